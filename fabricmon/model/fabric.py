"""The fabric collector's records and section: the discovered topology (switches, their levels
and port roles), the counters of one sweep, and the FabricSection a snapshot carries.

Kind-neutral: an InfiniBand switch (ibnetdiscover) and an Ethernet switch (SNMP, LLDP) are the
same records. A switch is a node with numbered ports; `guid` is its stable ID (the node GUID,
or an Ethernet switch's LLDP chassis ID), `name` its node description or sysName, and a port
has a number (IB port, or the ifIndex) and a label (the number, or the ifName). A link's rate
is a width and a generation on InfiniBand (4X HDR) or a speed in Mb/s on Ethernet (ifHighSpeed).

Levels come from what a node is, then the graph, never from names (switch_levels; the rule and
what it cannot know: docs/topology.md). A CA inside a switch (a SHARP Aggregation Node: its
SystemImageGUID is the switch's, or its device ID is 0xcf09) is part of that switch, not a host.
Level 1 are the leaves, the switches carrying hosts (less a switch with a stray host among
leaves, plus a switch that was a leaf and whose hosts are down); each further level one hop
farther (a director chassis shows as internal line and spine switches, which land on levels 2
and 3). A switch port is `host` (to a host CA), `internal` (to a CA inside the switch), `up` (to
a switch of a higher level), `down` (to a switch of the same or a lower level), `external`
(Ethernet: to a bridge or router that is not one of the fabric's switches, e.g. a border router)
or `unconnected`.
"""

from __future__ import annotations

import re
from collections import deque
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING, TypeVar, cast

from fabricmon.model import ibspec
from fabricmon.model.link_ability import LinkAbility

if TYPE_CHECKING:
    from fabricmon.model.fabric_events import EventsView
    from fabricmon.model.optics import ModuleDiag
    from fabricmon.model.vitals import Vital

ROLES = ("host", "internal", "up", "down", "unconnected", "external")
AGGREGATION_NODE_DEVICE = 0xCF09                 # NodeInfo DeviceID of a SHARP Aggregation Node
AGGREGATION_NODE_DESCRIPTION = "Mellanox Technologies Aggregation Node"
Key = tuple[str, int]          # (switch_guid, port)
UNICAST_LIDS = range(0x0001, 0xC000)     # IBTA: 0 is reserved, 0xC000-0xFFFE multicast, 0xFFFF permissive


def unicast_lid(lid: int) -> bool:
    """A LID a subnet manager assigns a port (1-0xBFFF); 0 and 65535 (0xFFFF) are what a port no subnet
    manager configured reports (0, or 0xFFFF on ConnectX)."""
    return lid in UNICAST_LIDS


@dataclass(frozen=True, slots=True)
class Link:
    """One cabled switch port: as ibnetdiscover prints it (`[port] "remote"[rport] # "desc" lid L
    4xHDR`), or as a switch's LLDP neighbour table reports it (Ethernet: rate_mbps set, width and
    speed None)."""
    port: int
    remote_guid: str                 # IB: 0x-less, 16 hex digits; Ethernet: the peer's stable ID
    remote_port: int                 # the remote port number (0 when only its name is known)
    # "Switch", or a host end ("Ca" on IB, routers count as CAs; "Host"), or "External" (Ethernet:
    # a bridge or router by LLDP's capabilities that is not a configured switch)
    remote_type: str
    remote_name: str                 # the remote node description / sysName
    width: int | None                # lanes (4 for 4xHDR)
    speed: str | None                # generation name (HDR)
    remote_lid: int | None = None    # the remote port's LID (a CA port's own LID; a switch's port-0 LID)
    rate_mbps: int | None = None     # Ethernet: the port speed in Mb/s (ifHighSpeed)
    remote_port_name: str = ""       # the remote port's name where it has one (LLDP port ID: ifName)
    # a CA end without a LID: what the discovery printed as its LID where that is no unicast LID (0, or
    # 65535 as ConnectX reports a port no subnet manager configured); remote_lid is then None. None: the
    # CA port has its LID, or its LID is not known (a switch end, Ethernet)
    remote_unassigned_lid: int | None = None
    remote_port_guid: str = ""       # a CA end's port GUID where the discovery prints it (16 hex digits)

    @property
    def remote_port_label(self) -> str:
        return self.remote_port_name or str(self.remote_port)

    @property
    def rate_class(self) -> str:
        """The link class as operators say it: "4X HDR", "400G"."""
        return rate_class(self.width, self.speed, self.rate_mbps)

    @property
    def rate_bps(self) -> float | None:
        """Data rate in bytes/s (lanes x nominal lane rate, or the port speed), None if unknown."""
        if self.rate_mbps:
            return self.rate_mbps * 1e6 / 8
        g = ibspec.generation(self.speed) if self.speed else None
        if not self.width or g is None:
            return None
        return self.width * g.lane_gbps * 1e9 / 8

    @property
    def speed_rank(self) -> int | None:
        """Orders speeds within a kind: the IB generation's rank, or the Ethernet speed."""
        return self.rate_mbps if self.rate_mbps else ibspec.generation_rank(self.speed)


