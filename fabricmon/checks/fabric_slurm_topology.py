"""The scheduler's topology against the fabric: Slurm's configured topology.conf
(sources.slurm_topology) compared with the rail's tree of the live topology
(model.slurm_topology.drift: a node listed under a switch it is not cabled to, a rail node under no
switch, a listed node on no leaf of the rail, a switch the fabric lacks). One fabric-wide WARNING
naming the first drifts, with the command that lists every one with the line to change; the
drifted nodes are a metric (fabricmon_fabric_slurm_topology_drifted_nodes)."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

from fabricmon.checks import WARNING, Finding
from fabricmon.checks.shape import Outcome, report
from fabricmon.model import slurm_topology
from fabricmon.model.fabric import SchedulerDrift, Topology
from fabricmon.model.slurm_topology import Drift, SchedulerTopologyData, drifted_nodes
from fabricmon.model.snapshot import source_data

if TYPE_CHECKING:
    from fabricmon.checks.fabric_inputs import FabricInputs

CHECK = "slurm_topology"
NEEDS = ("topology", "scheduler_topology")     # a discovery and a configured topology.conf
SHOWN = 3                                       # drifts named in the message


def evaluate(found: Sequence[Drift], path: str, nodes: int) -> list[Finding]:
    """`found`: the drifts of the file at `path`; `nodes`: the rail's nodes on the fabric."""
    if not found:
        return []
    shown = "; ".join(d.message for d in found[:SHOWN])
    more = f"; and {len(found) - SHOWN} more" if len(found) > SHOWN else ""
    return [Finding(CHECK, "", None, WARNING,
                    f"{path} drifted from the fabric ({drifted_nodes(found)} of {nodes} nodes): {shown}{more}. "
                    f"Every line to change: fabricmon topology slurm --check {path}; or regenerate it with "
                    "fabricmon topology slurm, then scontrol reconfigure")]


@dataclass(slots=True)
class DriftState:
    # the last drift: (topology, file read, drifts, rail nodes)
    last: tuple[Topology, SchedulerTopologyData, list[Drift], int] | None = None


class SchedulerTopology:
    """slurm_topology (checks.shape): the configured topology.conf against the rail's tree of this
    topology (docs/slurm-topology.md), computed again only when the discovery or the file read is new;
    the drift counts go into the section. Fabric-wide."""
    reports = (report(CHECK, *NEEDS),)
    settings = None

    def __init__(self) -> None:
        self.state = DriftState()

    def run(self, inputs: FabricInputs) -> Outcome:
        conf = source_data(inputs.states, SchedulerTopologyData)
        if conf is None:
            return Outcome((), ())
        topo = inputs.topo
        last = self.state.last
        if last is None or last[0] is not topo or last[1] is not conf:
            tree = slurm_topology.build_tree(topo, conf.rail)
            found = slurm_topology.drift(tree, conf.lines, slurm_topology.switch_names(topo, topo.switches).values())
            nodes = len(set().union(*tree.nodes.values())) if tree.nodes else 0
            last = self.state.last = (topo, conf, found, nodes)
        _, _, found, nodes = last
        by_kind = {k: sum(1 for d in found if d.kind == k) for k in slurm_topology.DRIFT_KINDS}
        return Outcome(evaluate(found, conf.path, nodes), (),
                       SchedulerDrift(slurm_topology.drifted_nodes(found), by_kind))


__all__ = ["CHECK", "NEEDS", "DriftState", "SchedulerTopology", "evaluate"]
