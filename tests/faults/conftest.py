"""Fault-injection harness: a real daemon over a real sysfs tree plus fake tools (small
executable scripts) whose behaviour each test chooses (tests/faults/fault_harness.py). Its helpers live
in a module of their own name, not here: two conftest.py imported as `conftest` (tests/ship has one too)
would shadow each other when both directories run in one pytest."""

from __future__ import annotations

import pytest
from fault_harness import Harness


@pytest.fixture
def harness(tmp_path):
    h = Harness(tmp_path)
    yield h
    if h.daemon is not None:
        h.daemon.stop()