def rate_class(width: int | None, speed: str | None, rate_mbps: int | None = None) -> str:
    if rate_mbps:
        return f"{rate_mbps // 1000}G" if rate_mbps % 1000 == 0 else f"{rate_mbps}M"
    return f"{width or '?'}X {speed or '?'}"


@dataclass(slots=True)
class SwitchNode:
    guid: str                        # IB: 16 hex digits, no 0x; Ethernet: the LLDP chassis ID (or the address)
    name: str                        # node description / sysName
    nports: int
    lid: int | None
    links: dict[int, Link] = field(default_factory=dict)
    kind: str = "infiniband"         # or "ethernet"
    # port number -> name, for switches whose ports are not 1..nports (Ethernet: ifIndex -> ifName)
    port_names: dict[int, str] = field(default_factory=dict)
    address: str = ""                # where the collector reads it (Ethernet: host:port)
    # what the sweep reads besides the port counters (Ethernet: the PFC MIB walk the switch answers)
    counter_tables: tuple[str, ...] = ()
    # Ethernet: interfaces that are not fabric ports (name -> why: virtual, no connector, management)
    excluded_ports: dict[str, str] = field(default_factory=dict)
    # Ethernet: ports with several LLDP neighbours (port -> every neighbour, "name[port] (chassis)"):
    # the link is one of them (a configured switch first), the others are kept here and reported
    neighbours: dict[int, tuple[str, ...]] = field(default_factory=dict)
    # Ethernet: LAG members (port -> the LAG's name, from ifStackTable); the member is the fabric port
    lags: dict[int, str] = field(default_factory=dict)

    def ports(self) -> Iterable[int]:
        """Every port number of the switch."""
        return sorted(self.port_names) if self.port_names else range(1, self.nports + 1)

    def port_name(self, port: int) -> str:
        return self.port_names.get(port) or str(port)


@dataclass(slots=True)
class DiscoveryData:
    """The records of one ibnetdiscover run (parsers.ibnetdiscover)."""
    switches: dict[str, SwitchNode] = field(default_factory=dict)
    cas: dict[str, str] = field(default_factory=dict)          # guid -> node description
    cache_file: str | None = None                              # the ibnetdiscover cache the sweep loads
    unreachable: dict[str, str] = field(default_factory=dict)  # switch guid -> why this discovery missed it
    # False when some queries of the run went unanswered: what it saw is true, what it did not see
    # is unknown (merge_discovery keeps the last complete view for it), never "gone"
    complete: bool = True
    unanswered: int = 0                                        # queries that went unanswered
    # a link it shows is evidence that the link is up (ibnetdiscover walks only active links). Not
    # so for LLDP's neighbour tables (an entry outlives its link by its TTL; a host need not run
    # LLDP): there a port's state is only what a sweep reads (ifOperStatus)
    links_are_up: bool = True
    # NodeInfo where the discovery shows it (ibnetdiscover's header lines): node guid ->
    # SystemImageGUID, node guid -> DeviceID
    system_guids: dict[str, str] = field(default_factory=dict)
    device_ids: dict[str, int] = field(default_factory=dict)
    # node guid -> its name in the site's node name map (infiniband-diags' ib-node-name-map)
    node_names: dict[str, str] = field(default_factory=dict)
    # the discovery reads each CA port's LID (ibnetdiscover: a link's remote_unassigned_lid is the truth
    # about it); not so for LLDP, which knows no LIDs
    reads_lids: bool = False


_LINK_DETAILS = ("remote_name", "remote_lid", "width", "speed", "rate_mbps", "remote_port_name", "remote_type")


