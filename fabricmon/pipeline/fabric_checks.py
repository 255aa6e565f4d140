"""The fabric checks (pipeline.fabric's steps 3 and 4): every fabric check registered in one place, run by
the one runner (pipeline.checks) when its inputs are present (capabilities: checks.fabric_inputs, never
the fabric kind), and the check status: per switch (fabricmon_fabric_check_status, OK included) for the
checks that ran, none for the others (absent, never OK), and per port once it was not OK.

Three phases, each its own runner: the port checks on a full build (their findings and what ran are
reused while the build's inputs do not change: pipeline.fabric.PORT_INPUTS), the subnet manager on every
build (its poll is slow and its own), and the placement of the running jobs once they are known."""

from __future__ import annotations

import os
from collections.abc import Iterable, Mapping

from fabricmon.checks import OK, Finding
from fabricmon.checks import fabric_design, fabric_ecmp, fabric_host_ports, fabric_links, fabric_node_description, \
    fabric_pfc, fabric_placement, fabric_routing, fabric_slurm_topology, fabric_sm, fabric_uplinks, fabric_unresponsive, \
    fabric_uplink_capacity, fabric_link_errors
from fabricmon.checks import optics as optics_checks
from fabricmon.checks import fabric_vitals
from fabricmon.model.vitals import SwitchVitalsData, VitalsView
from fabricmon.checks.fabric_inputs import FabricInputs
from fabricmon.checks.optics import Readings
from fabricmon.checks.shape import Check
from fabricmon.config import Config
from fabricmon.checks.fabric_links import LinkVerdicts
from fabricmon.model.design import DesignData
from fabricmon.model.fabric import (DesignDrift, DiscoveryData, EcmpGroups, FabricSection, LftData, Responsiveness,
                                    RouteBalances, SchedulerDrift, SmData, SmPoll, SwitchOpticsView, UplinkCounts)
from fabricmon.model.jobs import JobsSection, Placements
from fabricmon.model.link_ability import LinkAbility
from fabricmon.model.optics import OpticsPort, SwitchOpticsData
from fabricmon.model.slurm_topology import SchedulerTopologyData
from fabricmon.model.snapshot import SourceState, records_present, source_data
from fabricmon.parsers.entity_sensor import SwitchOptics
from fabricmon.pipeline.checks import CheckRunner, Ran
from fabricmon.stores.optics_baseline import BaselineStore

FabricCheck = Check[FabricInputs]


def switch_optics(inputs: FabricInputs) -> Readings | None:
    """The switches' transceivers (sources.ethernet.optics) joined to the section's ports: what the
    optics checks (checks.optics, the node's logic) judge, and the switches whose sensors were read."""
    data = source_data(inputs.states, SwitchOpticsData)
    if data is None:
        return None
    sec = inputs.sec
    judged = []
    optics, unjoined = {}, {}
    for g, so in sorted(data.switches.items()):
        sw = sec.switches.get(g)
        if sw is None or not isinstance(so, SwitchOptics):
            continue
        unjoined[g] = len(so.unjoined)
        for if_index, mod in sorted(so.ports.items()):
            fp = sec.ports.get((g, if_index))
            if fp is None:      # no fabric port (an empty cage, a management port, a LAG): no readings of it
                continue
            optics[(g, if_index)] = mod
            name = so.port_names.get(if_index) or fp.label
            link = fp.link
            peer = ""
            if link is not None:     # printable names only (an LLDP port ID may be raw octets)
                rport = link.remote_port_name if link.remote_port_name.isprintable() else ""
                rname = link.remote_name if link.remote_name.isprintable() else ""
                peer = f"{rname or link.remote_guid} {rport or link.remote_port or ''}".strip()
            judged.append(OpticsPort(g, if_index, f"switch {sw.name} {name}", mod, up=so.oper_up.get(if_index),
                                     peer=peer, key=f"switch:{g}:{name}"))

    return Readings(judged, inputs.now, SwitchOpticsView(optics, unjoined), list(unjoined))


