"""Parse unicast linear forwarding tables as `ibroute -n <switch>` and `dump_fts -n` print them
(infiniband-diags): per switch a header
`Unicast lids [0x0-0x11d4] of switch Lid 3887 guid 0x0c42a10300b2bfec (desc):` (dump_fts says
`DR path slid 0; dlid 0; 0,1,3 guid ...`), then `0x0001 036 ` lines (destination LID, out port;
port 0 is the switch itself), then `N valid lids dumped`. Entries without a valid port are not
printed (without -a). Lines we do not recognise are skipped."""

from __future__ import annotations

import re

from fabricmon.model.fabric import NO_ROUTE
from fabricmon.parsers.captured import first_line, normalised
from fabricmon.parsers.errors import ParseError

_HEADER = re.compile(r"^Unicast lids \[0x[0-9a-fA-F]+-0x(?P<top>[0-9a-fA-F]+)\] of switch .*?guid 0x(?P<guid>[0-9a-fA-F]+)",
                     re.M)
_ENTRY = re.compile(r"^0x([0-9a-fA-F]+) (\d+)", re.M)
MAX_LID = 0xFFFF                # a LID is 16 bits (unicast up to 0xBFFF)


def parse_lft(text: str) -> dict[str, bytes]:
    """Switch GUID (16 hex digits) -> bytes indexed by destination LID holding the out port
    (NO_ROUTE where the table has none). Raises ParseError when no table header is found."""
    text = normalised(text)             # CRLF or CR endings: `^` and `$` at every line
    heads = list(_HEADER.finditer(text))
    if not heads:
        raise ParseError(f"no forwarding table found ({first_line(text)[:160]})")
    out: dict[str, bytes] = {}
    for i, h in enumerate(heads):
        end = heads[i + 1].start() if i + 1 < len(heads) else len(text)
        top = int(h["top"], 16)
        if top > MAX_LID:
            raise ParseError(f"forwarding table up to LID 0x{top:x}: past the 16-bit LID space")
        table = bytearray([NO_ROUTE]) * (top + 1)
        for lid_hex, port in _ENTRY.findall(text, h.end(), end):
            lid, p = int(lid_hex, 16), int(port)
            if lid < len(table) and p < NO_ROUTE:
                table[lid] = p
        out[f"{int(h['guid'], 16):016x}"] = bytes(table)
    return out


__all__ = ["parse_lft"]
