"""The fabric configuration of the pipeline: how the latest discovery and sweep become a
Snapshot's fabric section. Records are picked by type (DiscoveryData, SweepData), never by
source name. FabricModel composes four parts, each kept between builds:

1. the topology (pipeline.fabric_topology): levels and roles from the latest discovery, rebuilt only
   when a new one arrived; a partial discovery is merged into the last complete view, never replaces it;
   links that appear or vanish between complete views are logged and counted, and a port that was
   cabled and is no longer stays known (reported down, never dropped);
1b. the link-state evidence (pipeline.fabric_state): each cabled port's newest read (the sweep's
   PortInfo, or the discovery that saw it cabled), the peer's read included; a port not read keeps its
   last state (unreached is not down); each switch's unanswered sweeps (checks.fabric_unresponsive);
2. the counters (pipeline.fabric_counters): every counter of a new sweep through the one CounterIntake
   (model.history), keyed (switch_guid, port, counter); transmit/receive and pause rates;
3. the checks (pipeline.fabric_checks), each of the one shape (checks.shape), run by the one runner
   (pipeline.checks) when its inputs are present (capabilities: checks.fabric_inputs, never the fabric
   kind), each with its settings and its state;
4. every check's status per switch (fabricmon_fabric_check_status, OK included) for the checks whose
   inputs were read (none for the others: absent, never OK), and per port once it was not OK;
5. this collector's shard only: a switch belongs to exactly one shard (GUID hash);
6. the jobs each WARNING/CRITICAL finding can hurt, when a job source runs (pipeline.jobs);
7. while the last sweep read no switch, the snapshot's `unknown` says why (pipeline.fabric_failure, the
   kind's failure hints first), so the collector's verdict is UNKNOWN (model.health) and /readyz 503.

A build whose inputs (PORT_INPUTS' latest records and the topology) are all the last full build's reuses
its port section and findings, and redoes only the subnet manager, the check status and the jobs.

An event build (the SM's reports re-read a few switches: sources/infiniband/events.py, and nothing else
changed) is that reuse with the re-read ports' state applied: the last section with only the ports whose
state changed replaced (and the far ends of their inter-switch links), degraded_link judged again on those
ports alone, every other finding kept until the next full build (the ECMP groups, the uplink counts and
capacity follow at the next sweep). What it costs is the ports that changed, a copy of the section's port
table and the reuse's work, not a full build (docs/latency.md). The mode in force (events or sweep) is the
events source's, demoted here where a sweep saw a port change on a switch that reported nothing since the
sweep before (an SM that accepted the subscription and does not forward)."""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import replace
from typing import TYPE_CHECKING

import structlog

from fabricmon.checks import Finding
from fabricmon.checks.fabric_inputs import FabricInputs
from fabricmon.config import Config
from fabricmon.model.design import DesignData
from fabricmon.model.fabric import DiscoveryData, FabricSection, LftData, SweepData, Topology
from fabricmon.model.fabric_events import EventsView, FabricEventsData
from fabricmon.model.optics import SwitchOpticsData
from fabricmon.model.vitals import SwitchVitalsData
from fabricmon.model.slurm_topology import SchedulerTopologyData
from fabricmon.model.snapshot import Sections, SourceState, source_data, source_state
from fabricmon.pipeline.fabric_checks import FabricChecks
from fabricmon.pipeline.fabric_counters import SweepCounters
from fabricmon.pipeline.fabric_failure import Hint, why_nothing_read
from fabricmon.pipeline.fabric_state import LinkEvidence
from fabricmon.pipeline.fabric_topology import FabricTopology
from fabricmon.pipeline.jobs import FabricJobs
from fabricmon.registry import failure_hints
from fabricmon.host.io import HostIO

if TYPE_CHECKING:
    from fabricmon.pipeline.scheduler import Pipeline

log = structlog.get_logger("fabricmon.fabric")

# the records a full build reads (the port section, its checks); a build whose inputs are all the last full
# build's reuses it and redoes only the subnet manager (SmData), the check status and the jobs (pipeline.jobs)
PORT_INPUTS = (SweepData, LftData, SwitchOpticsData, SchedulerTopologyData, DesignData, SwitchVitalsData)


