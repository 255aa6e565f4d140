"""Slurm's topology from the live fabric: `topology.conf` (topology/tree) and `topology.yaml`
(Slurm 25.05+: tree and block) for one rail (docs/slurm-topology.md).

A rail is chosen by the HCA (a word of the CA's node description: `node01 mlx5_0` is HCA
`mlx5_0`, as rdma-ndd names it), a CA GUID list, and/or a switch name pattern; the subnet is the
one the collector's discovery reads. Only the rail's host CAs make a switch a leaf, so a storage
or management rail cabled into the same subnet never merges into a compute leaf. Leaves are the
level-1 switches carrying a rail CA; every switch above them (by the topology's levels) lists
its lower-level children. Nodes are the host names the collector gives jobs (node name map, else
the description's first word); a CA without a name (its GUID) and a host CA on a switch above
level 1 are left out, each with a note. CAs inside a switch (SHARP Aggregation Nodes) are never
nodes.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from fnmatch import fnmatchcase

from fabricmon.model.fabric import Topology

_UNSAFE = re.compile(r"[^A-Za-z0-9._-]+")
_TAIL = re.compile(r"^(.*?)(\d+)$")


@dataclass(frozen=True, slots=True)
class Rail:
    """Which CAs and switches make the scheduler's topology; empty: every host CA and switch."""
    hca: str = ""                               # fnmatch pattern on the HCA word(s) of a CA's description
    switch: str = ""                            # fnmatch pattern on switch names
    ca_guids: frozenset[str] = frozenset()      # CA node GUIDs, 16 hex digits, no 0x

    def takes_ca(self, guid: str, desc: str) -> bool:
        if self.ca_guids and guid not in self.ca_guids:
            return False
        return not self.hca or any(fnmatchcase(w, self.hca) for w in desc.split()[1:])

    def takes_switch(self, name: str) -> bool:
        return not self.switch or fnmatchcase(name, self.switch)


def parse_rail(specs: Iterable[str]) -> Rail:
    """`hca=mlx5_0`, `switch=ib-leaf*`, `guid=0x...,0x...` (each at most once; all must hold).
    Raises ValueError naming the bad spec."""
    got: dict[str, str] = {}
    for spec in specs:
        key, sep, value = spec.partition("=")
        key = key.strip().lower()
        if not sep or not value.strip() or key not in ("hca", "switch", "guid"):
            raise ValueError(f"--rail {spec!r}: expected hca=PATTERN, switch=PATTERN or guid=GUID[,GUID...]")
        if key in got:
            raise ValueError(f"--rail {key}= given twice")
        got[key] = value.strip()
    guids: set[str] = set()
    for g in filter(None, (x.strip() for x in got.get("guid", "").split(","))):
        h = g[2:] if g.lower().startswith("0x") else g
        if not re.fullmatch(r"[0-9A-Fa-f]{1,16}", h):
            raise ValueError(f"--rail guid={g!r}: not a GUID")
        guids.add(h.lower().zfill(16))
    return Rail(hca=got.get("hca", ""), switch=got.get("switch", ""), ca_guids=frozenset(guids))


@dataclass(slots=True)
class SlurmTree:
    """The rail as Slurm sees it: switch name -> its child switches (by name) and its nodes, in
    level order (leaves first, as topograph and the Topology Guide's examples write them)."""
    switches: dict[str, list[str]] = field(default_factory=dict)
    nodes: dict[str, list[str]] = field(default_factory=dict)
    levels: dict[str, int] = field(default_factory=dict)
    notes: list[str] = field(default_factory=list)         # what was left out, and why
    # leaf -> node -> the HCAs (words after the host in the CA's description, "" for none) it is cabled
    # there with: the rails a placement is counted on (model.placement)
    hcas: dict[str, dict[str, frozenset[str]]] = field(default_factory=dict)

    @property
    def leaves(self) -> list[str]:
        return [s for s in self.levels if self.nodes.get(s)]


def slurm_name(name: str) -> str:
    """A switch name Slurm can parse in `SwitchName=`/`Switches=` (no spaces, `=`, `,`, brackets)."""
    return _UNSAFE.sub("_", name).strip("_")


