"""The fabric collector's records and section: the discovered topology (switches, their levels
and port roles), the counters of one sweep, and the FabricSection a snapshot carries.

Levels come from the graph, never from names: level 1 is a switch with a CA attached, each
further level one hop farther from the CAs (a director chassis shows as internal line and
spine switches, which land on levels 2 and 3). A switch port is `host` (to a CA), `up` (to a
switch of a higher level), `down` (to a switch of the same or a lower level) or `unconnected`.
"""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass, field

ROLES = ("host", "up", "down", "unconnected")
Key = tuple[str, int]          # (switch_guid, port)


@dataclass(frozen=True, slots=True)
class Link:
    """One cabled switch port as ibnetdiscover prints it (`[port] "remote"[rport] # "desc" lid L 4xHDR`)."""
    port: int
    remote_guid: str                 # normalised 0x-less, 16 hex digits
    remote_port: int
    remote_type: str                 # "Switch" or "Ca" (routers count as CAs)
    remote_name: str                 # the remote node description
    width: int | None                # lanes (4 for 4xHDR)
    speed: str | None                # generation name (HDR)
    remote_lid: int | None = None    # the remote port's LID (a CA port's own LID; a switch's port-0 LID)


@dataclass(slots=True)
class SwitchNode:
    guid: str                        # 16 hex digits, no 0x
    name: str                        # node description
    nports: int
    lid: int | None
    links: dict[int, Link] = field(default_factory=dict)


@dataclass(slots=True)
class DiscoveryData:
    """The records of one ibnetdiscover run (parsers.ibnetdiscover)."""
    switches: dict[str, SwitchNode] = field(default_factory=dict)
    cas: dict[str, str] = field(default_factory=dict)          # guid -> node description
    cache_file: str | None = None                              # the ibnetdiscover cache the sweep loads


@dataclass(slots=True)
class PortInfo:
    """A switch port of the topology, with its role and, when cabled, its link."""
    guid: str
    port: int
    role: str
    link: Link | None
    up: bool                         # cabled in the latest discovery


@dataclass(slots=True)
class Topology:
    """The discovered fabric with levels and roles: what the sweep reads and checks judge."""
    switches: dict[str, SwitchNode] = field(default_factory=dict)
    levels: dict[str, int] = field(default_factory=dict)       # guid -> level (0: no path to a CA)
    ports: dict[Key, PortInfo] = field(default_factory=dict)
    cas: dict[str, str] = field(default_factory=dict)
    cache_file: str | None = None
    time: float = 0.0                # data time of the discovery it came from

    @property
    def top_level(self) -> int:
        return max(self.levels.values(), default=0)


def switch_levels(d: DiscoveryData) -> dict[str, int]:
    """Level 1: switches with a CA attached; each further level one hop farther (BFS over
    switch-to-switch links). A switch with no path to any CA is level 0."""
    levels: dict[str, int] = {}
    queue: deque[str] = deque()
    for guid, sw in d.switches.items():
        if any(lk.remote_type != "Switch" for lk in sw.links.values()):
            levels[guid] = 1
            queue.append(guid)
    while queue:
        guid = queue.popleft()
        for lk in d.switches[guid].links.values():
            if lk.remote_type == "Switch" and lk.remote_guid in d.switches and lk.remote_guid not in levels:
                levels[lk.remote_guid] = levels[guid] + 1
                queue.append(lk.remote_guid)
    for guid in d.switches:
        levels.setdefault(guid, 0)
    return levels


def port_role(level: int, link: Link | None, levels: dict[str, int]) -> str:
    if link is None:
        return "unconnected"
    if link.remote_type != "Switch":
        return "host"
    return "up" if levels.get(link.remote_guid, 0) > level else "down"


def build_topology(d: DiscoveryData, t: float = 0.0) -> Topology:
    levels = switch_levels(d)
    topo = Topology(switches=dict(d.switches), levels=levels, cas=dict(d.cas), cache_file=d.cache_file, time=t)
    for guid, sw in d.switches.items():
        for port in range(1, sw.nports + 1):
            lk = sw.links.get(port)
            topo.ports[(guid, port)] = PortInfo(guid, port, port_role(levels[guid], lk, levels), lk, lk is not None)
    return topo


# --- the sweep ------------------------------------------------------------------------------

@dataclass(slots=True)
class SweepData:
    """The counters of one sweep: raw values by canonical counter name (fabricmon.ibspec) for
    every switch port answered, and which switches did not answer."""
    ports: dict[Key, dict[str, int]] = field(default_factory=dict)
    bits: dict[str, int] = field(default_factory=dict)         # counter -> width it was read at
    switches: set[str] = field(default_factory=set)            # switches with data this sweep
    missing: set[str] = field(default_factory=set)             # switches of the shard without data
    duration: float = 0.0


