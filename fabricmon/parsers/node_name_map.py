"""infiniband-diags' node name map (`--node-name-map FILE`, `/etc/rdma/ib-node-name-map`): a site's
GUID -> name table, as ibnetdiscover(8) "NODE NAME MAP FILE FORMAT" describes it:

    # comment
    <guid> "<name>"

e.g. `0x0008f104003f125c "IB1 (Rack 11 slot 1   ) ISR9288/ISR9096 Voltaire sLB-24D"`. The GUID is a
C integer (`0x...` hex, or decimal, as strtoull base 0 reads it), the name the text between the
quotes (a name without quotes runs to the end of the line or to a `#`). Blank lines and lines
starting with `#` are comments. A line whose first word is no GUID is garbage: the whole map is
refused (ParseError naming the line), as infiniband-diags refuse it."""

from __future__ import annotations

import re

from fabricmon.parsers.captured import lines
from fabricmon.parsers.errors import ParseError

_LINE = re.compile(r'^(?P<guid>\S+?)(?=\s|#|$)\s*(?P<rest>.*)$')


def _guid(text: str) -> int | None:
    try:
        value = int(text, 16) if text[:2].lower() == "0x" else int(text, 10)
    except ValueError:
        return None
    return value if 0 <= value < 1 << 64 else None


def parse_node_name_map(text: str) -> dict[str, str]:
    """node GUID (16 hex digits, no 0x) -> name. Raises ParseError on a line that names no GUID."""
    names: dict[str, str] = {}
    for n, raw in enumerate(lines(text), 1):     # LF, CRLF (a map edited on Windows) or CR endings
        line = raw.strip()
        if not line or line.startswith("#"):
            continue
        m = _LINE.match(line)
        guid = _guid(m["guid"]) if m else None
        if m is None or guid is None:
            raise ParseError(f"line {n}: {line[:80]!r} starts with no GUID (expected 0x<guid> \"<name>\")")
        rest = m["rest"]
        if rest.startswith('"'):
            name = rest[1:].split('"', 1)[0]
        else:
            name = rest.split("#", 1)[0]
        name = name.strip()
        if name:
            names[f"{guid:016x}"] = name
    return names


__all__ = ["parse_node_name_map"]
