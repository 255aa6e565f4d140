"""`fabricmon run`: the pipeline's workers plus the HTTP endpoint, serving the last snapshot."""

from __future__ import annotations

import resource
import threading
import time

import structlog

from fabricmon.config import Config
from fabricmon.exporter import render
from fabricmon.host.io import HostIO
from fabricmon.model.snapshot import Snapshot
from fabricmon.pages import Pages, RenderGate
from fabricmon.pipeline import Pipeline
from fabricmon.report import verdict
from fabricmon.serve.journal import Journal
from fabricmon.serve import webconfig
from fabricmon.serve.server import Exposition, MetricsServer

log = structlog.get_logger("fabricmon.daemon")


FD_TARGET = 8192     # the soft descriptor limit a daemon raises itself to (within the hard one), as Go does


def raise_fd_limit() -> None:
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    want = FD_TARGET if hard == resource.RLIM_INFINITY else min(FD_TARGET, hard)
    if soft != resource.RLIM_INFINITY and soft < want:
        try:
            resource.setrlimit(resource.RLIMIT_NOFILE, (want, hard))
        except (ValueError, OSError):
            pass


def not_ready(snap: Snapshot) -> str:
    """Why the daemon has no view to serve yet ("" once it has): the node daemon until its inventory
    sources have listed the ports, the fabric collector while it has read no switch (the snapshot's
    `unknown` reason: no umad device, no subnet manager, ...). A node with no port at all is ready: that
    is its answer."""
    if not snap.inventory_known:
        return "the port inventory has not been read yet"
    if snap.fabric is not None and snap.unknown:
        return f"no switch could be read: {snap.unknown}"
    return ""


class Daemon:
    """Serves one pipeline: the node daemon's by default, or any other configuration of it
    (the fabric collector passes its own Pipeline)."""

    def __init__(self, config: Config, io: HostIO, port: int | None = None, address: str | None = None,
                 journal: bool = True, pipeline: Pipeline | None = None):
        self.config = config
        self.pipeline = pipeline if pipeline is not None else Pipeline(config, io)
        self.expo = Exposition()
        web = webconfig.for_config(config)
        raise_fd_limit()
        self.server = MetricsServer(address or config.address, config.port if port is None else port,
                                    self.expo, config.tls, serve=config.serve, web=web)
        self.gate = RenderGate(rate=config.serve.page_renders_per_second,
                               budget=config.serve.page_render_budget)
        self._stop = threading.Event()
        self._watch = threading.Thread(target=self._watchdog, name="fabricmon-health", daemon=True)
        self.snapshot: Snapshot | None = None
        self.on_snapshot = None          # optional callback(snapshot), used by the demo
        self.pipeline.on_snapshot.append(self._publish)
        self.journal = Journal(log) if journal else None      # the demo prints its own lines
        if self.journal is not None:
            self.pipeline.on_snapshot.append(self.journal)

    @property
    def port(self) -> int:
        return self.server.port

    def start(self) -> None:
        self.server.start()
        self.pipeline.start()
        self._watch.start()
        scheme = "https" if self.server.ssl is not None else "http"
        host = self.server.address
        log.info("fabricmon started", listen=f"{'[' + host + ']' if ':' in host else host}:{self.port}",
                 metrics=f"{scheme}://{'[' + host + ']' if ':' in host else host}:{self.port}/metrics",
                 sources=self.pipeline.active())

    def _publish(self, snap: Snapshot) -> None:
        self.snapshot = snap
        snap.http_errors = self.server.errors.snapshot()
        self.expo.set(render(snap), snap.time)
        self.expo.verdict = lambda: verdict(snap)      # built when /api/v1/findings asks
        self.expo.pages = Pages(snap, self.gate)        # rendered when / asks, through the gate
        self.expo.healthy = True
        self.expo.health_detail = f"last snapshot {time.strftime('%H:%M:%S', time.localtime(snap.time))}"
        self.expo.not_ready = not_ready(snap)
        if self.on_snapshot:
            self.on_snapshot(snap)

    def _watchdog(self) -> None:
        """/healthz turns 503 when no snapshot was built for 3 of the longest intervals."""
        max_interval = max((s.interval for s in self.pipeline.states.values() if s.enabled), default=15.0)
        while not self._stop.wait(1.0):
            if self.snapshot is not None and time.time() - self.snapshot.time > 3 * max_interval:
                self.expo.healthy = False

    def stop(self) -> None:
        self._stop.set()
        self.pipeline.stop()
        if self.server.thread.is_alive():
            self.server.stop()
        else:
            self.server.close()
        self.pipeline.close()
        log.info("fabricmon stopped")

    def alive(self) -> bool:
        """Every source worker and the publisher are running."""
        return self.pipeline.alive()

    def wait(self) -> None:
        while not self._stop.is_set():
            self._stop.wait(1.0)
