"""Never two series with one label set (issue 26): Prometheus keeps one of them silently. tests/conftest.py
wraps Renderer.render so that every exposition the suite renders is checked (the test that rendered one
with a series twice fails); this is the check's own test."""

from __future__ import annotations

from pathlib import Path

from fabricmon.exporter.render import Renderer
from helpers import duplicate_series, repeated_series

GOLDEN = Path(__file__).resolve().parents[1] / "golden"


def test_every_render_in_the_suite_is_checked() -> None:
    assert getattr(Renderer.render, "guarded", False), "tests/conftest.py no longer wraps Renderer.render"


def test_the_cheap_check_finds_what_the_parser_finds() -> None:
    files = sorted(GOLDEN.glob("*.prom"))
    assert len(files) >= 5
    for f in files:
        # the goldens write what differs per run as <volatile> (values) and le="<le>" (buckets)
        body = "".join(ln.replace("<volatile>", "0") + "\n" for ln in f.read_text().splitlines()
                       if '"<le>"' not in ln)
        assert repeated_series(body) == [] and duplicate_series(body) == [], f.name
        series = [ln for ln in body.splitlines() if ln and not ln.startswith("#")]
        doubled = body + series[-1].rsplit(" ", 1)[0] + " 7\n"     # the last series again, another value
        assert repeated_series(doubled) == [series[-1].rsplit(" ", 1)[0]], f.name
        assert len(duplicate_series(doubled)) == 1, f.name
