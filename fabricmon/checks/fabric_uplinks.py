"""Topology symmetry: in a fat tree the leaves of one uplink group have the same number of active
uplinks. Each switch's count is compared with the most common count among its peers by structure:
the switches of its level, of its uplinks' rate class, whose upper switches are mostly its own (they
share at least half of the larger of the two sets: a pod's leaves share their spines; a management
leaf with two cables to two of a pod's twenty spines shares a tenth, and is no peer of the pod's
leaves). A switch whose uplink group is its own (no other switch shares it) has no peers, so no
expectation and no status from the comparison; a switch with no uplink at all is compared with its
whole level. A switch below its peers is a WARNING naming the uplinks that were cabled at an earlier
discovery and are down now (a leaf that lost an uplink runs every job at a fraction of its
bandwidth), and CRITICAL once `critical_fraction` (fabric.uplinks_critical_fraction) of its expected
uplinks or more are missing: one uplink of many is a ticket, half of them a page.

Records in (FabricPort, the topology's ports and levels), counts and findings out."""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING

from fabricmon.checks import CRITICAL, OK, WARNING, Finding
from fabricmon.checks.port_text import port_ranges
from fabricmon.checks.shape import Outcome, report
from fabricmon.model.fabric import FabricPort, PortInfo, SwitchNode, Topology, UplinkCounts

if TYPE_CHECKING:
    from fabricmon.checks.fabric_inputs import FabricInputs

CHECK = "uplinks"
NEEDS = ("SweepData",)            # a fresh sweep: the link state of each switch it read


def active_uplinks(ports: Iterable[PortInfo | FabricPort]) -> dict[str, int]:
    """Active `up` ports per switch (every switch with a port in `ports` gets an entry)."""
    out: dict[str, int] = {}
    for p in ports:
        n = out.setdefault(p.guid, 0)
        if p.role == "up" and p.up and p.link is not None:
            out[p.guid] = n + 1
    return out


def uplink_classes(ports: Iterable[PortInfo | FabricPort]) -> dict[str, str]:
    """Per switch, the rate class of its uplinks (the most common among its cabled up ports, "" for none)."""
    by_switch: dict[str, Counter[str]] = {}
    for p in ports:
        c = by_switch.setdefault(p.guid, Counter())
        if p.role == "up" and p.link is not None:
            c[p.link.rate_class] += 1
    return {g: (c.most_common(1)[0][0] if c else "") for g, c in by_switch.items()}


def _mode(c: Counter[int]) -> int:
    """The most common count (ties: the larger, so a half-cabled group is not taken as the norm)."""
    return max(c.items(), key=lambda kv: (kv[1], kv[0]))[0]


PEER_SHARE = 0.5         # peers share at least this much of the larger of their two sets of upper switches


def peers_by_structure(a: frozenset[str], b: frozenset[str]) -> bool:
    """Whether two switches' sets of upper switches make them one uplink group."""
    return bool(a) and bool(b) and len(a & b) >= PEER_SHARE * max(len(a), len(b))


def expected_uplinks(counts: Mapping[str, int], levels: Mapping[str, int],
                     uppers: Mapping[str, frozenset[str]] | None = None,
                     classes: Mapping[str, str] | None = None) -> dict[str, int | None]:
    """Per switch, the most common active-uplink count among its peers, itself included: with
    `uppers` (switch -> the switches its uplinks lead to, down ones included), the switches of its
    level whose uppers are mostly its own (peers_by_structure; None when none is: its uplink group is
    its own, nothing to compare it with); a switch without uplinks, or without `uppers`, against its
    whole level. With `classes` (uplink_classes), only the switches whose uplinks are of its rate
    class count as its peers (a storage leaf with EDR uplinks is not held to the HDR compute leaves'
    count)."""
    cls = classes or {}
    by_level: dict[tuple[int, str], Counter[int]] = {}
    for guid, n in counts.items():
        by_level.setdefault((levels.get(guid, 0), cls.get(guid, "")), Counter())[n] += 1
    norm = {lvl: _mode(c) for lvl, c in by_level.items()}
    below: dict[str, set[str]] = {}         # upper switch -> the switches whose uplinks lead to it
    for guid, ups in (uppers or {}).items():
        for u in ups:
            below.setdefault(u, set()).add(guid)
    out: dict[str, int | None] = {}
    for guid, n in counts.items():
        his = uppers.get(guid) if uppers is not None else None
        lvl, mine = levels.get(guid, 0), cls.get(guid, "")
        if not his:
            out[guid] = norm[(lvl, mine)]
            continue
        assert uppers is not None
        near = {h for u in his for h in below.get(u, ())
                if h in counts and levels.get(h, 0) == lvl and cls.get(h, "") == mine}
        peers = {h for h in near if h == guid or peers_by_structure(his, uppers.get(h, frozenset()))}
        out[guid] = _mode(Counter(counts[h] for h in peers)) if len(peers) > 1 else None
    return out


