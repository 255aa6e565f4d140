"""Parser for ``ethtool -m <netdev>`` (module EEPROM / digital diagnostics) as ethtool decodes
it: SFF-8472 (SFP), SFF-8636 (QSFP+/QSFP28) and CMIS (QSFP-DD, OSFP, QSFP112), text output.

Text lines are ``<name padded> : <value>``. What ethtool prints per module class:

- SFP: ``Laser bias current``, ``Laser output power``, ``Receiver signal average optical power``
  (one lane), ``Module temperature``, ``Module voltage``;
- QSFP/CMIS: ``Laser tx bias current (Channel N)``, ``Transmit avg optical power (Channel N)``,
  ``Rcvr signal avg optical power(Channel N)`` (no space before the parenthesis in SFF-8636's
  decoder, one in CMIS's); channels are 1-based, some builds number them from 0;
- all: ``<quantity> {high,low} {alarm,warning} threshold`` lines and ``... alarm/warning : On|Off``
  flags (per channel on QSFP/CMIS).

Power reads ``0.9720 mW / -0.12 dBm`` (``0.0000 mW / -inf dBm`` when dark) or, in some builds,
``2.4 dBm`` alone. A module without diagnostics (a copper DAC, ``Optical diagnostics support :
No``) parses to a record without readings: "no data", which the source reports as such.
"""

from __future__ import annotations

import re

from fabricmon.model.optics import LaneDiag, Limits, ModuleDiag, dbm_to_mw, mw_to_dbm
from fabricmon.model.ber import medium_of
from fabricmon.parsers.errors import ParseError

__all__ = ["module_class", "parse_module", "parse_module_text"]

_LINE = re.compile(r"^\s*(?P<key>[^:]+?)\s*:\s*(?P<val>.*?)\s*$")
_CHAN = re.compile(r"^(?P<name>.*?)\s*\((?:Channel|Chan|Lane)\s*(?P<n>\d+)\)$", re.I)
_NUM = r"[+-]?(?:\d+(?:\.\d*)?|\.\d+|inf)"
_POWER = re.compile(rf"^(?P<mw>{_NUM})\s*mW(?:\s*/\s*(?P<dbm>{_NUM})\s*dBm)?|^(?P<only>{_NUM})\s*dBm", re.I)
_FIRST = re.compile(rf"^(?P<v>{_NUM})")

# reading name (lower case, channel removed) -> (quantity, per lane)
_READINGS = {
    "laser bias current": ("tx_bias", False),
    "laser tx bias current": ("tx_bias", True),
    "laser output power": ("tx_power", False),
    "transmit avg optical power": ("tx_power", True),
    "receiver signal average optical power": ("rx_power", False),
    "rcvr signal avg optical power": ("rx_power", True),
    "receiver signal optical power": ("rx_power", False),
    "module temperature": ("temperature", False),
    "module voltage": ("voltage", False),
}
# threshold name prefix -> quantity
_THRESHOLDS = {
    "laser bias current": "tx_bias",
    "laser output power": "tx_power",
    "laser tx power": "tx_power",
    "laser rx power": "rx_power",
    "module temperature": "temperature",
    "module voltage": "voltage",
}
_THRESH = re.compile(r"^(?P<q>.+?)\s+(?P<hl>high|low)\s+(?P<aw>alarm|warning)\s+threshold$", re.I)
_FLAG = re.compile(r"^(?P<q>.+?)\s+(?P<hl>high|low)\s+(?P<aw>alarm|warning)$", re.I)


def module_class(identifier: str, revision: str = "") -> str:
    """SFP, QSFP or CMIS from the SFF-8024 identifier byte ethtool prints (``0x11 (QSFP28)``)."""
    m = re.match(r"\s*0x([0-9a-f]{2})", identifier, re.I)
    ident = int(m.group(1), 16) if m else None
    if ident in (0x02, 0x03, 0x0b):
        return "SFP"
    if ident in (0x0c, 0x0d, 0x11):
        return "QSFP"
    if ident is not None and ident >= 0x18:
        return "CMIS"
    low = (identifier + " " + revision).lower()
    if "cmis" in low or "qsfp-dd" in low or "osfp" in low:
        return "CMIS"
    if "qsfp" in low or "8636" in low:
        return "QSFP"
    if "sfp" in low:
        return "SFP"
    return "unknown"


