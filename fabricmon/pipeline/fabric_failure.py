"""Why `fabricmon fabric once` read no switch, in one line an operator can act on.

It reads only the fabric sources' states in the snapshot (their records, by type, and their
current errors) and, for the umad case, whether `/dev/infiniband/umad*` exist and can be opened:
the tools say only "can't open UMAD port" whether the device is missing or not permitted.
"""

from __future__ import annotations

import glob
import os

from fabricmon.model.fabric import DiscoveryData, SmData, SweepData
from fabricmon.model.snapshot import Snapshot, source_state

UMAD_GLOB = "/dev/infiniband/umad*"


def _umad_reason(umad_glob: str) -> str:
    devices = sorted(glob.glob(umad_glob))
    if not devices:
        return (f"no umad device ({umad_glob} does not exist): no InfiniBand HCA on this host, or the ib_umad "
                "module is not loaded (modprobe ib_umad)")
    usable = [d for d in devices if os.access(d, os.R_OK | os.W_OK)]
    if not usable:
        return (f"permission denied on {devices[0]}: run as root or as a member of the group that owns it "
                "(the README's udev rule gives it to group rdma)")
    return f"cannot open the local umad port ({', '.join(usable[:4])} exist): is the local HCA port up? (ibstat)"


def why_nothing_read(snap: Snapshot, umad_glob: str = UMAD_GLOB) -> str | None:
    """None when the last sweep read at least one switch; otherwise the reason, one line."""
    sweep, disc, sm = (source_state(snap.sources, t) for t in (SweepData, DiscoveryData, SmData))
    if sweep is not None and isinstance(sweep.data, SweepData) and (sweep.data.switches or not sweep.data.missing):
        return None         # switches read, or a shard without switches: nothing it should have read
    errors = [(st.name, e) for st in (disc, sweep, sm) if st is not None for e in sorted(st.active_errors)]
    for name, e in errors:
        if e.endswith(": command not found"):
            return f"{e.split(':')[0].split()[0]} is not installed (apt-get install infiniband-diags)"
    if any("UMAD port" in e or "MAD port" in e for _, e in errors):
        return _umad_reason(umad_glob)
    for name, e in errors:
        if "timed out after" in e:
            return f"the {name} source timed out: {e}"
    if disc is not None and isinstance(disc.data, DiscoveryData) and not disc.data.switches:
        return "discovery found no switch (is the local port cabled to a switch? ibstat, iblinkinfo)"
    no_lid = any("has no LID" in e for _, e in errors)
    no_sm = sm is not None and isinstance(sm.data, SmData) and not sm.data.answered
    if no_lid or no_sm:
        return ("no subnet manager answers, so the switches have no LIDs to query: start opensm "
                "(or check the fabric's SM), then sminfo")
    if errors:
        name, e = errors[0]
        return f"{name}: {e}"
    if sweep is None:
        return "the sweep source is disabled (sources.sweep.enabled)"
    return "the sweep has not run"


__all__ = ["UMAD_GLOB", "why_nothing_read"]
