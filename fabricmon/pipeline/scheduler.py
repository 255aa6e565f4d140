"""The pipeline: registered sources, each on its own schedule in its own worker; a snapshot
rebuilt from the latest data of every source whenever one completes.

Two ways to drive it:
- `start()`/`stop()` (the daemon): one worker thread per enabled source, plus a publisher that
  rebuilds and publishes the snapshot when any source completes (completions within a few
  milliseconds of each other are built once). A hung tool delays only its own source.
- `collect()` (`once`, `check`, `capture`, tests): every named source at once under one overall
  deadline (the largest timeout), then one snapshot. It ends by the deadline (plus DEADLINE_MARGIN)
  whatever hangs: one wait for all of them, never one after another.

Every build reads the sources' states through `model.snapshot.fresh_states`: a source's records are
there only while they are fresh (produced within its staleness bound, `sources.<name>.stale_after`,
default two intervals plus the timeout), so one failed run is ridden out and no check judges what a
source said long ago.
A source is up when its last run produced records that are still fresh; a source that read nothing
returns no records (it is down, with its errors saying why), never an empty record posing as a reading.

A source that needs the port inventory gets the latest one, merged from whatever the
inventory sources have produced so far; it waits (within its own deadline) only until the
first inventory is there, never for a hung inventory source.
"""

from __future__ import annotations

import re
import threading
import time
from collections.abc import Callable, Iterable, Mapping
from typing import Protocol
from concurrent.futures import ThreadPoolExecutor, wait

import structlog

from fabricmon.model import gc_pause
from fabricmon.config import Config, SourceConfig
from fabricmon.host.io import HostIO
from fabricmon.model.history import CounterHistory
from fabricmon.model.ports import Inventory
from fabricmon.model.fabric import Topology
from fabricmon.model.finding import Finding
from fabricmon.model.remediation import RemediationSection
from fabricmon.model.snapshot import BUILD_BUCKETS, BuildStats, Sections, Snapshot, SourceState, fresh_states
from fabricmon.stores.learned import LearnedStore
from fabricmon.pipeline.node import NodeModel
from fabricmon.pipeline.source import INVENTORY, Inputs, Source, SourceOutput, SourceSpec, registry

log = structlog.get_logger("fabricmon.pipeline")

_NUMBER = re.compile(r"\d+(?:\.\d+)?")
# Completions closer than this are folded into one snapshot build.
PUBLISH_DEBOUNCE = 0.02
# A source's new errors logged one by one per completion, then summarised (a sweep of a large fabric
# can lose queries to hundreds of switches at once: each is counted, the first few are logged).
MAX_ERROR_LINES = 10
# collect() waits this long past the deadline for sources to hand back what they have (the build takes the
# rest of the second collect() may take past its deadline).
DEADLINE_MARGIN = 0.5
# Once one inventory source has listed ports, sources that need the inventory wait at most this
# long for the others (ibstat normally answers within it); a hung one is not waited for.
INVENTORY_GRACE = 1.0


def _error_key(message: str) -> str:
    """An error's identity for logging: numbers (durations, counts) masked, so that a tool
    timing out after 10.0 s, then 10.1 s, is one error that started once."""
    return _NUMBER.sub("#", message)


class Model(Protocol):
    """What a configuration of the pipeline supplies: how the latest records become an
    inventory (for sources that need one: a pure read), what it takes of an inventory source's run as it
    finishes (`take`, under the pipeline's lock), a snapshot's sections and findings, and the counter
    history it keeps. `inventory_ran` is (every, any) active inventory source has answered."""
    history: CounterHistory

    def inventory(self, states: Mapping[str, SourceState]) -> Inventory | Topology: ...

    def take(self, states: Mapping[str, SourceState]) -> None: ...

    def build(self, states: Mapping[str, SourceState], inventory_ran: tuple[bool, bool]
              ) -> tuple[Sections, list[Finding]]: ...


