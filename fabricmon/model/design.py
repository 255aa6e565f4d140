"""The fabric as designed against the fabric as found (docs/design.md).

A design is the cabling plan the fabric was accepted from: its nodes (switches and host CAs, by
name and, where the file says, GUID) and its cables (two ends, each a node and a port; optionally
the width and speed the cable is meant to train at). It comes from an `ibnetdiscover` topology file
of the accepted fabric (`design_from_discovery`) or a CSV of cable ends (parsers.design).

`compare(design, live)` matches the design's nodes to the live topology's, by name where the name
is the node's own (set, not the firmware's default, and unique on both sides: a replaced switch
keeps its name and changes its GUID), else by GUID (a default name, `MF0;switch-1a2b3c:...`,
`localhost HCA-1`, or a name several nodes share), then sets the designed cables against the found
ones. Every difference is one `Discrepancy` naming both ends as designed and as found:

- `swapped`: two designed cables whose far ends are exchanged (one for the pair);
- `miswired`: a cable with one end where designed and the other in the wrong port of the right
  node, or on another node;
- `missing_cable`, `extra_cable`: designed and not found, found and not designed;
- `missing_node`: a designed switch or host the fabric lacks (its cables with it);
- `extra_node`: a switch or host found and not in the design (its cables with it);
- `replaced`: same name, new GUID (a normal repair, not a fault);
- `below_design`: a cable as designed that trains at a lower width or speed.

A CA inside a switch (a SHARP Aggregation Node) is part of its switch on both sides and never
compared; a port without a cable on both sides is nothing to report.
"""

from __future__ import annotations

import functools
import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field

from fabricmon.model import ibspec
from fabricmon.model.fabric import (
    AGGREGATION_NODE_DESCRIPTION, DiscoveryData, Link, Topology, default_description, switch_parts,
)

KINDS = ("swapped", "miswired", "missing_cable", "extra_cable", "missing_node", "extra_node", "replaced",
         "below_design")
# a switch's description the firmware sets while the switch has no host name of its own: `MF0;switch-1a2b3c:
# MQM8700/U1` (NVIDIA's default host name `switch-<MAC digits>`)
_DEFAULT_SWITCH = re.compile(r"^MF0;switch-[0-9a-f]+:", re.I)


@dataclass(frozen=True, slots=True)
class DesignNode:
    name: str                        # node description (a switch's, a CA's) or host name; "" unknown
    guid: str | None = None          # 16 hex digits where the design says
    switch: bool | None = None       # None: the design does not say (CSV)


@dataclass(frozen=True, slots=True)
class DesignCable:
    a: tuple[str, int]               # (node key of Design.nodes, port)
    b: tuple[str, int]
    width: int | None = None         # lanes it is meant to train at (None: not said)
    speed: str | None = None         # generation name (HDR)
    line: int = 0                    # where the design file says so (0: not from a line)


@dataclass(slots=True)
class Design:
    nodes: dict[str, DesignNode] = field(default_factory=dict)
    cables: list[DesignCable] = field(default_factory=list)


@dataclass(slots=True)
class DesignData:
    """The design file as the design source read it (sources.infiniband.design)."""
    path: str
    design: Design
    configured: bool = True          # False: no file configured (nothing to compare)


@dataclass(frozen=True, slots=True)
class Discrepancy:
    kind: str                        # one of KINDS
    switch: str                      # the live switch it is marked on ("" where none)
    port: int | None
    message: str


@functools.lru_cache(maxsize=1 << 16)
def default_name(name: str) -> bool:
    """A name that names no node of its own: a firmware or unconfigured image's description."""
    return (not name.strip() or default_description(name) or bool(_DEFAULT_SWITCH.match(name))
            or name == AGGREGATION_NODE_DESCRIPTION)


def design_from_discovery(d: DiscoveryData) -> Design:
    """A design from an `ibnetdiscover` topology (parsers.ibnetdiscover): every node by name and GUID,
    every cable once, with its width and speed; CAs inside a switch (SHARP) left out."""
    parts = switch_parts(d)
    design = Design()
    for g, sw in d.switches.items():
        design.nodes[g] = DesignNode(sw.name, g, True)
    for g, desc in d.cas.items():
        if g not in parts:
            design.nodes[g] = DesignNode(desc, g, False)
    seen: set[frozenset[tuple[str, int]]] = set()
    for g, sw in d.switches.items():
        for port, lk in sorted(sw.links.items()):
            if lk.remote_guid in parts or lk.remote_type == "External":
                continue
            ends = frozenset({(g, port), (lk.remote_guid, lk.remote_port)})
            if ends in seen:
                continue
            seen.add(ends)
            if lk.remote_guid not in design.nodes:      # a CA the file lists only by its switch's link line
                design.nodes[lk.remote_guid] = DesignNode(lk.remote_name, lk.remote_guid, lk.remote_type == "Switch")
            design.cables.append(DesignCable((g, port), (lk.remote_guid, lk.remote_port), lk.width, lk.speed))
    return design


