"""The fabric configuration of the pipeline: how the latest discovery and sweep become a
Snapshot's fabric section. Records are picked by type (DiscoveryData, SweepData), never by
source name:

1. the topology: levels and roles from the latest discovery, rebuilt only when a new one
   arrived; a partial discovery (queries unanswered) is merged into the last complete view
   (model.fabric.merge_discovery), never replaces it; links that appear or vanish between complete
   views are logged and counted, and a port that was cabled and is no longer stays known
   (reported down, never dropped);
1b. link state: each cabled port's newest read (the sweep's PortInfo, or the discovery that saw it
   cabled), the peer's read included; a port not read keeps its last state (unreached is not
   down); a switch whose queries go unanswered in unresponsive_sweeps of its last unresponsive_window
   sweeps is unresponsive (checks.fabric_unresponsive, WARNING), on either fabric kind;
2. every counter of a new sweep enters a CounterHistory through the one CounterIntake (width, wrap,
   saturation, reset and first baseline: model.history), keyed (switch_guid, port, counter);
   transmit/receive rates from the last step;
3. the checks, each run when its inputs are present (capabilities, never the fabric kind):
   fabric_links (down, width, speed), link_errors (the node daemon's thresholds), fabric_ecmp
   (imbalance over consecutive sweeps), fabric_symmetry (active uplinks against the level's norm),
   fabric_unresponsive (a switch that does not answer), fabric_names (host CAs with the firmware's
   node description and no name in the node name map: one WARNING), fabric_routing (route balance of the latest
   forwarding tables, when a source yields LftData), fabric_sm (the subnet manager, when a source
   yields SmData; its activity count followed between polls), fabric_pfc (PFC storms, once a
   sweep yielded pause frames) and the optics checks (checks.optics, the node daemon's logic, when a
   source yields SwitchOpticsData; each lane's baseline kept in <state_dir>/fabric_optics_baseline.json);
4. every check's status per switch (fabricmon_fabric_check_status, OK included) for the checks whose
   inputs were read (none for the others: absent, never OK), and per port once it was not OK;
5. this collector's shard only: a switch belongs to exactly one shard (GUID hash);
6. the jobs each WARNING/CRITICAL finding can hurt, when a job source runs (pipeline.jobs);
7. while the last sweep read no switch, the snapshot's `unknown` says why (pipeline.fabric_failure, the
   kind's failure hints first), so the collector's verdict is UNKNOWN (model.health) and /readyz 503.
"""

from __future__ import annotations

import os
import time
from collections import deque
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import replace
from typing import TYPE_CHECKING

import structlog

from fabricmon import ibspec
from fabricmon.checks import OK, Finding
from fabricmon.checks import optics as optics_checks
from fabricmon.checks import fabric_slurm_topology as slurm_topology_check
from fabricmon.checks import fabric_placement
from fabricmon.checks import fabric_design as design_check
from fabricmon.checks import (
    fabric_ecmp, fabric_links, fabric_names, fabric_pfc, fabric_routing, fabric_sm, fabric_symmetry, fabric_unresponsive,
    link_errors,
)
from fabricmon.checks.fabric_unresponsive import SweepRead
from fabricmon.config import Config
from fabricmon.checks.settings import COUNTER_CHECKS
from fabricmon.model.fabric import (
    DiscoveryData, FabricPort, FabricSection, LftData, PortInfo, RouteBalance, SmData, SweepData, Topology, build_topology,
    in_shard, merge_discovery,
)
from fabricmon.model.history import PLAIN, CounterHistory, CounterIntake, ib_rule
from fabricmon.model.link_ability import LinkAbility
from fabricmon.model import slurm_topology
from fabricmon.model.ports import PortView
from fabricmon.model.slurm_topology import Drift, Rail, SchedulerTopologyData
from fabricmon.model import placement
from fabricmon.model.jobs import JobsSection
from fabricmon.model import design as fabric_design
from fabricmon.model.design import DesignData, Discrepancy
from fabricmon.model.optics import OpticsPort, SwitchOpticsData
from fabricmon.model.snapshot import Sections, SourceState, source_data, source_state
from fabricmon.pipeline.fabric_failure import Hint, why_nothing_read
from fabricmon.pipeline.jobs import FabricJobs
from fabricmon.pipeline.optics_baseline import BaselineStore
from fabricmon.pipeline.node import CHECKED_COUNTERS
from fabricmon.registry import failure_hints
from fabricmon.host.io import HostIO
from fabricmon.parsers.entity_sensor import SwitchOptics

if TYPE_CHECKING:
    from fabricmon.pipeline.scheduler import Pipeline

log = structlog.get_logger("fabricmon.fabric")