class FabricModel:
    """Builds fabric snapshots from its parts, each kept between builds: the topology
    (pipeline.fabric_topology), the link-state evidence (pipeline.fabric_state), the counters
    (pipeline.fabric_counters) and the checks with their state (pipeline.fabric_checks)."""

    def __init__(self, config: Config, clock: Callable[[], float] = time.time, shard: tuple[int, int] | None = None,
                 hints: Sequence[Hint] = ()):
        self.config = config
        self.clock = clock
        self.hints = tuple(hints)       # the collector's failure hints (registry.failure_hints), asked first
        self._why = ""                  # why no switch could be read, as last logged ("" while one was)
        self.shard = shard or config.fabric.shard
        self.name = config.fabric.name or ""
        self.evidence = LinkEvidence(config.fabric.unresponsive_window)
        self.topology = FabricTopology(self.evidence, config.fabric.down_port_max_age)
        self.counters = SweepCounters(max(c.window for c in config.checks.counters.values()))
        self.history = self.counters.history
        self.checks = FabricChecks(config)
        self.optics_baseline = self.checks.optics_baseline
        self.jobs = FabricJobs(config.slurm.max_job_switch_series)     # which jobs each finding hurts
        self._sweep_time: float | None = None
        # the last full build: its inputs (PORT_INPUTS' data and data times, the topology), its section, its
        # findings but the subnet manager's, and the checks that ran (a build with the same inputs reuses them)
        self._last: tuple[tuple[object, ...], FabricSection, list[Finding], dict[str, tuple[str, ...]]] | None = None
        # the events: the source's re-read count when the last sweep was taken, and the change a sweep saw that no
        # report announced (switch, port, up; with the re-read count then: a re-read since clears it)
        self._rereads_at_sweep = 0
        self._missed: tuple[str, int, bool, int] | None = None
        self.event_builds = 0

    def inventory(self, states: Mapping[str, SourceState]) -> Topology:
        """The latest topology (empty before the first discovery): the sweep's input. A pure read of what
        take() took."""
        return self.topology.inventory()

    def take(self, states: Mapping[str, SourceState]) -> None:
        """A discovery finished: take it (pipeline.fabric_topology.take, once per discovery)."""
        self.topology.take(states)

    @property
    def topology_changes(self) -> int:
        return self.topology.topology_changes

    # --- the build ----------------------------------------------------------------------
    def build(self, states: Mapping[str, SourceState], inventory_ran: tuple[bool, bool] = (True, True)
              ) -> tuple[Sections, list[Finding]]:
        now = self.clock()
        unknown = self._nothing_read(states)
        topo = self.topology.take(states)      # taken already when the pipeline runs it (a no-op then)
        sec = FabricSection(shard=self.shard, topology_changes=self.topology_changes, name=self.name)
        sweep_st = source_state(states, SweepData)
        if sweep_st is not None:
            sec.sweep_duration = sweep_st.duration if sweep_st.ran else None
        if not topo.switches:
            self._last = None
            return {"fabric": sec, "unknown": unknown}, []
        inputs = self._inputs(states, topo)
        events_st = source_state(states, FabricEventsData)
        events = events_st.data if events_st is not None and isinstance(events_st.data, FabricEventsData) else None
        if self._last is not None and len(inputs) == len(self._last[0]) \
                and all(a is b for a, b in zip(inputs, self._last[0])):
            if events is not None and events.seq > self.evidence.events_seq:
                assert events_st is not None
                self._event_build(events, events_st.data_time)
            return self._reuse(states, topo, unknown, sec.sweep_duration, now)
        self.topology.ports(topo, sec)
        if events is not None and events_st is not None:
            self.evidence.take_events(events, events_st.data_time)

        sweep = sweep_st.data if sweep_st is not None and isinstance(sweep_st.data, SweepData) else None
        sweep_time = sweep_st.data_time if sweep_st is not None else 0.0
        new_sweep = sweep is not None and sweep_time != self._sweep_time
        if sweep is not None and new_sweep:
            self.counters.record(sweep, sweep_time, set(sec.ports))
            self._sweep_time = sweep_time
            self.evidence.take_sweep(sweep, sweep_time, sec, changes=events is not None and events.mode == "events")
            self._note_unreported(events, sec)
        self.evidence.apply_state(sec)
        if sweep is not None:
            sec.counter_scale = dict(sweep.scale)
            sec.link_state_method = sweep.state_method
            sec.sweep_method = sweep.method
            self.evidence.fresh_state(sweep, sec)
            self.evidence.fresh_events(sec)
            self.counters.fill(sweep, sec)
        ev = self.evidence
        check_inputs = FabricInputs(states, topo, sec, now, self.history, sweep, new_sweep, ev.abilities, ev.reads,
                                    ev.last_read, self.checks.flagged)
        present = self.checks.present(states, bool(sweep is not None and sweep.pause), self.counters.present(sweep))
        findings, ran = self.checks.run_ports(check_inputs, present)
        self._last = (inputs, sec, findings, ran)
        return self._reuse(states, topo, unknown, sec.sweep_duration, now)

    def _inputs(self, states: Mapping[str, SourceState], topo: Topology) -> tuple[object, ...]:
        """What a full build reads (PORT_INPUTS' latest data, each with its data time, and the topology),
        compared by identity: a build whose inputs are the last full build's reuses its port section and
        findings (only a slow source completed: the subnet manager's poll, the job list, a failing source)."""
        out: list[object] = [topo]
        for records in PORT_INPUTS:
            st = source_state(states, records)
            out += [None, None] if st is None else [st.data, st.data_time]
        return tuple(out)

    def _event_build(self, events: FabricEventsData, t: float) -> None:
        """The reports' new re-reads into the last full build's section (module doc): a new section sharing every
        port but those whose state changed, degraded_link judged again on them; it becomes the last build."""
        assert self._last is not None
        inputs, last, findings, ran = self._last
        keys = self.evidence.take_events(events, t)
        sec = replace(last, ports=dict(last.ports))
        touched = self.evidence.apply_events(sec, keys)
        self.event_builds += 1
        if touched:
            new = self.checks.rejudge_links(sec, touched, self.evidence.abilities)
            gone = set(touched)
            findings = [f for f in findings if not (f.check == "degraded_link" and (f.device, f.port) in gone)] + new
        self._last = (inputs, sec, findings, ran)

    def _note_unreported(self, events: FabricEventsData | None, sec: FabricSection) -> None:
        """A sweep's port changes against the reports: a change on a switch of this shard with no re-read since
        the sweep before is one the SM did not report (kept until a report comes)."""
        if events is None:
            return
        if self._missed is not None and events.rereads > self._missed[3]:
            self._missed = None
        if events.mode == "events":
            for (g, port), up in self.evidence.sweep_changes:
                if g in sec.switches and events.reported.get(g, 0) <= self._rereads_at_sweep:
                    self._missed = (g, port, up, events.rereads)
                    log.warning("a port changed and the subnet manager reported nothing", switch_guid=g, port=port,
                                up=up, sm_guid=events.sm_guid, note="link state from the sweep until a report comes")
                    break
        self._rereads_at_sweep = events.rereads

    def _events_view(self, states: Mapping[str, SourceState], sec: FabricSection) -> EventsView | None:
        ev = source_data(states, FabricEventsData)
        if ev is None:
            return None
        mode, reason = ev.mode, ev.reason
        if self._missed is not None and ev.rereads > self._missed[3]:
            self._missed = None
        if mode == "events" and self._missed is not None:
            g, port, up, _ = self._missed
            name = sec.switches[g].name if g in sec.switches else g
            mode = "sweep"
            reason = (f"the SM at LID {ev.sm_lid} (0x{ev.sm_guid}) accepted the subscription but reported nothing of "
                      f"{name} (0x{g}) port {port} going {'up' if up else 'down'}, which the sweep saw: it does not "
                      f"forward, and link state comes from the sweep until a report comes")
        return EventsView(mode, reason, ev.sm_guid, ev.sm_lid, ev.traps, ev.subscribed_at, dict(ev.reports),
                          ev.unmatched, ev.rereads, ev.latency)

    def _reuse(self, states: Mapping[str, SourceState], topo: Topology, unknown: str, sweep_duration: float | None,
               now: float) -> tuple[Sections, list[Finding]]:
        """The snapshot's sections from the last full build: its section (a copy sharing its ports and switches,
        which no build changes once built) with this build's subnet manager, check status and jobs."""
        assert self._last is not None
        _, last, port_findings, ran = self._last
        sec = replace(last, sweep_duration=sweep_duration, sms=None, sm_activity=None)
        sec.events = self._events_view(states, sec)
        inputs = FabricInputs(states, topo, sec, now, self.history)
        present = self.checks.present(states, False)
        poll = self.checks.run_poll(inputs, present)
        findings = list(port_findings) + poll.findings
        self.checks.check_status(sec, findings, {**ran, **poll.names})
        jobs, findings = self.jobs.apply(states, sec, topo, findings)
        if jobs is not None:
            findings += self.checks.run_jobs(replace(inputs, jobs=jobs), present | {"running_jobs"}, jobs).findings
        return {"fabric": sec, "jobs": jobs, "unknown": unknown}, findings

    def why_unread(self, states: Mapping[str, SourceState]) -> str:
        """Why the last sweep (before one, the discovery) read no switch, "" when it read one: the one line
        every command that reads the fabric says (`fabric once`, `fabric design save`, `topology slurm`),
        its kind's failure hints first (no umad device, no permission on it, no SM, a missing tool)."""
        return why_nothing_read(states, self.hints) or ""

    def _nothing_read(self, states: Mapping[str, SourceState]) -> str:
        """why_unread: the snapshot's `unknown`, so the collector's verdict is UNKNOWN (3) while it has no
        view of its fabric; logged once when it appears or changes, and when it clears. Not logged before
        the first sweep has had its chance (run, read or not: between the first discovery and the first
        sweep nothing was read yet, and nothing is wrong); with no sweep to wait for (disabled, its tool not
        installed), once the discovery has run."""
        why = self.why_unread(states)
        sweep = source_state(states, SweepData)
        waited = sweep if sweep is not None and sweep.active else source_state(states, DiscoveryData)
        tried = waited is not None and waited.ran
        if why != self._why and (tried or not why):
            if why:
                log.warning("no switch could be read", reason=why, retrying=True)
            else:
                log.info("switches read again", previous=self._why)
            self._why = why
        return why


def fabric_pipeline(config: Config, io: HostIO, clock: Callable[[], float] = time.time) -> Pipeline:
    """The fabric collector: the one Pipeline, with the fabric sources and this model."""
    from fabricmon.pipeline.scheduler import Pipeline
    # fabric.kind names the registry's collector (its sources and failure hints); nothing here depends on which
    model = FabricModel(config, clock, hints=failure_hints(config.fabric.kind))
    return Pipeline(config, io, clock=clock, collector=config.fabric.kind, model=model,
                    source_configs=config.fabric.sources)


__all__ = ["FabricModel", "fabric_pipeline"]