# --- the live side --------------------------------------------------------------------------

@dataclass(slots=True)
class _Live:
    names: dict[str, str]                                   # guid -> its name (switch name, CA description)
    switches: set[str]
    cables: dict[frozenset[tuple[str, int]], Link]          # every cable once, with the link as seen from a switch
    rate: dict[frozenset[tuple[str, int]], tuple[int | None, str | None]]   # its width and speed (the lower end's)
    at: dict[tuple[str, int], tuple[str, int]]              # end -> the other end
    by_name: dict[str, set[str]]                            # a usable name -> the guids that carry it


def _live(topo: Topology, rates: Mapping[tuple[str, int], tuple[int | None, str | None]]) -> _Live:
    names = {g: sw.name for g, sw in topo.switches.items()}
    names.update({g: d for g, d in topo.cas.items() if g not in topo.parts})
    lv = _Live(names, set(topo.switches), {}, {}, {}, {})
    parts, cables, rate, at = topo.parts, lv.cables, lv.rate, lv.at
    for g, sw in topo.switches.items():
        for port, lk in sw.links.items():
            if lk.remote_guid in parts or lk.remote_type == "External":
                continue
            a, b = (g, port), (lk.remote_guid, lk.remote_port)
            key = frozenset((a, b))
            width, speed = rates.get(a) or (lk.width, lk.speed)
            if not width:
                width, speed = lk.width, lk.speed
            if key in cables:               # seen from its other end: the lower width the two ends say
                was = rate[key]
                if width and was[0] and width < was[0]:
                    rate[key] = (width, was[1])
                continue
            cables[key] = lk
            rate[key] = (width, speed)
            at[a], at[b] = b, a
            if lk.remote_guid not in names:
                names[lk.remote_guid] = lk.remote_name
    for g, name in names.items():
        for n in {name, topo.hosts.get(g, "")} - {""}:
            if not default_name(n):
                lv.by_name.setdefault(n, set()).add(g)
    return lv


def cable_count(topo: Topology) -> int:
    """The live topology's cables, each once (SHARP Aggregation Nodes' left out)."""
    return len(_live(topo, {}).cables)


# --- the comparison -------------------------------------------------------------------------

def match_nodes(design: Design, lv: _Live) -> tuple[dict[str, str], list[str]]:
    """Design node key -> live guid (by its own name where unique on both sides, else by GUID), and
    the keys matched by name whose GUID changed (replaced)."""
    counts: dict[str, int] = {}
    for n in design.nodes.values():
        counts[n.name] = counts.get(n.name, 0) + 1
    out: dict[str, str] = {}
    taken: set[str] = set()
    replaced = []
    for key, n in design.nodes.items():         # 1. by name
        if default_name(n.name) or counts[n.name] > 1:
            continue
        gs = lv.by_name.get(n.name, set())
        if len(gs) == 1:
            (g,) = gs
            out[key] = g
            taken.add(g)
            if n.guid is not None and n.guid != g:
                replaced.append(key)
    for key, n in design.nodes.items():         # 2. by GUID
        if key not in out and n.guid is not None and n.guid in lv.names and n.guid not in taken:
            out[key] = n.guid
            taken.add(n.guid)
    return out, replaced