RATE_COUNTERS = ("transmit_bytes", "receive_bytes")
MAX_CHANGE_LINES = 20       # topology changes logged one by one per discovery, then summarised
# Capabilities, not kinds: each fabric check declares the inputs it needs (its module's NEEDS); the model
# runs it, and reports it per switch in fabricmon_fabric_check_status (OK included, by the finding's own
# check name), once the sources provide them, whatever the fabric kind:
#   topology           a discovery (DiscoveryData)
#   forwarding_tables  a source yielded LftData
#   subnet_manager     a source yielded SmData
#   pause_frames       a sweep yielded PFC pause frames (SweepData.pause)
#   transceiver_readings  a source yielded the switches' optics (SwitchOpticsData): the optics checks
#                      (checks.optics, shared with the node daemon), per switch whose sensors were read
#   scheduler_topology a configured Slurm topology.conf/.yaml was read (SchedulerTopologyData): its drift
#                      from the rail (checks.fabric_slurm_topology), once per new discovery or file read
#   running_jobs       a job source lists the running jobs (ClusterJobsData): their placement on the rail
#                      (checks.fabric_placement, one finding per job, after the jobs are known)
#   design             a design file was read (DesignData): the fabric as designed against the fabric as found
#                      (checks.fabric_design), once per new discovery, sweep or file read
CAPABILITIES = ("topology", "forwarding_tables", "subnet_manager", "pause_frames", "transceiver_readings",
                "scheduler_topology", "running_jobs", "design")
SWITCH_CHECK_MODULES = (fabric_links, fabric_ecmp, fabric_symmetry, fabric_unresponsive, fabric_routing, fabric_pfc)
FABRIC_WIDE_CHECK_MODULES = (fabric_sm, fabric_names, slurm_topology_check, fabric_placement,   # placement: per job
                             design_check)
# the counter checks (checks.link_errors, shared with the node daemon) judge the sweep's counters per port:
# each runs once a sweep yielded one of its counters (COUNTER_CHECKS), counter_saturation once a sweep
# yielded a counter that saturates (not one that wraps: Ethernet's ifTable counters)
COUNTER_NEEDS = ("topology",)
# the records a full build reads (the port section, its checks); a build whose inputs are all the last full
# build's reuses it and redoes only the subnet manager (SmData), the check status and the jobs (pipeline.jobs)
PORT_INPUTS = (SweepData, LftData, SwitchOpticsData, SchedulerTopologyData, DesignData)