def compose(sec: FabricSection, derived: object) -> None:
    """The fabric's one composer (pipeline.checks): a check's derived sub-section into the section being built,
    by its type (the link verdicts into the ports this build made); a type it does not know is a bug."""
    if isinstance(derived, LinkVerdicts):
        fabric_links.apply(sec.ports, derived)
    elif isinstance(derived, Responsiveness):
        sec.unresponsive, sec.last_read = dict(derived.unresponsive), dict(derived.last_read)
    elif isinstance(derived, EcmpGroups):
        sec.groups = list(derived.groups)
    elif isinstance(derived, UplinkCounts):
        sec.uplinks = dict(derived.uplinks)
    elif isinstance(derived, RouteBalances):
        sec.routes = dict(derived.routes)
    elif isinstance(derived, SmPoll):
        sec.sms, sec.sm_activity = list(derived.sms), derived.activity
    elif isinstance(derived, DesignDrift):
        sec.design_cables, sec.design_discrepancies = derived.cables, dict(derived.discrepancies)
    elif isinstance(derived, SchedulerDrift):
        sec.slurm_topology_drifted, sec.slurm_topology_drift = derived.drifted, dict(derived.by_kind)
    elif isinstance(derived, SwitchOpticsView):
        sec.optics.update(derived.optics)
        sec.optics_unjoined.update(derived.unjoined)
    elif isinstance(derived, VitalsView):
        sec.vitals.update(derived.vitals)
    else:
        raise TypeError(f"the fabric section composes no {type(derived).__name__}")


def compose_jobs(js: JobsSection, derived: object) -> None:
    """The jobs section's composer: the placement check's spans."""
    if not isinstance(derived, Placements):
        raise TypeError(f"the jobs section composes no {type(derived).__name__}")
    js.placement = derived.placement


