"""Which end of a link to blame, where the fabric collector reads both ends (an inter-switch link): errors a
port receives are made by what feeds it, so errors received at one end only point at the far end's
transmitter or module, and errors received at both ends at the cable (docs/ber.md#which-end). A host link's
two ends are read by two daemons (the node daemon and the collector): Prometheus joins them (the recording
rules `node_guid_port:fabricmon_link_*`, prometheus/build_rules.py). Pure: the section, the counter history."""

from __future__ import annotations

from collections.abc import Sequence

from fabricmon.model.fabric import FabricSection
from fabricmon.model.history import CounterHistory

# the counters a port's received errors are counted with
RECEIVED = ("receive_errors", "symbol_errors")


def far_end(sec: FabricSection, key: tuple[str, int], counters: Sequence[str], window: float, limit: float,
            history: CounterHistory, now: float) -> str:
    """The verdict of both ends of the switch-to-switch link on `key` (whose own received errors broke `limit` in
    `window`) as a clause for its finding, or "" where the far end is no switch the collector reads, or its
    counters have no history in the window (its ports' error counters stay 0 and keep no history: clean)."""
    p = sec.ports.get(key)
    lk = p.link if p is not None else None
    if lk is None or lk.remote_guid not in sec.switches or not lk.remote_port:
        return ""
    fk = (lk.remote_guid, lk.remote_port)
    far = sec.ports.get(fk)
    if far is None or not far.counters:
        return ""
    total = 0
    for c in counters:
        if c in far.counters:
            inc, _ = history.increase((fk[0], fk[1], c), window, now)
            total += inc
    name = sec.switches[lk.remote_guid].name or lk.remote_guid
    where = f"{name} port {far.label if far.label else fk[1]}"
    if total >= limit:
        return (f"; the far end ({where}) receives errors too ({total} in the same window): both ends err, "
                f"so replace the cable")
    return (f"; the far end ({where}) receives clean ({total}): this end's errors come from the far end's "
            f"transmitter, so replace the module at {where}")



__all__ = ["RECEIVED", "far_end"]