def switch_names(topo: Topology, guids: Iterable[str]) -> dict[str, str]:
    """guid -> a unique Slurm switch name: the fabric's name made safe; where two switches share
    it (or it is empty), the GUID appended."""
    safe = {g: slurm_name(topo.switches[g].name) for g in guids}
    count: dict[str, int] = {}
    for n in safe.values():
        count[n] = count.get(n, 0) + 1
    return {g: n if n and count[n] == 1 else f"{n or 'switch'}_{g}" for g, n in safe.items()}


def build_tree(topo: Topology, rail: Rail = Rail()) -> SlurmTree:
    tree = SlurmTree()
    leaf_nodes: dict[str, set[str]] = {}
    leaf_hcas: dict[str, dict[str, set[str]]] = {}
    for (guid, _port), p in sorted(topo.ports.items()):
        lk = p.link
        if p.role != "host" or lk is None or not rail.takes_ca(lk.remote_guid, topo.cas.get(lk.remote_guid, "")):
            continue
        sw = topo.switches[guid]
        if not rail.takes_switch(sw.name):
            continue
        host = topo.hosts.get(lk.remote_guid, "")
        if not host or host == f"0x{lk.remote_guid}":
            tree.notes.append(f"CA 0x{lk.remote_guid} on {sw.name} has no host name (node name map or rdma-ndd): "
                              "left out")
            continue
        if topo.levels.get(guid) != 1:
            tree.notes.append(f"{host} is cabled to {sw.name} (level {topo.levels.get(guid, 0)}), not to a leaf: "
                              "left out")
            continue
        leaf_nodes.setdefault(guid, set()).add(host)
        leaf_hcas.setdefault(guid, {}).setdefault(host, set()).add(" ".join(topo.cas.get(lk.remote_guid, "").split()[1:2]))
    members = set(leaf_nodes)
    # upwards, level by level: a switch above a member that the rail takes
    frontier = set(members)
    while frontier:
        nxt: set[str] = set()
        for g in frontier:
            for lk in topo.switches[g].links.values():
                up = lk.remote_guid
                if (lk.remote_type == "Switch" and up in topo.switches and up not in members
                        and topo.levels.get(up, 0) > topo.levels.get(g, 0) and rail.takes_switch(topo.switches[up].name)):
                    nxt.add(up)
        members |= nxt
        frontier = nxt
    names = switch_names(topo, members)
    for g in sorted(members, key=lambda g: (topo.levels.get(g, 0), names[g])):
        n = names[g]
        tree.levels[n] = topo.levels.get(g, 0)
        kids = {names[lk.remote_guid] for lk in topo.switches[g].links.values()
                if lk.remote_guid in members and lk.remote_guid != g
                and topo.levels.get(lk.remote_guid, 0) < topo.levels.get(g, 0)}
        if kids:
            tree.switches[n] = sorted(kids, key=_natural)
        if g in leaf_nodes:
            tree.nodes[n] = sorted(leaf_nodes[g], key=_natural)
            tree.hcas[n] = {h: frozenset(x) for h, x in leaf_hcas[g].items()}
    tops = [n for n, lvl in tree.levels.items() if lvl == max(tree.levels.values())]
    if tree.levels and len(tops) > 1:
        every = set().union(*tree.nodes.values())
        short = [t for t in tops if _nodes_below(tree, t) != every]
        if short:
            tree.notes.append(f"no switch reaches every node ({', '.join(short[:5])} reach only part): Slurm places "
                              "a job under one switch, so jobs cannot span those parts")
    return tree


def _nodes_below(tree: SlurmTree, switch: str, seen: set[str] | None = None) -> set[str]:
    seen = set() if seen is None else seen
    if switch in seen:
        return set()
    seen.add(switch)
    out = set(tree.nodes.get(switch, ()))
    for c in tree.switches.get(switch, ()):
        out |= _nodes_below(tree, c, seen)
    return out


def _natural(name: str) -> tuple[str, int, str]:
    m = _TAIL.match(name)
    return (m.group(1), int(m.group(2)), name) if m else (name, -1, name)


