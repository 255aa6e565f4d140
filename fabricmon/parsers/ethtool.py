"""Parser for ``ethtool -S <netdev>`` output plus a curated RoCE/PFC extraction.

An mlx5 netdev exposes 600+ statistics; only the small curated set in
:class:`RoceNetdevStats` is kept for export (cardinality).
"""

from __future__ import annotations

import re

from fabricmon.parsers.errors import ParseError
from fabricmon.model.node_records import (  # the records this parser returns (re-exported)
    RoceNetdevStats as RoceNetdevStats, NetdevStats as NetdevStats, EthtoolData as EthtoolData,
)

__all__ = [
    "CURATED_ERROR_COUNTERS",
    "RoceNetdevStats",
    "curate_roce_stats",
    "parse_ethtool_stats",
]

#: Plain error/drop counters kept by :func:`curate_roce_stats` (besides ``rx_prioN_discards``).
CURATED_ERROR_COUNTERS: tuple[str, ...] = (
    "rx_discards_phy",
    "rx_out_of_buffer",
    "rx_crc_errors_phy",
    "rx_symbol_err_phy",
    "link_down_events_phy",
)

_HEADER = "NIC statistics:"
_NO_STATS = "no stats available"
_RE_INT = re.compile(r"^[+-]?\d+$")
_RE_PFC = re.compile(r"^(?P<dir>rx|tx)_prio(?P<prio>[0-7])_pause(?P<kind>|_duration|_transition)$")
_RE_PRIO_DISCARDS = re.compile(r"^rx_prio[0-7]_discards$")
_STORM = {"tx_pause_storm_warning_events": "warning", "tx_pause_storm_error_events": "error"}


def parse_ethtool_stats(text: str) -> dict[str, int]:
    """Parse ``ethtool -S`` output into ``{name: value}``.

    Lines are ``     name: value``; names may contain spaces or dots. Duplicate
    names keep the last value; non-integer values are skipped; lines without a
    colon (a command echo, blank lines) are ignored. A missing ``NIC statistics:``
    header is tolerated when stat lines are present (e.g. output through grep).

    Raises :class:`ParseError` for empty input, ethtool's ``no stats available``
    message, or text with neither the header nor any stat line.
    """
    if not text or not text.strip():
        raise ParseError("ethtool -S: empty output")
    if _NO_STATS in text.lower():
        raise ParseError("ethtool -S: driver reports no stats available")

    stats: dict[str, int] = {}
    header = False
    for raw in text.splitlines():
        line = raw.strip()
        if line == _HEADER:
            header = True
            continue
        name, sep, value = line.rpartition(":")
        name, value = name.strip(), value.strip()
        if sep and name and _RE_INT.match(value):
            stats[name] = int(value)

    if not header and not stats:
        raise ParseError("ethtool -S: no 'NIC statistics:' header and no stat lines")
    return stats


def curate_roce_stats(stats: dict[str, int]) -> RoceNetdevStats:
    """Keep only the PFC, pause-storm and error counters that matter for RoCE."""
    pause: dict[tuple[int, str], int] = {}
    duration: dict[tuple[int, str], int] = {}
    transitions: dict[tuple[int, str], int] = {}
    storm: dict[str, int] = {}
    errors: dict[str, int] = {}
    by_kind = {"": pause, "_duration": duration, "_transition": transitions}
    for name, value in stats.items():
        if m := _RE_PFC.match(name):
            by_kind[m["kind"]][(int(m["prio"]), m["dir"])] = value
        elif name in _STORM:
            storm[_STORM[name]] = value
        elif name in CURATED_ERROR_COUNTERS or _RE_PRIO_DISCARDS.match(name):
            errors[name] = value
    return RoceNetdevStats(
        pause=pause,
        pause_duration_us=duration,
        pause_transitions=transitions,
        pause_storm=storm,
        errors=errors,
    )