def evaluate(uplinks: Mapping[str, tuple[int, int | None]], ports: Mapping[tuple[str, int], FabricPort],
             switches: Mapping[str, SwitchNode], levels: Mapping[str, int],
             critical_fraction: float = 0.5) -> list[Finding]:
    """A WARNING for every switch with fewer active uplinks than its level's norm, CRITICAL from
    `critical_fraction` of the norm missing (non-OK only)."""
    findings = []
    for guid, (active, expected) in uplinks.items():
        if guid not in switches or expected is None or active >= expected:
            continue
        missing = sorted(p.port for (g, _), p in ports.items()
                         if g == guid and p.role == "up" and p.link is not None and not p.up)
        if missing:
            ends = ", ".join(f'{fp.label} to "{lk.remote_name}"[{lk.remote_port_label}]'
                             for fp in (ports[(guid, p)] for p in missing[:8]) if (lk := fp.link) is not None)
            where = (f"missing: port{'s' if len(missing) > 1 else ''} "
                     f"{port_ranges(missing, lambda p: ports[(guid, p)].label)} ({ends}), cabled at an earlier discovery")
        else:
            where = "no uplink of it was seen cabled since the collector started"
        findings.append(Finding(
            CHECK, guid, missing[0] if missing else None,
            CRITICAL if expected and (expected - active) / expected >= critical_fraction else WARNING,
            f"{switches[guid].name} has {active} active uplinks where the switches of level {levels.get(guid, 0)} "
            f"that share its upper switches have {expected}; {where}: its hosts get {active}/{expected} of the "
            f"uplink bandwidth; check the cables and both ports"))
    return [f for f in findings if f.status != OK]


def topology_uplinks(topo: Topology) -> tuple[dict[str, int], dict[str, int | None]]:
    """The discovery's active and expected uplinks of each switch."""
    counts = active_uplinks(topo.ports.values())
    uppers: dict[str, set[str]] = {}        # switch -> the switches its uplinks lead to (down ones too)
    links = [((g, p), i.link) for (g, p), i in topo.ports.items()] + list(topo.down_links.items())
    for (g, _), lk in links:
        if lk is not None and lk.remote_type == "Switch" and topo.levels.get(lk.remote_guid, 0) > topo.levels.get(g, 0):
            uppers.setdefault(g, set()).add(lk.remote_guid)
    classes = uplink_classes(topo.ports.values())
    return counts, expected_uplinks(counts, topo.levels, {g: frozenset(u) for g, u in uppers.items()}, classes)


@dataclass(slots=True)
class SymmetryState:
    # the active and expected uplinks of each switch, from a topology: (it, active, expected), once per topology
    uplinks: tuple[Topology, dict[str, int], dict[str, int | None]] | None = None


class Symmetry:
    """uplinks (checks.shape): each switch's active uplinks against its peers' (the discovery's counts,
    kept per topology); the counts go into the section."""
    reports = (report(CHECK, *NEEDS),)

    def __init__(self, critical_fraction: float):
        self.settings = critical_fraction
        self.state = SymmetryState()

    def run(self, inputs: FabricInputs) -> Outcome:
        topo, sec = inputs.topo, inputs.sec
        if self.state.uplinks is None or self.state.uplinks[0] is not topo:
            self.state.uplinks = (topo, *topology_uplinks(topo))
        _, counts, expected = self.state.uplinks
        uplinks = {g: (counts.get(g, 0), expected.get(g)) for g in sec.switches}
        findings = evaluate(uplinks, sec.ports, sec.switches, sec.levels, self.settings)
        # judged: the switches whose link state this sweep read (a switch not read keeps its last state: no
        # status) and that have peers (a switch whose uplink group is its own has nothing to be held to)
        read = inputs.sweep.switches_read() if inputs.sweep is not None else set()
        return Outcome([f for f in findings if f.device in read],
                       tuple(g for g in sec.switches if g in read and uplinks[g][1] is not None), UplinkCounts(uplinks))


__all__ = ["CHECK", "NEEDS", "PEER_SHARE", "Symmetry", "SymmetryState", "active_uplinks", "evaluate",
           "expected_uplinks", "peers_by_structure", "topology_uplinks", "uplink_classes"]
