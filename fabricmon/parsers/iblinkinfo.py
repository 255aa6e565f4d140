"""Parse `iblinkinfo` port lines (default and `-l` line mode).

A port line looks like
    0x0000000000100007     13    1[  ] ==( 4X        53.125 Gbps Active/  LinkUp)==>   4    2[  ] "leaf02" (Could be 12X )
The speed is per lane (53.125 Gbps is HDR; FDR10 prints as `10.0 Gbps (FDR10)`).
`(Could be 4X Could be 106.25 Gbps)` tells what both ends support when the link runs below
it (the text may hold parentheses itself: `Could be FDR10 (Found link at QDR but ...)`). A port
that is up but whose peer was not discovered ends in `"Port not available"`.
"""

from __future__ import annotations

import re

from fabricmon.model.ibspec import generation, generation_from_signal, parse_width, phys_state_id, state_id
from fabricmon.parsers.captured import first_line, lines
from fabricmon.parsers.errors import ParseError
from fabricmon.model.node_records import (  # the records this parser returns (re-exported)
    LinkInfo as LinkInfo, LinkData as LinkData,
)

# A port line starts with the port's GUID (default mode, CA ports) or the node's GUID and quoted
# description (-l), or with the LID itself (switch ports in default mode).
_LINE = (
    r"^\s*(?:0x[0-9a-fA-F]+\s+(?:\"(?P<ldesc>.{LOCAL})\"\s+)?)?"
    r"(?P<lid>\d+)\s+(?P<port>\d+)\[[^\]]*\]\s*==\(\s*"
    r"(?:(?P<width>\d+X)\s+(?P<speed>\d+(?:\.\d+)?)\s*Gbps(?:\s*\((?P<fdr10>FDR10)\))?\s+)?"
    r"(?P<state>[A-Za-z_]+)/\s*(?P<phys>[A-Za-z ]+?)\s*\)"
    r"(?:\s*\([^)]*\))?"                      # -p adds (HOQ:n VL_Stall:n)
    r"==>\s*(?:"
    r"(?:0x[0-9a-fA-F]+\s+)?(?:(?P<rlid>\d+)\s+(?P<rport>\d+))?\s*\[[^\]]*\]\s*"
    r"\"(?P<rdesc>.*)\"\s*\((?P<could>.*)\)"   # the could-be text may hold parentheses itself
    r"|\"(?P<unavailable>Port not available)\""   # up, but the remote end was not discovered
    r")\s*$"
)
# The local description (-l) and the remote one are both free text that may hold quotes and
# look like the fields around them. The remote one runs to the last quote of the line (the
# could-be text has none); the local one is read both shortest and longest, and a line that
# reads two ways (a description forging a LID or port) is not read at all.
_LINE_SHORT = re.compile(_LINE.replace("{LOCAL}", "*?"))
_LINE_LONG = re.compile(_LINE.replace("{LOCAL}", "*"))
_CA_RE = re.compile(r"^CA: (?P<desc>.*):$")                     # `CA: <desc>:` (the colon is iblinkinfo's)
_SWITCH_RE = re.compile(r"^Switch: 0x[0-9a-fA-F]+ (?P<desc>.*):$")
_COULD_WIDTH = re.compile(r"Could be (\d+X)")
_COULD_SPEED = re.compile(r"Could be (\d+(?:\.\d+)?) Gbps")
_COULD_FDR10 = re.compile(r"Could be FDR10\b")


def _fields(m: re.Match[str]) -> tuple[str | None, ...]:
    return m["lid"], m["port"], m["rlid"], m["rport"], m["rdesc"], m["could"], m["unavailable"]


def _parse_line(line: str, node_desc: str | None) -> LinkInfo | None:
    m = _LINE_SHORT.match(line)
    if not m:
        return None
    if m["ldesc"] is not None:
        other = _LINE_LONG.match(line)
        if other is None or _fields(other) != _fields(m):
            return None                 # ambiguous: never guess a LID or a port
    speed = float(m["speed"]) if m["speed"] else None
    gen = generation_from_signal(speed) if speed is not None else None
    if m["fdr10"]:                       # "10.0 Gbps (FDR10)": same lane rate as QDR, 64b/66b
        gen = generation("FDR10")
    could = m["could"] or ""
    cw = _COULD_WIDTH.search(could)
    cs = _COULD_SPEED.search(could)
    cgen = generation_from_signal(float(cs.group(1))) if cs else None
    if cgen is None and _COULD_FDR10.search(could):
        cgen = generation("FDR10")
    desc = node_desc if m["ldesc"] is None else m["ldesc"].strip()
    return LinkInfo(
        lid=int(m["lid"]), port=int(m["port"]),
        width=parse_width(m["width"]) if m["width"] else None,
        lane_signal_gbps=speed,
        generation=gen.name if gen else None,
        state_id=state_id(m["state"]), phys_state_id=phys_state_id(m["phys"]),
        remote_lid=int(m["rlid"]) if m["rlid"] else None,
        remote_port=int(m["rport"]) if m["rport"] else None,
        remote_desc=m["rdesc"] or "",
        could_be_width=parse_width(cw.group(1)) if cw else None,
        could_be_generation=cgen.name if cgen else None,
        node_desc=desc,
    )


def parse_iblinkinfo(text: str) -> list[LinkInfo]:
    """Parse every port line. Raises ParseError when none is recognised."""
    links: list[LinkInfo] = []
    node_desc: str | None = None
    for raw in lines(text):             # not splitlines(): a description may hold \x85 or \u2028
        line = raw.rstrip()
        if not line.strip():
            continue
        m = _CA_RE.match(line)
        if m:
            node_desc = m["desc"]
            continue
        m = _SWITCH_RE.match(line)
        if m:
            node_desc = m["desc"]
            continue
        info = _parse_line(line, node_desc)
        if info is not None:
            links.append(info)
    if not links:
        raise ParseError(f"no iblinkinfo port line found ({first_line(text)[:160]})")
    return links
