"""The screenshots under docs/img show the pages as they are now: docs/screenshots.py takes each one and
records beside it what the page showed (docs/img/<name>.txt: title, summary, the states of switches,
links and ports, the findings table); this renders the same page again, with no browser, and compares.
A check renamed (ecmp_imbalance -> ecmp), a reason or a title changed: the test fails until the
screenshots are regenerated (`python docs/screenshots.py [NAME ...]`)."""

from __future__ import annotations

import difflib
import importlib.util
import sys
from pathlib import Path
from types import ModuleType

import pytest

from helpers import REPO

IMG = REPO / "docs" / "img"


def screenshots() -> ModuleType:
    name = "fabricmon_docs_screenshots"
    if name not in sys.modules:
        spec = importlib.util.spec_from_file_location(name, REPO / "docs" / "screenshots.py")
        assert spec is not None and spec.loader is not None
        mod = importlib.util.module_from_spec(spec)
        sys.modules[name] = mod
        spec.loader.exec_module(mod)
    return sys.modules[name]


def test_every_screenshot_is_made_by_the_script_and_records_its_page() -> None:
    shots = set(screenshots().SHOTS)
    assert {p.stem for p in IMG.glob("*.png")} == shots, "a docs/img/*.png that docs/screenshots.py does not make"
    assert {p.stem for p in IMG.glob("*.txt")} == shots, "a screenshot without its page text (docs/img/<name>.txt)"
    docs = "\n".join(p.read_text() for p in [REPO / "README.md", *sorted((REPO / "docs").glob("*.md"))])
    assert all(f"img/{name}.png" in docs for name in shots), "a screenshot no page shows"


@pytest.mark.parametrize("name", ["node-page", "fabric-map", "fabric-map-director"])
def test_the_screenshot_shows_the_page_as_it_is_now(name: str, request) -> None:
    mod = screenshots()
    if name == "fabric-map-director":          # the director snapshot the page tests build once (conftest)
        page = mod.served(mod.director_snapshot(request.getfixturevalue("director")))
    else:
        page = mod.SHOTS[name]()
    with page as url:
        now = mod.page_text(mod.fetch(url))
    recorded = (IMG / f"{name}.txt").read_text()
    diff = "".join(difflib.unified_diff(recorded.splitlines(True), now.splitlines(True),
                                        f"docs/img/{name}.txt", "the page now"))
    assert now == recorded, (f"docs/img/{name}.png no longer shows the page: regenerate it with "
                             f"`python docs/screenshots.py {name}` (and look at it)\n{diff}")


def test_the_recorded_text_is_what_the_page_shows() -> None:
    """page_text reads the findings table, the states and the title, and nothing that varies between two
    renders of one snapshot (durations, times)."""
    mod = screenshots()
    html = ('<html><head><title>fabricmon fabric map · f</title></head><body><svg><line data-link="a:1-b:2" '
            'data-state="warning" data-hot="1"><title>tooltip</title></line></svg><p class="summary">2 switches</p>'
            '<table><tr data-finding="ecmp" data-state="warning"><td>WARNING</td><td>ecmp</td><td>leaf02</td><td>'
            '</td><td class="msg">leaf02 uplinks:\n port 9</td></tr></table><table><tr><td>sysfs</td>'
            '<td>0 s ago</td></tr></table></body></html>')
    assert mod.page_text(html).splitlines() == [
        "title: fabricmon fabric map · f", "summary: 2 switches", "link a:1-b:2: warning hot",
        "finding: WARNING | ecmp | leaf02 |  | leaf02 uplinks: port 9"]


def test_the_script_takes_only_the_screenshots_it_knows(capsys) -> None:
    with pytest.raises(SystemExit):
        screenshots().main(["fabric-map-typo", "--out", str(Path("/nonexistent"))])
    assert "unknown screenshot 'fabric-map-typo'" in capsys.readouterr().err
