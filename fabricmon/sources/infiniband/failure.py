"""Why the InfiniBand collector read no switch, from what only its own tools and devices say: a
missing infiniband-diags, the umad device (missing, or not permitted: the tools print only
"can't open UMAD port" either way), a fabric without a subnet manager (no LIDs to query).

Registered as the infiniband collector's failure hint; pipeline.fabric_failure asks it first."""

from __future__ import annotations

from fabricmon.model.fabric import DiscoveryData, SmData
from fabricmon.model.snapshot import Snapshot, source_data
from fabricmon.registry import failure_hint
from fabricmon.sources.privilege import UMAD_GLOB, umad_reason


def explain(snap: Snapshot, errors: list[tuple[str, str]], umad_glob: str = UMAD_GLOB) -> str | None:
    """One line for an operator, or None when none of these applies."""
    for _, e in errors:
        if e.endswith(": command not found"):
            return f"{e.split(':')[0].split()[0]} is not installed (apt-get install infiniband-diags)"
    if any("UMAD port" in e or "MAD port" in e for _, e in errors):
        return umad_reason(umad_glob)
    disc = source_data(snap.sources, DiscoveryData)
    if isinstance(disc, DiscoveryData) and not disc.switches:
        return "discovery found no switch (is the local port cabled to a switch? ibstat, iblinkinfo)"
    sm = source_data(snap.sources, SmData)
    if any("has no LID" in e for _, e in errors) or (isinstance(sm, SmData) and not sm.answered):
        return ("no subnet manager answers, so the switches have no LIDs to query: start opensm "
                "(or check the fabric's SM), then sminfo")
    return None


failure_hint("infiniband")(explain)

__all__ = ["UMAD_GLOB", "explain", "umad_reason"]