def compress_hostlist(names: Iterable[str]) -> str:
    """Slurm's hostlist expression of these names: `node01..node16,node18` -> `node[01-16,18]`.
    Names are grouped by prefix and digit count (zero padding kept, as `scontrol show hostnames`
    expands it); a name without a numeric tail stays as it is. Order: by group, then number."""
    groups: dict[tuple[str, int], set[int]] = {}
    plain: set[str] = set()
    for n in names:
        m = _TAIL.match(n)
        if m is None or "[" in n or "," in n:
            plain.add(n)
        else:
            groups.setdefault((m.group(1), len(m.group(2))), set()).add(int(m.group(2)))
    parts: list[str] = []
    for (prefix, width), nums in sorted(groups.items()):
        ordered = sorted(nums)
        if len(ordered) == 1:
            parts.append(f"{prefix}{ordered[0]:0{width}d}")
            continue
        runs: list[str] = []
        lo = prev = ordered[0]
        for x in [*ordered[1:], None]:
            if x is not None and x == prev + 1:
                prev = x
                continue
            runs.append(f"{lo:0{width}d}" if lo == prev else f"{lo:0{width}d}-{prev:0{width}d}")
            if x is not None:
                lo = prev = x
        parts.append(f"{prefix}[{','.join(runs)}]")
    return ",".join([*parts, *sorted(plain)])


def topology_conf(tree: SlurmTree, header: str = "") -> str:
    """topology.conf (topology/tree): `SwitchName=leaf Nodes=node[01-16]` for the leaves, then
    `SwitchName=spine Switches=leaf[01-04]` level by level."""
    lines = [f"# {h}" for h in header.splitlines()]
    lines += [f"# note: {n}" for n in tree.notes]
    for sw in tree.levels:
        if sw in tree.nodes:
            lines.append(f"SwitchName={sw} Nodes={compress_hostlist(tree.nodes[sw])}")
        if sw in tree.switches:
            lines.append(f"SwitchName={sw} Switches={compress_hostlist(tree.switches[sw])}")
    return "\n".join(lines) + "\n"


def topology_yaml_data(tree: SlurmTree, name: str = "fabric", block: bool = False,
                       block_sizes: Iterable[int] = ()) -> list[dict[str, object]]:
    """topology.yaml's data (topology.yaml(5)): one topology, `topology` first, `cluster_default:
    true`, and `tree` (`switches`: `switch` with `children` and/or `nodes`) or `block`
    (`block_sizes`, `blocks`: `block`, `nodes`; a block per leaf; block_sizes default to the
    smallest leaf's node count)."""
    topo: dict[str, object] = {"topology": name, "cluster_default": True}
    if block:
        leaves = tree.leaves
        sizes = list(block_sizes) or ([min(len(tree.nodes[lf]) for lf in leaves)] if leaves else [])
        topo["block"] = {"block_sizes": sizes,
                         "blocks": [{"block": lf, "nodes": compress_hostlist(tree.nodes[lf])} for lf in leaves]}
    else:
        switches: list[dict[str, str]] = []
        for sw in tree.levels:
            entry = {"switch": sw}
            if sw in tree.switches:
                entry["children"] = compress_hostlist(tree.switches[sw])
            if sw in tree.nodes:
                entry["nodes"] = compress_hostlist(tree.nodes[sw])
            switches.append(entry)
        topo["tree"] = {"switches": switches}
    return [topo]


def topology_yaml(tree: SlurmTree, name: str = "fabric", block: bool = False, block_sizes: Iterable[int] = (),
                  header: str = "") -> str:
    """topology.yaml's text: the data of topology_yaml_data in block style, every string
    double-quoted (a JSON string is a YAML double-quoted scalar), so no name reads as a number
    or a boolean."""
    lines = [f"# {h}" for h in header.splitlines()] + [f"# note: {n}" for n in tree.notes]
    for topo in topology_yaml_data(tree, name, block, block_sizes):
        lines += _yaml(topo, "", first="- ")
    return "\n".join(lines) + "\n"


def _yaml(value: Mapping[str, object], indent: str, first: str = "") -> list[str]:
    """A mapping of scalars, lists and mappings in YAML block style; `first` prefixes its first
    line (a list item's "- ")."""
    out: list[str] = []
    pad = indent + " " * len(first)
    for i, (k, v) in enumerate(value.items()):
        lead = (indent + first) if i == 0 else pad
        if isinstance(v, dict):
            out.append(f"{lead}{k}:")
            out += _yaml(v, pad + "  ")
        elif isinstance(v, list):
            out.append(f"{lead}{k}:")
            for item in v:
                if isinstance(item, dict):
                    out += _yaml(item, pad + "  ", first="- ")
                else:
                    out.append(f"{pad}  - {_scalar(item)}")
        else:
            out.append(f"{lead}{k}: {_scalar(v)}")
    return out


def _scalar(v: object) -> str:
    if isinstance(v, bool):
        return "true" if v else "false"
    if isinstance(v, int):
        return str(v)
    return json.dumps(str(v))


