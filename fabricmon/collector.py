"""The per-node pipeline: run sources on their own intervals, merge their records, update the
counter history, evaluate checks and build an immutable Snapshot that the exporter renders.

Sources run in two phases: the inventory sources (sysfs, ibstat) first, then the ones that
query each known port (perfquery, iblinkinfo). Each phase runs its sources in parallel, and
every tool call is bounded by its timeout, so one hung tool delays only its own data.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field, replace
from typing import Any

import structlog

from fabricmon import checks as checks_mod
from fabricmon.checks import degraded_link, link_errors
from fabricmon.config import COUNTER_CHECKS, Config
from fabricmon.history import CounterHistory
from fabricmon.hostio import HostIO
from fabricmon.model import DeviceView, PortView, merge
from fabricmon.sources import ERROR_KINDS, SourceOutput
from fabricmon.sources.ibstat import IbstatSource
from fabricmon.sources.iblinkinfo import IblinkinfoSource
from fabricmon.sources.perfquery import PerfquerySource
from fabricmon.sources.sysfs_ib import SysfsSource
from fabricmon.rocegpu import INVENTORY_SOURCES, PER_PORT_SOURCES, RoceGpu

log = structlog.get_logger("fabricmon.collector")

CHECKED_COUNTERS = frozenset(c for counters, *_ in COUNTER_CHECKS.values() for c in counters)
INVENTORY = ("sysfs", "ibstat", *INVENTORY_SOURCES)
PER_PORT = ("perfquery", "iblinkinfo", *PER_PORT_SOURCES)


@dataclass(slots=True)
class SourceState:
    name: str
    enabled: bool
    interval: float
    up: bool = False
    ran: bool = False
    data: Any = None
    data_time: float = 0.0              # wall-clock time of the data
    last_run: float = float("-inf")     # monotonic
    duration: float = 0.0
    last_success: float = 0.0
    errors_total: dict[str, int] = field(default_factory=lambda: {k: 0 for k in ERROR_KINDS})
    active_errors: set[str] = field(default_factory=set)


@dataclass(slots=True)
class Snapshot:
    time: float
    devices: dict[str, DeviceView]
    ports: dict[tuple[str, int], PortView]
    verdicts: dict[tuple[str, int], degraded_link.LinkVerdict]
    saturation: dict[tuple[str, int], dict[str, bool]]
    findings: list[checks_mod.Finding]
    sources: dict[str, SourceState]
    poll_count: int
    poll_buckets: list[int]
    poll_sum: float
    extra: dict[str, Any] = field(default_factory=dict)

    @property
    def status(self) -> int:
        return checks_mod.worst(self.findings)


POLL_BUCKETS = (0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, float("inf"))


class Collector:
    def __init__(self, config: Config, io: HostIO, history: CounterHistory | None = None,
                 clock: Callable[[], float] = time.time):
        self.config = config
        self.io = io
        self.clock = clock
        self.history = history or CounterHistory(
            horizon=max(*(c.window for c in config.checks.counters.values()), *config.roce.windows()))
        self.sysfs = SysfsSource(config)
        self.ibstat = IbstatSource(config)
        self.perfquery = PerfquerySource(config)
        self.iblinkinfo = IblinkinfoSource(config)
        self.rocegpu = RoceGpu(config)      # RoCE, GPUDirect and GPU-NIC affinity (fabricmon.rocegpu)
        self.states = {
            name: SourceState(name=name, enabled=sc.enabled is not False, interval=sc.interval)
            for name, sc in config.sources.items()
        }
        self.poll_count = 0
        self.poll_buckets = [0] * len(POLL_BUCKETS)
        self.poll_sum = 0.0
        self._pool = ThreadPoolExecutor(max_workers=4, thread_name_prefix="fabricmon-src")
        self._counter_times: dict[tuple[str, int], float] = {}
        self.snapshot: Snapshot | None = None

    # --- scheduling -------------------------------------------------------------------
    def due(self, now_mono: float) -> list[str]:
        return [n for n, s in self.states.items()
                if s.enabled and now_mono - s.last_run >= s.interval - 1e-3]

    def next_due_in(self, now_mono: float) -> float:
        waits = [s.last_run + s.interval - now_mono for s in self.states.values() if s.enabled]
        return max(0.0, min(waits, default=1.0))

    def poll(self, names: list[str] | None = None) -> Snapshot:
        """Run the given (default: due, or all on the first poll) sources, then rebuild."""
        start = time.monotonic()
        if names is None:
            names = self.due(start) if self.poll_count else [n for n, s in self.states.items() if s.enabled]
        inventory = None
        for phase in (INVENTORY, PER_PORT):
            batch = [n for n in names if n in phase]
            if not batch:
                continue
            if phase is PER_PORT:
                inventory = self._merged()    # once: every per-port source reads the same ports
            futures = {n: self._pool.submit(self._run_source, n, inventory) for n in batch}
            for n, fut in futures.items():
                self._finish(n, fut.result())
        for n in names:
            # Every source run in this poll is scheduled from the poll's start, so sources with
            # the same interval stay in step: one snapshot per tick, not one per phase.
            self.states[n].last_run = start
        self.snapshot = self._build(time.monotonic() - start)
        return self.snapshot

    def _ports_for(self, name: str, ports: dict[tuple[str, int], PortView]) -> list[tuple[str, int]]:
        """The InfiniBand ports a per-port tool queries. With `perfquery: auto`, ports whose
        counters sysfs already gives are skipped."""
        skip_sysfs = name == "perfquery" and self.config.sources["perfquery"].enabled == "auto"
        return [key for key, p in sorted(ports.items())
                if p.is_ib and not (skip_sysfs and p.counter_source == "sysfs")]

    def _run_source(self, name: str, inventory: tuple | None) -> tuple[SourceOutput, float]:
        t0 = time.monotonic()
        try:
            if name == "sysfs":
                out = self.sysfs.collect(self.io)
            elif name == "ibstat":
                out = self.ibstat.collect(self.io)
            elif name == "perfquery":
                out = self.perfquery.collect(self.io, self._ports_for(name, inventory[1]))
            elif name in self.rocegpu.sources:
                out = self.rocegpu.collect(name, self.io, *(inventory or ({}, {})))
            else:
                out = self.iblinkinfo.collect(self.io, self._ports_for(name, inventory[1]))
        except Exception as exc:  # a bug in one source must not take the daemon down
            log.exception("source crashed", source=name)
            out = SourceOutput()
            out.error("parse", f"{name}: internal error: {exc!r}")
        return out, time.monotonic() - t0

    def _finish(self, name: str, result: tuple[SourceOutput, float]) -> None:
        out, duration = result
        st = self.states[name]
        st.ran = True
        st.duration = duration
        st.up = out.up
        now = self.clock()
        if out.data is not None:
            st.data = out.data
            st.data_time = now
            if not out.errors:
                st.last_success = now
        elif not st.up:
            st.data = None      # stale data must not pose as current
        seen = set()
        for kind, message in out.errors:
            st.errors_total[kind] = st.errors_total.get(kind, 0) + 1
            seen.add(message)
            if message not in st.active_errors:
                log.warning("source error", source=name, kind=kind, error=message)
        for message in st.active_errors - seen:
            log.info("source recovered", source=name, error=message)
        st.active_errors = seen

    # --- building the snapshot ----------------------------------------------------------
    def _merged(self) -> tuple[dict[str, DeviceView], dict[tuple[str, int], PortView]]:
        s = self.states
        return merge(s["sysfs"].data if s["sysfs"].enabled else None,
                     s["ibstat"].data if s["ibstat"].enabled else None,
                     s["perfquery"].data if s["perfquery"].enabled else None,
                     s["iblinkinfo"].data if s["iblinkinfo"].enabled else None)

    def _record_counters(self, ports: dict[tuple[str, int], PortView]) -> None:
        for key, p in ports.items():
            if not p.counters:
                continue
            src = self.states.get(p.counter_source or "")
            t = src.data_time if src else self.clock()
            if self._counter_times.get(key) == t:
                continue
            self._counter_times[key] = t
            sat = link_errors.saturated(p)
            for name, value in p.counters.items():
                if name not in CHECKED_COUNTERS:
                    continue        # traffic counters feed no check: keep no history for them
                hk = (p.device, p.port, name)
                if sat.get(name):
                    self.history.add(hk, t, value, saturated=True)
                    continue
                if self.history.note_reset(hk, value):
                    log.info("counter decreased (reset)", device=p.device, port=p.port, counter=name)
                self.history.add(hk, t, value)
        self.history.prune(set(ports))
        for key in [k for k in self._counter_times if k not in ports]:
            del self._counter_times[key]

    def _build(self, poll_duration: float) -> Snapshot:
        now = self.clock()
        devices, ports = self._merged()
        self._record_counters(ports)
        verdicts = {}
        saturation = {}
        findings: list[checks_mod.Finding] = []
        for key, p in sorted(ports.items()):
            v = degraded_link.evaluate_port(p, self.config)
            verdicts[key] = v
            findings.append(v.finding)
            saturation[key] = link_errors.saturated(p)
            findings.extend(link_errors.evaluate_port(p, self.history, self.config, now))
        extra, more = self.rocegpu.evaluate(self.states, devices, ports, self.history, now)
        findings.extend(more)
        self.poll_count += 1
        self.poll_sum += poll_duration
        for i, b in enumerate(POLL_BUCKETS):
            if poll_duration <= b:
                self.poll_buckets[i] += 1
        return Snapshot(
            time=now, devices=devices, ports=ports, verdicts=verdicts, saturation=saturation,
            findings=findings,
            sources={n: replace(s, errors_total=dict(s.errors_total), active_errors=set(s.active_errors))
                     for n, s in self.states.items()},
            poll_count=self.poll_count, poll_buckets=list(self.poll_buckets), poll_sum=self.poll_sum,
            extra=extra,
        )

    def close(self) -> None:
        self._pool.shutdown(wait=False, cancel_futures=True)
        self.io.close()


__all__ = ["Collector", "Snapshot", "SourceState", "POLL_BUCKETS"]