def compare(design: Design, topo: Topology,
            rates: Mapping[tuple[str, int], tuple[int | None, str | None]] | None = None) -> list[Discrepancy]:
    """Every difference between the design and the live topology (`rates`: the width and speed a
    switch port runs at where a sweep read it after the discovery), one Discrepancy each."""
    lv = _live(topo, rates or {})
    node_of, replaced = match_nodes(design, lv)
    out: list[Discrepancy] = []

    def dname(key: str) -> str:
        n = design.nodes.get(key)
        return (n.name if n is not None and n.name and not default_name(n.name) else
                f"0x{n.guid}" if n is not None and n.guid else (n.name if n is not None else key)) or key

    def lname(g: str) -> str:
        name = lv.names.get(g, "")
        return name if name and not default_name(name) else f"0x{g}"

    def dend(e: tuple[str, int]) -> str:
        return f'"{dname(e[0])}"[{e[1]}]'

    def lend(e: tuple[str, int]) -> str:
        return f'"{lname(e[0])}"[{e[1]}]'

    def mark(*ends: tuple[str, int]) -> tuple[str, int | None]:
        for g, p in ends:                     # the first end on a live switch is where the map shows it
            if g in lv.switches:
                return g, p
        return "", None

    def order(k: Iterable[tuple[str, int]]) -> list[tuple[str, int]]:
        return sorted(k, key=lambda e: (e[0] not in lv.switches, e))      # a switch's end first

    def what(key: str) -> str:
        n = design.nodes[key]
        switch = n.switch if n.switch is not None or key not in node_of else node_of[key] in lv.switches
        return "switch" if switch else "host" if switch is False else "device"

    by_node: dict[str, list[DesignCable]] = {}
    for c in design.cables:
        by_node.setdefault(c.a[0], []).append(c)
        if c.b[0] != c.a[0]:
            by_node.setdefault(c.b[0], []).append(c)
    missing_nodes = [k for k in design.nodes if k not in node_of and k in by_node]
    gone = set(missing_nodes)
    for nk in replaced:
        g = node_of[nk]
        out.append(Discrepancy("replaced", g if g in lv.switches else "", None,
                               f"{what(nk)} {dname(nk)} was replaced: designed with GUID 0x{design.nodes[nk].guid}, "
                               f"found with 0x{g} (a normal repair: the design now follows the new GUID)"))
    for nk in missing_nodes:
        cables = by_node[nk]
        peers = [c.b if c.a[0] == nk else c.a for c in cables]
        shown = ", ".join(dend(p) for p in peers[:3]) + (f" and {len(peers) - 3} more" if len(peers) > 3 else "")
        guid = design.nodes[nk].guid
        sw, port = mark(*((node_of[p[0]], p[1]) for p in peers if p[0] in node_of))
        out.append(Discrepancy("missing_node", sw, port,
                               f"{what(nk)} {dname(nk)}{f' (0x{guid})' if guid and dname(nk)[2:] != guid else ''} "
                               f"is designed with {len(cables)} cable{'s' if len(cables) != 1 else ''} (to {shown}) "
                               "and not found in the fabric"))

    # the designed cables in live terms: (live guid, port); an unmatched node keeps its design key
    designed: dict[frozenset[tuple[str, int]], DesignCable] = {}
    live_of = node_of.get
    for c in design.cables:
        (na, pa), (nb, pb) = c.a, c.b
        if na in gone or nb in gone:
            continue
        designed[frozenset(((live_of(na) or "design:" + na, pa), (live_of(nb) or "design:" + nb, pb)))] = c
    found = set(lv.cables)
    both = found & set(designed)
    rate = lv.rate
    differ = [k for k in both if (designed[k].width not in (None, rate[k][0]) or designed[k].speed not in (None, rate[k][1]))]
    for key in sorted(differ, key=order):
        c, (width, speed) = designed[key], rate[key]
        low = _below(c, width, speed)
        if low:
            a, b = order(key)
            sw, port = mark(a, b)
            out.append(Discrepancy("below_design", sw, port,
                                   f"cable {lend(a)} <-> {lend(b)} runs at {_rate(width, speed)}, designed "
                                   f"{_rate(c.width, c.speed)} ({low})"))
    want = {k: c for k, c in designed.items() if k not in both}
    have = {k for k in found if k not in both}
    at_want: dict[tuple[str, int], tuple[str, int]] = {}
    for k in want:
        a, b = sorted(k)
        at_want[a], at_want[b] = b, a
    known = set(node_of.values())
    new_nodes = {g for k in have for g, _ in k if g not in known}

    # swaps: found {x1, y2} and {x2, y1} where designed {x1, y1} and {x2, y2}
    for k in sorted(have, key=order):
        if k not in have:
            continue
        for x1 in order(k):
            y2 = next(iter(k - {x1}), x1)
            y1, x2 = at_want.get(x1), at_want.get(y2)
            if y1 is None or x2 is None or y1 == y2:
                continue
            other = frozenset({x2, y1})
            if other in have and other != k:
                d1, d2 = frozenset({x1, y1}), frozenset({x2, y2})
                if d1 in want and d2 in want:
                    sw, port = mark(x1, x2, y1, y2)
                    at = (x1, x2) if x1[0] == x2[0] or y1[0] != y2[0] else (y1, y2)
                    out.append(Discrepancy(
                        "swapped", sw, port,
                        f"cables swapped: designed {dend(_d(want[d1], x1, node_of))} <-> {dend(_d(want[d1], y1, node_of))} "
                        f"and {dend(_d(want[d2], x2, node_of))} <-> {dend(_d(want[d2], y2, node_of))}, found "
                        f"{lend(x1)} <-> {lend(y2)} and {lend(x2)} <-> {lend(y1)}: swap the cables at "
                        f"{lend(at[0])} and {lend(at[1])} back"))
                    have -= {k, other}
                    del want[d1], want[d2]
                    for e in (x1, y1, x2, y2):
                        at_want.pop(e, None)
                    break
    # miswires: a found cable with one end where designed and the other elsewhere
    for k in sorted(have, key=order):
        for x in order(k):
            y = next(iter(k - {x}), x)
            z = at_want.get(x)
            if z is None or frozenset({x, z}) not in want:
                continue
            c = want.pop(frozenset({x, z}))
            at_want.pop(x, None)
            at_want.pop(z, None)
            have.discard(k)
            where = ("in the wrong port of the right " + ("switch" if z[0] in lv.switches else "node")
                     if y[0] == z[0] else "to the wrong " + ("switch" if y[0] in lv.switches else "node"))
            sw, port = mark(y, z, x)
            out.append(Discrepancy("miswired", sw, port,
                                   f"cable miswired {where}: designed {dend(_d(c, x, node_of))} <-> "
                                   f"{dend(_d(c, z, node_of))}, found {lend(x)} <-> {lend(y)}: move it from "
                                   f"{lend(y)} to {dend(_d(c, z, node_of))}"))
            break
    for g in sorted(new_nodes):
        mine = sorted((k for k in have if any(e[0] == g for e in k)), key=sorted)
        if not mine:
            continue
        peers = [next(e for e in sorted(k) if e[0] != g or len(k) == 1) for k in mine]
        have -= set(mine)
        shown = ", ".join(lend(p) for p in peers[:3]) + (f" and {len(peers) - 3} more" if len(peers) > 3 else "")
        sw, port = mark((g, 0)) if g in lv.switches else mark(*peers)
        out.append(Discrepancy("extra_node", sw, port if g not in lv.switches else None,
                               f"{'switch' if g in lv.switches else 'host'} {lname(g)}"
                               f"{f' (0x{g})' if lname(g)[2:] != g else ''} is not in the design: found with "
                               f"{len(mine)} cable{'s' if len(mine) != 1 else ''} (to {shown})"))
    for k, c in sorted(want.items(), key=lambda kv: order(kv[0])):
        a, b = order(k)
        sw, port = mark(a, b)
        now = "; ".join(f"{lend(e)} {'is cabled to ' + lend(lv.at[e]) if e in lv.at else 'has no cable'}"
                        for e in (a, b) if not e[0].startswith("design:"))
        out.append(Discrepancy("missing_cable", sw, port,
                               f"cable missing: designed {dend(_d(c, a, node_of))} <-> {dend(_d(c, b, node_of))}, "
                               f"found none ({now})"))
    for k in sorted(have, key=order):
        a, b = order(k)
        sw, port = mark(a, b)
        out.append(Discrepancy("extra_cable", sw, port,
                               f"cable not in the design: found {lend(a)} <-> {lend(b)}; designed "
                               + "; ".join(f"{lend(e)} " + (f"to {lend(at_want[e])}" if e in at_want else "unconnected")
                                           for e in (a, b))))
    return out


