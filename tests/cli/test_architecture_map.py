"""docs/architecture.md's package map names every package and module under fabricmon/, and nothing
that is not there: a module added, moved or removed fails here until the map says so."""

from __future__ import annotations

import re

from helpers import REPO

DOC = REPO / "docs" / "architecture.md"
PKG = REPO / "fabricmon"


def map_entries(text: str) -> set[str]:
    """The paths the package map names: the fenced block after the `package-map` marker, one entry a
    line (`name/` a folder, `name.py` a module), nested by indentation."""
    block = text.split("<!-- package-map", 1)[1].split("```", 2)[1]
    stack: list[tuple[int, str]] = []           # (indent, folder path)
    out: set[str] = set()
    for line in block.splitlines()[1:]:
        m = re.match(r"^( *)(\S+)", line)
        if not m:
            continue
        indent, name = len(m.group(1)), m.group(2)
        while stack and stack[-1][0] >= indent:
            stack.pop()
        base = stack[-1][1] if stack else ""
        if name.endswith("/"):
            path = base + name
            stack.append((indent, path))
            out.add(path)
        elif name.endswith(".py"):
            out.add(base + name)
    return out


def tree() -> set[str]:
    """Every Python package (a folder) and module under fabricmon/ (package __init__.py files are
    named by their folder)."""
    out = {"fabricmon/"}
    for p in PKG.rglob("*.py"):
        if "__pycache__" in p.parts:
            continue
        rel = p.relative_to(REPO)
        if p.name == "__init__.py":
            out.add(str(rel.parent) + "/")
        else:
            out.add(str(rel))
        for parent in rel.parents:
            if str(parent) not in (".", "fabricmon") and (REPO / parent / "__init__.py").exists():
                out.add(str(parent) + "/")
    return out


def test_the_package_map_names_every_package_and_module() -> None:
    named = map_entries(DOC.read_text())
    have = tree()
    missing = sorted(have - named)
    assert not missing, f"docs/architecture.md's package map does not name: {missing}"
    gone = sorted(p for p in named if not (REPO / p).exists())
    assert not gone, f"docs/architecture.md's package map names what is not in the tree: {gone}"


def test_the_map_reader_nests_by_indentation() -> None:
    doc = "<!-- package-map -->\n```\nfabricmon/\n  a.py  x\n  sub/  y\n    b.py\n  c.py\n```\n"
    assert map_entries(doc) == {"fabricmon/", "fabricmon/a.py", "fabricmon/sub/", "fabricmon/sub/b.py",
                                "fabricmon/c.py"}
