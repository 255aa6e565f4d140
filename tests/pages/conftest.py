from __future__ import annotations

import dataclasses

import pytest

from browser import chromium
from fabric_snap import fabric_snapshot
from fabricmon.model.snapshot import Snapshot
from fabricmon.pages import Pages, html
from fabricmon.serve.server import Exposition, MetricsServer
from helpers import CAPTURES, skip_without_captures, unavailable

DIRECTOR = CAPTURES / "ibnetdiscover" / "director-hdr-400sw.ibsim.net"


@pytest.fixture
def browser() -> str:
    """Headless Chromium; skips without it (fails instead when $CI is set: CI installs it)."""
    exe = chromium()
    if exe is None:
        unavailable("headless Chromium is not installed (apt-get install chromium; `make test` installs it)")
    return exe


@pytest.fixture(scope="session")
def director() -> Snapshot:
    """A fabric snapshot of the real 400-switch HDR director fabric (the capture's topology,
    two sweeps through the real FabricModel), built once per run."""
    skip_without_captures(DIRECTOR)
    return fabric_snapshot(DIRECTOR.read_text(), sweeps=2)


@pytest.fixture
def served(monkeypatch):
    """(server, publish): the real HTTP server; publish(snapshot) makes it the one / serves, as
    the daemon does (None: no snapshot, / answers 503). The pages refresh every 0.7 s."""
    monkeypatch.setattr(html, "REFRESH_MS", 700)         # the page's own refresh, quicker for the test
    expo = Exposition()
    srv = MetricsServer("127.0.0.1", 0, expo)
    srv.start()
    published = [0]

    def publish(snap: Snapshot | None) -> None:
        # records-built snapshots share their data time: each published one gets its own, as
        # the daemon's do
        published[0] += 1
        expo.pages = None if snap is None else Pages(dataclasses.replace(snap, time=snap.time + published[0]))

    yield srv, publish
    if srv.thread.is_alive():
        srv.stop()