def merge_discovery(base: DiscoveryData | None, new: DiscoveryData) -> DiscoveryData:
    """The view after `new`: a complete discovery is the truth (a link it no longer shows between
    switches it reached is gone); a partial one only adds what it saw to the last complete view
    `base`: every switch, link, name and CA it did not see is kept as it was, and a name or a
    remote name it could not read (empty) keeps its last known value. Kind-neutral."""
    if new.complete or base is None:
        return new
    switches = {g: SwitchNode(sw.guid, sw.name, sw.nports, sw.lid, dict(sw.links), sw.kind, dict(sw.port_names),
                              sw.address, sw.counter_tables, dict(sw.excluded_ports), dict(sw.neighbours),
                              dict(sw.lags))
                for g, sw in base.switches.items()}
    for g, sw in new.switches.items():
        old = switches.get(g)
        if old is None:
            switches[g] = sw
            continue
        old.name = sw.name or old.name
        old.lid = sw.lid if sw.lid is not None else old.lid
        old.nports = max(old.nports, sw.nports)
        old.port_names.update(sw.port_names)
        for port, lk in sw.links.items():
            was = old.links.get(port)
            if was is not None and was.remote_guid == lk.remote_guid and was.remote_port == lk.remote_port:
                # the same cable: what this run could not read (a remote name, a width) keeps its last value;
                # a LID this run read as unassigned is no LID it could not read
                keep = {f: getattr(was, f) for f in _LINK_DETAILS if not getattr(lk, f) and getattr(was, f)
                        and not (f == "remote_lid" and lk.remote_unassigned_lid is not None)}
                if keep:
                    lk = replace(lk, **keep)
            old.links[port] = lk
    cas = dict(base.cas)
    cas.update({g: d or cas.get(g, "") for g, d in new.cas.items()})
    # the cache the partial run points at (the last complete run's, on disk), else the view's: a view whose
    # cache could not be moved into place must not leave the sweep without one until a complete run
    return DiscoveryData(switches=switches, cas=cas, cache_file=new.cache_file or base.cache_file, complete=False,
                         unanswered=new.unanswered, links_are_up=new.links_are_up,
                         system_guids={**base.system_guids, **new.system_guids},
                         device_ids={**base.device_ids, **new.device_ids},
                         node_names=new.node_names or base.node_names, reads_lids=new.reads_lids)


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
    # ports cabled at an earlier discovery and not in this one (reported down): the sweep keeps
    # reading their state, so a cable plugged back in shows before the next discovery
    down_links: dict[Key, Link] = field(default_factory=dict)
    # CAs inside a switch (SHARP Aggregation Nodes): CA guid -> its switch's guid
    parts: dict[str, str] = field(default_factory=dict)
    # the host CAs (every CA not part of a switch): CA guid -> its host's name (host_name)
    hosts: dict[str, str] = field(default_factory=dict)
    # host CAs whose node description is the firmware's default and that the name map does not name
    unnamed: list[str] = field(default_factory=list)

    def aggregation_nodes(self, guid: str) -> list[int]:
        """The ports of a switch that lead to a CA inside it (its SHARP Aggregation Node)."""
        sw = self.switches.get(guid)
        if sw is None:
            return []
        return sorted(p for p, lk in sw.links.items() if self.parts.get(lk.remote_guid) == guid)


# the firmware's own node descriptions (no rdma-ndd ran on the host): `MT4129 ConnectX7   Mellanox
# Technologies`, `MT25408 ConnectX Mellanox Technologies`, `MT4123 ConnectX6   Mellanox Technologies`;
# sites' images: `localhost`, `ubuntu`; or empty
_DEFAULT_DESCRIPTION = re.compile(r"^(?:MT\d{4,5}\b.*|.*\bMellanox Technologies\s*|)$")
_DEFAULT_HOSTS = frozenset({"localhost", "localhost.localdomain", "ubuntu", "(none)", "localhost6"})


def default_description(desc: str) -> bool:
    """A node description the firmware or an unconfigured image set, not one naming a host."""
    words = desc.split()
    return bool(_DEFAULT_DESCRIPTION.match(desc.strip())) or (bool(words) and words[0].lower() in _DEFAULT_HOSTS)


def host_name(guid: str, desc: str, names: Mapping[str, str]) -> str:
    """A host CA's host: the first word of its name in the node name map, else of its node
    description (`node01 mlx5_0` -> node01, as rdma-ndd sets it), else (a default description) its
    GUID, `0x...`: CAs without a name are never merged into one pseudo-host."""
    for text in (names.get(guid, ""), "" if default_description(desc) else desc):
        words = text.split()
        if words:
            return words[0]
    return f"0x{guid}"


