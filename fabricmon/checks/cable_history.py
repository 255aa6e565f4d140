"""cable_history: the module (or cable) in a port has had trouble in another port before: it was moved during
troubleshooting, and may be what fails here too (docs/cables.md). Per port whose module's serial is known, from
the cable ledger (model.cable_ledger, kept by stores.cable_ledger): a WARNING naming the serial, where and when
it had which trouble, and what the port counted (insertions, swaps); an OK when it had none elsewhere. A port
whose module is unknown (no serial read) is not judged."""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any, Protocol

from fabricmon.checks import OK, WARNING, Finding
from fabricmon.checks.shape import Outcome, Report, judged_in, report
from fabricmon.model.cable_ledger import CableLedger, CablePort, CablesSection
from fabricmon.model.finding import STATUS_NAMES

CHECK = "cable_history"


class LedgerKeeper(Protocol):
    @property
    def ledger(self) -> CableLedger: ...


@dataclass(frozen=True, slots=True)
class Held:
    """A port and the module it holds now (stores.cable_ledger.PortModule's fields the check reads)."""
    key: str
    label: str
    device: str
    port: int
    serial: str
    vendor: str = ""
    part_number: str = ""


def judge(h: Held, ledger: CableLedger) -> Finding | None:
    if not h.serial:
        return None
    entry = ledger.ports.get(h.key)
    counts = f"{entry.insertions} insertion(s), {entry.swaps} swap(s) here" if entry is not None else ""
    what = " ".join(x for x in (h.vendor, h.part_number) if x)
    module = f"the module (serial {h.serial}{', ' + what if what else ''})"
    past = ledger.elsewhere(h.serial, h.key)
    if not past:
        return Finding(CHECK, h.device, h.port, OK, f"{h.label}: {module} had no trouble elsewhere ({counts})")
    seen: dict[tuple[str, str], str] = {}
    for t in sorted(past, key=lambda t: -t.t):
        k = (t.port, t.check)
        if k not in seen:
            seen[k] = (f"{STATUS_NAMES.get(t.status, '?')} {t.check} on {t.port} on "
                       f"{time.strftime('%Y-%m-%d', time.gmtime(t.t))}")
    return Finding(CHECK, h.device, h.port, WARNING,
                   f"{h.label}: {module} had trouble in another port: " + "; ".join(list(seen.values())[:4])
                   + f" ({counts}): it carries its fault with it; replace it rather than moving it again")


class CableHistory:
    """The check (checks.shape): the ports' modules (`select`) against the ledger, its state (kept by the pipeline)."""

    def __init__(self, ledger: LedgerKeeper, select: Callable[[Any], Sequence[Held] | None], needs: Sequence[str]):
        self.settings = None
        self.state = ledger
        self.select = select
        self.reports: tuple[Report, ...] = (report(CHECK, any_of=needs),)

    def run(self, inputs: Any) -> Outcome:
        held = self.select(inputs)
        if not held:
            return Outcome((), ())
        led = self.state.ledger
        findings = [f for f in (judge(h, led) for h in held) if f is not None]
        rows = []
        for h in held:
            e = led.ports.get(h.key)
            s = led.serials.get(h.serial)
            if h.serial and e is not None:
                rows.append(CablePort(h.device, h.port, h.serial, h.vendor, h.part_number, e.insertions, e.swaps,
                                      len(s.troubles) if s is not None else 0))
        return Outcome(findings, judged_in(findings), CablesSection(tuple(rows)))


__all__ = ["CHECK", "CableHistory", "Held", "LedgerKeeper", "judge"]
