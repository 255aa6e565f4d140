"""The fabric map's layout, apart from its drawing: which switches and links are drawn where,
in which state and colour. A pure function of the fabric section and the findings.

- Rows by level, the top level first (spines on top, leaves at the bottom with a host count
  under each); switches with no path to a CA (level 0) in a last row of their own.
- A row of more than MAX_ROW switches collapses into groups: a director's chassis by its node
  description; the rest by what they connect (the switches one level below, for a leaf the ones
  above: a pod's leaves share their spines, a pod's spines their leaves, a core group its spines),
  where that gives between 2 and MAX_ROW groups, otherwise runs of names in natural order. A
  collapsed group is drawn as a box with one small cell per switch, so every switch is still on
  the picture, and can be expanded.
- Every cable between two switches drawn on their own is one link, attached at its port's
  place along each box's edge (uplinks on top, downlinks below), so parallel cables fan out.
  Cables with an end inside a collapsed group are drawn as one bundle per pair of drawn items.
- A link's colour is its utilisation in the last sweep (the busier direction) on a fixed scale;
  its width is its rate class; down: dashed, critical; degraded (width or speed below its link
  class): marked, warning; rising errors: outlined; the hot port of an imbalanced ECMP group:
  marked hot, warning. A switch takes the state of its worst finding.
"""

from __future__ import annotations

import functools
import math
import os
import re
from collections import defaultdict
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field

from fabricmon.checks import CRITICAL, OK, WARNING, Finding, worst
from fabricmon.checks.link_errors import SATURATION_CHECK
from fabricmon.checks.settings import COUNTER_CHECKS
from fabricmon.model.fabric import FabricPort, FabricSection, Link
from fabricmon.pages.html import natural_key

MAX_ROW = 32                     # switches in a row drawn one by one before the row collapses into groups
GROUP_TARGET = 10                # groups per collapsed row, when names give no chassis to group by
LINK_ERROR_CHECKS = frozenset(COUNTER_CHECKS) | {SATURATION_CHECK}     # link_errors' findings: rising errors

# The utilisation colour scale: (upper bound, colour, legend label); fixed, so colours compare
# across sweeps and fabrics.
UTIL_SCALE: tuple[tuple[float, str, str], ...] = (
    (0.01, "#b0b7bf", "< 1 %"),
    (0.20, "#64b5f6", "1-20 %"),
    (0.40, "#43a047", "20-40 %"),
    (0.60, "#fdd835", "40-60 %"),
    (0.80, "#fb8c00", "60-80 %"),
    (math.inf, "#d32f2f", "80 % and more"),
)
NO_RATE = "#dde1e5"              # no rate yet (first sweep) or no link rate known
DOWN = "#c62828"

# Stroke width by the link's nominal data rate (Gb/s): (upper bound, width, label)
RATE_CLASSES: tuple[tuple[float, float, str], ...] = (
    (30, 1.0, "up to 25 Gb/s"),
    (60, 1.6, "50 Gb/s"),
    (120, 2.4, "100 Gb/s (EDR)"),
    (240, 3.4, "200 Gb/s (HDR)"),
    (480, 4.6, "400 Gb/s (NDR)"),
    (math.inf, 6.0, "800 Gb/s and more"),
)

BOX_W, BOX_H = 118, 36           # a switch drawn on its own
GROUP_COLS = 10                  # cells per line in a collapsed group
CELL, CELL_GAP = 9, 2            # a switch's cell inside a collapsed group
GAP_X, ROW_GAP, MARGIN, LABEL_W = 14, 120, 16, 64
HOST_LINE = 14                   # room under a leaf for its host count


def util_colour(util: float | None) -> str:
    if util is None:
        return NO_RATE
    return next(c for bound, c, _ in UTIL_SCALE if util < bound)


@functools.lru_cache(maxsize=64)
def rate_width(gbps: float | None) -> float:
    if not gbps:
        return RATE_CLASSES[0][1]
    return next(w for bound, w, _ in RATE_CLASSES if gbps < bound)


