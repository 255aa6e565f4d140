"""`fabricmon run`: the poll loop plus the HTTP endpoint, serving the last snapshot."""

from __future__ import annotations

import threading
import time

import structlog

from fabricmon.collector import Collector, Snapshot
from fabricmon.config import Config
from fabricmon.exporter import render
from fabricmon.hostio import HostIO
from fabricmon.server import Exposition, MetricsServer

log = structlog.get_logger("fabricmon.daemon")


class Daemon:
    def __init__(self, config: Config, io: HostIO, port: int | None = None, address: str | None = None):
        self.config = config
        self.collector = Collector(config, io)
        self.expo = Exposition()
        self.server = MetricsServer(address or config.address, config.port if port is None else port,
                                    self.expo, config.tls)
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._loop, name="fabricmon-poll", daemon=True)
        self.snapshot: Snapshot | None = None
        self.on_snapshot = None          # optional callback(snapshot), used by the demo

    @property
    def port(self) -> int:
        return self.server.port

    def start(self) -> None:
        self.server.start()
        self._thread.start()
        log.info("fabricmon started", address=self.config.address, port=self.port)

    def poll_once(self) -> Snapshot:
        snap = self.collector.poll()
        self.snapshot = snap
        self.expo.set(render(snap), snap.time)
        self.expo.healthy = True
        self.expo.health_detail = f"last poll {time.strftime('%H:%M:%S', time.localtime(snap.time))}"
        if self.on_snapshot:
            self.on_snapshot(snap)
        return snap

    def _loop(self) -> None:
        max_interval = max((s.interval for s in self.config.sources.values()), default=15.0)
        while not self._stop.is_set():
            try:
                self.poll_once()
            except Exception:      # never let a bug stop the loop; the scrape keeps serving
                log.exception("poll failed")
            if self.snapshot is not None and time.time() - self.snapshot.time > 3 * max_interval:
                self.expo.healthy = False
            self._stop.wait(max(0.05, self.collector.next_due_in(time.monotonic())))

    def stop(self) -> None:
        self._stop.set()
        if self._thread.is_alive():
            self._thread.join(timeout=30)
        if self.server.thread.is_alive():
            self.server.stop()
        else:
            self.server.httpd.server_close()
        self.collector.close()
        log.info("fabricmon stopped")

    def wait(self) -> None:
        while not self._stop.is_set():
            self._stop.wait(1.0)
