"""A switch that does not answer, on either fabric kind: OpenSM's rule for an unresponsive port
(no answer in 5 of the last 7 sweeps; both numbers are config: fabric.unresponsive_sweeps and
fabric.unresponsive_window). A sweep counts against a switch when some of its queries (MADs, or
SNMP walks) went unanswered after retries.

Unreached is not down: the finding names the switch, what went unanswered and the age of its last
complete read, and its ports keep their last known state.

Records in (each switch's recent reads), findings out; nothing here parses or fetches."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from fabricmon.checks import WARNING, Finding
from fabricmon.checks.fabric_inputs import FabricInputs, SweepRead
from fabricmon.checks.shape import Outcome, report
from fabricmon.model.fabric import Responsiveness, SwitchNode

CHECK = "unresponsive"
NEEDS = ("SweepData",)            # a fresh sweep: what each switch it asked answered


def unresponsive(reads: Sequence[SweepRead], need: int) -> bool:
    """No answer in `need` of these (the last window's) sweeps."""
    return sum(1 for r in reads if r.unanswered) >= need


def evaluate(reads: Mapping[str, Sequence[SweepRead]], last_read: Mapping[str, float | None],
             switches: Mapping[str, SwitchNode], need: int, now: float) -> tuple[dict[str, bool], list[Finding]]:
    """-> (switch guid -> unresponsive, for every switch with reads; the WARNING findings)."""
    state: dict[str, bool] = {}
    out: list[Finding] = []
    for g, sw in switches.items():
        rs = reads.get(g)
        if not rs:
            continue
        state[g] = bad = unresponsive(rs, need)
        if not bad:
            continue
        missed = [r for r in rs if r.unanswered]
        lost, total = sum(r.unanswered for r in rs), sum(r.queries for r in rs)
        what = sorted({w for r in missed for w in r.failed})
        last = last_read.get(g)
        age = f"last complete read {now - last:.0f} s ago" if last is not None else "never read completely"
        where = sw.address or f"0x{g}"
        out.append(Finding(CHECK, g, None, WARNING,
                           f"{sw.name or g} ({where}) did not answer in {len(missed)} of its last {len(rs)} sweeps "
                           f"({100 * lost / max(total, 1):.0f}% of its queries unanswered: "
                           f"{', '.join(what) or 'queries'}; {age}): its ports keep their last known state, none "
                           f"is taken as down; check that the switch is up, its management CPU and the path to it "
                           f"(and, over SNMP, its management address, ACL and credentials)"))
    return state, out


class Unresponsive:
    """unresponsive (checks.shape): each switch's last sweeps (the link-state evidence keeps them);
    whether each is unresponsive, and the data time of its last full read, go into the section."""
    reports = (report(CHECK, *NEEDS),)
    state = None

    def __init__(self, need: int):
        self.settings = need            # fabric.unresponsive_sweeps

    def run(self, inputs: FabricInputs) -> Outcome:
        sec = inputs.sec
        last_read = {g: inputs.last_read.get(g) for g in sec.switches}
        state, findings = evaluate(inputs.reads, inputs.last_read, sec.switches, self.settings, inputs.now)
        # judged: the switches this sweep asked (a sweep that asked a switch nothing, or no sweep, judges none)
        sweep = inputs.sweep
        asked = {g for g, n in sweep.queries.items() if n} | sweep.switches_read() if sweep is not None else set()
        judged = tuple(g for g in sec.switches if g in asked and g in state)
        return Outcome([f for f in findings if f.device in asked], judged,
                       Responsiveness({g: state[g] for g in judged}, last_read))


__all__ = ["CHECK", "NEEDS", "SweepRead", "Unresponsive", "evaluate", "unresponsive"]
