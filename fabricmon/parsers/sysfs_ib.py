"""Pure parsers for the values in /sys/class/infiniband/<dev>/ports/<n>/."""

from __future__ import annotations

import re

from fabricmon.model.ibspec import generation_from_rate
from fabricmon.parsers.errors import ParseError
from fabricmon.model.node_records import (  # the records this parser returns (re-exported)
    SysfsPort as SysfsPort, SysfsDevice as SysfsDevice, HwCountersData as HwCountersData, SysfsData as SysfsData,
)

_ENUM_RE = re.compile(r"^\s*(?P<id>\d+)\s*:\s*(?P<name>.*?)\s*$")
_RATE_RE = re.compile(
    r"^\s*(?P<gbps>\d+(?:\.\d+)?)\s*Gb/sec(?:\s*\((?P<width>\d+)X\s*(?P<gen>[A-Za-z0-9]+)?\))?\s*$")


def parse_enum(text: str) -> tuple[int, str]:
    """`4: ACTIVE` -> (4, "ACTIVE"); `7: Phy Test` -> (7, "Phy Test")."""
    m = _ENUM_RE.match(text)
    if not m:
        raise ParseError(f"expected '<id>: <name>', got {text.strip()[:60]!r}")
    return int(m["id"]), m["name"]


def parse_rate(text: str) -> tuple[float, int | None, str | None]:
    """`400 Gb/sec (4X NDR)` -> (400.0, 4, "NDR").

    RoCE ports use IB names too (`200 Gb/sec (2X NDR)` on a 200GbE port): the number and
    the width are what count; the generation is recomputed from them when it is missing.
    """
    m = _RATE_RE.match(text)
    if not m:
        raise ParseError(f"unrecognised rate {text.strip()[:60]!r}")
    gbps = float(m["gbps"])
    width = int(m["width"]) if m["width"] else None
    gen = m["gen"].upper() if m["gen"] else None
    if gen is None and width:
        g = generation_from_rate(gbps, width)
        gen = g.name if g else None
    return gbps, width, gen


def parse_counter(text: str) -> int | None:
    """A counter file: an integer, or None for `N/A (no PMA)` and similar."""
    t = text.strip()
    if not t or t.startswith("N/A"):
        return None
    try:
        return int(t, 0)
    except ValueError as exc:
        raise ParseError(f"counter is not an integer: {t[:40]!r}") from exc


def port_guid_from_gid(text: str) -> str | None:
    """GID index 0 (`fe80:0000:0000:0000:a288:c2ff:feab:cdef`) -> port GUID `0xa288c2fffeabcdef`.

    The low 64 bits of the link-local GID 0 are the port GUID on InfiniBand. An all-zero GID
    (an empty slot) gives None.
    """
    parts = text.strip().split(":")
    if len(parts) != 8 or not all(len(x) == 4 for x in parts):
        return None
    low = "".join(parts[4:]).lower()
    if not all(c in "0123456789abcdef" for c in low) or int(low, 16) == 0:
        return None
    return "0x" + low
