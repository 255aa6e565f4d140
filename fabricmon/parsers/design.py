"""A fabric's design file -> model.design.Design (docs/design.md).

Two forms, told apart by their text (or named: `format`):

- `ibnetdiscover`: the topology file of the fabric as accepted (the "master topology"), read by
  parsers.ibnetdiscover: every node by name and GUID, every cable with its width and speed;
- `csv`: a cabling plan, one cable a row, under a header naming the columns (any order, case,
  spaces and underscores ignored, so UFM's NDT `StartDevice,StartPort,EndDevice,EndPort,...` reads
  too): `start_device`, `start_port`, `end_device`, `end_port` (required), `speed` (HDR, NDR, ...;
  or `4xHDR`), `width` (`4X`, `4`), `start_guid`, `end_guid` (the node GUID as accepted: a switch
  found under the same name with another GUID was replaced) optional, any other column ignored. A device is a node's name (a
  switch's node description, a host CA's description `node01 mlx5_0` or its host name `node01`) or
  its GUID `0x...`; a port its number (`5`, `Port 5`, `P5`). `#` lines and empty lines are skipped.

Either form as a site hands it over (parsers.captured): CRLF or CR line endings, an ibnetdiscover
file whose tabs a terminal expanded or lost, a session log's banner and the shell prompts around
the output. A node or port line of an ibnetdiscover design that does not read, and anything else in
a CSV, is a ParseError naming the line and what is wrong with it.
"""

from __future__ import annotations

import csv
import re

from fabricmon.model import ibspec
from fabricmon.model.design import Design, DesignCable, DesignNode, design_from_discovery
from fabricmon.parsers.captured import lines, normalised, terminal_line
from fabricmon.parsers.errors import ParseError
from fabricmon.parsers.ibnetdiscover import guid_hex, parse_ibnetdiscover

FORMATS = ("auto", "ibnetdiscover", "csv")
_IBNETDISCOVER = re.compile(r'^\s*(?:Switch|Ca|Hca|Rt)\s*\d+\s*"[SHR]-[0-9A-Fa-f]+"', re.M)
_PORT = re.compile(r"^(?:port\s*|p)?(\d+)$", re.I)
_WIDTH = re.compile(r"^(\d+)\s*x?$", re.I)
_RATE = re.compile(r"^(?:(\d+)\s*x\s*)?([A-Za-z]+\d*)$", re.I)
_GUID = re.compile(r"^0x[0-9A-Fa-f]{1,16}$")
_WIDTHS = (1, 2, 4, 8, 12)
_REQUIRED = ("startdevice", "startport", "enddevice", "endport")


def detect(text: str) -> str:
    """`ibnetdiscover` where the text holds an ibnetdiscover node line, else `csv`."""
    return "ibnetdiscover" if _IBNETDISCOVER.search(normalised(text)) else "csv"


def parse_design(text: str, fmt: str = "auto") -> Design:
    """Raises ParseError (naming the line) on a file that is no design."""
    fmt = detect(text) if fmt == "auto" else fmt
    if fmt == "ibnetdiscover":
        design = design_from_discovery(parse_ibnetdiscover(text, strict=True))
        if not design.cables:
            raise ParseError("the ibnetdiscover design holds no cable")
        return design
    return parse_design_csv(text)


def _column(name: str) -> str:
    return re.sub(r"[^a-z0-9]", "", name.lower())


def _device(text: str, guid_text: str, line: int, what: str) -> tuple[str, DesignNode]:
    name = text.strip()
    if not name:
        raise ParseError(f"line {line}: {what} is empty")
    guid = None
    if guid_text:
        if not _GUID.match(guid_text):
            raise ParseError(f"line {line}: {what[:-6]}guid {guid_text!r} is not a GUID (0x followed by hex digits)")
        guid = guid_hex(guid_text[2:])
    if _GUID.match(name):
        own = guid_hex(name[2:])
        if guid is not None and guid != own:
            raise ParseError(f"line {line}: {what} {name} and {what[:-6]}guid {guid_text} differ")
        return f"0x{own}", DesignNode("", own)
    return name, DesignNode(name, guid)


