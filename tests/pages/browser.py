"""Headless Chromium for the page tests (Debian package `chromium`): the DOM after the page's
scripts ran, and screenshots saved as test artefacts under build/test-artifacts/ (or
$FABRICMON_ARTIFACTS)."""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import tempfile
from pathlib import Path

from helpers import REPO

ARTIFACTS = Path(os.environ.get("FABRICMON_ARTIFACTS", REPO / "build" / "test-artifacts"))


def chromium() -> str | None:
    for name in ("chromium", "chromium-browser", "google-chrome"):
        path = shutil.which(name)
        if path:
            return path
    return None


def _run(url: str, *flags: str, budget_ms: int, size: tuple[int, int], timeout: float = 90.0) -> str:
    exe = chromium()
    assert exe, "chromium is not installed (apt-get install chromium)"
    with tempfile.TemporaryDirectory(prefix="fabricmon-chromium-") as profile:
        cmd = [exe, "--headless", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage", "--no-first-run",
               "--hide-scrollbars", f"--user-data-dir={profile}", f"--window-size={size[0]},{size[1]}",
               f"--virtual-time-budget={budget_ms}", *flags, url]
        proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True,
                                start_new_session=True)
        try:
            out, _ = proc.communicate(timeout=timeout)
        finally:
            if proc.poll() is None:
                os.killpg(proc.pid, signal.SIGKILL)
                proc.wait()
        return out


def dump_dom(url: str, budget_ms: int = 3000, size: tuple[int, int] = (1600, 1000)) -> str:
    """The serialized DOM once the page's scripts ran for `budget_ms` of virtual time."""
    return _run(url, "--dump-dom", budget_ms=budget_ms, size=size)


def screenshot(url: str, name: str, budget_ms: int = 3000, size: tuple[int, int] = (1600, 1000)) -> Path:
    """A PNG of the page, saved as ARTIFACTS/<name>; returns its path."""
    ARTIFACTS.mkdir(parents=True, exist_ok=True)
    path = ARTIFACTS / name
    path.unlink(missing_ok=True)
    _run(url, f"--screenshot={path}", budget_ms=budget_ms, size=size)
    assert path.exists() and path.stat().st_size > 1000, f"chromium wrote no screenshot of {url}"
    return path


def elements(dom: str, attr: str) -> list[dict[str, str | None]]:
    """The attributes of every element of a dumped DOM that carries `attr` (with `_tag`)."""
    from html.parser import HTMLParser

    found: list[dict[str, str | None]] = []

    class P(HTMLParser):
        def handle_starttag(self, tag, attrs):
            d = dict(attrs)
            if attr in d:
                found.append({"_tag": tag, **d})

        handle_startendtag = handle_starttag

    P().feed(dom)
    return found
