"""mlxlink (NVIDIA MFT / mstflint) text output: `mlxlink -d <dev> -p <port> -m -c` and `--show_fec`.

mlxlink prints titled sections ("Operational Info", "Module Info", "Physical Counters and BER Info",
"FEC Capability Info", ...), each a title line, a line of dashes and `Name<padding>: value` lines.
A terminal run colours values with ANSI escapes; the order of lines, their padding (32 or 35
characters) and which lines a section has change with the MFT version, the device and the protocol
(Symbol Errors/BER only on InfiniBand, Link Down/Error Recovery counters only on Ethernet, Raw
Physical BER Per Lane only on 7 nm devices): every field is looked up by its name, none by position.
Names and formats are those of mstflint's mlxlink/modules/mlxlink_commander.cpp (prepareBerInfo)
and mlxlink_maps.cpp (_fecModeActive); the layout is that of real recorded outputs (docs/ber.md).

A BER is printed as `<coef>E-<magnitude>` ("2E-9"); `15E-255` is the firmware's "nothing counted"
(about 0). Values `N/A` are absent. Pure: text in, records out.
"""

from __future__ import annotations

import re

from fabricmon.model.ber import MlxlinkPort, ModuleId, PhyCounters, fec_mode, medium_of
from fabricmon.parsers.errors import ParseError

_ANSI = re.compile(r"\x1b\[[0-9;]*[A-Za-z]")
_FIELD = re.compile(r"^(?P<name>[^:]*?\S)\s*:\s?(?P<value>.*)$")
_BER = re.compile(r"^\s*(?P<coef>\d+(?:\.\d+)?)\s*[eE]\s*(?P<exp>[-+]?\d+)\s*$")
_WIDTH = re.compile(r"^\s*(\d+)\s*x\s*$", re.I)
_NUM = re.compile(r"^[-+]?\d+(?:\.\d+)?$")
SECTIONS = ("Operational Info", "Supported Info", "Troubleshooting Info", "Tool Information", "Module Info",
            "Physical Counters and BER Info", "FEC Capability Info")


def strip_ansi(text: str) -> str:
    return _ANSI.sub("", text)


def parse_ber(text: str) -> float | None:
    """`2E-9` -> 2e-09; `15E-255` (the firmware's "no errors") -> 0.0; N/A and the like -> None."""
    m = _BER.match(strip_ansi(text))
    if not m:
        return None
    exp = int(m["exp"])
    if exp <= -200:
        return 0.0
    return float(m["coef"]) * 10.0 ** exp


def sections(text: str) -> dict[str, dict[str, str]]:
    """{section title: {field name: value}}; lines before any title go under ""; a repeated name keeps
    the first value (a section printed twice by a loop over ports is not one port)."""
    out: dict[str, dict[str, str]] = {}
    current = ""
    lines = [strip_ansi(raw).rstrip() for raw in text.splitlines()]
    for i, line in enumerate(lines):
        s = line.strip()
        if not s:
            continue
        nxt = lines[i + 1].strip() if i + 1 < len(lines) else ""
        if ":" not in s and nxt and set(nxt) == {"-"}:
            current = s
            out.setdefault(current, {})
            continue
        if set(s) == {"-"}:
            continue
        m = _FIELD.match(s)
        if m is None:
            continue
        out.setdefault(current, {}).setdefault(m["name"].strip(), m["value"].strip())
    return out


def _int(v: str | None) -> int | None:
    if v is None:
        return None
    v = v.strip()
    return int(v) if v.isdigit() else None


def _ints(v: str | None) -> list[int] | None:
    """"3946476397,5120336064" -> [..]; None unless every item is an integer."""
    if v is None:
        return None
    items = [x.strip() for x in v.split(",") if x.strip()]
    if not items or not all(x.isdigit() for x in items):
        return None
    return [int(x) for x in items]


def parse_mlxlink(text: str, device: str = "", port: int = 1) -> MlxlinkPort:
    """One port's `mlxlink -m -c` (or `-c`, `--show_fec`) answer.

    Raises ParseError for output that has none of mlxlink's sections (an error message, garbage)."""
    if not text or not text.strip():
        raise ParseError("mlxlink: empty output")
    secs = sections(text)
    if not any(s in secs for s in SECTIONS):
        first = next((ln.strip() for ln in strip_ansi(text).splitlines() if ln.strip()), "")
        raise ParseError(f"mlxlink: no mlxlink section in the output ({first[:120]!r})")
    rec = MlxlinkPort(device, port)
    op = secs.get("Operational Info", {})
    rec.state = op.get("State", "")
    rec.speed = op.get("Speed", "")
    if (w := _WIDTH.match(op.get("Width", ""))) is not None:
        rec.width = int(w.group(1))
    rec.fec_text = op.get("FEC", "")
    rec.fec = fec_mode(rec.fec_text) if rec.fec_text and rec.fec_text != "N/A" else "unknown"
    rec.recommendation = secs.get("Troubleshooting Info", {}).get("Recommendation", "")
    ber = secs.get("Physical Counters and BER Info", {})
    counters: dict[str, int] = {}
    lanes = _ints(ber.get("Raw Physical Errors Per Lane"))
    if lanes is not None:
        for i, v in enumerate(lanes):
            counters[f"raw_errors_lane{i}"] = v
        counters["raw_errors"] = sum(lanes)
    for name, key in (("Effective Physical Errors", "effective_errors"), ("Symbol Errors", "symbol_errors")):
        n = _int(ber.get(name))
        if n is not None:
            counters[key] = n
    rec.counters = PhyCounters(counters)
    t = ber.get("Time Since Last Clear [Min]")
    rec.since_clear_minutes = float(t) if t is not None and _NUM.match(t) else None
    rec.raw_ber = parse_ber(ber.get("Raw Physical BER", ""))
    rec.effective_ber = parse_ber(ber.get("Effective Physical BER", ""))
    rec.symbol_ber = parse_ber(ber.get("Symbol BER", ""))
    per_lane = ber.get("Raw Physical BER Per Lane")
    if per_lane:
        for i, item in enumerate(per_lane.split(",")):
            b = parse_ber(item)
            if b is not None:
                rec.raw_ber_lanes[i] = b
    rec.link_down = _int(ber.get("Link Down Counter"))
    rec.link_error_recovery = _int(ber.get("Link Error Recovery Counter"))
    mod = secs.get("Module Info")
    if mod:
        serial = mod.get("Vendor Serial Number", "")
        if serial and serial != "N/A":
            length = mod.get("Transfer Distance [m]", "")
            rec.module = ModuleId(vendor=_na(mod.get("Vendor Name")), part_number=_na(mod.get("Vendor Part Number")),
                                  serial=serial, kind=_na(mod.get("Identifier")),
                                  medium=medium_of(_na(mod.get("Cable Type")), _na(mod.get("Cable Technology"))),
                                  length_m=float(length) if _NUM.match(length or "") else None)
    cap = secs.get("FEC Capability Info", {})
    for name, value in cap.items():
        if name.startswith("FEC Capability "):
            rec.fec_capability[name[len("FEC Capability "):].strip()] = value
    if not ber and not cap and not mod:
        rec.note = "mlxlink printed no counters (the link is down, or the device does not give them)"
    return rec


def _na(v: str | None) -> str:
    return "" if v is None or v.strip() in ("N/A", "") else v.strip()


__all__ = ["parse_ber", "parse_mlxlink", "sections", "strip_ansi"]
