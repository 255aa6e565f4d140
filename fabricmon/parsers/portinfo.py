"""Parse a port's link state from PortInfo as the infiniband-diags tools print it:
`smpquery portinfo <lid> <port>` (one port, from the port itself) and `saquery PIR` (PortInfoRecords
from the subnet manager's database, one record per port: `EndPortLid....6`, `PortNum....3`, then the
PortInfo dump). Both print `LinkState:......Active` and `PhysLinkState:......LinkUp`.

Both also print what the port may train at (libibmad's dump of the PortInfo masks): `LinkWidthEnabled:
....1X or 4X`, `LinkWidthSupported`, `LinkSpeedEnabled:....2.5 Gbps or 5.0 Gbps`, `LinkSpeedSupported`,
`LinkSpeedExtEnabled:....14.0625 Gbps or 25.78125 Gbps` (`0` or `Extended link speeds disabled` when
none), `LinkSpeedExtSupported`, and the active width and speed (`LinkWidthActive`, `LinkSpeedActive`,
`LinkSpeedExtActive`, where `No Extended Speed` leaves LinkSpeedActive in charge); newer
infiniband-diags add `LinkSpeedExtEnabled2`/`Supported2`/`Active2` (`212.5 Gbps`: XDR)."""

from __future__ import annotations

import re
from collections.abc import Iterator
from dataclasses import dataclass

from fabricmon.model.ibspec import phys_state_id, state_id
from fabricmon.model.link_ability import LinkAbility, from_masks
from fabricmon.parsers.captured import first_line, lines
from fabricmon.parsers.errors import ParseError

_FIELD = re.compile(r"^\s*(?P<key>[A-Za-z0-9]+?)[:.]*\.{2,}(?P<value>.*?)\s*$|^\s*(?P<key2>[A-Za-z0-9]+):\.+(?P<value2>.*?)\s*$")
DOWN_STATE = 1                       # PortState Down
LINKUP_PHYS = 5                      # PhysPortState LinkUp


@dataclass(frozen=True, slots=True)
class PortState:
    state_id: int | None             # 1 Down, 2 Init, 3 Armed, 4 Active
    phys_state_id: int | None        # 2 Polling, 3 Disabled, 5 LinkUp, ...
    width: int | None = None         # LinkWidthActive (lanes)
    speed: str | None = None         # the active generation (LinkSpeedExtActive2/ExtActive/Active)
    ability: LinkAbility | None = None   # what the port may train at (None: the masks were not printed)

    @property
    def up(self) -> bool:
        """The link is up: PortState past Down and the physical link trained (Init and Armed count:
        the cable is there, the subnet manager has not finished with it)."""
        return self.state_id not in (None, DOWN_STATE) and self.phys_state_id in (None, LINKUP_PHYS)


def _fields(text: str) -> Iterator[tuple[str, str]]:
    for line in lines(text):
        m = _FIELD.match(line)
        if m:
            yield (m["key"] or m["key2"]), (m["value"] if m["key"] else m["value2"])


# the masks' words as libibmad prints them -> the PortInfo bit
_WIDTH_WORDS = {"1X": 0x01, "4X": 0x02, "8X": 0x04, "12X": 0x08, "2X": 0x10}
_SPEED_WORDS = {"2.5": 0x1, "5.0": 0x2, "10.0": 0x4}
_EXT_WORDS = {"14.0625": 0x1, "25.78125": 0x2, "53.125": 0x4, "106.25": 0x8}
_EXT2_WORDS = {"212.5": 0x1}
_MASKS = {   # field -> (its words, the from_masks argument it fills)
    "LinkWidthEnabled": (_WIDTH_WORDS, "width_enabled"), "LinkWidthSupported": (_WIDTH_WORDS, "width_supported"),
    "LinkSpeedEnabled": (_SPEED_WORDS, "speed_enabled"), "LinkSpeedSupported": (_SPEED_WORDS, "speed_supported"),
    "LinkSpeedExtEnabled": (_EXT_WORDS, "ext_enabled"), "LinkSpeedExtSupported": (_EXT_WORDS, "ext_supported"),
    "LinkSpeedExtEnabled2": (_EXT2_WORDS, "ext2_enabled"), "LinkSpeedExtSupported2": (_EXT2_WORDS, "ext2_supported"),
}
_ACTIVE_SPEED = {"2.5": "SDR", "5.0": "DDR", "10.0": "QDR", "14.0625": "FDR", "25.78125": "EDR", "53.125": "HDR",
                 "106.25": "NDR", "212.5": "XDR"}


