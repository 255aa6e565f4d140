"""Checks turn merged records and their deltas into findings. Every check yields one Finding
per port it evaluates, OK included, so `fabricmon_check_status` is always present."""

from __future__ import annotations

from dataclasses import dataclass

OK, WARNING, CRITICAL = 0, 1, 2
STATUS_NAMES = {OK: "OK", WARNING: "WARNING", CRITICAL: "CRITICAL"}


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


@dataclass(frozen=True, slots=True)
class Finding:
    check: str
    device: str
    port: int | None
    status: int
    message: str
    # the jobs it can hurt (WARNING/CRITICAL findings, when a job source runs): the node's jobs,
    # or on the fabric the jobs whose traffic crosses the port or switch
    jobs: tuple[JobRef, ...] = ()

    def line(self) -> str:
        line = f"{STATUS_NAMES[self.status]} {self.check}: {self.message}"
        return line + f" [jobs: {jobs_text(self.jobs)}]" if self.jobs else line


def worst(findings: list[Finding]) -> int:
    return max((f.status for f in findings), default=OK)
