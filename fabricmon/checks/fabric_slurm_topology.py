"""The scheduler's topology against the fabric: Slurm's configured topology.conf
(sources.slurm_topology) compared with the rail's tree of the live topology
(model.slurm_topology.drift: a node listed under a switch it is not cabled to, a rail node under no
switch, a listed node on no leaf of the rail, a switch the fabric lacks). One fabric-wide WARNING
naming the first drifts, with the command that lists every one with the line to change; the
drifted nodes are a metric (fabricmon_fabric_slurm_topology_drifted_nodes)."""

from __future__ import annotations

from collections.abc import Sequence

from fabricmon.checks import WARNING, Finding
from fabricmon.model.slurm_topology import Drift, drifted_nodes

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


__all__ = ["CHECK", "NEEDS", "evaluate"]
