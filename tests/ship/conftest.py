"""Fixtures for tests/ship; the helpers live in ship_helpers.py."""

from __future__ import annotations

import pytest

from ship_helpers import Processes, bundle_expositions as _bundle_expositions, fabric_exposition as _fabric_exposition


@pytest.fixture
def processes(tmp_path):
    """Processes a test starts; each is stopped by its PID at teardown."""
    procs = Processes(tmp_path)
    yield procs
    procs.stop_all()


@pytest.fixture(scope="session")
def bundle_expositions() -> dict[str, str]:
    return _bundle_expositions()


@pytest.fixture(scope="session")
def fabric_exposition() -> str:
    return _fabric_exposition()
