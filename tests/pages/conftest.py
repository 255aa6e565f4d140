from __future__ import annotations

import os

import pytest

from browser import chromium


@pytest.fixture
def browser() -> str:
    """Headless Chromium; skips without it (fails instead when $CI is set: CI installs it)."""
    exe = chromium()
    if exe is None:
        if os.environ.get("CI", "").strip().lower() not in ("", "0", "false", "no"):
            pytest.fail("CI is set but headless Chromium is not installed (apt-get install chromium)")
        pytest.skip("headless Chromium is not installed (apt-get install chromium; `make test` installs it)")
    return exe
