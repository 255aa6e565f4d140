"""The fabric collector's events: its subscription to the subnet manager's reports, and the link states the
reports' re-reads found (sources/infiniband/events.py fills the record; pipeline/fabric_state.py applies the
reads; docs/latency.md).

A report says only which switch changed (trap 128: a port of this switch changed state), so the source
re-reads that switch's ports (PortInfo), and each port read is an EventRead: the port's link state, width
and speed, numbered in the order read (`seq`), so that a model that missed a record (two completions folded
into one build) still applies every read once. The record keeps the reads of the last MAX_READS re-reads
(a whole leaf's reboot is 40 ports); a sweep that started after a read supersedes it anyway.

The mode in force is the source's (`events` while the SM accepted the subscription, `sweep` otherwise, with
why), which the model may demote: a sweep that sees a port change that no report announced says the SM
does not forward (pipeline.fabric: FabricModel)."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field

from fabricmon.model.link_ability import LinkAbility

Key = tuple[str, int]
MAX_READS = 65536                    # port reads kept in a record (the newest)


@dataclass(frozen=True, slots=True)
class EventRead:
    seq: int                         # the read's number, increasing
    up: bool
    width: int | None
    speed: str | None


@dataclass(slots=True)
class FabricEventsData:
    """The events source's record: a new object whenever anything in it changed (a report, a re-read, the
    mode), the same object otherwise (the pipeline then rebuilds nothing)."""
    mode: str = "sweep"              # "events" while the SM accepted the subscription, else "sweep"
    reason: str = ""                 # why the mode is sweep ("" in events)
    sm_lid: int | None = None        # the master SM the subscription was made with
    sm_guid: str = ""
    traps: tuple[int, ...] = ()      # the traps it accepted
    subscribed_at: float | None = None   # wall time of its last acceptance
    reports: dict[int, int] = field(default_factory=dict)      # trap -> reports received, since start
    unmatched: int = 0               # reports naming no switch of the topology (re-read nothing)
    rereads: int = 0                 # switch re-reads made on reports
    latency: float | None = None     # seconds from the last report's arrival to its switch's ports read
    seq: int = 0                     # the newest EventRead's seq (0: none)
    reads: dict[Key, EventRead] = field(default_factory=dict)   # each port's newest re-read
    abilities: dict[Key, LinkAbility] = field(default_factory=dict)   # what the re-read ports may train at
    # switch guid -> `rereads` after its last report's re-read (the model compares it with the count when the
    # last sweep was taken: a change the sweep saw on a switch with no re-read since was not reported)
    reported: dict[str, int] = field(default_factory=dict)


@dataclass(frozen=True, slots=True)
class EventsView:
    """What the snapshot carries of the events (FabricSection.events): the mode in force and why, the
    subscription and the counts."""
    mode: str
    reason: str
    sm_guid: str
    sm_lid: int | None
    traps: tuple[int, ...]
    subscribed_at: float | None
    reports: Mapping[int, int]
    unmatched: int
    rereads: int
    latency: float | None


__all__ = ["EventRead", "EventsView", "FabricEventsData", "MAX_READS"]
