"""A switch's transceiver sensors over SNMP, joined to its interfaces (docs/optics.md, "On the switches"):

- ENTITY-SENSOR-MIB entPhySensorTable `1.3.6.1.2.1.99.1.1.1.{1 type, 2 scale, 3 precision, 4 value,
  5 oper status}` (Arista, SONiC), with Arista's thresholds (ARISTA-ENTITY-SENSOR-MIB
  `1.3.6.1.4.1.30065.3.12.1.1.1.{1 low warning, 2 low critical, 3 high warning, 4 high critical}`,
  in the sensor's own units; -1000000000 is "not set");
- CISCO-ENTITY-SENSOR-MIB entSensorValueTable `1.3.6.1.4.1.9.9.91.1.1.1.1.{1 type (14 dBm), 2 scale,
  3 precision, 4 value, 5 status}` with its thresholds `1.3.6.1.4.1.9.9.91.1.2.1.1.{2 severity,
  3 relation, 4 value}.<sensor>.<n>` (NX-OS, IOS-XE, IOS-XR);
- the sensor's name: ENTITY-MIB entPhysicalName `.47.1.1.1.1.7`, else entPhysicalDescr `.2`.

A value is `value x 10^(3 x (scale - 9)) x 10^-precision` in the sensor type's unit (watts, amperes,
volts, Celsius; dBm for Cisco's type 14). A value of -1000000000 or 1000000000 is out of the sensor's
range (RFC 3433): a power below range is no light (0 mW; Arista reports a dark receiver so), any other
is no reading. Sensors that are not a transceiver's (fans, CPU) are not
optics. A transceiver sensor is joined to an interface by ENTITY-MIB entAliasMappingIdentifier
(`1.3.6.1.2.1.47.1.3.2.1.2.<entity>.0 = ifIndex.N`) where the switch maps the sensor itself, else by
the port its name names, against ifName, then ifDescr, then ifAlias (exactly one interface):

- `DOM RX Power Sensor for Ethernet1` (Arista), `... for Ethernet52/1` (SONiC: lane 1 of Ethernet52
  when no interface is named Ethernet52/1), `Ethernet1/1 Lane 1 Transceiver Receive Power Sensor`
  (NX-OS), `Te1/1/1 Receive Power Sensor`, `Ethernet1 Rx Power Sensor`;
- SONiC names ports by their internal name (`Ethernet52`) while ifName is the alias (`Eth1/53`):
  on a switch whose sysDescr says SONiC, `EthernetN` is ifIndex N + 1, sonic-snmpagent's own rule
  (`mibs.get_index_from_str`).

A sensor that names no interface, or more than one, is counted as unjoined, never guessed.
Text in (net-snmp's `-On -Oe` walk output, as host.snmp prints it too), records out.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass, field

from fabricmon.model.optics import LaneDiag, Limits, ModuleDiag, dbm_to_mw, mw_to_dbm
from fabricmon.parsers.errors import ParseError
from fabricmon.parsers.snmp import parse_lines

# The walks, by name -> root OID. One walk per column keeps every switch's answer small.
SENSOR_WALKS: tuple[tuple[str, str], ...] = (
    ("sys_descr", "1.3.6.1.2.1.1.1"),
    ("if_descr", "1.3.6.1.2.1.2.2.1.2"),
    ("if_oper", "1.3.6.1.2.1.2.2.1.8"),
    ("if_name", "1.3.6.1.2.1.31.1.1.1.1"),
    ("if_alias", "1.3.6.1.2.1.31.1.1.1.18"),
    ("ent_descr", "1.3.6.1.2.1.47.1.1.1.1.2"),
    ("ent_name", "1.3.6.1.2.1.47.1.1.1.1.7"),
    ("ent_alias", "1.3.6.1.2.1.47.1.3.2.1.2"),
    ("ent_sensor", "1.3.6.1.2.1.99.1.1.1"),
    ("arista_threshold", "1.3.6.1.4.1.30065.3.12.1.1.1"),
    ("cisco_sensor", "1.3.6.1.4.1.9.9.91.1.1.1.1"),
    ("cisco_threshold", "1.3.6.1.4.1.9.9.91.1.2.1.1"),
)
WALK_ROOT = dict(SENSOR_WALKS)

# sensor type -> the unit it measures (ENTITY-SENSOR-MIB EntitySensorDataType; Cisco adds 14 dBm)
_TYPES = {3: "volts", 4: "volts", 5: "amperes", 6: "watts", 8: "celsius", 14: "dBm"}
ARISTA_UNSET = -1000000000
RANGE_LIMIT = 1000000000        # EntitySensorValue's bounds (RFC 3433): a value at them is out of range
OK_STATUS = 1

_OPTIC = re.compile(r"\b(dom|transceiver|xcvr|sfp|qsfp)\b|\b(rx|tx|receive|transmit)\s+power\b|\bbias\b", re.I)
_NXOS = re.compile(r"^(?P<port>\S+)\s+Lane\s+(?P<lane>\d+)\s+Transceiver\b", re.I)
_FOR = re.compile(r"\bfor\s+(?P<port>\S+)\s*$", re.I)
_LEAD = re.compile(r"^(?P<port>\S*\d\S*)\s+(?:lane\s+(?P<lane>\d+)\s+)?.*sensor", re.I)
_SONIC_PORT = re.compile(r"^Ethernet(\d+)$")


@dataclass(slots=True)
class Sensor:
    index: int                      # entPhysicalIndex (ENTITY-SENSOR) or entSensor index (Cisco)
    name: str
    quantity: str                   # rx_power, tx_power, tx_bias, temperature, voltage
    value: float                    # mW for power, mA for bias, C, V
    limits: Limits | None = None    # power in dBm, bias in mA, C, V
    port_name: str = ""             # the port its name names
    lane: int = 0                   # 0: the whole port
    if_index: int | None = None     # joined to


@dataclass(slots=True)
class SwitchOptics:
    """One switch's transceivers: ifIndex -> module, and the sensors that could not be joined."""
    ports: dict[int, ModuleDiag] = field(default_factory=dict)
    port_names: dict[int, str] = field(default_factory=dict)       # ifIndex -> ifName (or ifDescr)
    oper_up: dict[int, bool] = field(default_factory=dict)         # ifIndex -> ifOperStatus is up
    sensors: list[Sensor] = field(default_factory=list)
    unjoined: list[str] = field(default_factory=list)              # names of optics sensors not joined
    sonic: bool = False


