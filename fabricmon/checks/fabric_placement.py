"""What placement costs each running job (model.placement): a job whose nodes span more leaves of
the rail than its node count needs, by more than `checks.placement.margin`, is one WARNING naming
the job, its user and its leaves ("job 4711 spans 6 leaves where 2 would do"). WARNING, never
CRITICAL: a scattered job runs, slower (its all-reduce crosses the spines); nothing is broken and
nothing is to be drained. The finding is about the job (device `job:<id>`), not a switch.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from fabricmon.checks import WARNING, Finding
from fabricmon.checks.shape import Outcome, report
from fabricmon.model import placement, slurm_topology
from fabricmon.model.fabric import Topology
from fabricmon.model.jobs import JobRef, Placements
from fabricmon.model.placement import Placement
from fabricmon.model.slurm_topology import Rail, SchedulerTopologyData
from fabricmon.model.snapshot import source_data
from fabricmon.schema import Schema, integer

if TYPE_CHECKING:
    from fabricmon.checks.fabric_inputs import FabricInputs

CHECK = "placement"
NEEDS = ("topology", "running_jobs")    # a discovery and the running jobs (fabric.sources.slurm_jobs)
SHOWN = 8                           # leaves named in a message


@dataclass(frozen=True, slots=True)
class PlacementCheckConfig:
    """checks.placement (docs/slurm-topology.md#placement)."""
    margin: int | None = 1          # leaves beyond the fewest needed a job may span; None: no finding


_D = PlacementCheckConfig()
SCHEMA: Schema[PlacementCheckConfig] = Schema(fields=(
    integer("margin", _D.margin, "leaves a running job may span beyond the fewest its node count needs before "
            "a `placement` WARNING (0: any excess; null: no finding, the metrics stay)", lo=0, null=True),
), build=lambda v, key, ctx: PlacementCheckConfig(**v))


def device(job_id: str) -> str:
    """The finding's device: the job (one finding per job)."""
    return f"job:{job_id}"


def evaluate(placements: Iterable[Placement], refs: Mapping[str, JobRef], cfg: PlacementCheckConfig) -> list[Finding]:
    """One WARNING per job spanning more than `margin` leaves beyond the fewest needed."""
    if cfg.margin is None:
        return []
    out = []
    for p in sorted(placements, key=lambda p: (len(p.job_id), p.job_id)):
        if p.excess <= cfg.margin:
            continue
        ref = refs.get(p.job_id, JobRef(p.job_id))
        shown = ", ".join(p.leaves[:SHOWN]) + (f" +{len(p.leaves) - SHOWN} more" if len(p.leaves) > SHOWN else "")
        spines = (f"; {p.spines} spine{'s' if p.spines != 1 else ''} where {p.spines_needed} would do"
                  if p.spines > p.spines_needed else "")
        out.append(Finding(CHECK, device(p.job_id), None, WARNING,
                           f"job {ref.text()} spans {len(p.leaves)} leaves where {p.leaves_needed} would do "
                           f"({p.nodes} nodes on {shown}{spines}): its collectives cross the spines. A placement "
                           "cost, not a fault: check the scheduler's topology (TopologyPlugin=topology/tree with a "
                           "current topology.conf: fabricmon topology slurm --check), or ask for compact placement "
                           f"(sbatch --switches={len(p.would_do)}@<max wait>)", jobs=(ref,)))
    return out


@dataclass(slots=True)
class PlacementState:
    # the rail's index (topology, rail, index) and the last placements (hosts, placements)
    rail_index: tuple[Topology, Rail, placement.RailIndex] | None = None
    placed: tuple[dict[str, tuple[str, ...]], dict[str, Placement]] = field(default_factory=lambda: ({}, {}))


class PlacementCheck:
    """placement (checks.shape): every running job's span on the rail (model.placement; the rail of
    fabric.sources.slurm_topology, else every host CA); a job is placed again only when the topology or
    the rail changed, or its hosts did. Run once the jobs are known; the placements go into the jobs
    section. Fabric-wide (one finding per job)."""
    reports = (report(CHECK, *NEEDS),)

    def __init__(self, settings: PlacementCheckConfig):
        self.settings = settings
        self.state = PlacementState()

    def run(self, inputs: FabricInputs) -> Outcome:
        jobs = inputs.jobs
        if jobs is None:
            return Outcome((), ())
        topo, s = inputs.topo, self.state
        conf = source_data(inputs.states, SchedulerTopologyData)
        rail = conf.rail if isinstance(conf, SchedulerTopologyData) else Rail()
        ix = s.rail_index
        if ix is None or ix[0] is not topo or ix[1] != rail:
            tree = slurm_topology.build_tree(topo, rail)
            ix = s.rail_index = (topo, rail, placement.RailIndex.build(tree.nodes, tree.switches, tree.hcas))
            s.placed = ({}, {})
        hosts, placed = s.placed
        if hosts != jobs.hosts:         # only the jobs that are new or changed hosts are placed again
            s.placed = (dict(jobs.hosts), {j: placed[j] if hosts.get(j) == h and j in placed
                                           else placement.place(ix[2], j, h) for j, h in jobs.hosts.items()})
        placements = s.placed[1]
        return Outcome(evaluate(placements.values(), jobs.jobs, self.settings), (), Placements(placements))


__all__ = ["CHECK", "NEEDS", "SCHEMA", "PlacementCheck", "PlacementCheckConfig", "PlacementState", "device",
           "evaluate"]
