"""Switch vitals over SNMP: fans, power supplies and temperatures, from ENTITY-SENSOR-MIB, ENTITY-STATE-MIB
and the vendors' own tables, declared as a table of vendor quirks (VENDOR_TABLES: one row per vendor table,
its OIDs, how its index names a part and what each state value means), the way parsers.snmp declares the
port model. docs/vitals.md. The facts come from the MIBs and LibreNMS's sensor definitions
(includes/definitions/discovery/*.yaml of librenms/librenms); no code of theirs.

- ENTITY-SENSOR-MIB (Arista, Cumulus, SONiC, NX-OS): every sensor that is no transceiver's (those are
  optics: parsers.entity_sensor), typed celsius (8) a temperature, rpm (10) a fan, watts/volts/amperes a
  power supply's where its name says so; entPhySensorOperStatus ok(1) / unavailable(2) /
  nonoperational(3); Arista's threshold table bounds it;
- ENTITY-STATE-MIB entStateOper (disabled(2) of a fan or power supply entity is a failure);
- CISCO-ENTITY-FRU-CONTROL-MIB cefcFRUPowerOperStatus, cefcFanTrayOperStatus; CISCO-ENVMON-MIB's fan,
  supply and temperature tables;
- JUNIPER-MIB jnxOperatingTable (descr, state, temperature by container: power supplies, fan trays, FPCs);
- DELL-NETWORKING-CHASSIS-MIB (OS9) and DELLEMC-OS10-CHASSIS-MIB (OS10) power supply and fan tray states.

Text in (net-snmp's `-On -Oe` walk output), records out: every part a switch reports, with its state as
the switch says it, the status fabricmon gives it and its reading. A switch that answers none of these
tables has no vitals (no series, no OK).
"""

from __future__ import annotations

import re
from dataclasses import dataclass, replace

from fabricmon.model.vitals import Vital
from fabricmon.parsers.entity_sensor import quantity
from fabricmon.parsers.errors import ParseError
from fabricmon.parsers.snmp import parse_lines

OK, WARNING, CRITICAL = 0, 1, 2
# a state table's value -> (its name, status; None: not judged)
States = dict[int, tuple[str, int | None]]


@dataclass(frozen=True, slots=True)
class VendorTable:
    """One vendor's state table: `state` the state column's OID (indexed like `descr`), `descr` the name
    column (None: the part is named from `label` and its index), `temp` a temperature column (celsius),
    `states` value -> (its name, status; None: not judged, e.g. absent)."""
    name: str
    vendor: str
    kind: str                                   # "fan", "psu", "temperature", or "by_name" (from the descr)
    state: str
    states: States
    descr: str | None = None
    label: str = ""
    temp: str | None = None
    by_entity: bool = False                     # indexed by entPhysicalIndex: named by ENTITY-MIB


_ENVMON: States = {1: ("normal", OK), 2: ("warning", WARNING), 3: ("critical", CRITICAL), 4: ("shutdown", CRITICAL),
                   5: ("notPresent", None), 6: ("notFunctioning", CRITICAL)}
_UPDOWN: States = {1: ("up", OK), 2: ("down", CRITICAL), 3: ("absent", None)}
_NORMAL: States = {1: ("normal", OK), 2: ("abnormal", CRITICAL)}