def _port(text: str, line: int, what: str) -> int:
    m = _PORT.match(text.strip())
    if not m or int(m[1]) < 1:
        raise ParseError(f"line {line}: {what} {text.strip()!r} is not a port number (1, 2, ...)")
    return int(m[1])


def _hex(guid: str | None) -> str:
    return f"0x{guid}" if guid else "none"


def parse_design_csv(text: str) -> Design:
    # one row a line (a line is never a CSV row continued: a design's names hold no newline); a session's
    # banner and prompts are no rows
    try:
        rows = [(i, row) for i, (line, row) in enumerate(((ln, next(csv.reader([ln]), [])) for ln in lines(text)), 1)
                if row and any(c.strip() for c in row) and not row[0].lstrip().startswith("#")
                and not terminal_line(line)]
    except csv.Error as exc:
        raise ParseError(f"not a design CSV: {exc}") from None
    if not rows:
        raise ParseError("empty design: expected a CSV header (start_device,start_port,end_device,end_port"
                         "[,speed][,width]) and one row per cable")
    hline, header = rows[0]
    cols = {_column(c): n for n, c in enumerate(header)}
    lacking = [c for c in _REQUIRED if c not in cols]
    if lacking:
        raise ParseError(f"line {hline}: the header {','.join(header)!r} lacks "
                         f"{', '.join(c[:-4] + '_' + c[-4:] if c.endswith('port') else c[:-6] + '_' + c[-6:] for c in lacking)} "
                         "(expected start_device,start_port,end_device,end_port[,speed][,width])")
    design = Design()
    used: dict[tuple[str, int], int] = {}
    for i, row in rows[1:]:
        def cell(col: str, row: list[str] = row) -> str:
            n = cols.get(col)
            return row[n].strip() if n is not None and n < len(row) else ""
        if len(row) < len(header) and any(cols[c] >= len(row) for c in _REQUIRED):
            raise ParseError(f"line {i}: {len(row)} fields where the header has {len(header)}")
        ka, na = _device(cell("startdevice"), cell("startguid"), i, "start_device")
        kb, nb = _device(cell("enddevice"), cell("endguid"), i, "end_device")
        for k, n in ((ka, na), (kb, nb)):
            if design.nodes.setdefault(k, n).guid != n.guid:
                raise ParseError(f"line {i}: {k} has GUID {_hex(n.guid)} here and {_hex(design.nodes[k].guid)} on "
                                 "an earlier line")
        pa, pb = _port(cell("startport"), i, "start_port"), _port(cell("endport"), i, "end_port")
        width, speed = None, None
        if cell("width"):
            w = _WIDTH.match(cell("width"))
            if not w or int(w[1]) not in _WIDTHS:
                raise ParseError(f"line {i}: width {cell('width')!r} is not a link width (1X, 2X, 4X, 8X, 12X)")
            width = int(w[1])
        if cell("speed"):
            r = _RATE.match(cell("speed"))
            g = ibspec.generation(r[2]) if r else None
            if r is None or g is None:
                raise ParseError(f"line {i}: speed {cell('speed')!r} is not an InfiniBand speed "
                                 f"({', '.join(x.name for x in ibspec.GENERATIONS)})")
            speed = g.name
            width = width or (int(r[1]) if r[1] else None)
        if (ka, pa) == (kb, pb):
            raise ParseError(f"line {i}: a cable from {ka}[{pa}] to itself")
        for end in ((ka, pa), (kb, pb)):
            if end in used:
                raise ParseError(f"line {i}: {end[0]}[{end[1]}] is already cabled on line {used[end]}")
            used[end] = i
        design.cables.append(DesignCable((ka, pa), (kb, pb), width, speed, i))
    if not design.cables:
        raise ParseError(f"line {hline}: a header and no cable")
    return design


__all__ = ["FORMATS", "detect", "parse_design", "parse_design_csv"]
