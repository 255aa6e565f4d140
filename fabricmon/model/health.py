"""The one health rule: what `fabricmon check` and `fabricmon fabric once` exit with, what the JSON
verdict's `status` says (report.verdict, /api/v1/findings), what `fabricmon_health_status` exports, what
the pages colour their header with and what /readyz answers, node daemon and fabric collector alike.

- the findings judged are the checks' findings plus one WARNING per failing enabled source
  (`verdict_findings`: silence must never read as healthy);
- CRITICAL outranks everything; otherwise a snapshot that could not judge (`unjudged`) is UNKNOWN (3,
  Nagios' "could not check"): it could judge nothing at all (`Snapshot.unknown`: a node without any port
  to check or before its port inventory was read, a fabric collector that has read no switch, a build
  that failed), or a device it knows was judged by no check (a port whose state and counters no fresh
  source read, a GPU whose path to the NICs could not be read, a switch no fresh sweep read);
  otherwise the worst finding;
- /readyz is not ready while the snapshot could judge nothing at all (`Snapshot.unknown`).

Written once, so that the metric, the exit codes, the verdict, the pages and readiness cannot disagree;
a new class of finding joins them all by joining `verdict_findings`."""

from __future__ import annotations

from collections.abc import Iterable

from fabricmon.model.finding import CRITICAL, OK, WARNING, Finding
from fabricmon.model.snapshot import Snapshot

UNKNOWN = 3         # nothing could be checked (Nagios: could not check); CRITICAL still outranks it
NAMED = 5           # devices named in the UNKNOWN line


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


def unjudged_devices(snap: Snapshot) -> list[str]:
    """The devices the snapshot knows that no check judged: the node's ports and GPUs without any finding
    (OK included), the fabric section's switches without any check status."""
    out: list[str] = []
    fab = snap.fabric
    if fab is not None:
        judged = {g for _, g in fab.check_status}
        out += [f"switch {sw.name or g} (0x{g})" for g, sw in fab.switches.items() if g not in judged]
        return out
    seen = {(f.device, f.port) for f in snap.findings}
    devices = {f.device for f in snap.findings}
    out += [f"{dev} port {port}" for dev, port in snap.ib.ports if (dev, port) not in seen]
    gpus = snap.gpu.gpus
    if gpus is not None:
        out += [f"GPU{g.index}" for g in gpus.gpus if f"GPU{g.index}" not in devices]
    return out


def unjudged(snap: Snapshot) -> str:
    """Why the snapshot's verdict is UNKNOWN ("" when it is not): why it could judge nothing, or the devices
    it knows that no check judged."""
    if snap.unknown:
        return snap.unknown
    missing = unjudged_devices(snap)
    if not missing:
        return ""
    more = f" (+{len(missing) - NAMED} more)" if len(missing) > NAMED else ""
    return (f"{len(missing)} device(s) not judged by any check (no fresh reading of them): "
            f"{', '.join(missing[:NAMED])}{more}")


def overall_status(statuses: Iterable[int], unknown: bool) -> int:
    """The rule itself, on finding statuses: CRITICAL, else UNKNOWN when not everything could be checked,
    else the worst status (OK when there is none)."""
    worst = min(CRITICAL, max(statuses, default=OK))
    return UNKNOWN if unknown and worst < CRITICAL else worst


def health_status(snap: Snapshot) -> int:
    """The snapshot's health: 0 OK, 1 WARNING, 2 CRITICAL, 3 UNKNOWN."""
    return overall_status((f.status for f in verdict_findings(snap)), bool(unjudged(snap)))


def not_ready(snap: Snapshot) -> str:
    """Why there is no view to serve ("" when there is): the snapshot could judge nothing at all (the
    collector: no switch could be read), node and fabric alike."""
    if not snap.inventory_known and not snap.unknown:
        return "the port inventory has not been read yet"
    if snap.unknown and snap.fabric is not None:
        return f"no switch could be read: {snap.unknown}"
    return snap.unknown


__all__ = ["UNKNOWN", "health_status", "not_ready", "overall_status", "source_findings", "unjudged",
           "unjudged_devices", "verdict_findings"]