VENDOR_TABLES: tuple[VendorTable, ...] = (
    # CISCO-ENTITY-FRU-CONTROL-MIB: indexed by entPhysicalIndex
    VendorTable("cefcFRUPowerOperStatus", "cisco", "psu", "1.3.6.1.4.1.9.9.117.1.1.2.1.2", {
        1: ("offEnvOther", CRITICAL), 2: ("on", OK), 3: ("offAdmin", WARNING), 4: ("offDenied", CRITICAL),
        5: ("offEnvPower", CRITICAL), 6: ("offEnvTemp", CRITICAL), 7: ("offEnvFan", CRITICAL), 8: ("failed", CRITICAL),
        9: ("onButFanFail", WARNING), 10: ("offCooling", CRITICAL), 11: ("offConnectorRating", CRITICAL),
        12: ("onButInlinePowerFail", WARNING)}, by_entity=True, label="power supply"),
    VendorTable("cefcFanTrayOperStatus", "cisco", "fan", "1.3.6.1.4.1.9.9.117.1.4.1.1.1", {
        1: ("unknown", None), 2: ("up", OK), 3: ("down", CRITICAL), 4: ("warning", WARNING)},
        by_entity=True, label="fan tray"),
    # CISCO-ENVMON-MIB
    VendorTable("ciscoEnvMonFanState", "cisco", "fan", "1.3.6.1.4.1.9.9.13.1.4.1.3", _ENVMON,
                descr="1.3.6.1.4.1.9.9.13.1.4.1.2"),
    VendorTable("ciscoEnvMonSupplyState", "cisco", "psu", "1.3.6.1.4.1.9.9.13.1.5.1.3", _ENVMON,
                descr="1.3.6.1.4.1.9.9.13.1.5.1.2"),
    VendorTable("ciscoEnvMonTemperatureState", "cisco", "temperature", "1.3.6.1.4.1.9.9.13.1.3.1.6", _ENVMON,
                descr="1.3.6.1.4.1.9.9.13.1.3.1.2", temp="1.3.6.1.4.1.9.9.13.1.3.1.3"),
    # JUNIPER-MIB jnxOperatingTable (jnxOperatingDescr .5, jnxOperatingState .6, jnxOperatingTemp .7)
    VendorTable("jnxOperatingState", "juniper", "by_name", "1.3.6.1.4.1.2636.3.1.13.1.6", {
        1: ("unknown", None), 2: ("running", OK), 3: ("ready", OK), 4: ("reset", WARNING),
        5: ("runningAtFullSpeed", WARNING), 6: ("down", CRITICAL), 7: ("standby", OK)},
        descr="1.3.6.1.4.1.2636.3.1.13.1.5", temp="1.3.6.1.4.1.2636.3.1.13.1.7"),
    # DELL-NETWORKING-CHASSIS-MIB (Dell Networking OS9)
    VendorTable("dellNetPowerSupplyOperStatus", "dell-os9", "psu", "1.3.6.1.4.1.6027.3.26.1.4.6.1.4", _UPDOWN,
                label="PSU"),
    VendorTable("dellNetFanTrayOperStatus", "dell-os9", "fan", "1.3.6.1.4.1.6027.3.26.1.4.7.1.4", _UPDOWN,
                label="Fan tray"),
    # DELLEMC-OS10-CHASSIS-MIB (Dell EMC Networking OS10)
    VendorTable("os10PowerSupplyOperStatus", "dell-os10", "psu", "1.3.6.1.4.1.674.11000.5000.100.4.1.2.1.1.4",
                _NORMAL, label="PSU"),
    VendorTable("os10FanTrayOperStatus", "dell-os10", "fan", "1.3.6.1.4.1.674.11000.5000.100.4.1.2.2.1.4", _NORMAL,
                label="Fan tray"),
    VendorTable("os10FanOperStatus", "dell-os10", "fan", "1.3.6.1.4.1.674.11000.5000.100.4.1.2.3.1.7", _NORMAL,
                label="Fan"),
)

# The walks, by name -> root OID (one walk per column or small table).
ENTITY_WALKS: tuple[tuple[str, str], ...] = (
    ("ent_descr", "1.3.6.1.2.1.47.1.1.1.1.2"),
    ("ent_class", "1.3.6.1.2.1.47.1.1.1.1.5"),
    ("ent_name", "1.3.6.1.2.1.47.1.1.1.1.7"),
    ("ent_sensor", "1.3.6.1.2.1.99.1.1.1"),
    ("arista_threshold", "1.3.6.1.4.1.30065.3.12.1.1.1"),
    ("ent_state_oper", "1.3.6.1.2.1.131.1.1.1.3"),
)


def vendor_walks() -> tuple[tuple[str, str], ...]:
    out: list[tuple[str, str]] = []
    for t in VENDOR_TABLES:
        out.append((f"{t.name}:state", t.state))
        if t.descr:
            out.append((f"{t.name}:descr", t.descr))
        if t.temp:
            out.append((f"{t.name}:temp", t.temp))
    return tuple(out)