def short_name(name: str, limit: int = 18) -> str:
    """A node description short enough for a box: the part after a `MF0;`-style prefix,
    middle-elided."""
    n = name.split(";", 1)[1] if ";" in name else name
    if len(n) <= limit:
        return n
    head = (limit - 1) * 2 // 3
    return n[:head] + "…" + n[-(limit - 1 - head):]


_CHASSIS = re.compile(r"^(.*?)((?:/[A-Za-z]+\d+)+)$")


def chassis(name: str) -> str | None:
    """The chassis of a director's internal switch chip: `…:MCS8500/L05/U1` -> `…:MCS8500`.
    None for a name without unit suffixes."""
    m = _CHASSIS.match(name)
    return m.group(1) if m and m.group(1) else None


# --- records --------------------------------------------------------------------------------

@dataclass(slots=True)
class SwitchBox:
    guid: str
    name: str
    level: int
    state: int
    x: float = 0.0
    y: float = 0.0
    w: float = BOX_W
    h: float = BOX_H
    hosts: int = 0               # host ports up
    hosts_down: int = 0          # host ports remembered, now down
    external: int = 0            # ports to a bridge or router outside the fabric (Ethernet, LLDP capabilities)
    group: str | None = None     # the (expanded) group it belongs to
    label: str = ""              # the name without what every switch of its row shares
    findings: list[Finding] = field(default_factory=list)
    up_ports: list[int] = field(default_factory=list)       # sorted, along the top edge
    down_ports: list[int] = field(default_factory=list)     # sorted, along the bottom edge (down and host)


@dataclass(slots=True)
class Cell:
    guid: str
    name: str
    state: int
    x: float
    y: float


@dataclass(slots=True)
class GroupBox:
    id: str                      # stable: level and the first member's GUID
    label: str
    level: int
    members: list[str]
    state: int
    expanded: bool
    x: float = 0.0
    y: float = 0.0
    w: float = BOX_W
    h: float = BOX_H
    cells: list[Cell] = field(default_factory=list)


@dataclass(slots=True)
class LinkEnd:
    guid: str
    port: int
    name: str
    port_rec: FabricPort | None

    @property
    def label(self) -> str:
        """The port as operators name it: its number on InfiniBand, its ifName on Ethernet."""
        return self.port_rec.label if self.port_rec is not None else str(self.port)


@dataclass(slots=True)
class LinkLine:
    key: str                     # "<guid>:<port>-<guid>:<port>", the lower end first
    a: LinkEnd
    b: LinkEnd
    x1: float = 0.0
    y1: float = 0.0
    x2: float = 0.0
    y2: float = 0.0
    util: float | None = None
    colour: str = NO_RATE
    width: float = 1.0
    link: Link | None = None     # the cable as discovery saw it (either end's record)
    gbps: float | None = None    # nominal data rate of the link class
    down: bool = False
    degraded: bool = False
    errors: bool = False
    hot: bool = False
    state: int = OK
    findings: list[Finding] = field(default_factory=list)


@dataclass(slots=True)
class Bundle:
    key: str                     # "<item>--<item>" (item: a switch GUID or a group id)
    a: str
    b: str
    links: list[LinkLine]
    x1: float = 0.0
    y1: float = 0.0
    x2: float = 0.0
    y2: float = 0.0
    util: float | None = None
    colour: str = NO_RATE
    width: float = 1.0
    state: int = OK


@dataclass(slots=True)
class Row:
    level: int
    y: float
    label: str


@dataclass(slots=True)
class Layout:
    width: float
    height: float
    rows: list[Row]
    switches: dict[str, SwitchBox]           # every switch of the section (drawn or in a group)
    groups: list[GroupBox]
    links: list[LinkLine]                    # drawn one by one
    bundles: list[Bundle]
    off_shard: int = 0                       # cables to switches this collector does not sweep

    def drawn(self) -> list[SwitchBox]:
        grouped = {g for gr in self.groups if not gr.expanded for g in gr.members}
        return [b for g, b in self.switches.items() if g not in grouped]


# --- grouping -------------------------------------------------------------------------------