class FabricChecks:
    """The registered fabric checks, each with its settings and state; the ports flagged not OK."""

    def __init__(self, config: Config):
        fab, checks = config.fabric, config.checks
        # each switch lane's learned receive power (checks.optics), in the state directory
        self.optics_baseline = BaselineStore(os.path.join(config.state_dir, "fabric_optics_baseline.json")
                                             if os.path.isdir(config.state_dir) else None)
        self.ports: CheckRunner[FabricInputs, FabricSection] = CheckRunner([
            fabric_links.Links(checks),
            fabric_unresponsive.Unresponsive(fab.unresponsive_sweeps),
            fabric_link_errors.FabricCounters(checks),
            fabric_ecmp.Ecmp(fab.thresholds),
            fabric_uplinks.Symmetry(fab.uplinks_critical_fraction),
            fabric_uplink_capacity.UplinkCapacity(),
            fabric_node_description.Names(),
            fabric_host_ports.HostPorts(),
            fabric_routing.Routing(fab.routing_imbalance_threshold),
            fabric_pfc.PfcStorm(fab.pfc_storm),
            optics_checks.Optics(checks.optics, self.optics_baseline, switch_optics, optics_checks.NEEDS),
            fabric_slurm_topology.SchedulerTopology(),
            fabric_design.DesignCheck(),
            fabric_vitals.Vitals(),
        ], compose)
        self.poll: CheckRunner[FabricInputs, FabricSection] = CheckRunner(
            [fabric_sm.SubnetManager(fab.sm_stalled_polls)], compose)
        self.jobs: CheckRunner[FabricInputs, JobsSection] = CheckRunner(
            [fabric_placement.PlacementCheck(checks.placement)], compose_jobs)
        self.flagged: frozenset[tuple[str, str, int]] = frozenset()     # (check, switch, port) once not OK

    @staticmethod
    def present(states: Mapping[str, SourceState], pause: bool, counters: Iterable[str] = ()) -> set[str]:
        """What is fresh in this build (checks.fabric_inputs.CAPABILITIES; running_jobs is the model's, once
        pipeline.jobs knows them): the fresh records' types, a fresh discovery (topology), the counters and
        pause frames this sweep read. Nothing is remembered: a sweep that failed takes its checks away."""
        caps = records_present(states) | set(counters)
        discovery = source_data(states, DiscoveryData)
        if discovery is not None:
            caps.add("topology")
            if discovery.reads_lids:
                caps.add("host_lids")
        if source_data(states, LftData) is not None:
            caps.add("forwarding_tables")
        if source_data(states, SmData) is not None:
            caps.add("subnet_manager")
        if pause:
            caps.add("pause_frames")
        if source_data(states, SwitchOpticsData) is not None:
            caps.add("transceiver_readings")
        if source_data(states, SwitchVitalsData) is not None:
            caps.add("switch_vitals")
        conf = source_data(states, SchedulerTopologyData)
        if conf is not None and conf.configured:
            caps.add("scheduler_topology")
        design = source_data(states, DesignData)
        if design is not None and design.configured:
            caps.add("design")
        return caps

    def run_ports(self, inputs: FabricInputs, present: set[str]) -> tuple[list[Finding], dict[str, tuple[str, ...]]]:
        """The port checks on a full build: their findings, the port status of the flagged ports, and the
        checks that ran with the switches each judged (said by each check, never "every switch")."""
        sec = inputs.sec
        ran = self.ports.run(inputs, present, sec)
        return ran.findings + self.port_status(sec, ran.findings, ran.names), ran.names

    def rejudge_links(self, sec: FabricSection, keys: list[tuple[str, int]],
                      abilities: Mapping[tuple[str, int], LinkAbility]) -> list[Finding]:
        """degraded_link again on the few ports an event build changed (checks.fabric_links.Links.rejudge), the
        other checks' findings kept from the last full build until the next one; its findings."""
        links = next(c for c in self.ports.checks if isinstance(c, fabric_links.Links))
        return links.rejudge(sec, keys, abilities)[1]

    def run_poll(self, inputs: FabricInputs, present: set[str]) -> Ran:
        return self.poll.run(inputs, present, inputs.sec)

    def run_jobs(self, inputs: FabricInputs, present: set[str], jobs: JobsSection) -> Ran:
        return self.jobs.run(inputs, present, jobs)

    def port_status(self, sec: FabricSection, findings: list[Finding], ran: Mapping[str, Iterable[str]]) -> list[Finding]:
        """fabricmon_check_status per switch port: a port's check, once not OK, keeps a status every build
        while it ran and the port exists (OK when it recovered), so the series does not vanish; a port
        never flagged has only its switch's status (fabricmon_fabric_check_status), which keeps a
        16,000-port fabric from exporting a status per port and check."""
        flagged = self.flagged | {(f.check, f.device, f.port) for f in findings
                                  if f.status != OK and f.port is not None and f.device in sec.switches}
        flagged = self.flagged = frozenset(k for k in flagged if (k[1], k[2]) in sec.ports and k[0] in ran)
        have = {(f.check, f.device, f.port) for f in findings}
        out = []
        for check, g, port in sorted(flagged - have):
            if g not in ran[check]:
                continue        # not judged this build (its switch not read): kept flagged, no status now
            p = sec.ports[(g, port)]
            out.append(Finding(check, g, port, OK, f"{sec.switches[g].name} (0x{g}) port {p.label}: {check} OK"))
        return out

    @staticmethod
    def check_status(sec: FabricSection, findings: list[Finding], ran: Mapping[str, Iterable[str]]) -> None:
        """fabricmon_fabric_check_status: every switch each check judged, OK included, at the worst of its
        findings; a fabric-wide check's finding under ""; a switch a check did not judge has none."""
        status = {(c, g): OK for c, switches in ran.items() for g in switches}
        for f in findings:      # a switch's findings by their own check name; fabric-wide ones (sm) with ""
            key = (f.check, f.device)
            if key in status or (f.device == "" and f.check in ran):
                status[key] = max(status.get(key, OK), f.status)
        sec.check_status = status

    def registered(self) -> list[FabricCheck]:
        """Every registered port and poll check (the placement check writes the jobs section)."""
        return [*self.ports.checks, *self.poll.checks]


__all__ = ["FabricCheck", "FabricChecks", "switch_optics"]
