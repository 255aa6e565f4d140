"""What placement costs each running job: the leaves and spines its nodes span on the live fabric,
against the fewest its node count needs (docs/slurm-topology.md#placement).

Pure: from the rail's tree of the live topology (model.slurm_topology.build_tree: the leaves with
the rail's hosts, the HCA each host is cabled there with, the switches above them) and each
running job's hosts. A **rail** here is one HCA name (`mlx5_0` of the CA description `node01
mlx5_0`; one rail where the descriptions name none): a host with two HCAs on the selection (a
compute and a storage rail, or eight compute rails) is on one leaf per rail wherever it runs. The
rules:

- **leaves**: the distinct leaves the job's hosts are cabled to. A host on no leaf of the
  selection (not on this fabric, unnamed, on another rail) is counted as unplaced, never guessed.
- **leaves needed**: per rail, the job's nodes on that rail packed into the rail's leaves with the
  most of its hosts first (greedy by leaf size, which gives the fewest leaves that can hold them;
  ties by name); the distinct leaves so picked over the job's rails (rails on their own leaves add
  up, a host's HCAs all cabled to one leaf count it once).
- **spines**: 0 when the job's nodes are on one leaf per rail; else the fewest switches of the next
  level (those listing the leaves as children) covering all the job's leaves, greedy (the switch
  above the most of them first). A leaf with no switch above it counts one.
- **spines needed**: 0 when one leaf per rail would do; else, for the rail with the most, the
  fewest switches of the next level whose leaves hold its nodes, greedy by its hosts below each.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field

_TAIL = re.compile(r"^(.*?)(\d+)$")


@dataclass(frozen=True, slots=True)
class Placement:
    """One running job on the selection: what it spans and what would do."""
    job_id: str
    nodes: int                          # the job's hosts on a leaf of the selection
    leaves: tuple[str, ...]             # the leaves they are cabled to (Slurm switch names)
    leaves_needed: int
    spines: int
    spines_needed: int
    unplaced: tuple[str, ...] = ()      # the job's hosts on no leaf of the selection
    would_do: tuple[str, ...] = ()      # leaves of its largest rail that could hold it (the largest first)

    @property
    def excess(self) -> int:
        """Leaves spanned beyond the fewest needed."""
        return len(self.leaves) - self.leaves_needed


@dataclass(slots=True)
class RailIndex:
    """The selection's leaves by rail, their sizes and parents, built once per tree (each job's
    placement is then proportional to its hosts and leaves)."""
    host_leaves: dict[str, dict[str, set[str]]] = field(default_factory=dict)   # host (short too) -> rail -> leaves
    sizes: dict[str, list[tuple[int, str]]] = field(default_factory=dict)     # rail -> (its hosts, leaf), largest first
    parents: dict[str, list[str]] = field(default_factory=dict)       # leaf -> the switches listing it
    below: dict[str, set[str]] = field(default_factory=dict)          # next-level switch -> its leaves
    _leaves: dict[tuple[str, int], tuple[str, ...]] = field(default_factory=dict)   # fewest_leaves, by (rail, n)
    _spines: dict[tuple[str, int], int] = field(default_factory=dict)                # fewest_spines, by (rail, n)

    @classmethod
    def build(cls, nodes: Mapping[str, Sequence[str]], switches: Mapping[str, Sequence[str]],
              hcas: Mapping[str, Mapping[str, Iterable[str]]] | None = None) -> RailIndex:
        """From the rail's tree (model.slurm_topology.SlurmTree's nodes, switches and hcas): leaf ->
        its nodes, switch -> its child switches, leaf -> node -> its HCAs there (none: one rail)."""
        ix = cls()
        count: dict[str, dict[str, int]] = {}
        for leaf, leaf_nodes in nodes.items():
            by_node = (hcas or {}).get(leaf, {})
            for n in leaf_nodes:
                for rail in set(by_node.get(n, ())) or {""}:
                    count.setdefault(rail, {})[leaf] = count.get(rail, {}).get(leaf, 0) + 1
                    for name in {n, n.split(".")[0]} - {""}:      # a node description may hold the FQDN
                        ix.host_leaves.setdefault(name, {}).setdefault(rail, set()).add(leaf)
        ix.sizes = {r: sorted(((c, lf) for lf, c in by.items()), key=lambda x: (-x[0], _natural(x[1])))
                    for r, by in count.items()}
        for sw, kids in switches.items():
            for k in kids:
                if k in nodes:
                    ix.parents.setdefault(k, []).append(sw)
                    ix.below.setdefault(sw, set()).add(k)
        return ix

    def rails_of(self, host: str) -> dict[str, set[str]]:
        return self.host_leaves.get(host) or self.host_leaves.get(host.split(".")[0]) or {}

    def fewest_leaves(self, rail: str, n: int) -> tuple[str, ...]:
        """The fewest leaves of the rail holding n nodes: the largest first (all when n exceeds the rail)."""
        got = self._leaves.get((rail, n))
        if got is None:
            got = self._leaves[(rail, n)] = self._fewest_leaves(rail, n)
        return got

    def _fewest_leaves(self, rail: str, n: int) -> tuple[str, ...]:
        out: list[str] = []
        held = 0
        for size, leaf in self.sizes.get(rail, ()):
            if held >= n:
                break
            out.append(leaf)
            held += size
        return tuple(out)

    def fewest_spines(self, rail: str, n: int) -> int:
        """The fewest next-level switches whose leaves hold n nodes of the rail (greedy by the rail's
        hosts below each, leaves under an earlier pick not counted twice); a leaf without a switch
        above it counts one."""
        got = self._spines.get((rail, n))
        if got is None:
            got = self._spines[(rail, n)] = self._fewest_spines(rail, n)
        return got

    def _fewest_spines(self, rail: str, n: int) -> int:
        size = {lf: c for c, lf in self.sizes.get(rail, ())}
        covered: set[str] = set()
        held = picked = 0
        while held < n:
            best, gain = "", 0
            for sw in sorted(self.below):
                g = sum(size.get(lf, 0) for lf in self.below[sw] - covered)
                if g > gain:
                    best, gain = sw, g
            if not gain:
                break
            covered |= self.below[best]
            held += gain
            picked += 1
        for c, leaf in self.sizes.get(rail, ()):       # leaves with no switch above them
            if held >= n:
                break
            if leaf not in covered and leaf not in self.parents:
                held += c
                picked += 1
        return picked

    def cover(self, leaves: Iterable[str]) -> int:
        """The fewest next-level switches above these leaves (greedy: the one above the most first);
        a leaf with no switch above it counts one."""
        left = set(leaves)
        picked = 0
        while left:
            above: dict[str, int] = {}          # switch -> how many of the leaves left it is above
            for lf in left:
                for sw in self.parents.get(lf, ()):
                    above[sw] = above.get(sw, 0) + 1
            if not above:           # the rest have no switch above them
                return picked + len(left)
            left -= self.below[min(above, key=lambda sw: (-above[sw], sw))]
            picked += 1
        return picked


def place(index: RailIndex, job_id: str, hosts: Iterable[str]) -> Placement:
    """One job's placement on the selection (the rules of this module's docstring)."""
    on: dict[str, int] = {}                 # rail -> the job's nodes on it
    leaves_on: dict[str, set[str]] = {}     # rail -> the job's leaves on it
    placed = 0
    unplaced: list[str] = []
    for h in dict.fromkeys(hosts):
        got = index.rails_of(h)
        if not got:
            unplaced.append(h)
            continue
        placed += 1
        for rail, lvs in got.items():
            on[rail] = on.get(rail, 0) + 1
            leaves_on.setdefault(rail, set()).update(lvs)
    if not placed:
        return Placement(job_id, 0, (), 0, 0, 0, tuple(unplaced))
    leaves = set().union(*leaves_on.values())
    would = {r: index.fewest_leaves(r, n) for r, n in on.items()}
    main = min(on, key=lambda r: (-on[r], r))
    spines = 0 if all(len(lv) <= 1 for lv in leaves_on.values()) else index.cover(leaves)
    spines_needed = 0 if all(len(w) <= 1 for w in would.values()) else index.fewest_spines(main, on[main])
    needed = set().union(*would.values())       # rails sharing leaves (a host's HCAs on one leaf) share them
    return Placement(job_id, placed, tuple(sorted(leaves, key=_natural)), len(needed), spines, spines_needed,
                     tuple(unplaced), would[main])


def place_all(index: RailIndex, jobs: Mapping[str, Iterable[str]]) -> dict[str, Placement]:
    """Every job's placement (job id -> its hosts)."""
    return {j: place(index, j, hosts) for j, hosts in jobs.items()}


def _natural(name: str) -> tuple[str, int, str]:
    """leaf2 before leaf10 (Slurm's and the fabric's numbering)."""
    m = _TAIL.match(name)
    return (m.group(1), int(m.group(2)), name) if m else (name, -1, name)


__all__ = ["Placement", "RailIndex", "place", "place_all"]
