"""The verdict of a snapshot as `fabricmon check` prints it and the daemon serves it
(`/api/v1/findings`): the findings (source failures included), the worst status (UNKNOWN, 3, when
the node has nothing to check and nothing is CRITICAL), the port count and every source's state. One builder, so that `check` reads the same whether it polled by itself
or asked the running daemon."""

from __future__ import annotations

from typing import Any

from fabricmon import __version__
from fabricmon.checks import CRITICAL, OK, STATUS_NAMES, WARNING, Finding
from fabricmon.model.finding import FATAL, class_of
from fabricmon.model.jobs import JobRef
from fabricmon.model.snapshot import Snapshot

API_VERSION = 1
FINDINGS_PATH = "/api/v1/findings"
UNKNOWN = 3         # nothing to check (Nagios: could not check); CRITICAL still outranks it


def source_findings(snap: Snapshot) -> list[Finding]:
    """A failing enabled source is a WARNING in `check`: silence must never read as healthy. An
    `enabled: auto` tool that is not installed is off, not failing."""
    out = []
    for name, s in sorted(snap.sources.items()):
        if s.enabled and s.ran and s.active_errors:
            first = sorted(s.active_errors)[0]
            more = f" (+{len(s.active_errors) - 1} more)" if len(s.active_errors) > 1 else ""
            out.append(Finding("source", name, None, WARNING,
                               f"source {name}: {first}{more}: fix it or disable sources.{name}"))
    return out


def verdict(snap: Snapshot) -> dict[str, Any]:
    """The snapshot's verdict as a JSON-able document (API_VERSION)."""
    findings = snap.findings + source_findings(snap)
    status = max((f.status for f in findings), default=OK)
    return {
        "drain_reason": drain_reason(findings),
        "api_version": API_VERSION,
        "fabricmon_version": __version__,
        "snapshot_time": snap.time,
        "status": UNKNOWN if snap.unknown and status < CRITICAL else status,
        "unknown": snap.unknown,
        "ports": len(snap.ib.ports),
        "inventory_known": snap.inventory_known,
        "findings": [{"check": f.check, "device": f.device, "port": f.port, "status": f.status,
                      "severity": STATUS_NAMES[f.status], "class": class_of(f), "message": f.message,
                      "jobs": [j.as_dict() for j in f.jobs]} for f in findings],
        "sources": {n: {"enabled": s.enabled, "active": s.enabled and s.active, "up": s.up, "runs": s.runs,
                        "errors": sorted(s.active_errors)} for n, s in sorted(snap.sources.items())},
    }


def findings_of(doc: dict[str, Any]) -> list[Finding]:
    return [Finding(f["check"], f["device"], f["port"], int(f["status"]), f["message"],
                    tuple(JobRef(str(j.get("id", "")), str(j.get("user", "")), str(j.get("name", "")))
                          for j in f.get("jobs") or () if isinstance(j, dict)), klass=str(f.get("class", "")))
            for f in doc["findings"]]


def drain_reason(findings: list[Finding]) -> str:
    """The one line a scheduler drains the node with: the first fatal finding's device, port and cause
    ("" when nothing is fatal), as /api/v1/findings serves it (`drain_reason`). It is the first
    CRITICAL line of `check`'s output, which the Slurm and NHC wrappers drain with, less the evidence."""
    fatal = sorted((f for f in findings if class_of(f) == FATAL), key=lambda f: (f.device, f.port or 0, f.check))
    if not fatal:
        return ""
    f = fatal[0]
    where = f.device + (f" port {f.port}" if f.port is not None else "")
    head = f.message.split(" [", 1)[0]          # the kernel log's message: what happened, before the evidence
    if f.device not in head:
        head = f"{where}: {head}"
    more = f" (+{len(fatal) - 1} more)" if len(fatal) > 1 else ""
    return f"fabricmon: {STATUS_NAMES[f.status]} {f.check}: {head}{more}"


def check_lines(doc: dict[str, Any], verbose: bool = False, note: str = "") -> list[str]:
    """`fabricmon check` output: a summary line (Nagios: the first line is the status), then one
    line per WARNING/CRITICAL finding, worst first; with `verbose` the OK results too."""
    findings = findings_of(doc)
    status = max((f.status for f in findings), default=OK)
    bad = [f for f in findings if f.status != OK]
    crit = sum(1 for f in bad if f.status == 2)
    warn = sum(1 for f in bad if f.status == 1)
    nports = int(doc["ports"])
    if status < CRITICAL and doc.get("unknown"):
        summary = f"FABRICMON UNKNOWN - {doc['unknown']}" + (f"; {warn} warning" if warn else "")
    else:
        summary = f"FABRICMON {STATUS_NAMES[status]} - {crit} critical, {warn} warning on {nports} port(s)"
        if nports == 0:
            summary += "; no InfiniBand or RoCE port found"
    if note:
        summary += f" ({note})"
    lines = [summary]
    lines += [f.line() for f in sorted(bad, key=lambda f: (-f.status, f.device, f.port or 0, f.check))]
    if verbose:
        lines += [f.line() for f in findings if f.status == OK]
    return lines


def status_of(doc: dict[str, Any]) -> int:
    """The exit status of a verdict: CRITICAL, else UNKNOWN when there is nothing to check, else
    the worst finding."""
    worst = min(CRITICAL, max((f.status for f in findings_of(doc)), default=OK))
    return UNKNOWN if worst < CRITICAL and doc.get("unknown") else worst


__all__ = ["API_VERSION", "FINDINGS_PATH", "drain_reason", "UNKNOWN", "check_lines", "findings_of", "source_findings", "status_of",
           "verdict"]
