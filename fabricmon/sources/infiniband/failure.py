"""Why the InfiniBand collector read no switch, from what only its own tools and devices say: a
missing infiniband-diags, the umad device (missing, or not permitted: the tools print only
"can't open UMAD port" either way), a fabric without a subnet manager (no LIDs to query).

Registered as the infiniband collector's failure hint; pipeline.fabric_failure asks it first."""

from __future__ import annotations

import glob
import os

from fabricmon.model.fabric import DiscoveryData, SmData
from fabricmon.model.snapshot import Snapshot, source_data
from fabricmon.registry import failure_hint

UMAD_GLOB = "/dev/infiniband/umad*"


def umad_reason(umad_glob: str = UMAD_GLOB) -> str:
    devices = sorted(glob.glob(umad_glob))
    if not devices:
        return (f"no umad device ({umad_glob} does not exist): no InfiniBand HCA on this host, or the ib_umad "
                "module is not loaded (modprobe ib_umad)")
    usable = [d for d in devices if os.access(d, os.R_OK | os.W_OK)]
    if not usable:
        return (f"permission denied on {devices[0]}: run as root or as a member of the group that owns it "
                "(the README's udev rule gives it to group rdma)")
    return f"cannot open the local umad port ({', '.join(usable[:4])} exist): is the local HCA port up? (ibstat)"


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