def _text(val: str) -> str:
    if len(val) >= 2 and val[0] == '"' and val[-1] == '"':
        return val[1:-1].replace('\\"', '"').replace("\\\\", "\\")
    return val


def _columns(text: str, root: str) -> dict[int, dict[str, str]]:
    """A walk of a table -> column number -> index (as printed, "300000013" or "300000013.1") -> value
    text (quotes taken off). The hot loop of a big switch: no per-line int parsing of the index."""
    out: dict[int, dict[str, str]] = {}
    prefix = root + "."
    n = len(prefix)
    for oid, typ, val in parse_lines(text):
        if not oid.startswith(prefix):
            continue
        col, _, idx = oid[n:].partition(".")
        if typ == "Hex-STRING":
            val = bytes.fromhex(val.replace(" ", "")).decode("utf-8", "replace").rstrip("\x00")
        elif val[:1] == '"':
            val = _text(val)
        try:
            out.setdefault(int(col), {})[idx] = val
        except ValueError:
            raise ParseError(f"bad index in {oid!r}") from None
    return out


def _column(text: str, root: str) -> dict[int, str]:
    """A walk of one column -> index (one number) -> value."""
    out = {}
    for idx, val in _columns(text, root.rsplit(".", 1)[0]).get(int(root.rsplit(".", 1)[1]), {}).items():
        try:
            out[int(idx.split(".")[0])] = val
        except ValueError:
            raise ParseError(f"bad index {idx!r} under {root}") from None
    return out


def _int(v: str | None) -> int | None:
    if v is None:
        return None
    try:
        return int(v.split()[0])
    except (ValueError, IndexError):
        m = re.search(r"\((-?\d+)\)", v)          # "watts(6)" without -Oe
        return int(m.group(1)) if m else None


def _scaled(raw: int, scale: int, precision: int) -> float:
    return raw * 10.0 ** (3 * (scale - 9)) * 10.0 ** (-precision)


def quantity(name: str, unit: str) -> str | None:
    """What a transceiver sensor measures, from its unit and name; None when it is not one."""
    low = name.lower()
    if not _OPTIC.search(low):
        return None
    if unit in ("watts", "dBm"):
        if re.search(r"\b(rx|receive|receiver|input)\b", low):
            return "rx_power"
        if re.search(r"\b(tx|transmit|output)\b", low):
            return "tx_power"
        return None
    if unit == "amperes":
        return "tx_bias"
    if unit == "celsius":
        return "temperature"
    if unit == "volts":
        return "voltage"
    return None


