"""The Finding every check returns and the statuses it carries. A type of the model layer, so
that the snapshot and everything below the checks can hold findings without importing a check."""

from __future__ import annotations

from dataclasses import dataclass

from fabricmon.model.jobs import JobRef, jobs_text

OK, WARNING, CRITICAL = 0, 1, 2
STATUS_NAMES = {OK: "OK", WARNING: "WARNING", CRITICAL: "CRITICAL"}


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


__all__ = ["CRITICAL", "OK", "STATUS_NAMES", "WARNING", "Finding", "worst"]
