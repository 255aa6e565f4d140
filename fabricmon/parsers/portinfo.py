"""Parse a port's link state from PortInfo as the infiniband-diags tools print it:
`smpquery portinfo <lid> <port>` (one port, from the port itself) and `saquery PIR` (PortInfoRecords
from the subnet manager's database, one record per port: `EndPortLid....6`, `PortNum....3`, then the
PortInfo dump). Both print `LinkState:......Active` and `PhysLinkState:......LinkUp`."""

from __future__ import annotations

import re
from dataclasses import dataclass

from fabricmon.ibspec import phys_state_id, state_id
from fabricmon.parsers.errors import ParseError

_FIELD = re.compile(r"^\s*(?P<key>[A-Za-z0-9]+?)[:.]*\.{2,}(?P<value>.*?)\s*$|^\s*(?P<key2>[A-Za-z0-9]+):\.+(?P<value2>.*?)\s*$")
DOWN_STATE = 1                       # PortState Down
LINKUP_PHYS = 5                      # PhysPortState LinkUp


@dataclass(frozen=True, slots=True)
class PortState:
    state_id: int | None             # 1 Down, 2 Init, 3 Armed, 4 Active
    phys_state_id: int | None        # 2 Polling, 3 Disabled, 5 LinkUp, ...

    @property
    def up(self) -> bool:
        """The link is up: PortState past Down and the physical link trained (Init and Armed count:
        the cable is there, the subnet manager has not finished with it)."""
        return self.state_id not in (None, DOWN_STATE) and self.phys_state_id in (None, LINKUP_PHYS)


def _fields(text: str):
    for line in text.splitlines():
        m = _FIELD.match(line)
        if m:
            yield (m["key"] or m["key2"]), (m["value"] if m["key"] else m["value2"])


def parse_portinfo(text: str) -> PortState:
    """One port's state from `smpquery portinfo`. Raises ParseError without a LinkState line."""
    st = ph = None
    seen = False
    for key, value in _fields(text):
        if key == "LinkState":
            st, seen = state_id(value), True
        elif key == "PhysLinkState":
            ph = phys_state_id(value)
    if not seen or st is None:
        raise ParseError(f"no LinkState in PortInfo output ({text.strip()[:120] or 'empty output'})")
    return PortState(st, ph)


def parse_saquery_pir(text: str) -> dict[tuple[int, int], PortState]:
    """Every PortInfoRecord of `saquery PIR`: (EndPortLid, PortNum) -> state. An empty answer is an
    empty dict (the caller judges whether it covers what it needs)."""
    out: dict[tuple[int, int], PortState] = {}
    lid = port = st = ph = None

    def flush():
        if lid is not None and port is not None and st is not None:
            out[(lid, port)] = PortState(st, ph)
    for key, value in _fields(text):
        if key == "EndPortLid":
            flush()
            lid, port, st, ph = _int(value), None, None, None
        elif key == "PortNum":
            port = _int(value)
        elif key == "LinkState":
            st = state_id(value)
        elif key == "PhysLinkState":
            ph = phys_state_id(value)
    flush()
    return out


def _int(v: str) -> int | None:
    try:
        return int(v.strip(), 0)
    except ValueError:
        return None


__all__ = ["PortState", "parse_portinfo", "parse_saquery_pir"]
