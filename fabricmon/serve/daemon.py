"""`fabricmon run`: the pipeline's workers plus the HTTP endpoint, serving the last snapshot."""

from __future__ import annotations

import ctypes
import ctypes.util
import os
import resource
import sys
import threading
import time
from collections.abc import Callable

import structlog

from fabricmon.config import Config
from fabricmon.exporter import render
from fabricmon.exporter import counter_sets
from fabricmon.host.io import HostIO
from fabricmon.model.health import not_ready as health_not_ready
from fabricmon.model.snapshot import Snapshot
from fabricmon.pages import Pages, RenderGate
from fabricmon.pipeline.scheduler import Pipeline
from fabricmon.remediation.engine import Remediator
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
    """Why the daemon has no view to serve ("" when it has), from the one health rule (model.health): while
    the snapshot could judge nothing (its `unknown`: the node before its inventory sources listed the ports,
    a node with nothing to check, the fabric collector while it has read no switch, a build that failed),
    /readyz is 503 and `fabricmon_health_status` 3, node and fabric alike."""
    return health_not_ready(snap)


# glibc's mallopt parameters (malloc.h)
M_MMAP_THRESHOLD = -3
M_ARENA_MAX = -8
MMAP_THRESHOLD = 1 << 20     # buffers from 1 MiB up (an exposition, its gzip copy, a tool's output) are mmapped
ARENA_MAX = 2


def tune_malloc() -> bool:
    """Keep a long-running daemon's memory where its live data is (issue 40). glibc gives each thread
    that allocates its own arena (up to 8 per core) and, once a large buffer is freed, raises its mmap
    threshold so that the next ones come from the heap: a collector whose sweep, publisher and scrape
    threads each churn tens of MB per sweep grew by about 60 MiB a sweep on the director fabric (309 to
    514 MiB in 3 minutes) where the same daemon with 2 arenas and a fixed 1 MiB threshold stayed at
    about 200 MiB. Done before any thread starts; an operator's MALLOC_ARENA_MAX or
    MALLOC_MMAP_THRESHOLD_ wins; no-op off glibc. True when it applied anything."""
    try:
        mallopt = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6").mallopt
    except (OSError, AttributeError):
        return False
    mallopt.argtypes, mallopt.restype = (ctypes.c_int, ctypes.c_int), ctypes.c_int
    done = False
    if "MALLOC_ARENA_MAX" not in os.environ:
        done = mallopt(M_ARENA_MAX, ARENA_MAX) == 1 or done
    if "MALLOC_MMAP_THRESHOLD_" not in os.environ:
        done = mallopt(M_MMAP_THRESHOLD, MMAP_THRESHOLD) == 1 or done
    return done


SWITCH_INTERVAL = 0.001     # seconds a running thread keeps the interpreter before another may take it


def share_interpreter() -> None:
    """A thread waiting on a descriptor (the MAD engine on its umad port, the server on a socket) gets
    the interpreter back within SWITCH_INTERVAL of its answer, rather than CPython's default 5 ms,
    while another thread renders or builds a snapshot: at 5 ms the in-process MAD engine's sweep
    stretched to several times its bare read whenever a render ran beside it (issue 40)."""
    if sys.getswitchinterval() > SWITCH_INTERVAL:
        sys.setswitchinterval(SWITCH_INTERVAL)


class Daemon:
    """Serves one pipeline: the node daemon's by default, or any other configuration of it
    (the fabric collector passes its own Pipeline)."""

    def __init__(self, config: Config, io: HostIO, port: int | None = None, address: str | None = None,
                 journal: bool = True, pipeline: Pipeline | None = None, remediate: bool = True):
        self.config = config
        tune_malloc()
        share_interpreter()
        self.pipeline = pipeline if pipeline is not None else Pipeline(config, io)
        self.pipeline.serving = self._http_errors       # each snapshot carries the server's error counts of its build
        self.expo = Exposition(counter_sets.parse(config.serve.collect))
        web = webconfig.for_config(config)
        raise_fd_limit()
        self.server = MetricsServer(address or config.address, config.port if port is None else port,
                                    self.expo, config.tls, serve=config.serve, web=web)
        self.gate = RenderGate(rate=config.serve.page_renders_per_second,
                               budget=config.serve.page_render_budget)
        self._stop = threading.Event()
        self.snapshot: Snapshot | None = None
        self.on_snapshot: Callable[[Snapshot], None] | None = None     # optional callback, used by the demo
        self.pipeline.on_snapshot.append(self._publish)
        self.journal = Journal(log) if journal else None      # the demo prints its own lines
        if self.journal is not None:
            self.pipeline.on_snapshot.append(self.journal)
        # remediation (remediation/engine.py): acts on each published snapshot in its own thread; its state goes
        # into the next build (Pipeline.acting). None for a replay: a bundle is never acted on
        self.remediator: Remediator | None = None
        if remediate:
            self.remediator = Remediator(config, io, self.pipeline.collector, host=self.pipeline.host)
            self.pipeline.acting = self.remediator.section
            self.pipeline.on_snapshot.append(self.remediator.on_snapshot)

    @property
    def port(self) -> int:
        return self.server.port

    def start(self) -> None:
        self.server.start()
        if self.remediator is not None:
            self.remediator.start()
        self.pipeline.start()
        scheme = "https" if self.server.ssl is not None else "http"
        host = self.server.address
        log.info("fabricmon started", listen=f"{'[' + host + ']' if ':' in host else host}:{self.port}",
                 metrics=f"{scheme}://{'[' + host + ']' if ':' in host else host}:{self.port}/metrics",
                 sources=self.pipeline.active())

    def _http_errors(self) -> dict[str, int]:
        return self.server.errors.snapshot()

    def _publish(self, snap: Snapshot) -> None:
        """One snapshot's view, published by one assignment: its exposition (rendered once, by the first scrape
        of this snapshot and counter-set selection: a source that completes between scrapes costs no render),
        its verdict (built when /api/v1/findings asks), its pages (rendered when / asks, through the gate) and
        its readiness. The snapshot is never changed afterwards."""
        self.snapshot = snap
        self.expo.show(lambda sets: render(snap, sets), snap.time, lambda: verdict(snap), Pages(snap, self.gate),
                       not_ready(snap))
        failed = snap.builds.failed
        # /healthz turns 503 when no snapshot was built for 3 publisher ticks (the pipeline rebuilds at least every
        # tick, so this means the publisher itself is stuck: Exposition.stuck_after), and while the last build failed
        self.expo.stuck_after, self.expo.last_snapshot = 3 * self.pipeline.tick, snap.time
        self.expo.healthy = not failed
        when = time.strftime('%H:%M:%S', time.localtime(snap.time))
        self.expo.health_detail = f"the snapshot build failed at {when}: {snap.unknown}" if failed else \
            f"last snapshot {when}"
        if self.on_snapshot:
            self.on_snapshot(snap)

    def stop(self) -> None:
        self._stop.set()
        self.pipeline.stop()
        if self.remediator is not None:
            self.remediator.stop()
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
        """Until stopped (a signal handler sets _stop: a lock's wait is interrupted by signals, so no timeout,
        and no wake-up every second)."""
        self._stop.wait()