def _affixes(names: list[str]) -> tuple[int, int]:
    """Lengths of the prefix and suffix every name shares (cut at a separator), so labels
    keep only what tells the names apart."""
    if len(names) < 2:
        return 0, 0
    pre = os.path.commonprefix(names)
    suf = os.path.commonprefix([n[::-1] for n in names])[::-1]
    cut = max((pre.rfind(c) + 1 for c in "-;:/_. "), default=0)
    scut = min((i for i in (suf.find(c) for c in "-;:/_. ") if i >= 0), default=len(suf))
    return cut, len(suf) - scut


def group_row(guids: list[str], names: Mapping[str, str], level: int,
              connects: Mapping[str, frozenset[str]] | None = None) -> list[tuple[str, str, list[str]]]:
    """(id, label, members) for a row too long to draw one by one: a director's chassis (two
    or more switches whose names differ only in unit suffixes) stay together; the rest by what
    they connect (`connects`: switch -> the switches it groups by) where that makes 2 to MAX_ROW
    groups in all, else in runs of names in natural order, about GROUP_TARGET groups in all."""
    order = sorted(guids, key=lambda g: natural_key(names[g]))
    by_chassis: dict[str, list[str]] = defaultdict(list)
    for g in order:
        by_chassis[chassis(names[g]) or names[g]].append(g)
    whole = [(k, v) for k, v in by_chassis.items() if len(v) > 1]
    rest = [g for k, v in by_chassis.items() if len(v) == 1 for g in v]
    pre, suf = _affixes([names[g] for g in order])

    def short(name: str) -> str:
        return name[pre:len(name) - suf] or name

    def run_label(run: list[str]) -> str:
        first, last = short(names[run[0]]), short(names[run[-1]])
        same = os.path.commonprefix([first, last])          # "0901-01ib0 … 16ib0", not the prefix twice
        cut = max((same.rfind(c) + 1 for c in "-;:/_. "), default=0)
        return f"{first} … {last[cut:]}" if len(run) > 1 else first

    parts: list[tuple[str, list[str]]] = [(short(k + "/").rstrip("/"), v) for k, v in whole]
    by_peers: dict[frozenset[str], list[str]] = defaultdict(list)
    for g in rest:
        by_peers[connects.get(g, frozenset()) if connects else frozenset()].append(g)
    if rest and 2 <= len(by_peers) + len(whole) <= MAX_ROW:
        parts += [(run_label(run), run) for run in by_peers.values()]
    elif rest:
        size = max(1, math.ceil(len(rest) / max(1, GROUP_TARGET - len(whole))))
        for i in range(0, len(rest), size):
            run = rest[i:i + size]
            parts.append((run_label(run), run))
    parts.sort(key=lambda p: natural_key(names[p[1][0]]))
    return [(f"{level}-{members[0]}", label, members) for label, members in parts]


# --- states ---------------------------------------------------------------------------------

def _link(a: tuple[str, int], b: tuple[str, int], sec: FabricSection, names: Mapping[str, str],
          port_findings: Mapping[tuple[str, int], list[Finding]], hot: set[tuple[str, int]]) -> LinkLine:
    pa, pb = sec.ports.get(a), sec.ports.get(b)
    ln = LinkLine(key=f"{a[0]}:{a[1]}-{b[0]}:{b[1]}", a=LinkEnd(a[0], a[1], names.get(a[0], a[0]), pa),
                  b=LinkEnd(b[0], b[1], names.get(b[0], b[0]), pb))
    recs = [p for p in (pa, pb) if p is not None]
    ln.down = any(not p.up for p in recs)
    ln.degraded = not ln.down and any(p.degraded.get("width") or p.degraded.get("speed") for p in recs)
    ln.findings = [f for k in (a, b) for f in port_findings.get(k, ())]
    ln.errors = any(f.check in LINK_ERROR_CHECKS and f.status != OK for f in ln.findings)
    ln.hot = a in hot or b in hot
    utils = [p.tx_rate / p.rate_bps for p in recs if p.up and p.tx_rate is not None and p.rate_bps]
    ln.util = max(utils) if utils else None
    lk = ln.link = next((p.link for p in recs if p.link is not None), None)
    ln.gbps = lk.rate_bps * 8 / 1e9 if lk is not None and lk.rate_bps else None
    ln.width = rate_width(ln.gbps)
    ln.colour = DOWN if ln.down else util_colour(ln.util)
    ln.state = max(worst(ln.findings), CRITICAL if ln.down and not ln.findings else OK,
                   WARNING if ln.hot or ln.degraded else OK)
    return ln