# --- forwarding tables and the subnet manager ---------------------------------------------

NO_ROUTE = 255                       # an LFT entry with no valid out port


@dataclass(slots=True)
class LftData:
    """Every switch's unicast linear forwarding table (parsers.dump_fts): per switch GUID, a
    bytes object indexed by destination LID holding the out port (NO_ROUTE where none)."""
    tables: dict[str, bytes] = field(default_factory=dict)
    duration: float = 0.0


@dataclass(frozen=True, slots=True)
class SmInfo:
    """One subnet manager as `sminfo` reports it."""
    lid: int
    guid: str                        # 16 hex digits, no 0x
    activity_count: int
    priority: int
    state: str                       # NOTACTIVE, DISCOVERING, STANDBY, MASTER


@dataclass(slots=True)
class SmData:
    """The subnet managers of one sm run: the one the local port knows as master (sminfo) and
    every other port that claims to be an SM (saquery -s, then sminfo <lid>). Empty when no
    SM answered (`answered` False)."""
    sms: list[SmInfo] = field(default_factory=list)
    answered: bool = False


@dataclass(slots=True)
class RouteBalance:
    """How one switch's forwarding table spreads the remote CA LIDs over its active uplinks."""
    guid: str
    switch: str
    remote: int                      # remote destinations (CA LIDs not below the switch)
    routes: dict[int, int] = field(default_factory=dict)     # active up port -> destinations routed through it
    other: int = 0                   # remote destinations routed elsewhere (down, host, no route)
    ratio: float | None = None       # max/mean over the active uplinks
    imbalanced: bool = False


# --- the section ----------------------------------------------------------------------------

@dataclass(slots=True)
class FabricPort:
    guid: str
    port: int
    role: str
    link: Link | None                # the last link seen on this port (kept when it goes down)
    up: bool
    counters: dict[str, int] = field(default_factory=dict)
    tx_rate: float | None = None     # bytes/s from the last two sweeps
    rx_rate: float | None = None
    rate_bps: float | None = None    # link data rate in bytes/s (0 while down)
    degraded: dict[str, bool] = field(default_factory=dict)     # reason -> bool (width, speed, down)
    expected: str = ""               # the link class norm, e.g. "4X HDR"


@dataclass(slots=True)
class EcmpGroup:
    guid: str
    switch: str
    direction: str                   # "up" (uplinks) or "down" (top level towards the level below)
    ports: list[int]                 # in the group (up, not degraded)
    excluded: list[int]              # down or degraded, reported on their own
    rates: dict[int, float] = field(default_factory=dict)       # port -> transmit bytes/s
    ratio: float | None = None       # max/mean
    cv: float | None = None          # coefficient of variation
    utilisation: float | None = None  # mean rate / link rate
    over: int = 0                    # consecutive sweeps over the threshold
    imbalanced: bool = False
    # when imbalanced: the busiest port and every other over ecmp_ratio x the mean (a polarised
    # group has several)
    hot: list[int] = field(default_factory=list)


@dataclass(slots=True)
class FabricSection:
    switches: dict[str, SwitchNode] = field(default_factory=dict)   # this shard's switches
    levels: dict[str, int] = field(default_factory=dict)
    ports: dict[Key, FabricPort] = field(default_factory=dict)
    groups: list[EcmpGroup] = field(default_factory=list)
    sweep_duration: float | None = None
    sweep_errors: dict[str, int] = field(default_factory=dict)
    topology_changes: int = 0
    shard: tuple[int, int] = (0, 1)
    routes: dict[str, RouteBalance] = field(default_factory=dict)   # switch guid -> its route balance
    uplinks: dict[str, tuple[int, int | None]] = field(default_factory=dict)   # guid -> (active, expected)
    sms: list[SmInfo] | None = None  # None before the sm source ran (or with it disabled)
    sm_activity: int | None = None   # the master's activity count
    check_status: dict[tuple[str, str], int] = field(default_factory=dict)     # (check, switch guid or "") -> status


__all__ = ["NO_ROUTE", "ROLES", "DiscoveryData", "EcmpGroup", "FabricPort", "FabricSection", "LftData", "Link",
           "PortInfo", "RouteBalance", "SmData", "SmInfo", "SwitchNode", "SweepData", "Topology", "build_topology",
           "port_role", "switch_levels"]


def shard_hash(guid: str) -> int:
    """A stable hash of a GUID (the same on every collector and every run)."""
    import hashlib
    return int.from_bytes(hashlib.sha256(guid.encode()).digest()[:8], "big")


def in_shard(guid: str, index: int, count: int) -> bool:
    return count <= 1 or shard_hash(guid) % count == index
