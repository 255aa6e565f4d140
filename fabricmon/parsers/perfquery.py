"""Parse `perfquery` output (basic PortCounters and `-x` PortCountersExtended).

Output is a `# Port counters: Lid L port P ...` header and `Name:.....value` lines. Only
fields we know (see fabricmon.model.ibspec.COUNTERS) are kept, translated to canonical names with
the raw (unscaled) value and the width in bits of the attribute they came from.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

from fabricmon.model.ibspec import COUNTER_BY_PERFQUERY
from fabricmon.parsers.captured import first_line, lines
from fabricmon.parsers.errors import ParseError
from fabricmon.model.node_records import (  # the records this parser returns (re-exported)
    PortCounterSet as PortCounterSet, PerfqueryData as PerfqueryData,
)

_HEADER_RE = re.compile(
    r"^# Port (?P<ext>extended )?counters: Lid (?P<lid>\d+) port (?P<port>\d+)", re.I)
_FIELD_RE = re.compile(r"^(?P<name>[A-Za-z0-9_]+):\.*(?P<value>\S+)\s*$")


@dataclass(slots=True)
class PerfqueryBlock:
    lid: int
    port: int
    extended: bool
    raw: dict[str, int] = field(default_factory=dict)       # perfquery field -> value
    counters: dict[str, int] = field(default_factory=dict)  # canonical name -> raw value
    bits: dict[str, int] = field(default_factory=dict)      # canonical name -> width


def parse_perfquery(text: str) -> list[PerfqueryBlock]:
    """Parse one or more perfquery blocks. Raises ParseError when there is none."""
    blocks: list[PerfqueryBlock] = []
    cur: PerfqueryBlock | None = None
    for raw in lines(text):
        line = raw.strip()
        m = _HEADER_RE.match(line)
        if m:
            cur = PerfqueryBlock(lid=int(m["lid"]), port=int(m["port"]), extended=bool(m["ext"]))
            blocks.append(cur)
            continue
        if cur is None:
            continue
        m = _FIELD_RE.match(line)
        if not m:
            continue
        try:
            value = int(m["value"], 0)
        except ValueError:
            continue
        name = m["name"]
        cur.raw[name] = value
        spec = COUNTER_BY_PERFQUERY.get(name)
        if spec is not None:
            cur.counters[spec.name] = value
            cur.bits[spec.name] = 64 if cur.extended else spec.bits
    if not blocks:
        raise ParseError(f"no perfquery counter block found ({first_line(text)[:160]})")
    return blocks