def port_in_name(name: str) -> tuple[str, int]:
    """(port, lane) a sensor's name names; ("", 0) when none."""
    m = _NXOS.match(name)
    if m:
        return m.group("port"), int(m.group("lane"))
    m = _FOR.search(name)
    if m:
        return m.group("port"), 0
    m = _LEAD.match(name)
    if m:
        return m.group("port"), int(m.group("lane") or 0)
    return "", 0


def _to_unit(quantity: str, unit: str, si: float) -> float:
    """SI value of the sensor's unit -> the record's unit (mW, mA, C, V); dBm -> mW."""
    if unit == "dBm":
        return dbm_to_mw(si)
    if quantity in ("rx_power", "tx_power", "tx_bias"):
        return si * 1000.0
    return si


def _limit_value(quantity: str, unit: str, si: float) -> float:
    """A threshold in the Limits' unit (power in dBm)."""
    if quantity in ("rx_power", "tx_power"):
        return si if unit == "dBm" else (mw_to_dbm(si * 1000.0) if si > 0 else -math.inf)
    return _to_unit(quantity, unit, si)


def _reading(cols: dict[int, dict[str, str]], idx: str, label: dict[int, str],
             dbm_in_range: bool) -> tuple[Sensor, str, int, int] | None:
    """One row of a sensor table (columns 1 type, 2 scale, 3 precision, 4 value, 5 status, as both
    ENTITY-SENSOR-MIB and CISCO-ENTITY-SENSOR-MIB lay them out): (the sensor, its unit, scale,
    precision), or None for a sensor that is no transceiver reading, not OK or without a value.
    `dbm_in_range`: a dBm value at the range limit is a reading (a logarithm), not out of range."""
    unit = _TYPES.get(_int(cols.get(1, {}).get(idx)) or 0)
    i = int(idx.split(".")[0])
    name = label.get(i, "")
    q = quantity(name, unit) if unit is not None else None
    if unit is None or q is None:
        return None
    raw, scale, prec = _int(cols.get(4, {}).get(idx)), _int(cols.get(2, {}).get(idx)), _int(cols.get(3, {}).get(idx))
    status = _int(cols.get(5, {}).get(idx))
    if raw is None or scale is None or prec is None or (status is not None and status != OK_STATUS):
        return None
    if abs(raw) == RANGE_LIMIT and not (dbm_in_range and unit == "dBm"):   # RFC 3433: out of the sensor's range
        if not (raw < 0 and q in ("rx_power", "tx_power")):
            return None
        value = 0.0                     # power below range (Arista: -1000000000 on a dark receiver): no light
    else:
        value = _to_unit(q, unit, _scaled(raw, scale, prec))
    return Sensor(i, name, q, value), unit, scale, prec


def sensors_from_walks(texts: dict[str, str]) -> tuple[list[Sensor], dict[int, str]]:
    """Every transceiver sensor with an OK status and a value: (sensors, entity index -> name)."""
    names = _column(texts.get("ent_name", ""), WALK_ROOT["ent_name"])
    descrs = _column(texts.get("ent_descr", ""), WALK_ROOT["ent_descr"])
    label = {i: (names.get(i) or descrs.get(i) or "") for i in set(names) | set(descrs)}
    out: list[Sensor] = []
    ent = _columns(texts.get("ent_sensor", ""), WALK_ROOT["ent_sensor"])
    arista = _columns(texts.get("arista_threshold", ""), WALK_ROOT["arista_threshold"])
    for idx in ent.get(1, {}):
        r = _reading(ent, idx, label, dbm_in_range=False)
        if r is None:
            continue
        s, unit, scale, prec = r
        lim = {}
        for col, level in ((1, "low_warning"), (2, "low_alarm"), (3, "high_warning"), (4, "high_alarm")):
            v = _int(arista.get(col, {}).get(idx))
            if v is not None and v != ARISTA_UNSET:
                lim[level] = _limit_value(s.quantity, unit, _scaled(v, scale, prec))
        if lim:
            s.limits = Limits(source="switch", **lim)
        out.append(s)
    cis = _columns(texts.get("cisco_sensor", ""), WALK_ROOT["cisco_sensor"])
    thr = _columns(texts.get("cisco_threshold", ""), WALK_ROOT["cisco_threshold"])
    by_sensor: dict[str, list[str]] = {}
    for tidx in thr.get(2, {}):
        by_sensor.setdefault(tidx.split(".")[0], []).append(tidx)
    for idx in cis.get(1, {}):
        r = _reading(cis, idx, label, dbm_in_range=True)
        if r is None:
            continue
        s, unit, scale, prec = r
        lim = {}
        for tidx in by_sensor.get(idx, ()):
            rel, v = _int(thr.get(3, {}).get(tidx)), _int(thr.get(4, {}).get(tidx))
            sv = _int(thr[2][tidx])
            if rel is None or v is None or sv is None or rel not in (1, 2, 3, 4):
                continue
            level = ("low" if rel in (1, 2) else "high") + ("_alarm" if sv >= 20 else "_warning")
            limit = _limit_value(s.quantity, unit, _scaled(v, scale, prec))
            old = lim.get(level)        # two rows for one level: the outermost
            lim[level] = limit if old is None else (min(old, limit) if level.startswith("low") else max(old, limit))
        if lim:
            s.limits = Limits(source="switch", **lim)
        out.append(s)
    return out, label


