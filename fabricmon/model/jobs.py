"""Jobs a finding can hurt: the record every job source hands on (a Slurm job today; a
Kubernetes pod could follow behind the same registry) and how a finding's line names them."""

from __future__ import annotations

from dataclasses import dataclass

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



__all__ = ["JOBS_IN_LINE", "JobRef", "jobs_text"]
