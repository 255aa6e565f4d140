"""The counter checks on the fabric's switch ports (symbol_errors, link_flap, ... and counter_saturation:
checks.link_errors' logic and thresholds, the node daemon's), a switch-to-switch link's received errors
with the verdict of its far end (checks.blame).

Records in (the sweep's ports and their counter history), findings out (per port: what is not OK, and
what was not OK before)."""

from __future__ import annotations

import dataclasses
from typing import TYPE_CHECKING

from fabricmon.checks import OK, Finding, blame
from fabricmon.checks.link_errors import CHECKED_COUNTERS, CHECKS, ber_limits, calm_mark, counter_reports, evaluate_port
from fabricmon.checks.settings import COUNTER_CHECKS, ChecksConfig
from fabricmon.checks.shape import Outcome
from fabricmon.model.history import CounterHistory, saturation
from fabricmon.model.ports import PortView

if TYPE_CHECKING:
    from fabricmon.checks.fabric_inputs import FabricInputs
    from fabricmon.model.fabric import FabricSection

NEEDS = ("SweepData",)          # the sweep being judged, fresh (checks.fabric_inputs.FRESH_RECORDS)

@dataclasses.dataclass
class CountersState:
    """The ports judged with nothing to say (every check OK, none flagged, none waiting), each with what it
    was judged on: its counters, its rate and its history marks (CounterHistory.marks). While those stay the
    same nothing can have risen (a window's sum only falls as time passes), so the port is not judged again:
    after a leaf's 40 ports went down, their LinkDowned steps keep them in the history for hours, and judging
    them at every sweep cost more than the rest of the build (bench/link_storm.py)."""
    calm: dict[tuple[str, int], tuple[object, ...]] = dataclasses.field(default_factory=dict)


class FabricCounters:
    """The counter checks on the switch ports (checks.shape), the node daemon's logic and thresholds: per
    port, what is not OK, and the status of what was not OK at an earlier build (inputs.flagged); a port
    is judged while its history holds a checked counter or it was flagged (a quiet fabric keeps none: its
    counters read 0 or did not move). The switches judged are those whose counters this sweep read, but one
    with a port whose count could not be judged yet (counted before its first sample: the next sweep says)."""
    reports = counter_reports(*NEEDS)

    def __init__(self, settings: ChecksConfig):
        self.settings = settings
        self.state = CountersState()

    def _far_end(self, f: Finding, sec: FabricSection, key: tuple[str, int], pv: PortView, history: CounterHistory,
                 now: float) -> Finding:
        """A received-errors finding on a switch-to-switch link, with the verdict of both ends (checks.blame)."""
        if f.status == OK or f.check not in ("receive_errors", "symbol_errors"):
            return f
        cc = self.settings.counters[f.check]
        limit = cc.warning if cc.warning is not None else 1.0
        if f.check == "symbol_errors":
            ber = ber_limits(cc, pv.rate_gbps)
            if ber is not None and ber[0] is not None:
                limit = ber[0]
        clause = blame.far_end(sec, key, COUNTER_CHECKS[f.check][0], cc.window, limit, history, now)
        return dataclasses.replace(f, message=f.message + clause) if clause else f

    def run(self, inputs: FabricInputs) -> Outcome:
        sec, sweep, flagged, history, now = inputs.sec, inputs.sweep, inputs.flagged, inputs.history, inputs.now
        if sweep is None:
            return Outcome((), ())
        findings: list[Finding] = []
        waiting: set[str] = set()           # switches with a port not judged yet
        judged = {k[1:] for k in flagged} | history.ports(CHECKED_COUNTERS)
        flagged_ports = {k[1:] for k in flagged if k[0] in CHECKS}      # flagged by these checks
        calm: dict[tuple[str, int], tuple[object, ...]] = {}
        was_calm = self.state.calm
        widths = (tuple(sorted(sweep.bits.items())), frozenset(sweep.wrapping))
        for key, p in sec.ports.items():
            if p.counters and key in judged:
                mark: tuple[object, ...] | None = None
                if key not in flagged_ports:
                    mark = calm_mark(key[0], key[1], p.counters, history, p.rate_bps, widths)
                    if was_calm.get(key) == mark:
                        calm[key] = mark
                        continue
                bits = dict(sweep.bits) if sweep else {}
                wrapping = sweep.wrapping if sweep else set()
                pv = PortView(device=key[0], port=key[1], counters=dict(p.counters), counter_bits=bits,
                              rate_gbps=p.rate_bps * 8 / 1e9 if p.rate_bps else None)   # the BER budget's rate
                label = f"{sec.switches[key[0]].name} (0x{key[0]}) port {p.label}"
                sat = saturation(p.counters, bits, wrapping)
                # per port: what is not OK, and the status of what was (flagged) not OK before
                skipped: set[str] = set()
                said = [self._far_end(f, sec, key, pv, history, now)
                        for f in evaluate_port(pv, history, self.settings, now, sat, label, skipped)
                        if f.status != OK or (f.check, f.device, f.port) in flagged]
                findings += said
                if skipped:
                    waiting.add(key[0])
                elif not said and mark is not None:
                    calm[key] = mark
        self.state.calm = calm
        read = {g for g, _ in sweep.ports}
        return Outcome(findings, tuple(g for g in sec.switches if g in read and g not in waiting))


__all__ = ["CHECKS", "NEEDS", "CountersState", "FabricCounters"]
