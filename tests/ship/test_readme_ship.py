"""The README's deployment sections, and the links of the README and docs/, stay true to the shipped files."""

from __future__ import annotations

import re

from ship_helpers import ROOT, load_generator

README = (ROOT / "README.md").read_text()
build_rules = load_generator("prometheus/build_rules.py")


def anchors(markdown: str) -> set[str]:
    """GitHub's heading anchors: lower case, punctuation other than '-' and '_' dropped, spaces to '-'."""
    out = set()
    for heading in re.findall(r"^#{1,6} (.+)$", re.sub(r"^```.*?^```", "", markdown, flags=re.M | re.S), re.M):
        out.add(re.sub(r"[^\w\- ]", "", heading.strip().lower()).replace(" ", "-"))
    return out


def test_every_link_of_the_readme_and_docs_resolves():
    """Every relative link (file, and #anchor) of README.md and docs/*.md points at something there."""
    pages = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
    bad = []
    for page in pages:
        text = re.sub(r"`[^`\n]*`", "", re.sub(r"^```.*?^```", "", page.read_text(), flags=re.M | re.S))
        for target in re.findall(r"\]\(([^)\s]+)\)", text):     # code is not a link
            if re.match(r"[a-z]+:", target):
                continue                                    # http(s):, mailto:
            path, _, anchor = target.partition("#")
            dest = (page.parent / path).resolve() if path else page
            if not dest.exists():
                bad.append(f"{page.name}: {target} (no such file)")
            elif anchor and dest.suffix == ".md" and anchor not in anchors(dest.read_text()):
                bad.append(f"{page.name}: {target} (no such heading)")
    assert not bad, bad


def test_scrape_job_is_the_rules_job():
    assert f"job_name: {build_rules.JOB}\n" in README
    assert f'absent(up{{job="{build_rules.JOB}"}})' in (ROOT / "fabricmon" / "deploy" / "prometheus" / "fabricmon.rules.yml").read_text()


def test_unit_path_matches_the_install_steps():
    unit = (ROOT / "fabricmon" / "deploy" / "systemd" / "fabricmon.service").read_text()
    exe = re.search(r"^ExecStart=(\S+)", unit, re.M).group(1)
    assert exe == "/opt/fabricmon/bin/fabricmon" and "python3 -m venv /opt/fabricmon" in README


def test_every_venv_an_operator_is_told_to_make_uses_the_distributions_python():
    """The README's rule (a pyenv or conda python3 makes a venv the unit's sandbox hides): every
    `python3 -m venv` the README, docs/ and the offline archive's README show is /usr/bin/python3's."""
    offline = load_generator("release/offline.py")
    texts = {"README.md": README, "release/offline.py README": offline.README,
             **{f"docs/{p.name}": p.read_text() for p in sorted((ROOT / "docs").glob("*.md"))}}
    bad = [f"{name}: {m.group(0)!r}" for name, text in texts.items()
           for m in re.finditer(r"(\S*)python3 -m venv", text) if m.group(1) != "/usr/bin/"]
    assert not bad, bad
    assert "/usr/bin/python3 -m venv /opt/fabricmon" in offline.README


def test_every_named_readme_section_exists():
    """A page or shipped file that sends the reader to (README, "Section") names a heading the README has."""
    headings = {h.strip() for h in re.findall(r"^#{2,6} (.+)$", re.sub(r"^```.*?^```", "", README, flags=re.M | re.S),
                                               re.M)}
    files = [*sorted((ROOT / "docs").glob("*.md")), *sorted(p for p in (ROOT / "fabricmon" / "deploy").rglob("*")
                                                            if p.is_file() and "__pycache__" not in p.parts)]
    bad = []
    for f in files:
        text = f.read_text(errors="replace")
        for name in re.findall(r'README(?:\.md)?\]?(?:\([^)]*\))?, "([^"]+)"', text):
            if name not in headings:
                bad.append(f"{f.relative_to(ROOT)}: README section {name!r} does not exist")
    assert not bad, bad


def test_the_demo_text_names_both_maps():
    """The README's demo text and docs/cli.md name the InfiniBand map (:9881) and the Ethernet map (:9882)."""
    demo = re.split(r"make test[^\n]*\n```", README, maxsplit=1)[1].split("\n## ", 1)[0]
    cli = [ln for ln in (ROOT / "docs" / "cli.md").read_text().splitlines() if ln.startswith("| `fabricmon demo")]
    assert len(cli) == 1
    for text in (demo, cli[0]):
        assert "http://127.0.0.1:9881/" in text and "http://127.0.0.1:9882/" in text, text
    assert "--duration" in demo and "ended" in demo and "ended" in cli[0]
