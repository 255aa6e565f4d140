"""The one health rule: what `fabricmon check` exits with, what the JSON verdict's `status` says
(report.verdict, /api/v1/findings), what `fabricmon_health_status` exports and what the pages colour
their header with, node daemon and fabric collector alike.

- the findings judged are the checks' findings plus one WARNING per failing enabled source
  (`verdict_findings`: silence must never read as healthy);
- CRITICAL outranks everything; otherwise a snapshot that could judge nothing (`Snapshot.unknown`: a
  node without any port to check, a fabric collector that has read no switch) is UNKNOWN (3, Nagios'
  "could not check"); otherwise the worst finding.

Written once, so that the metric, the exit code and the verdict cannot disagree; a new class of
finding joins them all by joining `verdict_findings`."""

from __future__ import annotations

from collections.abc import Iterable

from fabricmon.model.finding import CRITICAL, OK, WARNING, Finding
from fabricmon.model.snapshot import Snapshot

UNKNOWN = 3         # nothing could be checked (Nagios: could not check); CRITICAL still outranks it


def source_findings(snap: Snapshot) -> list[Finding]:
    """A failing enabled source is a WARNING: silence must never read as healthy. An `enabled: auto`
    tool that is not installed is off, not failing."""
    out: list[Finding] = []
    for name, s in sorted(snap.sources.items()):
        if s.enabled and s.ran and s.active_errors:
            first = sorted(s.active_errors)[0]
            more = f" (+{len(s.active_errors) - 1} more)" if len(s.active_errors) > 1 else ""
            out.append(Finding("source", name, None, WARNING,
                               f"source {name}: {first}{more}: fix it or disable sources.{name}"))
    return out


def verdict_findings(snap: Snapshot) -> list[Finding]:
    """Every finding the verdict judges: the checks' and the failing sources'."""
    return snap.findings + source_findings(snap)


def overall_status(statuses: Iterable[int], unknown: bool) -> int:
    """The rule itself, on finding statuses: CRITICAL, else UNKNOWN when nothing could be checked,
    else the worst status (OK when there is none)."""
    worst = min(CRITICAL, max(statuses, default=OK))
    return UNKNOWN if unknown and worst < CRITICAL else worst


def health_status(snap: Snapshot) -> int:
    """The snapshot's health: 0 OK, 1 WARNING, 2 CRITICAL, 3 UNKNOWN."""
    return overall_status((f.status for f in verdict_findings(snap)), bool(snap.unknown))


__all__ = ["UNKNOWN", "health_status", "overall_status", "source_findings", "verdict_findings"]
