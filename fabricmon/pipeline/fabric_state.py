"""Link-state evidence on the fabric (pipeline.fabric's step 1b; docs/freshness.md): each cabled port's
newest read (the sweep's PortInfo or ifOperStatus, or the discovery that saw it cabled), the peer's
read included; a port not read keeps its last state (unreached is not down); each switch's last sweeps
(what went unanswered: checks.fabric_unresponsive judges them) and the data time of its last full read;
what each port may train at (InfiniBand PortInfo); the ports the SM's reports had re-read (sources/infiniband/
events.py), which win over a sweep that started before them (the sweep may have read the port before it
changed), and are superseded by the first sweep that started after them."""

from __future__ import annotations

from collections import deque
from dataclasses import replace

from fabricmon.checks.fabric_inputs import SweepRead
from fabricmon.model.fabric import FabricPort, FabricSection, SweepData
from fabricmon.model.fabric_events import FabricEventsData
from fabricmon.model.link_ability import LinkAbility

Key = tuple[str, int]
# an event read: the port's link state, width and speed as the report's re-read found them, and when the model
# took it (the pipeline's clock)
EventState = tuple[bool, int | None, str | None, float]


class LinkEvidence:
    """What the reads so far say of each port's state, and of each switch's answers."""

    def __init__(self, window: int):
        self.window = window                            # fabric.unresponsive_window
        # the last read of each cabled port's link state: (up, data time); the newest read wins
        self.link_state: dict[Key, tuple[bool, float]] = {}
        self.seen_up: set[Key] = set()                  # ports a sweep has read up
        self.discovery_reads_state = True       # the last discovery's links are evidence of their state
        # per switch: the last sweeps' (unanswered, queries, what failed), and the data time of its last full read
        self.reads: dict[str, deque[SweepRead]] = {}
        self.last_read: dict[str, float] = {}
        # what each port may train at (InfiniBand PortInfo, both ends of a link: the latest read of each)
        self.abilities: dict[Key, LinkAbility] = {}
        # the reports' re-reads not yet superseded by a sweep that started after them, and the last one taken
        self.event_reads: dict[Key, EventState] = {}
        self.events_seq = 0
        # the ports whose state the last sweep changed where no event read had (pipeline.fabric asks whether
        # their switch reported them)
        self.sweep_changes: list[tuple[Key, bool]] = []

    def read_state(self, key: Key, up: bool, t: float) -> None:
        old = self.link_state.get(key)
        if old is None or old[1] <= t:
            self.link_state[key] = (up, t)

    def take_sweep(self, sweep: SweepData, sweep_time: float, sec: FabricSection, changes: bool = False) -> None:
        """A new sweep's reads: each port's state, the ports it read up, what each switch answered, what
        each port may train at. An event read since the sweep started wins over what it read of that port
        (the sweep may have read it before it changed); the older ones are superseded by it. `changes`: note
        the ports whose state (as the last build showed it, apply_state's rule) this sweep changed, where no
        event read had (sweep_changes)."""
        started = sweep_time - sweep.duration
        events = self.event_reads = {k: e for k, e in self.event_reads.items() if e[3] >= started}
        state = self.link_state
        was: dict[Key, bool] = {}
        if changes:
            ports = sec.ports
            for key in sweep.link_up:
                p = ports.get(key)
                if p is not None and key in state and key not in events:
                    was[key] = self.port_up(key, p)
        for key, up in sweep.link_up.items():
            self.read_state(key, up, sweep_time)
            if up:
                self.seen_up.add(key)
        self.sweep_changes = [(key, up) for key, up in sweep.link_up.items() if key in was and was[key] != up]
        for key, e in events.items():
            state[key] = (e[0], max(e[3], sweep_time))
        self.seen_up &= set(sec.ports)
        self.note_reads(sweep, sweep_time, sec)
        self.abilities.update(sweep.abilities)

    def take_events(self, ev: FabricEventsData, t: float) -> list[Key]:
        """The reports' re-reads not taken yet (their seq past the last taken), at time t: the ports read."""
        last = self.events_seq
        if ev.seq <= last:
            return []
        keys = [k for k, r in ev.reads.items() if r.seq > last]
        reads, state, abilities = ev.reads, self.link_state, ev.abilities
        for k in keys:
            r = reads[k]
            self.event_reads[k] = (r.up, r.width, r.speed, t)
            old = state.get(k)
            state[k] = (r.up, max(t, old[1]) if old is not None else t)
            if r.up:
                self.seen_up.add(k)
            a = abilities.get(k)
            if a is not None:
                self.abilities[k] = a
        self.events_seq = ev.seq
        return keys

    def port_up(self, key: Key, p: FabricPort) -> bool:
        """A port's state by apply_state's rule, for one port."""
        own = self.link_state.get(key)
        up = own[0] if own is not None else p.up
        lk = p.link
        if lk is None:
            return up
        peer = self.link_state.get((lk.remote_guid, lk.remote_port)) if lk.remote_type == "Switch" else None
        if peer is not None and not peer[0] and (own is None or peer[1] >= own[1]):
            return False
        return up

    def apply_events(self, sec: FabricSection, keys: list[Key]) -> list[Key]:
        """The ports of `sec` whose state an event read changes, each replaced by a new FabricPort with it (its
        link's width and speed as read, where up): the read ports and the far ends of their inter-switch links.
        The section's other ports are untouched (shared with the last build's)."""
        out = []
        ports = sec.ports
        todo = list(keys)
        for key in keys:
            p = ports.get(key)
            if p is not None and p.link is not None and p.link.remote_type == "Switch":
                todo.append((p.link.remote_guid, p.link.remote_port))
        done = set()
        for key in todo:
            if key in done:
                continue
            done.add(key)
            p = ports.get(key)
            if p is None:
                continue
            up = self.port_up(key, p)
            link = p.link
            e = self.event_reads.get(key)
            if e is not None and link is not None and up and e[1] and e[2] and (e[1], e[2]) != (link.width, link.speed) \
                    and link.rate_mbps is None:
                link = replace(link, width=e[1], speed=e[2])
            if up == p.up and link is p.link:
                continue
            q = replace(p, up=up, link=link)
            if up and not q.seen_up:
                q.seen_up, q.seen_by = True, "report"
            ports[key] = q
            out.append(key)
        return out

    def note_reads(self, sweep: SweepData, t: float, sec: FabricSection) -> None:
        n = self.window
        read = sweep.switches_read()
        for g in sec.switches:
            queries = sweep.queries.get(g, 0)
            if not queries and g not in read:
                continue
            lost = sweep.unanswered.get(g, 0)
            self.reads.setdefault(g, deque(maxlen=n)).append(
                SweepRead(lost, queries, tuple(sorted(sweep.failed.get(g, ())))))
            if not lost:
                self.last_read[g] = t
        for g in [g for g in self.reads if g not in sec.switches]:
            del self.reads[g]
            self.last_read.pop(g, None)

    def apply_state(self, sec: FabricSection) -> None:
        """Each port's state is its newest read (a sweep's PortInfo or ifOperStatus, or the
        discovery that saw it cabled; a port without a neighbour has only the sweep's read, and no
        neighbour never means down); a port not read keeps its last known state, never turns down
        for lack of an answer. The peer's newer read counts too: a switch-to-switch link whose far
        end reads down is down (a read of the same time: down if either end says so). Where the last
        discovery is no evidence of state (LLDP), only a sweep that read a port up says it was up."""
        evidence = self.discovery_reads_state
        for key, p in sec.ports.items():
            own = self.link_state.get(key)
            if own is not None:
                p.up = own[0]
            if p.link is None:              # no neighbour: its state is still the switch's (ifOperStatus)
                p.state_read = evidence or own is not None
                continue
            peer = self.link_state.get((p.link.remote_guid, p.link.remote_port)) \
                if p.link.remote_type == "Switch" else None
            if peer is not None and not peer[0] and (own is None or peer[1] >= own[1]):
                p.up = False
            # no read of it or of its far end yet, and a discovery that is no evidence (LLDP): unknown
            p.state_read = evidence or own is not None or peer is not None
        if not evidence:     # a first discovery claims no history: only a sweep that saw it up
            for key, p in sec.ports.items():
                p.seen_up, p.seen_by = key in self.seen_up, "sweep"

    def fresh_events(self, sec: FabricSection) -> None:
        """An event read newer than the sweep: its width and speed win over the sweep's (a full build)."""
        for key, e in self.event_reads.items():
            p = sec.ports.get(key)
            if p is not None and p.link is not None and p.up and e[0] and e[1] and e[2] \
                    and (e[1], e[2]) != (p.link.width, p.link.speed) and p.link.rate_mbps is None:
                p.link = replace(p.link, width=e[1], speed=e[2])

    @staticmethod
    def fresh_state(sweep: SweepData, sec: FabricSection) -> None:
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


__all__ = ["LinkEvidence"]
