"""Link-state evidence on the fabric (pipeline.fabric's step 1b; docs/freshness.md): each cabled port's
newest read (the sweep's PortInfo or ifOperStatus, or the discovery that saw it cabled), the peer's
read included; a port not read keeps its last state (unreached is not down); each switch's last sweeps
(what went unanswered: checks.fabric_unresponsive judges them) and the data time of its last full read;
what each port may train at (InfiniBand PortInfo)."""

from __future__ import annotations

from collections import deque
from dataclasses import replace

from fabricmon.checks.fabric_inputs import SweepRead
from fabricmon.model.fabric import FabricSection, SweepData
from fabricmon.model.link_ability import LinkAbility

Key = tuple[str, int]


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

    def read_state(self, key: Key, up: bool, t: float) -> None:
        old = self.link_state.get(key)
        if old is None or old[1] <= t:
            self.link_state[key] = (up, t)

    def take_sweep(self, sweep: SweepData, sweep_time: float, sec: FabricSection) -> None:
        """A new sweep's reads: each port's state, the ports it read up, what each switch answered, what
        each port may train at."""
        for key, up in sweep.link_up.items():
            self.read_state(key, up, sweep_time)
            if up:
                self.seen_up.add(key)
        self.seen_up &= set(sec.ports)
        self.note_reads(sweep, sweep_time, sec)
        self.abilities.update(sweep.abilities)

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
        for key, p in sec.ports.items():
            if p.link is None:              # no neighbour: its state is still the switch's (ifOperStatus)
                own = self.link_state.get(key)
                if own is not None:
                    p.up = own[0]
                continue
            own = self.link_state.get(key)
            peer = self.link_state.get((p.link.remote_guid, p.link.remote_port)) \
                if p.link.remote_type == "Switch" else None
            if own is not None:
                p.up = own[0]
            if peer is not None and not peer[0] and (own is None or peer[1] >= own[1]):
                p.up = False
        if not self.discovery_reads_state:     # a first discovery claims no history: only a sweep that saw it up
            for key, p in sec.ports.items():
                p.seen_up, p.seen_by = key in self.seen_up, "sweep"

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
