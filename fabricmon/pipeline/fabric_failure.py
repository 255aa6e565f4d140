"""Why the fabric collector read no switch, in one line an operator can act on: what `fabricmon fabric
once` prints, and the `unknown` reason of the collector's snapshots (its verdict UNKNOWN, its map and log).

It reads only the fabric sources' states in the snapshot (their records, by type, and their
current errors). What a kind's own tools and devices mean (InfiniBand's umad device, its tools'
error text) is its source package's failure hint (registry.failure_hints): asked first, in order."""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence

from fabricmon.model.fabric import DiscoveryData, SmData, SweepData
from fabricmon.model.snapshot import BuildStats, Snapshot, SourceState, source_state

# (snapshot, [(source name, error)]) -> one line, or None when the hint does not apply
Hint = Callable[[Snapshot, list[tuple[str, str]]], "str | None"]


def why_nothing_read(snap: Snapshot | Mapping[str, SourceState], hints: Sequence[Hint] = ()) -> str | None:
    """None when the last sweep read at least one switch; otherwise the reason, one line. Given the
    sources' states (the fabric model, before its snapshot exists), it asks the hints with a snapshot of
    them alone."""
    if not isinstance(snap, Snapshot):
        snap = Snapshot(time=0.0, findings=[], sources=dict(snap), builds=BuildStats())
    sweep, disc, sm = (source_state(snap.sources, t) for t in (SweepData, DiscoveryData, SmData))
    if sweep is not None and isinstance(sweep.data, SweepData) and (sweep.data.switches or not sweep.data.missing):
        return None         # switches read, or a shard without switches: nothing it should have read
    errors = [(st.name, e) for st in (disc, sweep, sm) if st is not None for e in sorted(st.active_errors)]
    for hint in hints:
        why = hint(snap, errors)
        if why:
            return why
    for name, e in errors:
        if "timed out after" in e:
            return f"the {name} source timed out: {e}"
    if disc is not None and isinstance(disc.data, DiscoveryData) and not disc.data.switches:
        return "discovery found no switch"
    if errors:
        name, e = errors[0]
        return f"{name}: {e}"
    if sweep is None:
        return "the sweep source is disabled (sources.sweep.enabled)"
    return "the sweep has not run"


__all__ = ["Hint", "why_nothing_read"]