def _power_mw(val: str) -> float | None:
    m = _POWER.match(val)
    if not m:
        return None
    if m.group("mw") is not None:
        return float(m.group("mw"))
    return dbm_to_mw(float(m.group("only")))


def _power_dbm(val: str) -> float | None:
    """A threshold's dBm: the printed dBm where given, else from mW."""
    m = _POWER.match(val)
    if not m:
        return None
    if m.group("dbm") is not None:
        v = float(m.group("dbm"))
        return None if v != v or v == float("-inf") else v
    if m.group("only") is not None:
        return float(m.group("only"))
    return mw_to_dbm(float(m.group("mw")))


def _first(val: str) -> float | None:
    m = _FIRST.match(val)
    return float(m.group("v")) if m else None


def parse_module_text(text: str) -> ModuleDiag:
    """Parse ``ethtool -m`` text. Raises ParseError when the text is not module information at
    all (no ``Identifier`` line and no reading)."""
    mod = ModuleDiag()
    thresholds: dict[str, dict[str, float | None]] = {}
    raised: list[str] = []
    revision = ""
    recognised = False
    lanes_zero_based = False
    dom_supported: bool | None = None
    for raw in text.splitlines():
        m = _LINE.match(raw)
        if not m:
            continue
        key, val = m.group("key"), m.group("val")
        low = key.lower()
        if low == "identifier":
            mod.identifier, recognised = val, True
            continue
        if low == "vendor name":
            mod.vendor = val
            continue
        if low == "vendor pn":
            mod.part_number = val
            continue
        if low == "vendor sn":
            mod.serial = val
            continue
        if low == "revision compliance":
            revision = val
            continue
        if low == "transmitter technology":
            mod.medium = medium_of(val)         # the BER budget's medium (model.ber)
            continue
        if low == "optical diagnostics support":
            dom_supported = val.lower().startswith("yes")
            continue
        t = _THRESH.match(key)
        if t:
            q = _THRESHOLDS.get(t.group("q").lower())
            if q is None:
                continue
            v = _power_dbm(val) if q in ("rx_power", "tx_power") else _first(val)
            thresholds.setdefault(q, {})[f"{t.group('hl').lower()}_{t.group('aw').lower()}"] = v
            recognised = True
            continue
        c = _CHAN.match(key)
        name, lane = (c.group("name").lower(), int(c.group("n"))) if c else (low, None)
        f = _FLAG.match(name)
        if f and val.lower() in ("on", "off"):
            if val.lower() == "on":
                raised.append(re.sub(r"\s+", " ", key))
            continue
        r = _READINGS.get(name)
        if r is None:
            continue
        q, per_lane = r
        recognised = True
        if q == "temperature":
            mod.temperature_c = _first(val)
            continue
        if q == "voltage":
            mod.voltage_v = _first(val)
            continue
        if per_lane and lane is None:
            continue
        if lane == 0:
            lanes_zero_based = True
        n = 1 if lane is None else lane
        ln = mod.lanes.setdefault(n, LaneDiag(n))
        if q == "tx_bias":
            ln.tx_bias_ma = _first(val)
        elif q == "tx_power":
            ln.tx_power_mw = _power_mw(val)
        else:
            ln.rx_power_mw = _power_mw(val)
    if not recognised:
        raise ParseError("no module information (no Identifier line and no diagnostics)")
    if lanes_zero_based:        # a build that numbers channels from 0: lanes are 1-based here
        mod.lanes = {n + 1: LaneDiag(n + 1, ln.rx_power_mw, ln.tx_power_mw, ln.tx_bias_ma)
                     for n, ln in sorted(mod.lanes.items())}
    if dom_supported is False:
        mod.lanes, mod.temperature_c, mod.voltage_v = {}, None, None
    mod.module_class = module_class(mod.identifier, revision)
    mod.limits = {q: Limits(d.get("high_alarm"), d.get("low_alarm"), d.get("high_warning"), d.get("low_warning"))
                  for q, d in thresholds.items()}
    mod.limits = {q: lim for q, lim in mod.limits.items() if not lim.empty}
    mod.raised = tuple(raised)
    return mod


def parse_module(text: str) -> ModuleDiag:
    """``ethtool -m`` text. ``--json`` output (ethtool 6.9+) is refused by name: no recording of
    it was available to test against, and the text form is what every ethtool prints."""
    if text.lstrip().startswith(("[", "{")):
        raise ParseError("ethtool --json -m output is not supported; run ethtool -m without --json")
    return parse_module_text(text)