VITALS_WALKS: tuple[tuple[str, str], ...] = (*ENTITY_WALKS, *vendor_walks())
_ROOT = dict(VITALS_WALKS)

# ENTITY-SENSOR-MIB EntitySensorDataType -> unit; EntitySensorStatus; ENTITY-MIB PhysicalClass
_UNIT = {3: "volts", 4: "volts", 5: "amperes", 6: "watts", 8: "celsius", 10: "rpm"}
_SENSOR_STATUS = {1: ("ok", OK), 2: ("unavailable", None), 3: ("nonoperational", CRITICAL)}
_CLASS = {6: "psu", 7: "fan"}
_ENT_STATE = {1: ("unknown", None), 2: ("disabled", CRITICAL), 3: ("enabled", OK), 4: ("testing", WARNING)}
ARISTA_UNSET = -1000000000
_PSU = re.compile(r"\b(power\s*supply|psu|pwr|pem)\b|powersupply\d", re.I)
_FAN = re.compile(r"\bfan", re.I)


def _values(text: str, root: str) -> dict[str, str]:
    """A column's walk -> index (as printed after the root) -> value (quotes and Hex-STRING decoded)."""
    out: dict[str, str] = {}
    prefix = root + "."
    for oid, typ, val in parse_lines(text):
        if not oid.startswith(prefix):
            continue
        if typ == "Hex-STRING":
            val = bytes.fromhex(val.replace(" ", "")).decode("utf-8", "replace").rstrip("\x00")
        elif len(val) >= 2 and val[0] == '"' and val[-1] == '"':
            val = val[1:-1].replace('\\"', '"')
        out[oid[len(prefix):]] = val
    return out


def _int(v: str | None) -> int | None:
    if v is None:
        return None
    m = re.match(r"^\s*(-?\d+)", v) or re.search(r"\((-?\d+)\)", v)
    return int(m.group(1)) if m else None


def kind_of(name: str) -> str:
    if _PSU.search(name):
        return "psu"
    if _FAN.search(name):
        return "fan"
    return "module"


def _unique(vitals: list[Vital]) -> list[Vital]:
    """Parts whose names repeat (Arista's "Hotspot temperature sensor" of each PSU) get their index."""
    seen: dict[str, int] = {}
    for v in vitals:
        seen[v.part] = seen.get(v.part, 0) + 1
    return [replace(v, part=f"{v.part} ({v.index})") if seen[v.part] > 1 else v for v in vitals]


def _entity_sensors(texts: dict[str, str], label: dict[str, str]) -> list[Vital]:
    root = _ROOT["ent_sensor"]
    cols: dict[int, dict[str, str]] = {}
    for k, v in _values(texts.get("ent_sensor", ""), root).items():
        col, _, idx = k.partition(".")
        if col.isdigit():
            cols.setdefault(int(col), {})[idx] = v
    arista: dict[int, dict[str, str]] = {}
    for k, v in _values(texts.get("arista_threshold", ""), _ROOT["arista_threshold"]).items():
        col, _, idx = k.partition(".")
        if col.isdigit():
            arista.setdefault(int(col), {})[idx] = v
    out: list[Vital] = []
    for idx, t in cols.get(1, {}).items():
        unit = _UNIT.get(_int(t) or 0)
        name = label.get(idx, "")
        if unit is None or not name:
            continue
        if unit != "rpm" and quantity(name, "celsius" if unit == "celsius" else unit) is not None:
            continue            # a transceiver's sensor: optics, not vitals
        if unit == "celsius":
            kind = "temperature"
        elif unit == "rpm":
            kind = "fan"
        elif _PSU.search(name):
            kind = "psu"
        else:
            continue            # a voltage or current rail that names no power supply: not a vital
        raw, scale, prec = _int(cols.get(4, {}).get(idx)), _int(cols.get(2, {}).get(idx)), _int(cols.get(3, {}).get(idx))
        st = _int(cols.get(5, {}).get(idx))
        state, status = _SENSOR_STATUS.get(st or 0, (f"status {st}", None))
        value = None
        if raw is not None and scale is not None and prec is not None and abs(raw) < 1000000000:
            value = raw * 10.0 ** (3 * (scale - 9)) * 10.0 ** (-prec)
        limits: dict[str, float] = {}
        for column, level in ((1, "low_warning"), (2, "low_critical"), (3, "high_warning"), (4, "high_critical")):
            bound_raw = _int(arista.get(column, {}).get(idx))
            if bound_raw is not None and bound_raw != ARISTA_UNSET and scale is not None and prec is not None:
                limits[level] = bound_raw * 10.0 ** (3 * (scale - 9)) * 10.0 ** (-prec)
        note = ""
        if status == OK and value is not None:
            if kind == "fan" and value == 0:
                status, note = CRITICAL, "stopped (0 rpm)"
            for level, bound in sorted(limits.items()):
                beyond = value > bound if level.startswith("high") else value < bound
                if beyond:
                    lv = CRITICAL if level.endswith("critical") else WARNING
                    if lv > (status or 0):
                        status, note = lv, f"beyond the switch's {level.replace('_', ' ')} threshold {bound:g}"
        out.append(Vital(index=idx, part=name, kind=kind, source="ENTITY-SENSOR-MIB", state=state, status=status,
                         value=value, unit=unit, note=note, limits=tuple(sorted(limits.items()))))
    return out