def join(texts: dict[str, str]) -> SwitchOptics:
    """The switch's transceiver sensors joined to its interfaces (module docstring)."""
    res = SwitchOptics()
    sys_descr = " ".join(_column(texts.get("sys_descr", ""), WALK_ROOT["sys_descr"]).values())
    res.sonic = "sonic" in sys_descr.lower()
    if_name = _column(texts.get("if_name", ""), WALK_ROOT["if_name"])
    if_descr = _column(texts.get("if_descr", ""), WALK_ROOT["if_descr"])
    if_alias = _column(texts.get("if_alias", ""), WALK_ROOT["if_alias"])
    res.oper_up = {i: _int(v) == 1 for i, v in _column(texts.get("if_oper", ""), WALK_ROOT["if_oper"]).items()}
    res.port_names = {i: if_name.get(i) or if_descr.get(i) or str(i) for i in set(if_name) | set(if_descr)}
    by: list[dict[str, list[int]]] = []
    for col in (if_name, if_descr, if_alias):
        d: dict[str, list[int]] = {}
        for i, v in col.items():
            if v:
                d.setdefault(v, []).append(i)
        by.append(d)
    alias: dict[int, int] = {}
    for oid, _typ, val in parse_lines(texts.get("ent_alias", "")):
        parts = oid[len(WALK_ROOT["ent_alias"]) + 1:].split(".")
        m = re.search(r"1\.3\.6\.1\.2\.1\.2\.2\.1\.1\.(\d+)$", val)
        if m and parts and parts[0].isdigit():
            alias[int(parts[0])] = int(m.group(1))

    def lookup(port: str) -> int | None | str:
        """ifIndex, None (no interface), or "ambiguous"."""
        for d in by:
            hits = d.get(port)
            if hits:
                return hits[0] if len(hits) == 1 else "ambiguous"
        if res.sonic:
            m = _SONIC_PORT.match(port)
            if m and int(m.group(1)) + 1 in res.port_names:
                return int(m.group(1)) + 1
        return None

    sensors, _labels = sensors_from_walks(texts)
    for s in sensors:
        port, lane = port_in_name(s.name)
        s.port_name, s.lane = port, lane
        target: int | None | str = alias.get(s.index)
        if target is None and port:
            target = lookup(port)
            if target is None and lane == 0:
                m = re.match(r"^(?P<p>.+)/(?P<l>\d+)$", port)       # SONiC: "Ethernet52/1" is lane 1 of Ethernet52
                if m:
                    t2 = lookup(m.group("p"))
                    if isinstance(t2, int):
                        target, s.port_name, s.lane = t2, m.group("p"), int(m.group("l"))
        if not isinstance(target, int):
            res.unjoined.append(s.name)
            continue
        s.if_index = target
        res.sensors.append(s)
        mod = res.ports.setdefault(target, ModuleDiag(module_class="switch"))
        if s.quantity == "temperature":
            mod.temperature_c = s.value
        elif s.quantity == "voltage":
            mod.voltage_v = s.value
        else:
            ln = mod.lanes.setdefault(s.lane, LaneDiag(s.lane))
            setattr(ln, {"rx_power": "rx_power_mw", "tx_power": "tx_power_mw", "tx_bias": "tx_bias_ma"}[s.quantity],
                    s.value)
        if s.limits is not None:
            key_lane = 0 if s.quantity in ("temperature", "voltage") else s.lane
            mod.lane_limits[(s.quantity, key_lane)] = s.limits
            if s.quantity in ("temperature", "voltage"):
                mod.limits[s.quantity] = s.limits
    return res


__all__ = ["SENSOR_WALKS", "Sensor", "SwitchOptics", "join", "port_in_name", "quantity", "sensors_from_walks"]
