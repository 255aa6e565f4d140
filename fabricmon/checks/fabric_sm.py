"""The subnet manager: no SM answering as master, or more than one SM claiming master, is
CRITICAL (no LID assignment, no path records, no rerouting around a failed link); an activity
count that does not move over `stalled_polls` polls in a row while the SM claims master is a
WARNING (a hung SM).

Records in (SmInfo), findings out (one, OK included: the fabric has one SM check)."""

from __future__ import annotations

from fabricmon.checks import CRITICAL, OK, WARNING, Finding
from fabricmon.model.fabric import SmInfo

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


__all__ = ["CHECK", "NEEDS", "evaluate", "masters"]