def _entity_state(texts: dict[str, str], label: dict[str, str], classes: dict[str, int]) -> list[Vital]:
    out = []
    for idx, v in _values(texts.get("ent_state_oper", ""), _ROOT["ent_state_oper"]).items():
        kind = _CLASS.get(classes.get(idx, 0))
        if kind is None:
            continue            # only fans and power supplies: a disabled port module is no vital
        n = _int(v)
        state, status = _ENT_STATE.get(n or 0, (f"state {n}", None))
        out.append(Vital(index=idx, part=label.get(idx) or f"{kind} {idx}", kind=kind, source="ENTITY-STATE-MIB",
                         state=state, status=status))
    return out


def _vendor(t: VendorTable, texts: dict[str, str], label: dict[str, str]) -> list[Vital]:
    states = _values(texts.get(f"{t.name}:state", ""), t.state)
    descrs = _values(texts.get(f"{t.name}:descr", ""), t.descr) if t.descr else {}
    temps = _values(texts.get(f"{t.name}:temp", ""), t.temp) if t.temp else {}
    out = []
    for idx, v in states.items():
        n = _int(v)
        state, status = t.states.get(n or 0, (f"state {n}", None))
        name = descrs.get(idx, "").strip() or (label.get(idx, "") if t.by_entity else "") or \
            f"{t.label or t.name} {idx}"
        if t.kind == "by_name":
            kind = kind_of(name)
        else:
            kind = t.kind
        temp = _int(temps.get(idx)) if temps else None
        out.append(Vital(index=idx, part=name, kind=kind, source=t.name, state=state, status=status,
                         value=float(temp) if temp else None, unit="celsius" if temp else "", vendor=t.vendor))
    return out


def parse_vitals(texts: dict[str, str]) -> list[Vital]:
    """Every part the switch reports in the walks given (name -> walk text of VITALS_WALKS), each once per
    table it appears in. Raises ParseError for a walk that is not net-snmp's output."""
    try:
        names = _values(texts.get("ent_name", ""), _ROOT["ent_name"])
        descrs = _values(texts.get("ent_descr", ""), _ROOT["ent_descr"])
        classes = {k: _int(v) or 0 for k, v in _values(texts.get("ent_class", ""), _ROOT["ent_class"]).items()}
    except ValueError as exc:
        raise ParseError(f"unreadable ENTITY-MIB walk: {exc}") from None
    label = {i: (names.get(i) or descrs.get(i) or "") for i in set(names) | set(descrs)}
    out = _entity_sensors(texts, label) + _entity_state(texts, label, classes)
    for t in VENDOR_TABLES:
        out += _vendor(t, texts, label)
    return _unique(out)


__all__ = ["ENTITY_WALKS", "VENDOR_TABLES", "VITALS_WALKS", "VendorTable", "kind_of", "parse_vitals"]