# --- drift: the configured topology.conf against the fabric ---------------------------------

@dataclass(frozen=True, slots=True)
class TopologyLine:
    """One switch line of a topology.conf (parsers.slurm.parse_topology_conf): its line number,
    its text, and its expanded `Switches=` and `Nodes=`."""
    line: int
    switch: str
    switches: tuple[str, ...] = ()
    nodes: tuple[str, ...] = ()
    text: str = ""


@dataclass(frozen=True, slots=True)
class SchedulerTopologyData:
    """The scheduler's topology as configured (sources.slurm_topology): the file, its switch lines,
    and the rail it describes."""
    path: str
    lines: tuple[TopologyLine, ...]
    rail: Rail = Rail()
    configured: bool = True           # False: `enabled: auto` and no file at `path` (quietly off)


DRIFT_KINDS = ("wrong_switch", "missing_node", "unknown_node", "unknown_switch")


@dataclass(frozen=True, slots=True)
class Drift:
    """One difference between the configured topology and the rail's: `kind` one of DRIFT_KINDS,
    `name` the node or switch, `line` the line to change (0: a line to add)."""
    kind: str
    name: str
    line: int
    message: str


def drift(tree: SlurmTree, conf: Iterable[TopologyLine], fabric_switches: Iterable[str] = ()) -> list[Drift]:
    """Every node listed under a switch it is not cabled to, every node of the rail under no
    switch, every node listed that is on no leaf of the rail, every switch the fabric lacks (or
    that is not on the rail): one each, with the line to change. `fabric_switches`: the Slurm
    names of every switch discovered (a switch off the rail is told apart from one that is gone)."""
    lines = list(conf)
    out: list[Drift] = []
    leaf_of: dict[str, list[str]] = {}
    for leaf, nodes in tree.nodes.items():
        for n in nodes:
            leaf_of.setdefault(n, []).append(leaf)
    by_switch = {ln.switch: ln for ln in lines if ln.nodes}
    listed: dict[str, list[TopologyLine]] = {}
    for ln in lines:
        for n in ln.nodes:
            listed.setdefault(n, []).append(ln)
    every = set(fabric_switches)
    for ln in lines:
        if ln.switch not in tree.levels:
            where = "is not a switch of this rail" if ln.switch in every else "does not exist in the fabric"
            out.append(Drift("unknown_switch", ln.switch, ln.line,
                             f"switch {ln.switch} (line {ln.line}: `{ln.text}`) {where}: remove the line, or "
                             "rename it to the fabric's switch"))
    for node in sorted(listed, key=_natural):
        cabled = leaf_of.get(node)
        if cabled is None:
            first = listed[node][0]
            out.append(Drift("unknown_node", node, first.line,
                             f"{node} is listed under {first.switch} (line {first.line}) but is on no leaf of the "
                             "rail (down, unnamed, or on another rail): remove it, or bring its HCA up"))
            continue
        for ln in listed[node]:
            if ln.switch not in cabled:
                to = cabled[0]
                target = by_switch.get(to)
                move = (f"to line {target.line} (`{target.text}`)" if target is not None
                        else f"to a new line `SwitchName={to} Nodes={node}`")
                out.append(Drift("wrong_switch", node, ln.line,
                                 f"{node} is listed under {ln.switch} (line {ln.line}) but cabled to {to}: "
                                 f"move it {move}"))
    for node in sorted(set(leaf_of) - set(listed), key=_natural):
        to = leaf_of[node][0]
        target = by_switch.get(to)
        add = (f"add it to line {target.line} (`{target.text}`)" if target is not None
               else f"add the line `SwitchName={to} Nodes={node}`")
        out.append(Drift("missing_node", node, target.line if target is not None else 0,
                         f"{node} (cabled to {to}) is under no switch of the topology: {add}"))
    return out


def drifted_nodes(found: Iterable[Drift]) -> int:
    """Nodes with a drift (a switch that is gone counts none by itself)."""
    return len({d.name for d in found if d.kind != "unknown_switch"})


__all__ = ["DRIFT_KINDS", "Drift", "Rail", "SchedulerTopologyData", "SlurmTree", "TopologyLine", "drift", "drifted_nodes", "build_tree", "compress_hostlist", "parse_rail", "slurm_name",
           "switch_names", "topology_conf", "topology_yaml", "topology_yaml_data"]