# --- the layout ---------------------------------------------------------------------------

def _islands(boxes: Mapping[str, SwitchBox], links: Iterable[LinkLine]) -> dict[str, int]:
    """Per switch, the rank of the part of the fabric it is in, below the top level: the parts the
    switches fall into without the top level (a three-tier fabric's pods; a management island under
    its own spine), those with hosts first, the larger first, then by their first switch's name. The
    map draws the parts side by side, so an island is drawn beside the tree, not among its leaves."""
    top = max((b.level for b in boxes.values()), default=0)
    if top < 3:                 # two tiers: no parts below the spines but the leaves themselves
        return {}
    parent = {g: g for g, b in boxes.items() if 0 < b.level < top}

    def root(g: str) -> str:
        while parent[g] != g:
            parent[g] = parent[parent[g]]
            g = parent[g]
        return g

    for ln in links:
        a, b = ln.a.guid, ln.b.guid
        if a in parent and b in parent:
            parent[root(a)] = root(b)
    parts: dict[str, list[str]] = defaultdict(list)
    for g in parent:
        parts[root(g)].append(g)
    order = sorted(parts.values(), key=lambda ms: (not any(boxes[m].hosts or boxes[m].hosts_down for m in ms),
                                                  -len(ms), min(natural_key(boxes[m].name) for m in ms)))
    return {m: i for i, ms in enumerate(order) for m in ms}