class Pipeline:
    """collector: which registered sources run ("node", "infiniband" or "ethernet"); source_configs: their
    validated configs (default config.sources); model: how their records become a snapshot
    (default the node's); learned: where the node model keeps the learned inventory (default
    in memory)."""

    def __init__(self, config: Config, io: HostIO, history: CounterHistory | None = None,
                 clock: Callable[[], float] = time.time, collector: str = "node",
                 model: Model | None = None, source_configs: Mapping[str, SourceConfig] | None = None,
                 learned: LearnedStore | None = None):
        self.config = config
        self.io = io
        self.clock = clock
        confs = source_configs if source_configs is not None else config.sources
        self.source_configs = confs
        self.specs: dict[str, SourceSpec] = registry(collector)
        self.sources: dict[str, Source] = {n: spec.cls(confs[n]) for n, spec in self.specs.items()}
        self.states: dict[str, SourceState] = {
            n: SourceState(name=n, enabled=confs[n].enabled is not False, interval=confs[n].interval,
                           timeout=confs[n].timeout, records=spec.records, stale_after=confs[n].stale_bound)
            for n, spec in self.specs.items()
        }
        for n, st in self.states.items():
            st.active, st.program = self._resolve(n)
        self.model = model if model is not None else NodeModel(config, history, clock, learned)
        # the host this pipeline reports on, as the cluster knows it (slurm.node_name; the demo's node01)
        self.host = config.slurm.node_name or io.hostname().split(".")[0]
        self.snapshot: Snapshot | None = None
        self.on_snapshot: list[Callable[[Snapshot], None]] = []
        # what the serving daemon adds to each snapshot as it is built (its HTTP error counts), never after
        self.serving: Callable[[], dict[str, int]] | None = None
        # remediation's state as of the build (the daemon's Remediator, remediation/engine.py): its section and
        # its own findings (a breaker tripped, an action failing) join the snapshot as it is built, never after
        self.acting: Callable[[], RemediationSection] | None = None
        self.collector = collector
        # the publisher rebuilds at least this often, so a source's records go stale in the snapshot (and a
        # hung pipeline shows) within one tick even when no source completes: the shortest interval
        self.tick = max(1.0, min((s.interval for n, s in self.states.items() if s.enabled and not self.specs[n].quiet),
                                 default=15.0))
        self._lock = threading.Lock()                    # states and the inventory
        self._inventory_changed = threading.Condition(self._lock)
        self._inventory: Inventory | Topology = Inventory()
        self._inventory_since: float | None = None       # when the inventory first listed ports
        self._inventory_stale = False                    # an inventory source completed since the merge
        self._build_lock = threading.Lock()              # one build at a time, in order
        self._builds = BuildStats(buckets=[0] * len(BUILD_BUCKETS))
        self._stop = threading.Event()
        self._dirty = threading.Event()
        self._threads: list[threading.Thread] = []
        self._pool: ThreadPoolExecutor | None = None

    @property
    def history(self) -> CounterHistory:
        return self.model.history       # the node model's; a fabric model keeps its own

    def enabled(self) -> list[str]:
        return [n for n, s in self.states.items() if s.enabled]

    def active(self) -> list[str]:
        """Enabled sources in use (an `auto` tool that is not installed is off)."""
        return [n for n, s in self.states.items() if s.enabled and s.active]

    def _resolve(self, name: str) -> tuple[bool, str | None]:
        """(active, program file): a source that runs no program is active when enabled; a
        tool source when its program is found (PATH, then paths.tool_dirs)."""
        sc = self.source_configs[name]
        if sc.enabled is False:
            return False, None
        if not sc.command:
            return True, None
        path = self.io.which(sc.command[0])
        return path is not None, path

    # --- the inventory ------------------------------------------------------------------
    def _current_inventory(self) -> Inventory | Topology:
        """The inventory merged from the latest data, merged only when a source needs it and
        an inventory source has completed since (callers hold the lock)."""
        if self._inventory_stale:
            self._inventory = self.model.inventory(self.states)
            self._inventory_stale = False
            if self._inventory.ports and self._inventory_since is None:
                self._inventory_since = time.monotonic()
        return self._inventory

    def _inventory_ready(self) -> bool:
        """Every inventory source has answered once, or one has listed ports and the others
        had INVENTORY_GRACE to follow."""
        self._current_inventory()
        inv = [s for n, s in self.states.items() if s.enabled and s.active and self.specs[n].provides_inventory]
        if all(s.ran for s in inv):
            return True
        return self._inventory_since is not None and time.monotonic() - self._inventory_since >= INVENTORY_GRACE

    def _wait_inventory(self, deadline: float) -> Inventory | Topology:
        with self._inventory_changed:
            while not self._inventory_ready() and not self._stop.is_set():
                left = deadline - time.monotonic()
                if left <= 0:
                    break
                self._inventory_changed.wait(min(left, 0.1))
            return self._current_inventory()

    # --- one source run -----------------------------------------------------------------
    def run_source(self, name: str, deadline: float, continuous: bool = False) -> bool:
        """Run one source until its deadline and store what it produced. Whether the snapshot should be
        rebuilt for it: always, but for a quiet source (registry.SourceSpec.quiet) that returned its last
        record again without an error."""
        spec = self.specs[name]
        t0 = time.monotonic()
        if self.source_configs[name].command:
            active, program = self._resolve(name)
            with self._lock:
                st = self.states[name]
                if (active, program) != (st.active, st.program):
                    log.info("source program found" if active else "source program missing", source=name,
                             program=program or self.source_configs[name].command[0],
                             enabled=self.source_configs[name].enabled)
                    st.active, st.program = active, program
                    if not active and self.source_configs[name].enabled == "auto":
                        st.data, st.up, st.ran = None, False, False    # gone: its old data must not linger
                        self._inventory_stale = self._inventory_stale or spec.provides_inventory
                    self._inventory_changed.notify_all()
            if not active and self.source_configs[name].enabled == "auto":
                return False    # not installed: quietly off (no run, no error)
        inventory = self._wait_inventory(deadline) if INVENTORY in spec.needs else None
        try:
            out = self.sources[name].collect(self.io, Inputs(deadline=deadline, inventory=inventory, cancel=self._stop,
                                                             continuous=continuous))
        except Exception as exc:  # a bug in one source must not take the daemon down
            log.exception("source crashed", source=name)
            out = SourceOutput()
            out.error("parse", f"{name}: internal error: {exc!r}")
        if self._stop.is_set():
            return False    # stopping: tools were killed on purpose, that is no source error
        return self._finish(name, out, time.monotonic() - t0)

    def _finish(self, name: str, out: SourceOutput, duration: float) -> bool:
        now = self.clock()
        with self._lock:
            st = self.states[name]
            same = self.specs[name].quiet and out.data is not None and out.data is st.data and st.up \
                and not out.errors and not st.active_errors
            st.ran = True
            st.runs += 1
            st.duration = duration
            if out.data is not None:
                st.data = out.data
                st.data_time = now
                if not out.errors:
                    st.last_success = now
            # A run that read nothing keeps the last records it replaces nothing with: they stay usable while
            # fresh (within the source's staleness bound, model.snapshot.fresh_states), so one failed run is
            # ridden out; after that no build reads them. up: this run produced records (a source that read
            # nothing returns none: it is down, never up with an empty record; per-item losses, a port's file,
            # a switch that did not answer, are errors counted beside records that are still usable).
            st.up = out.data is not None
            seen = set()
            before = {_error_key(m) for m in st.active_errors}
            logged = set()
            more: dict[str, int] = {}       # kind -> new errors past MAX_ERROR_LINES, not logged one by one
            for kind, message in out.errors:
                st.errors_total[kind] = st.errors_total.get(kind, 0) + 1
                seen.add(message)
                key = _error_key(message)
                if key not in before and key not in logged:
                    logged.add(key)
                    if len(logged) <= MAX_ERROR_LINES:
                        log.warning("source error", source=name, kind=kind, error=message)
                    else:
                        more[kind] = more.get(kind, 0) + 1
            for kind, n in sorted(more.items()):
                log.warning("source errors", source=name, kind=kind, more=n,
                            note="not logged one by one (fabricmon_source_errors_total counts every one)")
            still = {_error_key(m) for m in seen}
            for message in sorted(st.active_errors):
                key = _error_key(message)
                if key not in still and key not in logged:
                    logged.add(key)
                    log.info("source recovered", source=name, error=message)
            st.active_errors = seen
            if self.specs[name].provides_inventory:
                self.model.take(self.states)        # under the lock: once, as it finished (the fabric's discovery)
                self._inventory_stale = True
                self._inventory_changed.notify_all()
            return not same

    # --- snapshots ----------------------------------------------------------------------
    def rebuild(self) -> Snapshot:
        """Build a snapshot from the fresh data of every source and publish it. A build that raises (a bug)
        is published too, at once: a snapshot with the sources' states only, UNKNOWN with why (model.health),
        so /metrics never goes on serving an old snapshot that looks fresh."""
        with self._build_lock:
            t0 = time.monotonic()
            with self._lock:
                states = fresh_states(self.states, self.clock())
            inv = [s for n, s in states.items() if s.enabled and s.active and self.specs[n].provides_inventory]
            b = self._builds
            failed = ""
            try:
                with gc_pause.paused():     # a fabric build makes a port record per switch port
                    sections, findings = self.model.build(states, (all(s.ran for s in inv), any(s.ran for s in inv)))
            except Exception as exc:        # never let a bug stop publishing: the failure is the snapshot
                log.exception("snapshot build failed")
                b.failures += 1
                failed = f"the snapshot build failed: {exc!r} (a bug; the log has the traceback)"
                sections, findings = {"unknown": failed, "fabric": None}, []
            took = time.monotonic() - t0
            b.count += 1
            b.total += took
            for i, bound in enumerate(BUILD_BUCKETS):
                if took <= bound:
                    b.buckets[i] += 1
            http_errors = self.serving() if self.serving is not None else {}
            acting = self.acting() if self.acting is not None else None
            if acting is not None and acting.findings:
                findings = list(findings) + list(acting.findings)
            snap = Snapshot(time=self.clock(), findings=findings, sources=states,
                            builds=BuildStats(b.count, b.total, list(b.buckets), b.failures, bool(failed)),
                            host=self.host, http_errors=http_errors, remediation=acting, **sections)
            self.snapshot = snap
            for fn in self.on_snapshot:
                try:
                    fn(snap)
                except Exception:   # a broken subscriber must not stop the pipeline
                    log.exception("snapshot subscriber failed")
            return snap

    def stale(self) -> list[str]:
        """The enabled, active sources whose records are stale now (past their staleness bound) or that have
        none: what a run of some sources only (`fabric once --sweeps N`: the sweep again) must run too, so
        that the snapshot it builds is not missing what merely aged."""
        now = self.clock()
        with self._lock:
            return [n for n, s in self.states.items() if s.enabled and s.active
                    and (s.data is None or now - s.data_time > s.stale_bound)]

    def collect(self, names: Iterable[str] | None = None, deadline: float | None = None) -> Snapshot:
        """Run the named sources (default: every enabled one) at once under one overall deadline
        (default: the largest of their timeouts), then build one snapshot."""
        names = list(names) if names is not None else self.enabled()
        if not names:
            return self.rebuild()
        if deadline is None:
            deadline = time.monotonic() + max(self.states[n].timeout for n in names)
        if self._pool is None:
            self._pool = ThreadPoolExecutor(max_workers=len(self.states), thread_name_prefix="fabricmon-src")
        started = time.monotonic()
        futures = {n: self._pool.submit(self.run_source, n, min(deadline, time.monotonic() + self.states[n].timeout))
                   for n in names}
        # one wait for them all, until the deadline plus the margin: N hung sources cost the deadline once
        wait(futures.values(), timeout=max(0.0, deadline - time.monotonic()) + DEADLINE_MARGIN)
        for n, fut in futures.items():
            if not fut.done():
                # A source that ignores its deadline is abandoned for this run; it is counted.
                out = SourceOutput()
                out.error("timeout", f"{n}: did not finish by the deadline")
                self._finish(n, out, time.monotonic() - started)
        return self.rebuild()

    # --- the daemon ---------------------------------------------------------------------
    def start(self) -> None:
        self._stop.clear()
        for n in self.enabled():
            t = threading.Thread(target=self._worker, args=(n,), name=f"fabricmon-{n}", daemon=True)
            self._threads.append(t)
        self._threads.append(threading.Thread(target=self._publisher, name="fabricmon-publish", daemon=True))
        for t in self._threads:
            t.start()

    def _worker(self, name: str) -> None:
        st = self.states[name]
        next_run = time.monotonic()
        while not self._stop.is_set():
            wait = next_run - time.monotonic()
            if wait > 0 and self._stop.wait(wait):
                break
            start = time.monotonic()
            if self.run_source(name, start + st.timeout, continuous=True):
                self._dirty.set()
            next_run = max(start + st.interval, time.monotonic() + 0.01)

    def _publisher(self) -> None:
        """Rebuilds when a source completes, and at least every tick (a source's records go stale, a hung
        source shows, even when nothing completes)."""
        while not self._stop.is_set():
            woke = self._dirty.wait(self.tick)
            if self._stop.is_set():
                break
            if not woke:
                last = self.snapshot
                if last is not None and self.clock() - last.time < self.tick:
                    continue
            else:
                time.sleep(PUBLISH_DEBOUNCE)
            self._dirty.clear()
            try:
                self.rebuild()
            except Exception:   # a subscriber's or the fallback's bug: logged, the loop goes on
                log.exception("snapshot publication failed")

    def alive(self) -> bool:
        return bool(self._threads) and all(t.is_alive() for t in self._threads)

    def stop(self, timeout: float = 10.0) -> None:
        """Stop every worker; this pipeline's tools in flight are killed at once (process groups),
        and only its own: another pipeline in the same process (the demo) keeps running."""
        self._stop.set()
        self._dirty.set()
        self.io.kill_tools()
        with self._inventory_changed:
            self._inventory_changed.notify_all()
        end = time.monotonic() + timeout
        while any(t.is_alive() for t in self._threads) and time.monotonic() < end:
            self.io.kill_tools()    # again: a tool that started while we were stopping
            for t in self._threads:
                t.join(0.05)
        self.io.kill_tools()
        self._threads = []

    def close(self) -> None:
        if self._pool is not None:
            self._pool.shutdown(wait=False, cancel_futures=True)
        for src in self.sources.values():
            src.close()
        self.io.close()


__all__ = ["Pipeline"]