def _mask(value: str, words: dict[str, int]) -> int:
    """`1X or 4X`, `2.5 Gbps or 5.0 Gbps` -> the mask; `0`, `undefined`, `... disabled` -> 0."""
    mask = 0
    for part in value.split(" or "):
        word = part.replace("Gbps", "").strip().split(" (")[0]
        mask |= words.get(word, 0)
    return mask


class _Link:
    """The width, speed and ability fields of one PortInfo dump, as they come."""

    def __init__(self) -> None:
        self.masks: dict[str, int] = {}
        self.width: int | None = None
        self.speeds: dict[str, str | None] = {}

    def take(self, key: str, value: str) -> None:
        if key in _MASKS:
            words, arg = _MASKS[key]
            self.masks[arg] = _mask(value, words)
        elif key == "LinkWidthActive":
            self.width = {1: 1, 2: 4, 4: 8, 8: 12, 16: 2}.get(_mask(value, _WIDTH_WORDS))
        elif key in ("LinkSpeedActive", "LinkSpeedExtActive", "LinkSpeedExtActive2"):
            self.speeds[key] = _ACTIVE_SPEED.get(value.replace("Gbps", "").strip())

    def state(self, st: int | None, ph: int | None) -> PortState:
        s = self.speeds
        speed = s.get("LinkSpeedExtActive2") or s.get("LinkSpeedExtActive") or s.get("LinkSpeedActive")
        # a Supported field not printed restricts nothing (from_masks: a supported mask of 0)
        ability = (from_masks(**{"width_supported": 0, "speed_supported": 0, **self.masks})
                   if "width_enabled" in self.masks and "speed_enabled" in self.masks else None)
        return PortState(st, ph, self.width, speed, ability)


def parse_portinfo(text: str) -> PortState:
    """One port's state from `smpquery portinfo`, with its width, speed and what it may train at.
    Raises ParseError without a LinkState line."""
    st = ph = None
    seen = False
    link = _Link()
    for key, value in _fields(text):
        if key == "LinkState":
            st, seen = state_id(value), True
        elif key == "PhysLinkState":
            ph = phys_state_id(value)
        else:
            link.take(key, value)
    if not seen or st is None:
        raise ParseError(f"no LinkState in PortInfo output ({first_line(text)[:120]})")
    return link.state(st, ph)


def parse_saquery_pir(text: str) -> dict[tuple[int, int], PortState]:
    """Every PortInfoRecord of `saquery PIR`: (EndPortLid, PortNum) -> state. An empty answer is an
    empty dict (the caller judges whether it covers what it needs)."""
    out: dict[tuple[int, int], PortState] = {}
    lid = port = st = ph = None
    link = _Link()

    def flush() -> None:
        if lid is not None and port is not None and st is not None:
            out[(lid, port)] = link.state(st, ph)
    for key, value in _fields(text):
        if key == "EndPortLid":
            flush()
            lid, port, st, ph, link = _int(value), None, None, None, _Link()
        elif key == "PortNum":
            port = _int(value)
        elif key == "LinkState":
            st = state_id(value)
        elif key == "PhysLinkState":
            ph = phys_state_id(value)
        else:
            link.take(key, value)
    flush()
    return out


def _int(v: str) -> int | None:
    try:
        return int(v.strip(), 0)
    except ValueError:
        return None


__all__ = ["PortState", "parse_portinfo", "parse_saquery_pir"]
