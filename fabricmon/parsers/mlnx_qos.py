"""Parser for ``mlnx_qos -i <netdev>`` output (pure: text in, records out).

Tolerates every layout variant seen across mlnx-tools versions: tab or space
indentation, trailing spaces, traffic classes printed out of order, the
``default priority:`` block, ``total_size=`` vs ``max_buffer_size=`` suffixes,
an optional ``dscp2prio mapping:`` block (with wrapped ``prio:N dscp:`` lines),
a missing PFC ``buffer`` row, and stray warning lines.
"""

from __future__ import annotations

import re

from fabricmon.parsers.errors import ParseError
from fabricmon.model.node_records import (  # the records this parser returns (re-exported)
    TrafficClass as TrafficClass, QosConfig as QosConfig, QosResult as QosResult, MlnxQosData as MlnxQosData,
)

__all__ = [
    "ETS_UNSUPPORTED_MESSAGE",
    "QosConfig",
    "TrafficClass",
    "is_dcb_unsupported",
    "parse_mlnx_qos",
]

#: Printed (with exit status 1) when the netdev has no DCB support at all.
ETS_UNSUPPORTED_MESSAGE = "ETS features are not supported on your system"

NUM_PRIORITIES = 8

_DCBX_MODES = {"os controlled": "os", "firmware controlled": "firmware"}

_RE_DCBX = re.compile(r"^DCBX mode:\s*(?P<mode>.*)$")
_RE_TRUST = re.compile(r"^Priority trust state:\s*(?P<trust>\S+)")
_RE_DSCP = re.compile(r"^prio:\s*(?P<prio>\d+)\s+dscp:\s*(?P<dscps>(?:\d+\s*,\s*)*\d*)$")
_RE_DEFAULT_PRIO = re.compile(r"^prio:\s*(?P<prio>\d+)$")
_RE_BUFFER_SIZE = re.compile(r"^Receive buffer size \(bytes\):\s*(?P<values>.*)$")
_RE_CABLE = re.compile(r"^Cable len:\s*(?P<len>\d+)")
_RE_PFC_ROW = re.compile(r"^(?P<row>priority|enabled|buffer)\s+(?P<values>\d+(?:\s+\d+)*)$")
_RE_TC = re.compile(
    r"^tc:\s*(?P<tc>\d+)\s+ratelimit:\s*(?P<rate>[^,]+?),\s*tsa:\s*(?P<tsa>\w+)"
    r"(?:,\s*bw:\s*(?P<bw>\d+)\s*%)?"
)
_RE_TC_PRIO = re.compile(r"^priority:\s*(?P<prio>\d+)$")
_SECTION_HEADERS = frozenset({"PFC configuration:", "dscp2prio mapping:", "default priority:"})


def is_dcb_unsupported(text: str, returncode: int) -> bool:
    """True when mlnx_qos says the netdev has no DCB (exit 1 + ETS message).

    This is a property of the netdev, not a failure of the tool or of fabricmon.
    """
    return returncode == 1 and ETS_UNSUPPORTED_MESSAGE in text


def parse_mlnx_qos(text: str) -> QosConfig:
    """Parse ``mlnx_qos -i <netdev>`` output into a :class:`QosConfig`.

    Unknown lines (warnings, a command echo) are ignored. Raises
    :class:`ParseError` on empty or unrecognisable input, on the
    "ETS features are not supported" output (check :func:`is_dcb_unsupported`
    first), when the PFC ``enabled`` row is missing, or when a PFC row does not
    hold exactly 8 columns.
    """
    if not text or not text.strip():
        raise ParseError("mlnx_qos: empty output")

    dcbx_mode: str | None = None
    trust: str | None = None
    dscp2prio: dict[int, int] = {}
    default_priority: int | None = None
    buffer_sizes: tuple[int, ...] = ()
    buffer_total: int | None = None
    cable_len: int | None = None
    pfc_rows: dict[str, list[int]] = {}
    tcs: dict[int, tuple[str, int | None, str]] = {}
    tc_prios: dict[int, list[int]] = {}
    current_tc: int | None = None
    recognised = 0

    for raw in text.splitlines():
        line = raw.strip()
        if not line:
            continue
        if m := _RE_DCBX.match(line):
            mode = m["mode"].strip().lower()
            dcbx_mode = _DCBX_MODES.get(mode, mode) or None
        elif m := _RE_TRUST.match(line):
            trust = m["trust"].lower()
        elif m := _RE_DSCP.match(line):
            prio = int(m["prio"])
            for dscp in re.findall(r"\d+", m["dscps"]):
                dscp2prio[int(dscp)] = prio
        elif m := _RE_DEFAULT_PRIO.match(line):
            default_priority = int(m["prio"])
        elif m := _RE_BUFFER_SIZE.match(line):
            sizes: list[int] = []
            for item in (i.strip() for i in m["values"].split(",")):
                key, eq, value = item.partition("=")
                if eq and value.strip().isdecimal():
                    buffer_total = int(value)  # total_size= or max_buffer_size=
                elif key.isdecimal():
                    sizes.append(int(key))
            buffer_sizes = tuple(sizes)
        elif m := _RE_CABLE.match(line):
            cable_len = int(m["len"])
        elif m := _RE_PFC_ROW.match(line):
            pfc_rows[m["row"]] = [int(v) for v in m["values"].split()]
        elif m := _RE_TC.match(line):
            current_tc = int(m["tc"])
            bw = int(m["bw"]) if m["bw"] is not None else None
            tcs[current_tc] = (m["tsa"].lower(), bw, m["rate"].strip())
            tc_prios.setdefault(current_tc, [])
        elif m := _RE_TC_PRIO.match(line):
            if current_tc is not None:
                tc_prios[current_tc].append(int(m["prio"]))
        elif line not in _SECTION_HEADERS:
            continue
        recognised += 1

    if not recognised:
        if ETS_UNSUPPORTED_MESSAGE in text:
            raise ParseError("mlnx_qos: netdev has no DCB support (ETS features not supported)")
        raise ParseError("mlnx_qos: no recognisable lines in output")

    enabled = pfc_rows.get("enabled")
    if enabled is None:
        raise ParseError("mlnx_qos: PFC 'enabled' row missing")
    for name, row in pfc_rows.items():
        if len(row) != NUM_PRIORITIES:
            raise ParseError(f"mlnx_qos: PFC {name!r} row has {len(row)} columns, expected 8")
    if any(v not in (0, 1) for v in enabled):
        raise ParseError(f"mlnx_qos: PFC 'enabled' row is not 0/1: {enabled}")
    buffer_row = pfc_rows.get("buffer")

    traffic_classes = tuple(
        TrafficClass(
            tc=tc,
            tsa=tcs[tc][0],
            bw_percent=tcs[tc][1],
            ratelimit=tcs[tc][2],
            priorities=tuple(tc_prios[tc]),
        )
        for tc in sorted(tcs)
    )
    return QosConfig(
        dcbx_mode=dcbx_mode,
        trust=trust,
        dscp2prio=dscp2prio,
        pfc_enabled=tuple(bool(v) for v in enabled),
        pfc_buffer=tuple(buffer_row) if buffer_row is not None else None,
        buffer_sizes=buffer_sizes,
        cable_len=cable_len,
        traffic_classes=traffic_classes,
        default_priority=default_priority,
        buffer_total_size=buffer_total,
    )
