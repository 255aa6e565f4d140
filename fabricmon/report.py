"""The verdict of a snapshot as `fabricmon check` prints it and the daemon serves it
(`/api/v1/findings`): the findings (source failures included), the status of the one health rule
(model.health: CRITICAL, else UNKNOWN, 3, when nothing could be checked, else the worst finding), the
port count and every source's state. One builder, so that `check` reads the same whether it polled by
itself or asked the running daemon."""

from __future__ import annotations

from typing import Any

from fabricmon import __version__
from fabricmon.checks import OK, STATUS_NAMES, Finding
from fabricmon.model.finding import FATAL, class_of
from fabricmon.model.health import UNKNOWN, health_status, overall_status, source_findings, unjudged, verdict_findings
from fabricmon.model.jobs import JobRef
from fabricmon.model.remediation import OFF, RemediationSection, modes_line
from fabricmon.model.snapshot import Snapshot

API_VERSION = 1
FINDINGS_PATH = "/api/v1/findings"


def verdict(snap: Snapshot) -> dict[str, Any]:
    """The snapshot's verdict as a JSON-able document (API_VERSION); its status is the one health rule's
    (model.health), as `fabricmon_health_status` exports it."""
    findings = verdict_findings(snap)
    return {
        "api_version": API_VERSION,
        "fabricmon_version": __version__,
        "snapshot_time": snap.time,
        "status": health_status(snap),
        "unknown": unjudged(snap),
        "drain_reason": drain_reason(findings),
        "ports": len(snap.ib.ports),
        "inventory_known": snap.inventory_known,
        "findings": [{"check": f.check, "device": f.device, "port": f.port, "status": f.status,
                      "severity": STATUS_NAMES[f.status], "class": class_of(f), "message": f.message,
                      "jobs": [j.as_dict() for j in f.jobs]} for f in findings],
        "sources": {n: {"enabled": s.enabled, "active": s.enabled and s.active, "up": s.up, "runs": s.runs,
                        "errors": sorted(s.active_errors)} for n, s in sorted(snap.sources.items())},
        **({"remediation": remediation_doc(snap.remediation)} if snap.remediation is not None else {}),
    }


def remediation_doc(rem: RemediationSection) -> dict[str, Any]:
    """Remediation in the verdict: its modes (which `check` says), whether this daemon acts (the lease), the open
    actions and the breakers."""
    return {"modes": dict(rem.modes), "held": rem.held, "lease": rem.lease,
            "open": [{"id": a.id, "kind": a.kind, "mode": a.mode, "state": a.state, "target": a.label,
                      "reason": a.reason, "returns_at": a.returns_at(), "waits": a.waits, "error": a.error}
                     for a in rem.actions if a.open],
            "refused": len(rem.refused),
            "breakers": {k: {"cap": b.cap, "used": b.used, "tripped": b.tripped} for k, b in rem.breakers.items()}}


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
    status = status_of(doc)
    bad = [f for f in findings if f.status != OK]
    crit = sum(1 for f in bad if f.status == 2)
    warn = sum(1 for f in bad if f.status == 1)
    nports = int(doc["ports"])
    if status == UNKNOWN:
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
    rem = doc.get("remediation")
    if isinstance(rem, dict) and isinstance(rem.get("modes"), dict) and any(m != OFF for m in rem["modes"].values()):
        open_ = rem.get("open") or []
        lines.append(f"remediation: {modes_line(rem['modes'])}" + (f"; {len(open_)} open action(s)" if open_ else "")
                     + ("" if rem.get("held", True) else f"; not acting here ({rem.get('lease', '')})")
                     + " (fabricmon actions)")
    return lines


def status_of(doc: dict[str, Any]) -> int:
    """The exit status of a verdict document (the daemon's, or a local poll's): the one health rule
    (model.health) on its findings, so a document from an older daemon reads the same."""
    return overall_status((f.status for f in findings_of(doc)), bool(doc.get("unknown")))


__all__ = ["API_VERSION", "FINDINGS_PATH", "drain_reason", "UNKNOWN", "check_lines", "findings_of", "source_findings", "status_of",
           "verdict"]
