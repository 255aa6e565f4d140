"""Jobs a finding can hurt: the record every job source hands on (a Slurm job today; a
Kubernetes pod could follow behind the same registry) and how a finding's line names them."""

from __future__ import annotations

from dataclasses import dataclass, field

from fabricmon.model.placement import Placement

JOBS_IN_LINE = 5         # jobs named in a finding's line before "+N more"


@dataclass(frozen=True, slots=True)
class JobRef:
    """A scheduler job a finding can hurt: its id, user and name (empty while unknown)."""
    job_id: str
    user: str = ""
    name: str = ""

    def text(self) -> str:
        who = "/".join(x for x in (self.user, self.name) if x)
        return f"{self.job_id} ({who})" if who else self.job_id

    def as_dict(self) -> dict[str, str]:
        return {"id": self.job_id, "user": self.user, "name": self.name}


def jobs_text(jobs: tuple[JobRef, ...]) -> str:
    """`1234 (alice/train), 1240 (bob/eval) +3 more`: the jobs as one line names them."""
    text = ", ".join(j.text() for j in jobs[:JOBS_IN_LINE])
    return text + (f" +{len(jobs) - JOBS_IN_LINE} more" if len(jobs) > JOBS_IN_LINE else "")





@dataclass(slots=True)
class JobsSection:
    """The jobs a snapshot knows. On a node: the jobs running on it (`node`). On the fabric
    collector: every running job, its hosts, and the switches its traffic can cross."""
    scope: str = "node"              # "node" (the node daemon) or "fabric" (the fabric collector)
    jobs: dict[str, JobRef] = field(default_factory=dict)      # job id -> job, running now
    lookup_failures: int = 0         # job lookups that failed (slurmctld down or slow), since start
    ended: int = 0                   # jobs found ended (or not this node's) when looked up
    node: str = ""                   # the node's Slurm name (node daemon)
    present: bool = True             # a scheduler runs here (node: a slurmd spool directory exists)
    hosts: dict[str, tuple[str, ...]] = field(default_factory=dict)      # job id -> its hosts (fabric)
    switches: dict[str, tuple[str, ...]] = field(default_factory=dict)   # job id -> switch GUIDs it can cross
    # (switch guid, port or None) of each WARNING/CRITICAL fabric finding -> the job ids it names
    finding_jobs: dict[tuple[str, int | None], tuple[str, ...]] = field(default_factory=dict)
    dropped_series: int = 0          # jobs not exported in job-switch pairs (over slurm.max_job_switch_series)
    unmapped_hosts: int = 0          # job hosts with no CA in the topology (not on this fabric)
    placement: dict[str, Placement] = field(default_factory=dict)   # job id -> its span on the rail (fabric)


@dataclass(frozen=True, slots=True)
class Placements:
    """checks.fabric_placement: each running job's span on the rail (composed into JobsSection.placement)."""
    placement: dict[str, Placement]


__all__ = ["JOBS_IN_LINE", "JobRef", "JobsSection", "Placements", "jobs_text"]