class FabricModel:
    """Builds fabric snapshots; keeps the topology, the remembered links and the counter
    histories between builds."""

    def __init__(self, config: Config, clock: Callable[[], float] = time.time, shard: tuple[int, int] | None = None,
                 hints: Sequence[Hint] = ()):
        self.config = config
        self.clock = clock
        self.hints = tuple(hints)       # the collector's failure hints (registry.failure_hints), asked first
        self._why = ""                  # why no switch could be read, as last logged ("" while one was)
        self.shard = shard or config.fabric.shard
        # Error counters: the node daemon's windows. A counter enters it once it is non-zero
        # (preceded by a 0 at the previous sweep), so a healthy fabric keeps no history at all.
        self.history = CounterHistory(horizon=max(c.window for c in config.checks.counters.values()))
        self.rates = CounterHistory(horizon=3600.0, max_samples=2)
        self.intake = CounterIntake(self.history, sparse=True)
        self.rate_intake = CounterIntake(self.rates)
        self._topo: Topology | None = None
        self._topo_time: float | None = None
        self._remembered: dict[tuple[str, int], PortInfo] = {}   # ports cabled at some discovery
        self._seen: dict[tuple[str, int], float] = {}            # ... and the data time it was last seen cabled
        self._sm_time: float | None = None
        self._sm_last: tuple[str, int] | None = None            # (master guid, activity count) at the last poll
        self._sm_stalled = 0
        self.topology_changes = 0
        self._sweep_time: float | None = None
        self._prev_sweep_time: float | None = None
        self._ecmp_counts: dict[tuple[str, str], int] = {}
        self.jobs = FabricJobs(config.slurm.max_job_switch_series)     # which jobs each finding hurts
        self._pfc_counts: dict[tuple[str, int, int, str], int] = {}
        self._reads_pause = False                                # some sweep yielded PFC pause frames
        self._counters_read: set[str] = set()                    # the checked counters some sweep yielded
        self._saturable_read = False                             # ... one of them a counter that saturates
        self._flagged: set[tuple[str, str, int]] = set()         # (check, switch, port) once not OK
        self._view: DiscoveryData | None = None                  # the merged discovery view
        # the last drift of the configured Slurm topology: (topology, file read, drifts, rail nodes)
        self._scheduler_drift: tuple[Topology, SchedulerTopologyData, list[Drift], int] | None = None
        self._view_complete = False                              # some discovery so far was complete
        # the rail's index for placement (topology, rail, index) and the last placements (hosts, placements)
        self._rail_index: tuple[Topology, Rail, placement.RailIndex] | None = None
        self._placed: tuple[dict[str, tuple[str, ...]], dict[str, placement.Placement]] = ({}, {})
        # the last comparison with the design: its inputs (topology, design read, the ports a sweep read at
        # another width or speed than the discovery) and its discrepancies
        self._design_last: tuple[Topology, DesignData, frozenset[tuple[tuple[str, int], tuple[int | None, str | None]]],
                                 list[Discrepancy]] | None = None
        # the last read of each cabled port's link state: (up, data time); the newest read wins
        self._link_state: dict[tuple[str, int], tuple[bool, float]] = {}
        self._seen_up: set[tuple[str, int]] = set()     # ports a sweep has read up
        self._discovery_reads_state = True      # the last discovery's links are evidence of their state
        # per switch: the last sweeps' (unanswered, queries, what failed), and the data time of its last full read
        self._reads: dict[str, deque[SweepRead]] = {}
        self._last_read: dict[str, float] = {}
        # what each port may train at (InfiniBand PortInfo, both ends of a link: the latest read of each),
        # each link's past (checks.fabric_links.remember), and the ports noted slower than their class
        self._abilities: dict[tuple[str, int], LinkAbility] = {}
        self._past: dict[tuple[str, int], fabric_links.Past] = {}
        self._noted: set[tuple[str, int]] = set()
        # the last full build: its inputs (PORT_INPUTS' data and data times, the topology), its section, its
        # findings but the subnet manager's, and the checks that ran (a build with the same inputs reuses them)
        self._last: tuple[tuple[object, ...], FabricSection, list[Finding], dict[str, Iterable[str]]] | None = None
        # the active and expected uplinks of each switch (fabric_symmetry), from a topology: (it, active, expected)
        self._uplinks: tuple[Topology, dict[str, int], dict[str, int | None]] | None = None
        # the last route balance (fabric_routing) and what it was computed from: (topology, tables, up uplinks, it)
        self._routes: tuple[Topology, LftData, frozenset[tuple[str, int]], dict[str, RouteBalance]] | None = None
        # each switch lane's learned receive power (checks.optics), in the state directory
        self.optics_baseline = BaselineStore(os.path.join(config.state_dir, "fabric_optics_baseline.json")
                                             if os.path.isdir(config.state_dir) else None)

    # --- topology -----------------------------------------------------------------------
    def inventory(self, states: Mapping[str, SourceState]) -> Topology:
        """The latest topology (empty before the first discovery): the sweep's input."""
        st = source_state(states, DiscoveryData)
        if st is None or not isinstance(st.data, DiscoveryData):
            return self._topo if self._topo is not None else Topology()
        if self._topo_time == st.data_time and self._topo is not None:
            return self._topo
        data: DiscoveryData = st.data
        view = merge_discovery(self._view, data)
        if not data.complete:
            log.info("partial discovery merged with the last complete view", unanswered=data.unanswered,
                     switches_reached=len(data.switches), switches_kept=len(view.switches) - len(data.switches))
        # the last levels: a leaf whose hosts went down stays a leaf (a fabric's levels are stable)
        topo = build_topology(view, st.data_time, self._topo.levels if self._topo is not None else None)
        if self._topo is not None and self._view_complete:
            self._log_changes(self._topo, topo)
        self._view, self._view_complete = view, self._view_complete or data.complete
        reached = {(g, p) for g, sw in data.switches.items() for p in sw.links}
        # a discovery that sees a link only while it is up is evidence of its state (ibnetdiscover);
        # one that is not (LLDP: DiscoveryData.links_are_up) leaves the state to the sweep's reads
        self._discovery_reads_state = evidence = data.links_are_up
        for key, p in topo.ports.items():
            if p.link is not None:
                self._remembered[key] = p
                self._seen[key] = st.data_time
                if key in reached and evidence:   # seen cabled now: up, unless a later read says otherwise
                    self._read_state(key, True, st.data_time)
        for key in self._remembered:
            if key not in topo.ports or topo.ports[key].link is None:
                if (lk := self._remembered[key].link) is not None:     # always: only cabled ports are remembered
                    topo.down_links[key] = lk
                if data.complete and evidence:    # gone from a complete discovery: positive evidence
                    self._read_state(key, False, st.data_time)
        max_age = self.config.fabric.down_port_max_age
        if max_age is not None:         # a port down for longer than the age limit is forgotten
            for key in [k for k, t in self._seen.items() if st.data_time - t > max_age]:
                del self._seen[key]
                self._remembered.pop(key, None)
                self._link_state.pop(key, None)
                log.info("down port forgotten (fabric.down_port_max_age)", switch_guid=key[0], port=key[1])
        self._topo, self._topo_time = topo, st.data_time
        return topo

    def _log_changes(self, old: Topology, new: Topology) -> None:
        def links(t: Topology) -> set[tuple[str, str, str, str, str, str]]:
            return {(g, sw.port_name(p), lk.remote_guid, lk.remote_port_label,
                     lk.rate_class if lk.rate_mbps else f"{lk.width}x{lk.speed}", lk.remote_name)
                    for g, sw in t.switches.items() for p, lk in sw.links.items()}
        changes: list[str] = []
        for g in sorted(set(old.switches) - set(new.switches)):
            changes.append(f"switch {old.switches[g].name or g} (0x{g}) vanished")
        for g in sorted(set(new.switches) - set(old.switches)):
            changes.append(f"switch {new.switches[g].name or g} (0x{g}) appeared")
        for g in sorted(set(old.cas) - set(new.cas)):
            changes.append(f"CA {old.cas[g]} (0x{g}) vanished")
        for g in sorted(set(new.cas) - set(old.cas)):
            changes.append(f"CA {new.cas[g]} (0x{g}) appeared")
        before, after = links(old), links(new)
        for what, group, t in (("vanished", before - after, old), ("appeared", after - before, new)):
            for g, p, rg, rp, cls, rname in sorted(group):
                if g in old.switches and g in new.switches:
                    name = t.switches[g].name or g
                    changes.append(f'link "{name}"[{p}] (0x{g}) <-> "{rname}"[{rp}] (0x{rg}) {cls} {what}')
        self.topology_changes += len(changes)
        for c in changes[:MAX_CHANGE_LINES]:
            log.warning("topology change", change=c)
        if len(changes) > MAX_CHANGE_LINES:
            log.warning("topology changes", more=len(changes) - MAX_CHANGE_LINES)

    def _read_state(self, key: tuple[str, int], up: bool, t: float) -> None:
        old = self._link_state.get(key)
        if old is None or old[1] <= t:
            self._link_state[key] = (up, t)

    # --- counters -----------------------------------------------------------------------
    def _record(self, sweep: SweepData, t: float, keep: set[tuple[str, int]]) -> None:
        """A new sweep's counters through the one intake: the error counters into the history (sparse:
        a quiet counter keeps none), transmit/receive and pause frames into the rates."""
        rules = {name: ib_rule(name, bits, name in sweep.wrapping) for name, bits in sweep.bits.items()}
        rates = {name: rules.get(name, PLAIN) for name in RATE_COUNTERS}
        read, unseen = self._counters_read, CHECKED_COUNTERS - self._counters_read
        self.rate_intake.take_ports([(key, {f"pause:{prio}:{direction}": v for (prio, direction), v in pause.items()})
                                     for key, pause in sweep.pause.items() if key in keep], t, {}, stream="pause")
        ports = [(key, vals) for key, vals in sweep.ports.items() if key in keep]
        for _, vals in ports:
            if not unseen:
                break
            if not unseen.isdisjoint(vals):
                read |= unseen.intersection(vals)
                unseen = unseen.difference(vals)
        self.rate_intake.take_ports(ports, t, rates, only=RATE_COUNTERS)
        for key, name in self.intake.take_ports(ports, t, rules, only=CHECKED_COUNTERS):
            log.info("counter decreased (reset)", switch_guid=key[0], port=key[1], counter=name)
        self.intake.prune(keep)
        self.rate_intake.prune(keep)
        self._saturable_read = self._saturable_read or any(rules[n].saturates for n in read if n in rules)

    # --- the build ----------------------------------------------------------------------
    def build(self, states: Mapping[str, SourceState], inventory_ran: tuple[bool, bool] = (True, True)
              ) -> tuple[Sections, list[Finding]]:
        now = self.clock()
        unknown = self._nothing_read(states)
        p: FabricPort | None
        topo = self.inventory(states)
        sec = FabricSection(shard=self.shard, topology_changes=self.topology_changes)
        sweep_st = source_state(states, SweepData)
        if sweep_st is not None:
            sec.sweep_duration = sweep_st.duration if sweep_st.ran else None
        if not topo.switches:
            self._last = None
            return {"fabric": sec, "unknown": unknown}, []
        inputs = self._inputs(states, topo)
        if self._last is not None and len(inputs) == len(self._last[0]) \
                and all(a is b for a, b in zip(inputs, self._last[0])):
            return self._reuse(states, topo, unknown, sec.sweep_duration)
        sec.switches = {g: sw for g, sw in sorted(topo.switches.items()) if in_shard(g, *self.shard)}
        sec.levels = {g: topo.levels.get(g, 0) for g in sec.switches}
        for ca, g in topo.parts.items():        # the switches' SHARP Aggregation Nodes
            if g in sec.switches:
                sec.aggregation_nodes[g] = tuple(topo.aggregation_nodes(g))
        section_ports, topo_port, remembered = sec.ports, topo.ports.get, self._remembered.get
        for g, sw in sec.switches.items():
            sec.kind = sw.kind
            names = sw.port_names
            for port in sw.ports():
                key = (g, port)
                info = topo_port(key)
                name = names.get(port, "") if names else ""
                if info is None or info.link is None:
                    old = remembered(key)
                    if old is not None:         # cabled before, not now: down, never dropped
                        section_ports[key] = FabricPort(g, port, old.role, old.link, up=False, name=name)
                        continue
                    section_ports[key] = FabricPort(g, port, "unconnected", None, up=False, name=name)
                else:
                    section_ports[key] = FabricPort(g, port, info.role, info.link, up=True, name=name)

        sweep = sweep_st.data if sweep_st is not None and isinstance(sweep_st.data, SweepData) else None
        sweep_time = sweep_st.data_time if sweep_st is not None else 0.0
        new_sweep = sweep is not None and sweep_time != self._sweep_time
        if sweep is not None and new_sweep:
            self._record(sweep, sweep_time, set(sec.ports))
            self._prev_sweep_time, self._sweep_time = self._sweep_time, sweep_time
            for key, up in sweep.link_up.items():
                self._read_state(key, up, sweep_time)
                if up:
                    self._seen_up.add(key)
            self._seen_up &= set(sec.ports)
            self._note_reads(sweep, sweep_time, sec)
            self._abilities.update(sweep.abilities)
        findings: list[Finding] = []
        self._apply_state(sec)
        if not self._discovery_reads_state:     # a first discovery claims no history: only a sweep that saw it up
            for key, p in sec.ports.items():
                p.seen_up, p.seen_by = key in self._seen_up, "sweep"
        if sweep is not None:
            sec.counter_scale = dict(sweep.scale)
            sec.link_state_method = sweep.state_method
            sec.sweep_method = sweep.method
            self._fresh_state(sweep, sec)
            for key, pause in sweep.pause.items():
                p = sec.ports.get(key)
                if p is None:
                    continue
                p.pause = dict(pause)
                for pd in pause:
                    step = self.rates.last_step((key[0], key[1], f"pause:{pd[0]}:{pd[1]}"))
                    if step is not None and step[1] > 0:
                        p.pause_rates[pd] = step[0] / step[1]
            tx_scale, rx_scale = (sweep.scale.get(n, ibspec.COUNTER_BY_NAME[n].scale) for n in RATE_COUNTERS)
            port_of, last_step = sec.ports.get, self.rates.last_step
            for key, vals in sweep.ports.items():
                p = port_of(key)
                if p is None:
                    continue
                p.counters = vals
                g, n = key
                step = last_step((g, n, "transmit_bytes"))
                if step is not None and step[1] > 0:
                    p.tx_rate = step[0] * tx_scale / step[1]
                step = last_step((g, n, "receive_bytes"))
                if step is not None and step[1] > 0:
                    p.rx_rate = step[0] * rx_scale / step[1]
        findings += self._links(sec)
        findings += self._unresponsive(sec, now)
        flagged = self._flagged
        judged = {k[1:] for k in flagged} | self.history.ports(CHECKED_COUNTERS)
        for key, p in sec.ports.items():
            if p.counters and key in judged:
                bits = dict(sweep.bits) if sweep else {}
                wrapping = sweep.wrapping if sweep else set()
                pv = PortView(device=key[0], port=key[1], counters=dict(p.counters), counter_bits=bits,
                              rate_gbps=p.rate_bps * 8 / 1e9 if p.rate_bps else None)   # the BER budget's rate
                label = f"{sec.switches[key[0]].name} (0x{key[0]}) port {p.label}"
                sat = {n: ib_rule(n, bits.get(n), n in wrapping).at_max(v)
                       for n, v in p.counters.items() if n in ibspec.SATURABLE}
                # per port: what is not OK, and the status of what was (flagged) not OK before
                findings += [f for f in link_errors.evaluate_port(pv, self.history, self.config.checks, now, sat, label)
                             if f.status != OK or (f.check, f.device, f.port) in flagged]
        sec.groups = fabric_ecmp.groups(sec.ports, sec.switches, topo.levels)
        ecmp_findings, self._ecmp_counts = fabric_ecmp.judge(sec.groups, self._ecmp_counts,
                                                            self.config.fabric.thresholds, new_sweep, sec.ports)
        findings += ecmp_findings
        findings += self._symmetry(sec, topo)
        findings += fabric_names.evaluate(topo.unnamed, len(topo.hosts))
        caps = self._capabilities(states, sweep)
        if set(fabric_routing.NEEDS) <= caps:
            findings += self._routing(states, sec, topo)
        if set(fabric_pfc.NEEDS) <= caps:
            pfc, self._pfc_counts = fabric_pfc.evaluate(sec.ports, sec.switches, self._pfc_counts,
                                                        self.config.fabric.pfc_storm, new_sweep)
            findings += pfc
        if set(optics_checks.NEEDS) <= caps:
            findings += self._optics(states, sec, now)
        conf = source_data(states, SchedulerTopologyData)
        if conf is not None and set(slurm_topology_check.NEEDS) <= caps:
            findings += self._scheduler_topology(conf, topo, sec)
        design = source_data(states, DesignData)
        if design is not None and set(design_check.NEEDS) <= caps:
            findings += self._design(design, topo, sec)
        ran = self._ran(sec, caps)
        findings += self._port_status(sec, findings, ran)
        self._last = (inputs, sec, findings, ran)
        return self._reuse(states, topo, unknown, sec.sweep_duration)

    def _inputs(self, states: Mapping[str, SourceState], topo: Topology) -> tuple[object, ...]:
        """What a full build reads (PORT_INPUTS' latest data, each with its data time, and the topology),
        compared by identity: a build whose inputs are the last full build's reuses its port section and
        findings (only a slow source completed: the subnet manager's poll, the job list, a failing source)."""
        out: list[object] = [topo]
        for records in PORT_INPUTS:
            st = source_state(states, records)
            out += [None, None] if st is None else [st.data, st.data_time]
        return tuple(out)

    def _reuse(self, states: Mapping[str, SourceState], topo: Topology, unknown: str, sweep_duration: float | None
               ) -> tuple[Sections, list[Finding]]:
        """The snapshot's sections from the last full build: its section (a copy sharing its ports and switches,
        which no build changes once built) with this build's subnet manager, check status and jobs."""
        assert self._last is not None
        _, last, port_findings, ran = self._last
        sec = replace(last, sweep_duration=sweep_duration, sms=None, sm_activity=None)
        findings = list(port_findings)
        if source_data(states, SmData) is not None:     # the subnet_manager capability (fabric_sm.NEEDS)
            findings += self._sm(states, sec)
        self._check_status(sec, findings, ran)
        jobs, findings = self.jobs.apply(states, sec, topo, findings)
        if jobs is not None:
            findings += self._placement(states, topo, jobs)
        return {"fabric": sec, "jobs": jobs, "unknown": unknown}, findings

    def _placement(self, states: Mapping[str, SourceState], topo: Topology, jobs: JobsSection) -> list[Finding]:
        """Every running job's span on the rail (model.placement; the rail of fabric.sources.slurm_topology,
        else every host CA) and the placement check; a job is placed again only when the topology or the
        rail changed, or its hosts did."""
        conf = source_data(states, SchedulerTopologyData)
        rail = conf.rail if isinstance(conf, SchedulerTopologyData) else Rail()
        ix = self._rail_index
        if ix is None or ix[0] is not topo or ix[1] != rail:
            tree = slurm_topology.build_tree(topo, rail)
            ix = self._rail_index = (topo, rail, placement.RailIndex.build(tree.nodes, tree.switches, tree.hcas))
            self._placed = ({}, {})
        hosts, placed = self._placed
        if hosts != jobs.hosts:         # only the jobs that are new or changed hosts are placed again
            self._placed = (dict(jobs.hosts), {j: placed[j] if hosts.get(j) == h and j in placed
                                               else placement.place(ix[2], j, h) for j, h in jobs.hosts.items()})
        jobs.placement = self._placed[1]
        return fabric_placement.evaluate(jobs.placement.values(), jobs.jobs, self.config.checks.placement)

    def _nothing_read(self, states: Mapping[str, SourceState]) -> str:
        """Why the last sweep read no switch ("" when it read one): the line `fabric once` prints, its
        kind's failure hints first. The snapshot's `unknown`, so the collector's verdict is UNKNOWN (3)
        while it has no view of its fabric; logged once when it appears or changes, and when it clears."""
        why = why_nothing_read(states, self.hints) or ""
        ran = any(s.ran for s in states.values() if s.records in (DiscoveryData, SweepData))
        if why != self._why and (ran or not why):
            if why:
                log.warning("no switch could be read", reason=why, retrying=True)
            else:
                log.info("switches read again", previous=self._why)
            self._why = why
        return why

    def _apply_state(self, sec: FabricSection) -> None:
        """Each port's state is its newest read (a sweep's PortInfo or ifOperStatus, or the
        discovery that saw it cabled; a port without a neighbour has only the sweep's read, and no
        neighbour never means down); a port not read keeps its last known state, never turns down
        for lack of an answer. The peer's newer read counts too: a switch-to-switch link whose far
        end reads down is down (a read of the same time: down if either end says so)."""
        for key, p in sec.ports.items():
            if p.link is None:              # no neighbour: its state is still the switch's (ifOperStatus)
                own = self._link_state.get(key)
                if own is not None:
                    p.up = own[0]
                continue
            own = self._link_state.get(key)
            peer = self._link_state.get((p.link.remote_guid, p.link.remote_port)) \
                if p.link.remote_type == "Switch" else None
            if own is not None:
                p.up = own[0]
            if peer is not None and not peer[0] and (own is None or peer[1] >= own[1]):
                p.up = False

    def _note_reads(self, sweep: SweepData, t: float, sec: FabricSection) -> None:
        n = self.config.fabric.unresponsive_window
        for g in sec.switches:
            queries = sweep.queries.get(g, 0)
            if not queries and g not in sweep.switches:
                continue
            lost = sweep.unanswered.get(g, 0)
            self._reads.setdefault(g, deque(maxlen=n)).append(
                SweepRead(lost, queries, tuple(sorted(sweep.failed.get(g, ())))))
            if not lost:
                self._last_read[g] = t
        for g in [g for g in self._reads if g not in sec.switches]:
            del self._reads[g]
            self._last_read.pop(g, None)

    def _unresponsive(self, sec: FabricSection, now: float) -> list[Finding]:
        """Unresponsive switches (checks.fabric_unresponsive); their ports keep their last known state."""
        for g in sec.switches:
            sec.last_read[g] = self._last_read.get(g)
        sec.unresponsive, out = fabric_unresponsive.evaluate(self._reads, self._last_read, sec.switches,
                                                             self.config.fabric.unresponsive_sweeps, now)
        return out

    @staticmethod
    def _fresh_state(sweep: SweepData, sec: FabricSection) -> None:
        """The sweep's own view of a port's speed (Ethernet: ifHighSpeed; InfiniBand: the width and
        speed PortInfo or the sweep's discovery pass read) wins over the last discovery's."""
        for key, mbps in sweep.rate_mbps.items():
            p = sec.ports.get(key)
            if p is not None and p.link is not None and p.link.rate_mbps is not None and mbps and mbps != p.link.rate_mbps:
                p.link = replace(p.link, rate_mbps=mbps)
        for key, (width, speed) in sweep.link_rate.items():
            p = sec.ports.get(key)
            if p is not None and p.link is not None and p.up and width and speed \
                    and (width, speed) != (p.link.width, p.link.speed):
                p.link = replace(p.link, width=width, speed=speed)

    def _links(self, sec: FabricSection) -> list[Finding]:
        """checks.fabric_links against what both ends enable, each link's past and its class; a port
        newly noted slower than its class (information, never a finding) is logged once."""
        findings = fabric_links.evaluate(sec.ports, sec.switches, sec.levels, self.config.checks, self._abilities, self._past)
        self._past = fabric_links.remember(sec.ports, self._past)
        noted = {k for k, p in sec.ports.items() if p.note}
        for g, port in sorted(noted - self._noted):
            p = sec.ports[(g, port)]
            log.info("link slower than its class", switch=sec.switches[g].name, switch_guid=g, port=p.label,
                     remote=p.link.remote_name if p.link is not None else "", note=p.note)
        self._noted = noted
        return findings

    # --- symmetry, routing, the subnet manager, check status ------------------------------
    def _symmetry(self, sec: FabricSection, topo: Topology) -> list[Finding]:
        if self._uplinks is None or self._uplinks[0] is not topo:   # the discovery's: once per topology
            counts = fabric_symmetry.active_uplinks(topo.ports.values())
            uppers: dict[str, set[str]] = {}        # switch -> the switches its uplinks lead to (down ones too)
            links = [((g, p), i.link) for (g, p), i in topo.ports.items()] + list(topo.down_links.items())
            for (g, _), lk in links:
                if lk is not None and lk.remote_type == "Switch" and topo.levels.get(lk.remote_guid, 0) > topo.levels.get(g, 0):
                    uppers.setdefault(g, set()).add(lk.remote_guid)
            classes = fabric_symmetry.uplink_classes(topo.ports.values())
            self._uplinks = (topo, counts, fabric_symmetry.expected_uplinks(
                counts, topo.levels, {g: frozenset(u) for g, u in uppers.items()}, classes))
        _, counts, expected = self._uplinks
        sec.uplinks = {g: (counts.get(g, 0), expected.get(g)) for g in sec.switches}
        return fabric_symmetry.evaluate(sec.uplinks, sec.ports, sec.switches, sec.levels,
                                        self.config.fabric.uplinks_critical_fraction)

    def _routing(self, states: Mapping[str, SourceState], sec: FabricSection, topo: Topology) -> list[Finding]:
        st = source_state(states, LftData)
        if st is None or not isinstance(st.data, LftData):
            return []
        threshold = self.config.fabric.routing_imbalance_threshold
        # the balance reads the tables, the topology and which uplinks are up: computed again only when one
        # of them changed (the tables every routing_interval, the uplinks when one goes down or comes back)
        active = frozenset(k for k, p in sec.ports.items() if p.role == "up" and p.up)
        last = self._routes
        if last is None or last[0] is not topo or last[1] is not st.data or last[2] != active:
            last = self._routes = (topo, st.data, active,
                                   fabric_routing.balance(topo, st.data.tables, sec.ports, list(sec.switches), threshold))
        sec.routes = last[3]
        return fabric_routing.evaluate(sec.routes, sec.ports, threshold)

    def _sm(self, states: Mapping[str, SourceState], sec: FabricSection) -> list[Finding]:
        st = source_state(states, SmData)
        if st is None or not isinstance(st.data, SmData):
            return []
        sec.sms = list(st.data.sms)
        ms = fabric_sm.masters(sec.sms)
        sec.sm_activity = ms[0].activity_count if len(ms) == 1 else None
        if st.data_time != self._sm_time:       # a new poll: is the master's activity count moving?
            cur = (ms[0].guid, ms[0].activity_count) if len(ms) == 1 else None
            self._sm_stalled = self._sm_stalled + 1 if cur is not None and cur == self._sm_last else 0
            self._sm_last, self._sm_time = cur, st.data_time
        return [fabric_sm.evaluate(sec.sms, self._sm_stalled, self.config.fabric.sm_stalled_polls)]

    def _scheduler_topology(self, conf: SchedulerTopologyData, topo: Topology, sec: FabricSection) -> list[Finding]:
        """The configured topology.conf against the rail's tree of this topology (docs/slurm-topology.md);
        computed again only when the discovery or the file read is new (each build reuses the last)."""
        last = self._scheduler_drift
        if last is None or last[0] is not topo or last[1] is not conf:
            tree = slurm_topology.build_tree(topo, conf.rail)
            found = slurm_topology.drift(tree, conf.lines, slurm_topology.switch_names(topo, topo.switches).values())
            nodes = len(set().union(*tree.nodes.values())) if tree.nodes else 0
            last = self._scheduler_drift = (topo, conf, found, nodes)
        _, _, found, nodes = last
        sec.slurm_topology_drifted = slurm_topology.drifted_nodes(found)
        sec.slurm_topology_drift = {k: sum(1 for d in found if d.kind == k) for k in slurm_topology.DRIFT_KINDS}
        return slurm_topology_check.evaluate(found, conf.path, nodes)

    def _design(self, design: DesignData, topo: Topology, sec: FabricSection) -> list[Finding]:
        """The design against this topology, each port at the width and speed the last sweep read
        (docs/design.md); this shard's switches only (fabric-wide ones on shard 0). Compared again only
        when one of its inputs changed: a new discovery, a new design read, a port's rate."""
        rates = {}
        for k, p in sec.ports.items():          # where the sweep read another width or speed than the discovery
            if p.link is not None and p.up:
                info = topo.ports.get(k)
                if info is None or info.link is None or (info.link.width, info.link.speed) != (p.link.width, p.link.speed):
                    rates[k] = (p.link.width, p.link.speed)
        read = frozenset(rates.items())
        last = self._design_last
        if last is None or last[0] is not topo or last[1] is not design or last[2] != read:   # else: the same inputs
            last = self._design_last = (topo, design, read, fabric_design.compare(design.design, topo, rates))
        found = [d for d in last[3] if d.switch in sec.switches or (not d.switch and sec.shard[0] == 0)]
        sec.design_cables = len(design.design.cables)
        sec.design_discrepancies = fabric_design.counts(found)
        return design_check.evaluate(found, design.path)

    def _capabilities(self, states: Mapping[str, SourceState], sweep: SweepData | None) -> set[str]:
        """What the sources provide now (CAPABILITIES); pause frames once any sweep yielded them (a sweep
        that failed does not take the check away)."""
        self._reads_pause = self._reads_pause or bool(sweep is not None and sweep.pause)
        caps = {"topology"}
        if source_data(states, LftData) is not None:
            caps.add("forwarding_tables")
        if source_data(states, SmData) is not None:
            caps.add("subnet_manager")
        if self._reads_pause:
            caps.add("pause_frames")
        if source_data(states, SwitchOpticsData) is not None:
            caps.add("transceiver_readings")
        conf = source_data(states, SchedulerTopologyData)
        if conf is not None and conf.configured:
            caps.add("scheduler_topology")
        design = source_data(states, DesignData)
        if design is not None and design.configured:
            caps.add("design")
        return caps

    def _optics(self, states: Mapping[str, SourceState], sec: FabricSection, now: float) -> list[Finding]:
        """The switches' transceivers (sources.ethernet.optics), judged by checks.optics, the node's logic."""
        data = source_data(states, SwitchOpticsData)
        if data is None:
            return []
        judged = []
        for g, so in sorted(data.switches.items()):
            sw = sec.switches.get(g)
            if sw is None or not isinstance(so, SwitchOptics):
                continue
            sec.optics_unjoined[g] = len(so.unjoined)
            for if_index, mod in sorted(so.ports.items()):
                fp = sec.ports.get((g, if_index))
                if fp is None:      # no fabric port (an empty cage, a management port, a LAG): no readings of it
                    continue
                sec.optics[(g, if_index)] = mod
                name = so.port_names.get(if_index) or fp.label
                link = fp.link
                peer = ""
                if link is not None:     # printable names only (an LLDP port ID may be raw octets)
                    rport = link.remote_port_name if link.remote_port_name.isprintable() else ""
                    rname = link.remote_name if link.remote_name.isprintable() else ""
                    peer = f"{rname or link.remote_guid} {rport or link.remote_port or ''}".strip()
                judged.append(OpticsPort(g, if_index, f"switch {sw.name} {name}", mod, up=so.oper_up.get(if_index),
                                         peer=peer, key=f"switch:{g}:{name}"))
        findings, learn = optics_checks.evaluate(judged, self.config.checks.optics, self.optics_baseline.baseline)
        self.optics_baseline.learn(learn, now)
        return findings

    def _ran(self, sec: FabricSection, caps: set[str]) -> dict[str, Iterable[str]]:
        """The checks that ran this build, each with the switches it judged: only a check whose inputs
        were read (its capability; a counter check once a sweep yielded one of its counters) has a
        status, OK included; the others have none (absent, never OK)."""
        checks = [m.CHECK for m in SWITCH_CHECK_MODULES if set(m.NEEDS) <= caps]
        if set(COUNTER_NEEDS) <= caps:
            checks += [c for c, (counters, *_) in COUNTER_CHECKS.items() if not self._counters_read.isdisjoint(counters)]
            checks += [link_errors.SATURATION_CHECK] if self._saturable_read else []
        ran: dict[str, Iterable[str]] = {c: sec.switches for c in checks}
        if set(design_check.NEEDS) <= caps:      # the design judges every switch of the shard
            ran[design_check.CHECK] = sec.switches
        if set(optics_checks.NEEDS) <= caps:     # the switches whose transceiver sensors were read
            ran.update({c: sec.optics_unjoined for c in optics_checks.CHECKS})
        return ran

    def _port_status(self, sec: FabricSection, findings: list[Finding], ran: Mapping[str, Iterable[str]]) -> list[Finding]:
        """fabricmon_check_status per switch port: a port's check, once not OK, keeps a status every build
        while it ran and the port exists (OK when it recovered), so the series does not vanish; a port
        never flagged has only its switch's status (fabricmon_fabric_check_status), which keeps a
        16,000-port fabric from exporting a status per port and check."""
        flagged = self._flagged | {(f.check, f.device, f.port) for f in findings
                                   if f.status != OK and f.port is not None and f.device in sec.switches}
        flagged = self._flagged = {k for k in flagged if (k[1], k[2]) in sec.ports and k[0] in ran}
        have = {(f.check, f.device, f.port) for f in findings}
        out = []
        for check, g, port in sorted(flagged - have):
            p = sec.ports[(g, port)]
            out.append(Finding(check, g, port, OK, f"{sec.switches[g].name} (0x{g}) port {p.label}: {check} OK"))
        return out

    def _check_status(self, sec: FabricSection, findings: list[Finding], ran: Mapping[str, Iterable[str]]) -> None:
        status = {(c, g): OK for c, switches in ran.items() for g in switches}
        for f in findings:      # a switch's findings by their own check name; fabric-wide ones (sm) with ""
            if f.device in sec.switches or f.device == "":
                key = (f.check, f.device)
                status[key] = max(status.get(key, OK), f.status)
        sec.check_status = status


def fabric_pipeline(config: Config, io: HostIO, clock: Callable[[], float] = time.time) -> Pipeline:
    """The fabric collector: the one Pipeline, with the fabric sources and this model."""
    from fabricmon.pipeline.scheduler import Pipeline
    # fabric.kind names the registry's collector (its sources and failure hints); nothing here depends on which
    model = FabricModel(config, clock, hints=failure_hints(config.fabric.kind))
    return Pipeline(config, io, clock=clock, collector=config.fabric.kind, model=model,
                    source_configs=config.fabric.sources)


__all__ = ["FabricModel", "fabric_pipeline"]
