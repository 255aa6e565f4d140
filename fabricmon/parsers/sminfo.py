"""Parse `sminfo` and `saquery -s` output (infiniband-diags) into subnet manager records.

`sminfo [lid]` prints one line:
`sminfo: sm lid 1 sm guid 0x100001, activity count 297 priority 0 state 3 SMINFO_MASTER`
(states: 0 NOTACTIVE, 1 DISCOVERING, 2 STANDBY, 3 MASTER). With no SM answering it prints
`sminfo: iberror: failed: query` and exits 255: that is "no SM", not a parse error.

`saquery -s` (IsSM ports, from the SA) prints `PortInfoRecord dump:` blocks with
`EndPortLid..............1` lines: the LIDs of every port that claims to be an SM."""

from __future__ import annotations

import re

from fabricmon.model.fabric import SmInfo
from fabricmon.parsers.captured import first_line, normalised
from fabricmon.parsers.errors import ParseError

SM_STATES = {0: "NOTACTIVE", 1: "DISCOVERING", 2: "STANDBY", 3: "MASTER"}

_SMINFO = re.compile(r"sm lid (?P<lid>\d+) sm guid (?P<guid>0x[0-9a-fA-F]+), activity count (?P<act>\d+) "
                     r"priority (?P<prio>\d+) state (?P<state>\d+)(?: SMINFO_(?P<name>\w+))?")
_END_LID = re.compile(r"^\s*EndPortLid\.*\s*(\d+)\s*$", re.M)
NO_SM = "iberror: failed: query"


def parse_sminfo(text: str) -> SmInfo:
    """Raises ParseError when no `sm lid ...` line is found (`no_sm_answered` tells why)."""
    m = _SMINFO.search(text)
    if not m:
        raise ParseError(f"no sminfo line found ({first_line(text)[:160]})")
    state = int(m["state"])
    return SmInfo(lid=int(m["lid"]), guid=f"{int(m['guid'], 16):016x}", activity_count=int(m["act"]),
                  priority=int(m["prio"]), state=SM_STATES.get(state, m["name"] or str(state)))


def no_sm_answered(text: str) -> bool:
    """sminfo's `iberror: failed: query`: no subnet manager answered (exit 255)."""
    return NO_SM in text


def parse_saquery_sm_lids(text: str) -> list[int]:
    """The EndPortLid of every `saquery -s` record, in order, without duplicates."""
    out: list[int] = []
    for m in _END_LID.finditer(normalised(text)):
        lid = int(m.group(1))
        if lid not in out:
            out.append(lid)
    return out


__all__ = ["NO_SM", "SM_STATES", "no_sm_answered", "parse_saquery_sm_lids", "parse_sminfo"]