def _d(c: DesignCable, end: tuple[str, int], node_of: Mapping[str, str]) -> tuple[str, int]:
    """The design's own end of cable `c` that is `end` in live terms."""
    for e in (c.a, c.b):
        if (node_of.get(e[0], "design:" + e[0]), e[1]) == end:
            return e
    return end


def _rate(width: int | None, speed: str | None) -> str:
    return " ".join(x for x in (f"{width}X" if width else "", speed or "") if x) or "?"


def _below(c: DesignCable, width: int | None, speed: str | None) -> str:
    why = []
    if c.width and width and width < c.width:
        why.append(f"width {width}X of {c.width}X")
    want, got = ibspec.generation_rank(c.speed) if c.speed else None, ibspec.generation_rank(speed) if speed else None
    if want is not None and got is not None and got < want:
        why.append(f"speed {speed} of {c.speed}")
    return ", ".join(why)


def counts(found: Iterable[Discrepancy]) -> dict[str, int]:
    """Discrepancies by kind, every kind present (0 where none)."""
    out = dict.fromkeys(KINDS, 0)
    for d in found:
        out[d.kind] += 1
    return out


# --- writing a design -----------------------------------------------------------------------

def design_ibnetdiscover(topo: Topology, header: str = "") -> str:
    """The live topology as an `ibnetdiscover` topology file (what parsers.ibnetdiscover and ibsim
    read): every switch with its links, every CA with its own; SHARP Aggregation Nodes included, as
    they are part of the switches."""
    lines = [f"# {ln}" for ln in header.splitlines()]
    ca_links: dict[str, list[tuple[int, str, int, Link]]] = {}
    for g, sw in sorted(topo.switches.items()):
        lines += ["", "vendid=0x2c9", f"switchguid=0x{g}(0x{g})",
                  f'Switch\t{sw.nports} "S-{g}"\t\t# "{sw.name}" enhanced port 0 lid {sw.lid or 0} lmc 0']
        for port, lk in sorted(sw.links.items()):
            if lk.remote_type == "External":
                continue
            kind = "S" if lk.remote_type == "Switch" else "H"
            lines.append(f'[{port}]\t"{kind}-{lk.remote_guid}"[{lk.remote_port}]\t\t# "{lk.remote_name}" lid '
                         f"{lk.remote_lid or 0} {_kind(lk)}")
            if kind == "H":
                ca_links.setdefault(lk.remote_guid, []).append((lk.remote_port, g, port, lk))
    for ca, desc in sorted(topo.cas.items()):
        links = sorted(ca_links.get(ca, []))
        nports = max((p for p, *_ in links), default=1)
        sysimg = topo.parts.get(ca)
        lines += ["", "vendid=0x2c9"] + ([f"sysimgguid=0x{sysimg}"] if sysimg else []) + [
            f"caguid=0x{ca}", f'Ca\t{nports} "H-{ca}"\t\t# "{desc}"']
        for cport, g, port, lk in links:
            sw = topo.switches[g]
            lines.append(f'[{cport}]({ca})\t"S-{g}"[{port}]\t\t# "{sw.name}" lid {sw.lid or 0} {_kind(lk)}')
    return "\n".join(lines).lstrip("\n") + "\n"


