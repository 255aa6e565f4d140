"""`ethtool -I --show-fec <netdev>`: the FEC encodings configured and active, and (with -I, where the
driver gives them) the FEC statistics.

The layout is ethtool's netlink/fec.c:

    FEC parameters for eth0:
    Supported/Configured FEC encodings: Auto RS BaseR
    Active FEC encoding: RS
    Statistics:
      corrected_blocks: 256
        Lane 0: 255
        Lane 1: 1
      uncorrectable_blocks: 145
      corrected_bits: 2048

ethtool 6.18 (with Linux 6.18's FEC histogram) prints lanes on the counter's own line and the
histogram's bins, one per range of corrected symbols per codeword:

      corrected_blocks: 123 [ per_lane:  100, 23 ]
      fec_symbol_err_0: 445 [ per_lane:  125, 120, 100, 100 ]
      fec_symbol_err_1_to_3: 12

(the patch's code prints `fec_symbols_err_`, its message `fec_symbol_err_`: both are read). Pure.
"""

from __future__ import annotations

import re

from fabricmon.model.ber import FecStats, PhyCounters, fec_mode
from fabricmon.parsers.errors import ParseError

_HEADER = re.compile(r"^FEC parameters for (?P<nd>\S+?):?\s*$")
_STAT = re.compile(r"^(?P<name>[a-z_0-9]+):\s*(?P<value>\d+)(?:\s*\[\s*per_lane:\s*(?P<lanes>[\d,\s]*)\])?\s*$")
_LANE = re.compile(r"^Lane\s+(?P<lane>\d+):\s*(?P<value>\d+)\s*$")
_BIN = re.compile(r"^fec_symbols?_err_(?P<lo>\d+)(?:_to_(?P<hi>\d+))?$")
_STATS = {"corrected_blocks": "fec_corrected_blocks", "uncorrectable_blocks": "fec_uncorrectable_blocks",
          "corrected_bits": "corrected_bits"}


def parse_show_fec(text: str) -> FecStats:
    """One netdev's answer. Raises ParseError for output without ethtool's FEC header."""
    if not text or not text.strip():
        raise ParseError("ethtool --show-fec: empty output")
    lines = [ln.strip() for ln in text.splitlines()]
    header = next((m for ln in lines if (m := _HEADER.match(ln))), None)
    if header is None:
        raise ParseError(f"ethtool --show-fec: no 'FEC parameters for' line ({lines[0][:80]!r})")
    rec = FecStats(netdev=header["nd"])
    counters: dict[str, int] = {}
    current: str | None = None          # the statistic the following "Lane N:" lines belong to
    for ln in lines:
        if ln.startswith("Supported/Configured FEC encodings:"):
            rec.configured = tuple(ln.split(":", 1)[1].split())
            continue
        if ln.startswith("Active FEC encoding:"):
            rec.active_text = ln.split(":", 1)[1].strip()
            rec.active = fec_mode(rec.active_text)
            continue
        if ln == "Statistics:":
            rec.has_statistics = True
            continue
        if (lm := _LANE.match(ln)) is not None and current is not None:
            _lane(rec, current, int(lm["lane"]), int(lm["value"]))
            continue
        sm = _STAT.match(ln)
        if sm is None:
            continue
        name, value = sm["name"], int(sm["value"])
        lanes = [int(x) for x in (sm["lanes"] or "").replace(",", " ").split()]
        bm = _BIN.match(name)
        if bm is not None:
            lo = int(bm["lo"])
            counters[f"fec_bin_{lo}_{int(bm['hi']) if bm['hi'] else lo}"] = value
            current = None
            continue
        if name in _STATS:
            counters[_STATS[name]] = value
            current = name
            for i, v in enumerate(lanes):
                _lane(rec, name, i, v)
        else:
            current = None
    rec.counters = PhyCounters(counters)
    return rec


def _lane(rec: FecStats, stat: str, lane: int, value: int) -> None:
    if stat == "corrected_blocks":
        rec.lanes_corrected[lane] = value
    elif stat == "uncorrectable_blocks":
        rec.lanes_uncorrectable[lane] = value


# ethtool's words for "this netdev has no FEC to tell": not a failure (a virtual netdev, an IPoIB one,
# a driver without get_fecparam)
NO_FEC = ("operation not supported", "not supported", "no such device", "invalid argument")

__all__ = ["NO_FEC", "parse_show_fec"]