def layout(sec: FabricSection, findings: Iterable[Finding], expand: Iterable[str] = ()) -> Layout:
    """Where everything of the section is drawn. `expand`: ids of groups drawn open."""
    expand = set(expand)
    names = {g: sw.name or g for g, sw in sec.switches.items()}
    by_switch: dict[str, list[Finding]] = defaultdict(list)
    by_port: dict[tuple[str, int], list[Finding]] = defaultdict(list)
    for f in findings:
        if f.device in sec.switches:
            by_switch[f.device].append(f)
            if f.port is not None:
                by_port[(f.device, f.port)].append(f)
    hot = {(gr.guid, p) for gr in sec.groups if gr.imbalanced for p in gr.hot}

    boxes: dict[str, SwitchBox] = {}
    for g, sw in sec.switches.items():
        b = SwitchBox(g, names[g], sec.levels.get(g, 0), worst(by_switch.get(g, [])), findings=by_switch.get(g, []))
        for port in sw.ports():
            p = sec.ports.get((g, port))
            if p is None or p.link is None:
                continue
            if p.role == "host":
                b.hosts += p.up
                b.hosts_down += not p.up
                b.down_ports.append(port)
            elif p.role == "external":  # not a host (out of host counts), not a cable of the fabric
                b.external += 1
                b.down_ports.append(port)
            elif p.role == "up":
                b.up_ports.append(port)
            else:
                b.down_ports.append(port)
        boxes[g] = b

    # the cables: each once, the lower end (level, then GUID) first
    cables: dict[tuple[tuple[str, int], tuple[str, int]], None] = {}
    off_shard = 0
    for (g, port), p in sec.ports.items():
        lk = p.link
        if lk is None or lk.remote_type != "Switch":
            continue
        if lk.remote_guid not in sec.switches:
            off_shard += 1
            continue
        near, far = (g, port), (lk.remote_guid, lk.remote_port)
        if (sec.levels.get(far[0], 0), far) < (sec.levels.get(near[0], 0), near):
            near, far = far, near
        cables[(near, far)] = None
    links = [_link(a, b, sec, names, by_port, hot) for a, b in cables]

    # rows, top level first; level 0 last
    levels = sorted({bx.level for bx in boxes.values()}, key=lambda lv: (lv == 0, -lv))
    neighbours: dict[str, list[str]] = defaultdict(list)       # switch -> switches below it
    above: dict[str, set[str]] = defaultdict(set)              # switch -> switches one level above it
    for ln in links:
        la, lb = boxes[ln.a.guid].level, boxes[ln.b.guid].level
        if la < lb:
            neighbours[ln.b.guid].append(ln.a.guid)
            if lb == la + 1:
                above[ln.a.guid].add(ln.b.guid)
    # what a switch is grouped by: the switches one level below it (a leaf: those above it)
    connects = {g: frozenset(n for n in neighbours.get(g, ()) if boxes[n].level == bx.level - 1)
                if bx.level > 1 else frozenset(above.get(g, ())) for g, bx in boxes.items()}
    groups: list[GroupBox] = []
    member_of: dict[str, GroupBox] = {}
    row_items: dict[int, list[str | GroupBox]] = {}
    for lv in levels:
        guids = [g for g, bx in boxes.items() if bx.level == lv]
        if len(guids) <= MAX_ROW:
            row_items[lv] = list(guids)
            continue
        items: list[str | GroupBox] = []
        for gid, label, members in group_row(guids, names, lv, connects):
            if len(members) == 1:            # a group of one is just the switch
                items.append(members[0])
                continue
            gr = GroupBox(gid, label, lv, members, max(boxes[m].state for m in members), gid in expand)
            groups.append(gr)
            for m in members:
                member_of[m] = gr
                if gr.expanded:
                    boxes[m].group = gid
            items.extend(members if gr.expanded else [gr])
        row_items[lv] = items

    for lv in levels:
        guids = [g for g, bx in boxes.items() if bx.level == lv]
        pre, suf = _affixes([names[g] for g in guids])
        for g in guids:
            boxes[g].label = names[g][pre:len(names[g]) - suf] or names[g]

    # order within rows: leaves (and level 0) by the part of the tree they are in (_islands), then by
    # name; upper rows by the mean position of what they connect to below, so links cross as little as
    # a single pass can manage (an island's spines follow its leaves to the side)
    pos: dict[str, float] = {}

    def item_name(it: str | GroupBox) -> str:
        return it.label if isinstance(it, GroupBox) else names[it]

    def item_guids(it: str | GroupBox) -> list[str]:
        return it.members if isinstance(it, GroupBox) else [it]

    island = _islands(boxes, links)
    for lv in sorted(row_items, key=lambda lv: (lv == 0, lv)):      # bottom-up
        items = row_items[lv]

        def bary(it: str | GroupBox) -> float:
            below = [pos[n] for g in item_guids(it) for n in neighbours.get(g, ()) if n in pos]
            return sum(below) / len(below) if below else math.inf

        if lv <= 1:
            items.sort(key=lambda it: (min(island.get(g, 0) for g in item_guids(it)), natural_key(item_name(it))))
        else:
            items.sort(key=lambda it: (bary(it), natural_key(item_name(it))))
        for i, it in enumerate(items):
            for g in item_guids(it):
                pos[g] = (i + 0.5) / len(items)

    # geometry
    rows: list[Row] = []
    widths: dict[int, float] = {}
    for lv in levels:
        w = 0.0
        for it in row_items[lv]:
            if isinstance(it, GroupBox):
                cols = min(len(it.members), GROUP_COLS)
                it.w = max(BOX_W, cols * (CELL + CELL_GAP) + 12)
                it.h = 22 + math.ceil(len(it.members) / cols) * (CELL + CELL_GAP) + 6
            w += (it.w if isinstance(it, GroupBox) else BOX_W) + GAP_X
        widths[lv] = w - GAP_X
    width = LABEL_W + max(widths.values(), default=BOX_W) + 2 * MARGIN
    y: float = MARGIN
    for lv in levels:
        items = row_items[lv]
        h = max((it.h if isinstance(it, GroupBox) else BOX_H) for it in items)
        top = max(levels)
        label = ("unreached" if lv == 0 else "leaves" if lv == 1 else "spines" if lv == 2 and top <= 3
                 else "cores" if lv == 3 and top == 3 else f"level {lv}")
        rows.append(Row(lv, y, label))
        x = LABEL_W + MARGIN + (width - LABEL_W - 2 * MARGIN - widths[lv]) / 2
        for it in items:
            if isinstance(it, GroupBox):
                it.x, it.y = x, y + (h - it.h) / 2
                cols = min(len(it.members), GROUP_COLS)
                for i, m in enumerate(sorted(it.members, key=lambda g: natural_key(names[g]))):
                    it.cells.append(Cell(m, names[m], boxes[m].state, it.x + 6 + (i % cols) * (CELL + CELL_GAP),
                                         it.y + 22 + (i // cols) * (CELL + CELL_GAP)))
                    boxes[m].x, boxes[m].y = it.x, it.y          # where its cables attach
                x += it.w + GAP_X
            else:
                b = boxes[it]
                b.x, b.y = x, y + (h - BOX_H) / 2
                x += BOX_W + GAP_X
        y += h + (HOST_LINE if lv == 1 else 0) + ROW_GAP
    height = y - ROW_GAP + MARGIN

    # attach the links; cables into a collapsed group become bundles
    def attach(box: SwitchBox, port: int, top: bool) -> float:
        ports = box.up_ports if top else box.down_ports
        i = ports.index(port) if port in ports else len(ports) // 2
        return box.x + box.w * (i + 1) / (len(ports) + 1)

    drawn_links: list[LinkLine] = []
    bundles: dict[tuple[str, str], Bundle] = {}
    for ln in links:
        ga, gb = member_of.get(ln.a.guid), member_of.get(ln.b.guid)
        ca = ga if ga is not None and not ga.expanded else None
        cb = gb if gb is not None and not gb.expanded else None
        ba, bb = boxes[ln.a.guid], boxes[ln.b.guid]
        if ca is None and cb is None:
            a_top = bb.level > ba.level
            ln.x1, ln.y1 = attach(ba, ln.a.port, a_top), ba.y if a_top else ba.y + ba.h
            ln.x2, ln.y2 = attach(bb, ln.b.port, not a_top), bb.y + bb.h      # same level: both below
            drawn_links.append(ln)
            continue
        ia = ca.id if ca is not None else ln.a.guid
        ib = cb.id if cb is not None else ln.b.guid
        if ia == ib:
            continue                     # inside one collapsed group: its box stands for them
        bd = bundles.get((ia, ib))
        if bd is None:
            bd = bundles[(ia, ib)] = Bundle(f"{ia}--{ib}", ia, ib, [])
            (xa, ya, wa, ha) = (ca.x, ca.y, ca.w, ca.h) if ca is not None else (ba.x, ba.y, ba.w, ba.h)
            (xb, yb, wb, hb) = (cb.x, cb.y, cb.w, cb.h) if cb is not None else (bb.x, bb.y, bb.w, bb.h)
            up = ya > yb
            bd.x1, bd.y1 = xa + wa / 2, ya if up else ya + ha
            bd.x2, bd.y2 = xb + wb / 2, yb + hb if up else yb
        bd.links.append(ln)
    for bd in bundles.values():
        utils = [ln.util for ln in bd.links if ln.util is not None]
        bd.util = max(utils) if utils else None
        bd.colour = util_colour(bd.util) if not all(ln.down for ln in bd.links) else DOWN
        bd.width = min(8.0, 1.0 + math.log2(len(bd.links)))
        bd.state = max(ln.state for ln in bd.links)
    return Layout(width, height, rows, boxes, groups, drawn_links, list(bundles.values()), off_shard)


__all__ = ["MAX_ROW", "NO_RATE", "RATE_CLASSES", "UTIL_SCALE", "Bundle", "Cell", "GroupBox", "Layout", "LinkLine",
           "Row", "SwitchBox", "chassis", "group_row", "layout", "rate_width", "short_name",
           "util_colour"]