def _kind(lk: Link) -> str:
    return f"{lk.width or 4}x{lk.speed or 'SDR'}"


CSV_HEADER = ("start_device", "start_port", "end_device", "end_port", "speed", "width", "start_guid", "end_guid")


def design_csv(topo: Topology) -> str:
    """The live topology as the CSV of cable ends (parsers.design): one row per cable, switch end
    first, a node by its name where the name is its own and unique (a host CA with the firmware's
    description by its name in the node name map), else `0x<guid>`, and its GUID; SHARP Aggregation
    Nodes left out."""
    lv = _live(topo, {})
    counts_: dict[str, int] = {}
    for g, name in lv.names.items():
        counts_[name] = counts_.get(name, 0) + 1

    hosts: dict[str, int] = {}
    for h in topo.hosts.values():
        hosts[h] = hosts.get(h, 0) + 1

    def plain(name: str) -> bool:
        return bool(name) and name.strip() == name and not re.search(r'[",\n]', name)

    def dev(g: str) -> str:
        name = lv.names.get(g, "")
        if plain(name) and not default_name(name) and counts_[name] == 1:
            return name
        host = topo.hosts.get(g, "")     # a default description, named by the site's node name map
        if plain(host) and not host.startswith("0x") and hosts[host] == 1 and host not in counts_:
            return host
        return f"0x{g}"

    rows = []
    for key in lv.cables:
        width, speed = lv.rate[key]
        a, b = sorted(key, key=lambda e: (e[0] not in lv.switches, e))
        if a[0] not in lv.switches:         # no switch end (a host-to-host cable): as found
            a, b = sorted(key)
        rows.append(f"{dev(a[0])},{a[1]},{dev(b[0])},{b[1]},{speed or ''},{f'{width}X' if width else ''},"
                    f"0x{a[0]},0x{b[0]}")
    rows.sort(key=lambda r: (r.split(",")[0], int(r.split(",")[1])))
    return "\n".join([",".join(CSV_HEADER), *rows]) + "\n"


__all__ = ["CSV_HEADER", "KINDS", "Design", "DesignCable", "DesignData", "DesignNode", "Discrepancy", "compare",
           "cable_count", "counts", "default_name", "design_csv", "design_from_discovery", "design_ibnetdiscover", "match_nodes"]
