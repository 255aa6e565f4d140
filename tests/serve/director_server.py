"""Serve the real 400-switch director fabric's map and exposition as the collector does (the
real MetricsServer, Pages through a RenderGate), in a process of its own, so that a test can
flood it and measure it from outside: `python director_server.py NETFILE` prints `port N` on
stdout once it listens, and serves until its stdin closes."""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))      # fabric_snap

from fabric_snap import fabric_snapshot  # noqa: E402

from fabricmon import log  # noqa: E402
from fabricmon.serve.settings import ServeConfig  # noqa: E402
from fabricmon.exporter import render  # noqa: E402
from fabricmon.pages import Pages, RenderGate  # noqa: E402
from fabricmon.serve.server import Exposition, MetricsServer  # noqa: E402


def main() -> int:
    log.setup("info", "json")
    snap = fabric_snapshot(Path(sys.argv[1]).read_text(), sweeps=2)
    expo = Exposition()
    expo.set(render(snap), snap.time)
    cfg = ServeConfig()
    expo.pages = Pages(snap, RenderGate(rate=cfg.page_renders_per_second, budget=cfg.page_render_budget))
    expo.healthy = True
    srv = MetricsServer("127.0.0.1", 0, expo, serve=cfg)
    srv.start()
    print(f"port {srv.port}", flush=True)
    sys.stdin.read()
    srv.stop()
    return 0


if __name__ == "__main__":
    sys.exit(main())
