"""The fabric's topology (pipeline.fabric's step 1): levels and roles from the latest discovery, rebuilt
only when a new one arrived; a partial discovery (queries unanswered) is merged into the last complete
view (model.fabric.merge_discovery), never replaces it; links that appear or vanish between complete
views are logged and counted; a port that was cabled and is no longer stays known (reported down, never
dropped) until fabric.down_port_max_age; a discovery that sees a link only while it is up is evidence
of its state (pipeline.fabric_state)."""

from __future__ import annotations

import threading
from collections.abc import Mapping

import structlog

from fabricmon.model.fabric import DiscoveryData, FabricPort, FabricSection, PortInfo, Topology, build_topology, port_key, \
    in_shard, merge_discovery
from fabricmon.model.snapshot import SourceState, source_state
from fabricmon.pipeline.fabric_state import LinkEvidence

log = structlog.get_logger("fabricmon.fabric")

MAX_CHANGE_LINES = 20       # topology changes logged one by one per discovery, then summarised


class FabricTopology:
    """The topology, the remembered links and the topology change log, between builds."""

    def __init__(self, evidence: LinkEvidence, down_port_max_age: float | None):
        self.evidence = evidence
        self.down_port_max_age = down_port_max_age
        self._topo: Topology | None = None
        self._topo_time: float | None = None
        self._remembered: dict[tuple[str, int], PortInfo] = {}   # ports cabled at some discovery
        self._seen: dict[tuple[str, int], float] = {}            # ... and the data time it was last seen cabled
        self.topology_changes = 0
        self._view: DiscoveryData | None = None                  # the merged discovery view
        self._view_complete = False                              # some discovery so far was complete
        self._lock = threading.Lock()       # take() runs once per discovery, whichever thread asks first

    def inventory(self) -> Topology:
        """The latest topology taken (empty before the first discovery): the sweep's input and the build's
        structure. A pure read: taking a new discovery is take()'s."""
        topo = self._topo
        return topo if topo is not None else Topology()

    def take(self, states: Mapping[str, SourceState]) -> Topology:
        """Take the latest discovery, once (the pipeline does as the discovery finishes, under its lock; a
        build asks again, which finds it taken): merged into the last complete view, levels, the change log,
        the remembered ports and the evidence a discovery is. Returns the latest topology."""
        with self._lock:
            return self._take(states)

    def _take(self, states: Mapping[str, SourceState]) -> Topology:
        st = source_state(states, DiscoveryData)
        if st is None or not isinstance(st.data, DiscoveryData):
            return self.inventory()
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
        self.evidence.discovery_reads_state = evidence = data.links_are_up
        for key, p in topo.ports.items():
            if p.link is not None:
                self._remembered[key] = p
                self._seen[key] = st.data_time
                if key in reached and evidence:   # seen cabled now: up, unless a later read says otherwise
                    self.evidence.read_state(key, True, st.data_time)
        for key in self._remembered:
            if key not in topo.ports or topo.ports[key].link is None:
                if (lk := self._remembered[key].link) is not None:     # always: only cabled ports are remembered
                    topo.down_links[key] = lk
                if data.complete and evidence:    # gone from a complete discovery: positive evidence
                    self.evidence.read_state(key, False, st.data_time)
        max_age = self.down_port_max_age
        if max_age is not None:         # a port down for longer than the age limit is forgotten
            for key in [k for k, t in self._seen.items() if st.data_time - t > max_age]:
                del self._seen[key]
                self._remembered.pop(key, None)
                self.evidence.link_state.pop(key, None)
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

    def ports(self, topo: Topology, sec: FabricSection) -> None:
        """The section's switches (this shard's), levels, SHARP Aggregation Nodes and ports: each port as
        the topology has it, a port cabled before and not now down (never dropped)."""
        sec.switches = {g: sw for g, sw in sorted(topo.switches.items()) if in_shard(g, *sec.shard)}
        sec.levels = {g: topo.levels.get(g, 0) for g in sec.switches}
        for ca, g in topo.parts.items():        # the switches' SHARP Aggregation Nodes
            if g in sec.switches:
                sec.aggregation_nodes[g] = tuple(topo.aggregation_nodes(g))
        section_ports, topo_port, remembered = sec.ports, topo.ports.get, self._remembered.get
        for g, sw in sec.switches.items():
            sec.kind = sw.kind
            names = sw.port_names
            for port in sw.ports():
                key = port_key(g, port)
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

__all__ = ["FabricTopology", "MAX_CHANGE_LINES"]
