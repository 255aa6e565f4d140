"""The Finding every check returns and the statuses it carries. A type of the model layer, so
that the snapshot and everything below the checks can hold findings without importing a check."""

from __future__ import annotations

from dataclasses import dataclass

from fabricmon.model.jobs import JobRef, jobs_text

OK, WARNING, CRITICAL = 0, 1, 2
STATUS_NAMES = {OK: "OK", WARNING: "WARNING", CRITICAL: "CRITICAL"}
# What an automation does with a finding (docs/kernel-log.md, "Classes"): drain the node, schedule a
# repair, or only watch. A finding that names none takes its status's (checks.taxonomy).
FATAL, DEGRADED, WATCH = "fatal", "degraded", "watch"
CLASSES = (FATAL, DEGRADED, WATCH)


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
    klass: str = ""         # FATAL, DEGRADED or WATCH where the check decides; "" takes the status's

    def line(self) -> str:
        line = f"{STATUS_NAMES[self.status]} {self.check}: {self.message}"
        return line + f" [jobs: {jobs_text(self.jobs)}]" if self.jobs else line


def class_of(f: Finding) -> str:
    """The finding's class: its check's where the check decides (the kernel log's events), else its
    status's: CRITICAL drains the node (as the Slurm and NHC wrappers always did), WARNING asks for a
    repair, OK is watched."""
    return f.klass or CLASS_OF_STATUS[f.status]


CLASS_OF_STATUS = {CRITICAL: FATAL, WARNING: DEGRADED, OK: WATCH}


def worst(findings: list[Finding]) -> int:
    return max((f.status for f in findings), default=OK)


__all__ = ["CLASSES", "CLASS_OF_STATUS", "class_of", "CRITICAL", "DEGRADED", "FATAL", "OK", "WATCH", "STATUS_NAMES", "WARNING", "Finding", "worst"]