def switch_parts(d: DiscoveryData) -> dict[str, str]:
    """CAs inside a switch: a CA cabled to a switch whose NodeInfo SystemImageGUID is that
    switch's GUID (or its SystemImageGUID), or whose DeviceID is the SHARP Aggregation Node's;
    where the discovery shows no NodeInfo, the Aggregation Node's description. CA guid -> switch."""
    parts: dict[str, str] = {}
    for guid, sw in d.switches.items():
        mine = {guid, d.system_guids.get(guid, guid)}
        for lk in sw.links.values():
            if lk.remote_type in ("Switch", "External"):
                continue
            ca = lk.remote_guid
            if (d.system_guids.get(ca) in mine or d.device_ids.get(ca) == AGGREGATION_NODE_DEVICE
                    or (ca not in d.device_ids and (d.cas.get(ca) or lk.remote_name) == AGGREGATION_NODE_DESCRIPTION)):
                parts[ca] = guid
    return parts


def switch_levels(d: DiscoveryData, parts: Mapping[str, str] | None = None,
                  previous: Mapping[str, int] | None = None) -> dict[str, int]:
    """Each switch's level (docs/topology.md): 1 for the leaves, each further level one hop
    farther (BFS over switch-to-switch links), 0 for a switch with no path to a leaf.

    1. Leaves are the switches with a host CA (CAs inside a switch, `parts`, are no hosts), less a
       switch with a stray host: one whose switch neighbours are leaves more often than not (as
       often, from two on) and that carries fewer hosts than those neighbours (a spine with a host
       cabled to it);
       plus a switch that was a leaf (`previous`, the last topology's levels) and carries no host
       now (its hosts are down, or it lost its only host): a fabric's levels stay where they were.
    2. BFS from the leaves.
    3. A switch whose neighbours on its own level outnumber those below it (hosts counted) is one
       level higher (a management leaf cabled to the cores pulls them down to the spines' level).
    4. A switch without hosts above level 2 whose neighbours all sit one level below it, with a
       neighbour set and a cable count within those of a leaf, is a leaf whose hosts are down
       (a core's neighbours are one spine per pod; a leaf's every spine of its pod).
    5. Before 4: such a switch with a single switch neighbour, or two levels or more above the
       tree's top, is the leaf of an island (a management leaf whose hosts are absent, under a
       management spine cabled to the cores): it is a leaf, and the levels are worked out again
       from it too, so its spine sits one level above it, not one above the cores (_island_leaves)."""
    parts = switch_parts(d) if parts is None else parts
    sws = d.switches
    nbrs: dict[str, set[str]] = {}
    cables: dict[str, int] = {}
    hosts: dict[str, int] = {}
    for g, sw in sws.items():
        peer = [lk.remote_guid for lk in sw.links.values()
                if lk.remote_type == "Switch" and lk.remote_guid in sws and lk.remote_guid != g]
        nbrs[g], cables[g] = set(peer), len(peer)
        hosts[g] = sum(1 for lk in sw.links.values()
                       if lk.remote_type not in ("Switch", "External") and lk.remote_guid not in parts)
    seeds = {g for g in sws if hosts[g]}
    stray = set()
    for g in seeds:
        same = nbrs[g] & seeds          # a leaf pair's peer link (one leaf beside one spine) is no stray host
        other = len(nbrs[g]) - len(same)
        if len(same) > other or (len(same) == other and len(same) >= 2):
            theirs = sorted(hosts[n] for n in same)
            if hosts[g] < theirs[len(theirs) // 2]:
                stray.add(g)
    seeds -= stray
    if previous:
        seeds |= {g for g in sws if previous.get(g) == 1 and not hosts[g] and nbrs[g]}
    levels = _raised(sws, nbrs, hosts, seeds)
    stubs = _island_leaves(sws, nbrs, hosts, cables, levels)
    if stubs:                   # 5. leaves of an island hanging above the tree: levels again from them too
        seeds |= stubs
        levels = _raised(sws, nbrs, hosts, seeds)
    leaves = [g for g in seeds if levels[g] == 1]
    for g in sws:               # 4. leaves whose hosts are down
        lvl = levels[g]
        if (hosts[g] or lvl < 3 or not nbrs[g] or any(levels[n] != lvl - 1 for n in nbrs[g])
                or previous and previous.get(g, 1) > 1):
            continue
        if any(nbrs[g] <= nbrs[y] and cables[g] <= cables[y] for y in leaves):
            levels[g] = 1
    return levels


def _raised(sws: Mapping[str, SwitchNode], nbrs: Mapping[str, set[str]], hosts: Mapping[str, int],
            seeds: set[str]) -> dict[str, int]:
    """Rules 2 and 3 of switch_levels: BFS from the seeds, then no switch on the level of most of its
    neighbours."""
    levels = _bfs(sws, nbrs, seeds)
    for _ in range(4):
        rise = [g for g in sws if levels[g] > 1
                and sum(1 for n in nbrs[g] if levels[n] == levels[g])
                > hosts[g] + sum(1 for n in nbrs[g] if levels[n] == levels[g] - 1)]
        if not rise:
            break
        for g in rise:
            levels[g] += 1
        levels = _bfs(sws, nbrs, seeds, levels)
    return levels


def _island_leaves(sws: Mapping[str, SwitchNode], nbrs: Mapping[str, set[str]], hosts: Mapping[str, int],
                   cables: Mapping[str, int], levels: Mapping[str, int]) -> set[str]:
    """Rule 5 of switch_levels: the host-less switches at the end of a chain above the tree, which
    are leaves whose hosts are absent (a management island's spare leaf under its own spine), not a
    tier above that spine. Of the switches without hosts whose every neighbour sits one level below
    them (the tops of the BFS), those
    - with a single switch neighbour: a switch that reaches one other switch carries no traffic
      between two, so it is no spine or core of anything; or
    - two levels or more above the tree's top (the level of most of the tops' cables): a core's
      neighbours are spines; these hang off switches that are themselves above the cores."""
    tops = [g for g in sws if not hosts[g] and nbrs[g] and levels[g] >= 3
            and all(levels[n] == levels[g] - 1 for n in nbrs[g])]
    if not tops:
        return set()
    weight: dict[int, int] = {}
    for g in tops:
        weight[levels[g]] = weight.get(levels[g], 0) + cables[g]
    top = max(weight.items(), key=lambda kv: (kv[1], -kv[0]))[0]
    return {g for g in tops if len(nbrs[g]) == 1 or levels[g] > top + 1}


def _bfs(sws: Mapping[str, SwitchNode], nbrs: Mapping[str, set[str]], seeds: set[str],
         floor: Mapping[str, int] | None = None) -> dict[str, int]:
    """Levels one hop per switch-to-switch link from the seeds (level 1); with `floor`, no switch
    below its floor (a switch raised by rule 3 keeps its level, and what lies above it follows)."""
    levels: dict[str, int] = {}
    queue: deque[str] = deque()
    for g in sorted(seeds):
        levels[g] = 1
        queue.append(g)
    while queue:
        g = queue.popleft()
        for n in sorted(nbrs[g]):
            if n not in levels:
                levels[n] = levels[g] + 1
                queue.append(n)
    for g in sws:
        levels.setdefault(g, 0)
        if floor is not None and floor.get(g, 0) > levels[g]:
            levels[g] = floor[g]
    return levels


def port_role(level: int, link: Link | None, levels: Mapping[str, int], parts: Mapping[str, str] | None = None) -> str:
    if link is None:
        return "unconnected"
    if link.remote_type == "External":
        return "external"
    if link.remote_type != "Switch":
        return "internal" if parts and link.remote_guid in parts else "host"
    return "up" if levels.get(link.remote_guid, 0) > level else "down"


def build_topology(d: DiscoveryData, t: float = 0.0, previous: Mapping[str, int] | None = None) -> Topology:
    """Levels and roles of a discovery; `previous`: the last topology's levels (a leaf whose hosts
    went down stays a leaf)."""
    parts = switch_parts(d)
    levels = switch_levels(d, parts, previous)
    topo = Topology(switches=dict(d.switches), levels=levels, cas=dict(d.cas), cache_file=d.cache_file, time=t,
                    parts=parts)
    for guid, sw in d.switches.items():
        for port in sw.ports():
            lk = sw.links.get(port)
            topo.ports[port_key(guid, port)] = PortInfo(guid, port, port_role(levels[guid], lk, levels, parts), lk,
                                                lk is not None)
    for ca, desc in sorted(d.cas.items()):
        if ca in parts:
            continue
        topo.hosts[ca] = host_name(ca, desc, d.node_names)
        if ca not in d.node_names and default_description(desc):
            topo.unnamed.append(ca)
    return topo


# --- the sweep ------------------------------------------------------------------------------

@dataclass(slots=True)
class SweepData:
    """The counters of one sweep: raw values by canonical counter name (fabricmon.model.ibspec) for
    every switch port answered, and which switches did not answer.

    `link_up` and `rate_mbps` are what the sweep itself saw of a port's state (Ethernet:
    ifOperStatus and ifHighSpeed, read every sweep): they win over the discovery's view, so a
    port going down shows in the next sweep. A port not in them keeps the discovery's view."""
    ports: dict[Key, Mapping[str, int]] = field(default_factory=dict)    # model.compact.PortCounters on InfiniBand
    bits: dict[str, int] = field(default_factory=dict)         # counter -> width it was read at
    switches: set[str] = field(default_factory=set)            # switches with data this sweep
    missing: set[str] = field(default_factory=set)             # switches of the shard without data
    duration: float = 0.0
    link_up: dict[Key, bool] = field(default_factory=dict)     # port state read in this sweep
    rate_mbps: dict[Key, int] = field(default_factory=dict)    # port speed read in this sweep (Mb/s)
    # counter -> multiplier to its unit where it differs from ibspec's (Ethernet octets: 1, not 4)
    scale: dict[str, int] = field(default_factory=dict)
    wrapping: set[str] = field(default_factory=set)            # counters that wrap at their width (not saturate)
    # PFC pause frames: (priority, direction) -> frames; priority -1: every priority (a per-port MIB)
    pause: dict[Key, dict[tuple[int, str], int]] = field(default_factory=dict)
    # per switch: queries sent and queries left unanswered after retries (unreached is not down:
    # a port whose state was not read keeps its last known state, marked by the switch's staleness)
    queries: dict[str, int] = field(default_factory=dict)
    unanswered: dict[str, int] = field(default_factory=dict)
    failed: dict[str, set[str]] = field(default_factory=dict)  # switch -> what went unanswered (counters, state)
    state_method: str = ""           # how link_up was read: "sa" (the SM's PortInfoRecords), "smp", "" (not read)
    method: str = ""                 # how the InfiniBand sweep read the switches: "mad" (in process), "tools"; "": another kind
    # InfiniBand: what each end of a link may train at (PortInfo's enabled widths and speeds), by
    # (node GUID, port): a switch's ports and the far ends of its links (CA ports included)
    abilities: dict[Key, LinkAbility] = field(default_factory=dict)
    # InfiniBand: the width and speed a port runs at, read in this sweep (wins over the discovery's)
    link_rate: dict[Key, tuple[int | None, str | None]] = field(default_factory=dict)
    # Ethernet: per switch, the seconds between its traffic counters' answer and the sweep's end (a sweep's
    # records are timed at its end; a switch answered early in one sweep and late in the next would turn the
    # difference into traffic: the rates take each switch at its own read). Absent: read at the end (0)
    read_ago: dict[str, float] = field(default_factory=dict)
    # Ethernet: the same for each switch's pause frames (its PFC walk, after the traffic's). Absent: read_ago's
    pause_read_ago: dict[str, float] = field(default_factory=dict)

    def switches_read(self) -> set[str]:
        """The switches this sweep read something of: counters, or a port's state (what the sweep checks
        judge; a switch that answered nothing keeps its last state and is judged by none of them)."""
        return self.switches | {g for g, _ in self.link_up}


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

_PORT_TEXT = tuple(str(n) for n in range(256))     # a port number's label, made once (three per port a render)


class _Nothing(Mapping[object, object]):
    """An empty read-only mapping: the one default of FabricPort's mappings (a build makes 26,000 ports on a
    SuperPOD-size fabric, and four new dicts each cost more than the rest of the port). Hashable, so that
    a dataclass field may default to it."""

    __slots__ = ()
    __hash__ = object.__hash__

    def __getitem__(self, key: object) -> object:
        raise KeyError(key)

    def __iter__(self) -> Iterator[object]:
        return iter(())

    def __len__(self) -> int:
        return 0


_NOTHING = _Nothing()
_K = TypeVar("_K")
_V = TypeVar("_V")


def nothing() -> Mapping[_K, _V]:
    """The shared empty mapping, as the mapping type asked for."""
    return cast("Mapping[_K, _V]", _NOTHING)


@dataclass(slots=True)
class FabricPort:
    guid: str
    port: int
    role: str
    link: Link | None                # the last link seen on this port (kept when it goes down)
    up: bool
    # the mappings are read, never changed (a build sets new ones; empty: nothing(), shared)
    counters: Mapping[str, int] = nothing()
    tx_rate: float | None = None     # bytes/s from the last two sweeps
    rx_rate: float | None = None
    rate_bps: float | None = None    # link data rate in bytes/s (0 while down)
    degraded: Mapping[str, bool] = nothing()    # reason -> bool (width, speed, down)
    expected: str = ""               # the link class norm, e.g. "4X HDR", "400G"
    name: str = ""                   # the port's label where it is not its number (Ethernet: ifName)
    pause: Mapping[tuple[int, str], int] = nothing()           # (priority, direction) -> frames
    pause_rates: Mapping[tuple[int, str], float] = nothing()   # ... -> frames/s, last two sweeps
    # an earlier read saw this port up (InfiniBand: cabled at a discovery; Ethernet: ifOperStatus up
    # at an earlier sweep): what a down finding may claim about its history; `seen_by` names that read
    seen_up: bool = True
    seen_by: str = "discovery"
    # False while nothing read this port's state: an Ethernet port no sweep has answered for yet (LLDP is
    # no evidence of state); its `up` is then a default, and no port_up or down series claims it
    state_read: bool = True
    # what the link is judged against when it is not degraded but slower than its class, e.g.
    # "slower than its class (4X HDR), as since first seen": information, never a broken cable
    note: str = ""

    @property
    def label(self) -> str:
        """The `port` label: the port number on InfiniBand, the ifName on Ethernet."""
        if self.name:
            return self.name
        port = self.port
        return _PORT_TEXT[port] if 0 <= port < 256 else str(port)


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
    judged: bool = False             # rates read and mean utilisation at or above the floor (only then is ratio judged)
    over: int = 0                    # consecutive sweeps over the threshold
    imbalanced: bool = False
    # when imbalanced: the busiest port and every other over ecmp_ratio x the mean (a polarised
    # group has several)
    hot: list[int] = field(default_factory=list)


# --- what the fabric checks derive (checks.shape: Outcome.derived), composed into the section by the model -----

@dataclass(frozen=True, slots=True)
class Responsiveness:
    """checks.fabric_unresponsive: per switch judged, unresponsive or not, and the data time of its last sweep
    with every query answered (None: never)."""
    unresponsive: Mapping[str, bool]
    last_read: Mapping[str, float | None]


@dataclass(frozen=True, slots=True)
class EcmpGroups:
    """checks.fabric_ecmp: every uplink group (and top-level downlink group) as judged this build."""
    groups: tuple[EcmpGroup, ...]


@dataclass(frozen=True, slots=True)
class UplinkCounts:
    """checks.fabric_uplinks: per switch, (active uplinks, expected) as judged this build."""
    uplinks: Mapping[str, tuple[int, int | None]]


@dataclass(frozen=True, slots=True)
class RouteBalances:
    """checks.fabric_routing: each switch's route balance."""
    routes: Mapping[str, RouteBalance]


@dataclass(frozen=True, slots=True)
class SmPoll:
    """checks.fabric_sm: the subnet managers of the last poll and the master's activity count."""
    sms: tuple[SmInfo, ...]
    activity: int | None


@dataclass(frozen=True, slots=True)
class DesignDrift:
    """checks.fabric_design: the design's cables and the discrepancies by kind."""
    cables: int
    discrepancies: Mapping[str, int]


@dataclass(frozen=True, slots=True)
class SchedulerDrift:
    """checks.fabric_slurm_topology: nodes drifted from the configured topology, and the drift by kind."""
    drifted: int
    by_kind: Mapping[str, int]


@dataclass(frozen=True, slots=True)
class SwitchOpticsView:
    """The switches' transceivers joined to their ports (what the optics checks judged on the fabric)."""
    optics: Mapping[Key, ModuleDiag]
    unjoined: Mapping[str, int]


@dataclass(slots=True)
class FabricSection:
    switches: dict[str, SwitchNode] = field(default_factory=dict)   # this shard's switches
    levels: dict[str, int] = field(default_factory=dict)
    ports: dict[Key, FabricPort] = field(default_factory=dict)
    groups: list[EcmpGroup] = field(default_factory=list)
    sweep_duration: float | None = None
    topology_changes: int = 0
    shard: tuple[int, int] = (0, 1)
    routes: dict[str, RouteBalance] = field(default_factory=dict)   # switch guid -> its route balance
    uplinks: dict[str, tuple[int, int | None]] = field(default_factory=dict)   # guid -> (active, expected)
    sms: list[SmInfo] | None = None  # None before the sm source ran (or with it disabled)
    sm_activity: int | None = None   # the master's activity count
    check_status: dict[tuple[str, str], int] = field(default_factory=dict)     # (check, switch guid or "") -> status
    counter_scale: dict[str, int] = field(default_factory=dict)     # as SweepData.scale
    kind: str = "infiniband"         # or "ethernet"
    name: str = ""                   # fabric.name: what the map's title calls the fabric ("": the collector's host)
    # unreached is not down: per switch, unresponsive (queries unanswered in fabric.unresponsive_sweeps of
    # its last fabric.unresponsive_window sweeps) and the data time of its last sweep with every query
    # answered (None: never)
    unresponsive: dict[str, bool] = field(default_factory=dict)
    last_read: dict[str, float | None] = field(default_factory=dict)
    link_state_method: str = ""      # how the last sweep read link states: "sa", "smp", "" (not read)
    sweep_method: str = ""           # how the last InfiniBand sweep read the switches: "mad", "tools" ("": not one)
    # transceivers (sources.ethernet.optics): (guid, ifIndex) -> model.optics.ModuleDiag, and per switch
    # the transceiver sensors that named no interface (or more than one)
    optics: dict[Key, ModuleDiag] = field(default_factory=dict)
    optics_unjoined: dict[str, int] = field(default_factory=dict)
    # switches with a CA inside them (SHARP Aggregation Nodes): guid -> the ports leading to it
    aggregation_nodes: dict[str, tuple[int, ...]] = field(default_factory=dict)
    # the scheduler's configured topology against the rail (checks.fabric_slurm_topology): nodes drifted, per kind of
    # drift (model.slurm_topology.DRIFT_KINDS); None without a configured topology.conf
    slurm_topology_drifted: int | None = None
    slurm_topology_drift: dict[str, int] = field(default_factory=dict)
    # the design file against the live fabric (checks.fabric_design): its cables (None without a design read) and
    # the discrepancies by kind (model.design.KINDS)
    design_cables: int | None = None
    design_discrepancies: dict[str, int] = field(default_factory=dict)
    # the SM's reports (sources/infiniband/events.py): the link state's mode in force and why, the subscription,
    # the counts; None where no events source ran (Ethernet, or it is disabled)
    events: EventsView | None = None
    # each judged switch's fans, power supplies and temperatures (checks.fabric_vitals; docs/vitals.md)
    vitals: dict[str, list[Vital]] = field(default_factory=dict)

    def port_label(self, guid: str, port: int) -> str:
        p = self.ports.get((guid, port))
        return p.label if p is not None else str(port)


__all__ = ["NO_ROUTE", "ROLES", "DesignDrift", "DiscoveryData", "EcmpGroup", "EcmpGroups", "FabricPort", "FabricSection",
           "LftData", "Link", "PortInfo", "Responsiveness", "RouteBalance", "RouteBalances", "SchedulerDrift", "SmData",
           "SmInfo", "SmPoll", "SwitchNode", "SwitchOpticsView", "SweepData", "Topology", "UplinkCounts", "build_topology",
           "merge_discovery", "port_key", "port_role", "rate_class", "switch_levels", "switch_parts", "host_name",
           "default_description", "unicast_lid", "AGGREGATION_NODE_DEVICE", "AGGREGATION_NODE_DESCRIPTION", "UNICAST_LIDS"]


_PORT_KEYS: dict[tuple[str, int], tuple[str, int]] = {}


def port_key(guid: str, port: int) -> tuple[str, int]:
    """The one (switch GUID, port) tuple of a switch port, shared by every record keyed by it (the topology,
    each section, a sweep's counters, link states, rates and abilities): a tuple is 56 bytes, and before
    (issue 49) a SuperPOD-size fabric's port was keyed by about six of them at once. As many entries as
    ports ever seen; one dict lookup a use."""
    k = (guid, port)
    return _PORT_KEYS.setdefault(k, k)


def shard_hash(guid: str) -> int:
    """A stable hash of a GUID (the same on every collector and every run)."""
    import hashlib
    return int.from_bytes(hashlib.sha256(guid.encode()).digest()[:8], "big")


def in_shard(guid: str, index: int, count: int) -> bool:
    return count <= 1 or shard_hash(guid) % count == index
