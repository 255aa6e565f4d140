"""The layers hold: data flows sources -> parsers -> model -> checks -> exporter, and each
layer imports only what lies before it (checked on the source files, with ast)."""

from __future__ import annotations

import ast
from pathlib import Path

from helpers import REPO

PKG = REPO / "fabricmon"

# layer folder -> modules it must never import
FORBIDDEN = {
    # parsers return records that live with them or in the model (record types only)
    "parsers": ("fabricmon.sources", "fabricmon.checks", "fabricmon.model.snapshot", "fabricmon.model.history",
                "fabricmon.pipeline", "fabricmon.exporter", "fabricmon.host", "fabricmon.config"),
    "checks": ("fabricmon.sources", "fabricmon.parsers", "fabricmon.host", "fabricmon.pipeline",
               "fabricmon.exporter"),
    "sources": ("fabricmon.checks", "fabricmon.exporter", "fabricmon.pipeline.scheduler",
                "fabricmon.pipeline.node", "fabricmon.serve"),
    "exporter": ("fabricmon.sources", "fabricmon.parsers", "fabricmon.host", "fabricmon.pipeline"),
    # pages read the published snapshot only: no data path of their own
    "pages": ("fabricmon.sources", "fabricmon.parsers", "fabricmon.host", "fabricmon.pipeline", "fabricmon.exporter",
              "fabricmon.serve"),
    "model": ("fabricmon.sources", "fabricmon.pipeline.scheduler", "fabricmon.exporter", "fabricmon.serve"),
}


def imports(path: Path) -> set[str]:
    out = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            out.update(a.name for a in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module:
            out.add(node.module)
            out.update(f"{node.module}.{a.name}" for a in node.names)
    return out


def test_each_layer_imports_only_what_lies_before_it() -> None:
    bad = []
    for layer, forbidden in FORBIDDEN.items():
        for path in sorted((PKG / layer).rglob("*.py")):
            for name in imports(path):
                if any(name == f or name.startswith(f + ".") for f in forbidden):
                    bad.append(f"{path.relative_to(REPO)} imports {name}")
    assert not bad, "\n".join(bad)


def test_only_the_nvml_boundary_imports_pynvml() -> None:
    users = [p.relative_to(REPO) for p in PKG.rglob("*.py") if "pynvml" in {n.split(".")[0] for n in imports(p)}]
    assert users == [Path("fabricmon/host/nvml.py")]


def test_hostio_declares_every_method_sources_call() -> None:
    from fabricmon.host.io import HostIO
    declared = {n for n in vars(HostIO) if not n.startswith("_")}
    called = set()
    for path in (PKG / "sources").rglob("*.py"):
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name) and node.value.id == "io":
                called.add(node.attr)
    assert called and called <= declared, called - declared
    assert "getattr(io" not in "".join(p.read_text() for p in (PKG / "sources").rglob("*.py"))
