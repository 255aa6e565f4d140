"""The subnet manager: no SM answering as master, or more than one SM claiming master, is
CRITICAL (no LID assignment, no path records, no rerouting around a failed link); an activity
count that does not move over `stalled_polls` polls in a row while the SM claims master is a
WARNING (a hung SM).

Records in (SmInfo), findings out (one, OK included: the fabric has one SM check)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

from fabricmon.checks import CRITICAL, OK, WARNING, Finding
from fabricmon.checks.shape import Outcome, report
from fabricmon.model.fabric import SmData, SmInfo, SmPoll
from fabricmon.model.snapshot import source_state

if TYPE_CHECKING:
    from fabricmon.checks.fabric_inputs import FabricInputs

CHECK = "sm"
NEEDS = ("subnet_manager",)       # a source yielded SmData (a fabric-wide check)


def masters(sms: list[SmInfo]) -> list[SmInfo]:
    seen: dict[str, SmInfo] = {}
    for s in sms:
        if s.state == "MASTER":
            seen.setdefault(s.guid, s)
    return list(seen.values())


def evaluate(sms: list[SmInfo], stalled: int, stalled_polls: int) -> Finding:
    """`stalled`: polls in a row with the master's activity count unchanged."""
    ms = masters(sms)
    if not ms:
        others = ", ".join(f"0x{s.guid} lid {s.lid} {s.state}" for s in sms)
        return Finding(CHECK, "", None, CRITICAL,
                       "no subnet manager answers as master (sminfo: "
                       + (f"only {others}" if others else "iberror: failed: query")
                       + "): start or fail over opensm (or the switch's SM); without one no LIDs, no path "
                         "records and no rerouting around failed links")
    if len(ms) > 1:
        return Finding(CHECK, "", None, CRITICAL,
                       f"{len(ms)} subnet managers claim master: "
                       + ", ".join(f"0x{s.guid} (lid {s.lid}, priority {s.priority})" for s in ms)
                       + ": a split subnet; stop all but one, or give them distinct priorities")
    m = ms[0]
    if stalled >= stalled_polls:
        return Finding(CHECK, "", None, WARNING,
                       f"subnet manager 0x{m.guid} (lid {m.lid}) claims master but its activity count stayed at "
                       f"{m.activity_count} for {stalled} polls in a row: the SM looks hung; check opensm's log "
                       f"and restart it (or fail over)")
    return Finding(CHECK, "", None, OK,
                   f"subnet manager 0x{m.guid} (lid {m.lid}, priority {m.priority}) is master, activity count "
                   f"{m.activity_count}")


@dataclass(slots=True)
class SmState:
    time: float | None = None                   # the data time of the last poll judged
    last: tuple[str, int] | None = None         # (master guid, activity count) at that poll
    stalled: int = 0                            # polls in a row with the master's activity count unchanged


class SubnetManager:
    """sm (checks.shape): the subnet managers of the latest poll; the master's activity count followed
    between polls (its state). Fabric-wide: its one finding is its status."""
    reports = (report(CHECK, *NEEDS),)

    def __init__(self, stalled_polls: int):
        self.settings = stalled_polls
        self.state = SmState()

    def run(self, inputs: FabricInputs) -> Outcome:
        st = source_state(inputs.states, SmData)
        if st is None or not isinstance(st.data, SmData):
            return Outcome((), ())
        sms = list(st.data.sms)
        ms = masters(sms)
        activity = ms[0].activity_count if len(ms) == 1 else None
        s = self.state
        if st.data_time != s.time:       # a new poll: is the master's activity count moving?
            cur = (ms[0].guid, ms[0].activity_count) if len(ms) == 1 else None
            s.stalled = s.stalled + 1 if cur is not None and cur == s.last else 0
            s.last, s.time = cur, st.data_time
        return Outcome([evaluate(sms, s.stalled, self.settings)], (), SmPoll(tuple(sms), activity))


__all__ = ["CHECK", "NEEDS", "SmState", "SubnetManager", "evaluate", "masters"]
