"""What the Ethernet collector reads from a switch over SNMP, declared once as rows (snmp_exporter's
generated snmp.yml, in our words; docs/ethernet.md), and the one parser for all of it.

A row names an object: its numeric OID, how its index reads (`ifIndex`, `ifIndex.prio`, `port`
for an LLDP local port number, `lldpRem` for (TimeMark, LocalPortNum, RemIndex), `scalar`), its
value type, and the record field it fills. A walk is one subtree read in one net-snmp process
(`snmpbulkwalk` has no end OID: a walk reads a whole table, and the rows pick their columns from
it). A vendor's PFC MIB is one more pair of rows and one more walk, not a branch of code.

Text in, typed records out (net-snmp's `-On -Oe -Ot` output: `.OID = TYPE: value`, a long
Hex-STRING continued on the following lines); nothing here runs a tool.
"""

from __future__ import annotations

import ipaddress
import re
from dataclasses import dataclass, field
from typing import NamedTuple

from fabricmon.parsers.errors import ParseError


@dataclass(frozen=True, slots=True)
class OidRow:
    name: str                # the MIB object's name, for people
    oid: str                 # numeric, no leading dot
    walk: str                # the walk (WALKS) it comes in
    index: str               # "ifIndex", "ifIndex.prio", "port", "lldpRem", "scalar"
    type: str                # "string", "octets" (raw bytes, decoded by the record), "int", "counter32", "counter64", "gauge"
    field: str               # the record field it fills (a canonical counter name for counters)
    direction: str = ""      # PFC rows: "tx" (pause frames the port sent) or "rx" (received)


@dataclass(frozen=True, slots=True)
class Walk:
    name: str
    root: str                # the subtree one process walks
    phase: str               # "discovery" or "sweep"
    vendor: str = ""         # PFC walks: which MIB (read only where the switch answers it)


WALKS: tuple[Walk, ...] = (
    Walk("system", "1.3.6.1.2.1.1", "discovery"),
    Walk("lldp_local", "1.0.8802.1.1.2.1.3", "discovery"),
    Walk("lldp_remote", "1.0.8802.1.1.2.1.4.1", "discovery"),
    Walk("bridge_ports", "1.3.6.1.2.1.17.1.4.1", "discovery"),
    Walk("if_stack", "1.3.6.1.2.1.31.1.2.1.3", "discovery"),
    Walk("if_table", "1.3.6.1.2.1.2.2.1", "sweep"),
    Walk("ifx_table", "1.3.6.1.2.1.31.1.1.1", "sweep"),
    Walk("pfc_ieee", "1.3.111.2.802.1.1.21.1.1.1", "sweep", "ieee8021-pfc"),
    Walk("pfc_cisco", "1.3.6.1.4.1.9.9.813.1.2.1", "sweep", "cisco-pfc-ext"),
    Walk("pfc_arista", "1.3.6.1.4.1.30065.3.11.1.1.1", "sweep", "arista-pfc"),
    Walk("pfc_onyx", "1.3.6.1.4.1.33049.15.1.2.1", "sweep", "mellanox-qos"),
)
WALK_BY_NAME = {w.name: w for w in WALKS}
PFC_WALKS = tuple(w for w in WALKS if w.vendor)

OIDS: tuple[OidRow, ...] = (
    # SNMPv2-MIB system group
    OidRow("sysName", "1.3.6.1.2.1.1.5", "system", "scalar", "string", "sys_name"),
    # LLDP-MIB local system: the switch's stable identity
    OidRow("lldpLocChassisIdSubtype", "1.0.8802.1.1.2.1.3.1", "lldp_local", "scalar", "int", "chassis_subtype"),
    OidRow("lldpLocChassisId", "1.0.8802.1.1.2.1.3.2", "lldp_local", "scalar", "octets", "chassis_id"),
    OidRow("lldpLocSysName", "1.0.8802.1.1.2.1.3.3", "lldp_local", "scalar", "string", "lldp_sys_name"),
    # lldpLocPortTable, indexed by lldpLocPortNum (not always the ifIndex: docs/ethernet.md, "the local-port trap")
    OidRow("lldpLocPortIdSubtype", "1.0.8802.1.1.2.1.3.7.1.2", "lldp_local", "port", "int", "id_subtype"),
    OidRow("lldpLocPortId", "1.0.8802.1.1.2.1.3.7.1.3", "lldp_local", "port", "octets", "port_id"),
    OidRow("lldpLocPortDesc", "1.0.8802.1.1.2.1.3.7.1.4", "lldp_local", "port", "string", "port_desc"),
    # lldpRemTable, indexed by (TimeMark, LocalPortNum, RemIndex)
    OidRow("lldpRemChassisIdSubtype", "1.0.8802.1.1.2.1.4.1.1.4", "lldp_remote", "lldpRem", "int", "chassis_subtype"),
    OidRow("lldpRemChassisId", "1.0.8802.1.1.2.1.4.1.1.5", "lldp_remote", "lldpRem", "octets", "chassis_id"),
    OidRow("lldpRemPortIdSubtype", "1.0.8802.1.1.2.1.4.1.1.6", "lldp_remote", "lldpRem", "int", "port_subtype"),
    OidRow("lldpRemPortId", "1.0.8802.1.1.2.1.4.1.1.7", "lldp_remote", "lldpRem", "octets", "port_id"),
    OidRow("lldpRemPortDesc", "1.0.8802.1.1.2.1.4.1.1.8", "lldp_remote", "lldpRem", "string", "port_desc"),
    OidRow("lldpRemSysName", "1.0.8802.1.1.2.1.4.1.1.9", "lldp_remote", "lldpRem", "string", "sys_name"),
    # BITS: other(0) repeater(1) bridge(2) wlan(3) router(4) ..., bit 0 the high bit of the first octet
    OidRow("lldpRemSysCapEnabled", "1.0.8802.1.1.2.1.4.1.1.12", "lldp_remote", "lldpRem", "octets", "caps"),
    # BRIDGE-MIB dot1dBasePortIfIndex: bridge port number -> ifIndex
    OidRow("dot1dBasePortIfIndex", "1.3.6.1.2.1.17.1.4.1.2", "bridge_ports", "port", "int", "if_index"),
    # IF-MIB ifStackTable ifStackStatus, indexed by (higher, lower) ifIndex: a LAG above its members
    OidRow("ifStackStatus", "1.3.6.1.2.1.31.1.2.1.3", "if_stack", "ifStack", "int", "stack"),
    # IF-MIB ifTable (32-bit error and discard counters wrap)
    OidRow("ifDescr", "1.3.6.1.2.1.2.2.1.2", "if_table", "ifIndex", "string", "descr"),
    OidRow("ifType", "1.3.6.1.2.1.2.2.1.3", "if_table", "ifIndex", "int", "type"),
    OidRow("ifOperStatus", "1.3.6.1.2.1.2.2.1.8", "if_table", "ifIndex", "int", "oper_status"),
    OidRow("ifInDiscards", "1.3.6.1.2.1.2.2.1.13", "if_table", "ifIndex", "counter32", "receive_discards"),
    OidRow("ifInErrors", "1.3.6.1.2.1.2.2.1.14", "if_table", "ifIndex", "counter32", "receive_errors"),
    OidRow("ifOutDiscards", "1.3.6.1.2.1.2.2.1.19", "if_table", "ifIndex", "counter32", "transmit_discards"),
    # IF-MIB ifXTable (64-bit traffic counters)
    OidRow("ifName", "1.3.6.1.2.1.31.1.1.1.1", "ifx_table", "ifIndex", "string", "name"),
    OidRow("ifHCInOctets", "1.3.6.1.2.1.31.1.1.1.6", "ifx_table", "ifIndex", "counter64", "receive_bytes"),
    OidRow("ifHCInUcastPkts", "1.3.6.1.2.1.31.1.1.1.7", "ifx_table", "ifIndex", "counter64", "receive_unicast_packets"),
    OidRow("ifHCOutOctets", "1.3.6.1.2.1.31.1.1.1.10", "ifx_table", "ifIndex", "counter64", "transmit_bytes"),
    OidRow("ifHCOutUcastPkts", "1.3.6.1.2.1.31.1.1.1.11", "ifx_table", "ifIndex", "counter64",
           "transmit_unicast_packets"),
    OidRow("ifHighSpeed", "1.3.6.1.2.1.31.1.1.1.15", "ifx_table", "ifIndex", "gauge", "speed_mbps"),
    OidRow("ifConnectorPresent", "1.3.6.1.2.1.31.1.1.1.17", "ifx_table", "ifIndex", "int", "connector"),
    OidRow("ifAlias", "1.3.6.1.2.1.31.1.1.1.18", "ifx_table", "ifIndex", "string", "alias"),
    # PFC (802.1Qbb) pause frames, one pair of rows per MIB. IEEE8021-PFC-MIB counts per port only
    # (its rows carry priority -1: exported as priority "all").
    OidRow("ieee8021PfcRequests", "1.3.111.2.802.1.1.21.1.1.1.2", "pfc_ieee", "ifIndex", "counter64", "pause", "tx"),
    OidRow("ieee8021PfcIndications", "1.3.111.2.802.1.1.21.1.1.1.3", "pfc_ieee", "ifIndex", "counter64", "pause",
           "rx"),
    OidRow("cpfcIfRequests", "1.3.6.1.4.1.9.9.813.1.2.1.2", "pfc_cisco", "ifIndex.prio", "counter64", "pause", "tx"),
    OidRow("cpfcIfIndications", "1.3.6.1.4.1.9.9.813.1.2.1.3", "pfc_cisco", "ifIndex.prio", "counter64", "pause",
           "rx"),
    OidRow("aristaPfcRequests", "1.3.6.1.4.1.30065.3.11.1.1.1.3", "pfc_arista", "ifIndex.prio", "counter64", "pause",
           "tx"),
    OidRow("aristaPfcIndications", "1.3.6.1.4.1.30065.3.11.1.1.1.4", "pfc_arista", "ifIndex.prio", "counter64",
           "pause", "rx"),
    OidRow("mlnxQosRxPause", "1.3.6.1.4.1.33049.15.1.2.1.3", "pfc_onyx", "ifIndex.prio", "counter64", "pause", "rx"),
    OidRow("mlnxQosTxPause", "1.3.6.1.4.1.33049.15.1.2.1.5", "pfc_onyx", "ifIndex.prio", "counter64", "pause", "tx"),
)
ROWS_BY_WALK: dict[str, tuple[OidRow, ...]] = {w.name: tuple(r for r in OIDS if r.walk == w.name) for w in WALKS}
COUNTER_BITS = {"counter32": 32, "counter64": 64}
ALL_PRIORITIES = -1          # IEEE8021-PFC-MIB: a port's pause frames over every priority


# --- the text ---------------------------------------------------------------------------------

_SKIP = ("No Such Object", "No Such Instance", "No more variables", "End of MIB")


def parse_lines(text: str) -> list[tuple[str, str, str]]:
    """net-snmp output -> [(oid without leading dot, type, value text)]. A long Hex-STRING goes on
    over the next lines; 'No Such Object' and end-of-view answers are left out."""
    out: list[tuple[str, str, str]] = []
    for line in text.splitlines():
        if not line.startswith("."):
            if out and line.strip() and out[-1][1] == "Hex-STRING":
                oid, typ, val = out[-1]
                out[-1] = (oid, typ, f"{val} {line.strip()}".strip())
            continue
        oid, sep, rest = line.partition(" = ")
        if not sep:
            raise ParseError(f"not an SNMP answer: {line[:120]!r}")
        if rest.startswith(_SKIP):
            continue
        typ, sep, val = rest.partition(": ")
        if not sep:                 # "" (an empty string has no type) or an unknown form
            typ, val = ("STRING", "") if rest.strip() in ('""', "") else ("", rest)
        out.append((oid[1:], typ, val.rstrip() if typ == "Hex-STRING" else val))
    return out


def _value(typ: str, text: str, want: str) -> Value | None:
    if want in ("int", "counter32", "counter64", "gauge"):
        try:
            return int(text.split()[0]) if text else None
        except ValueError:
            m = text.rsplit("(", 1)         # "up(1)" without -Oe
            if len(m) == 2 and m[1].rstrip(")").lstrip("-").isdigit():
                return int(m[1].rstrip(")"))
            raise ParseError(f"not a number: {text[:60]!r}") from None
    if typ == "Hex-STRING":
        try:
            raw = bytes.fromhex(text.replace(" ", ""))
        except ValueError:
            raise ParseError(f"not a Hex-STRING: {text[:60]!r}") from None
        if want == "octets":
            return Octets(raw, False)
        try:                        # UTF-8 text (net-snmp prints only ASCII as STRING), else hex
            text = raw.decode("utf-8").rstrip("\x00")
        except UnicodeDecodeError:
            return ":".join(f"{b:02x}" for b in raw)
        return text if text.isprintable() else ":".join(f"{b:02x}" for b in raw)
    s = text
    if len(s) >= 2 and s[0] == '"' and s[-1] == '"':
        s = s[1:-1].replace('\\"', '"').replace("\\\\", "\\")
    if want == "octets":        # printed as text: the agent's octets were printable
        return Octets(s.encode("utf-8", "surrogateescape"), True)
    return s


_INDEX_LEN = {"ifIndex": 1, "ifIndex.prio": 2, "port": 1, "lldpRem": 3, "scalar": 1, "ifStack": 2}
# walk -> (row OID -> row, the index lengths its rows have): a line finds its row by one dict lookup
_ROW_LOOKUP = {w: ({r.oid: r for r in rows}, sorted({_INDEX_LEN[r.index] for r in rows}))
               for w, rows in ROWS_BY_WALK.items()}
_NUMERIC = frozenset(("int", "counter32", "counter64", "gauge"))


def parse_walk(walk: str, text: str) -> list[tuple[OidRow, tuple[int, ...], Value]]:
    """One walk's text -> [(row, index, value)] for the rows declared for that walk; objects of
    the table that no row names are left out before their value is read. A numeric row's value is
    an int, an "octets" row's an Octets, any other's a str."""
    by_oid, lengths = _ROW_LOOKUP[walk]
    out: list[tuple[OidRow, tuple[int, ...], Value]] = []
    for oid, typ, val in parse_lines(text):
        for n in lengths:
            parts = oid.rsplit(".", n)
            row = by_oid.get(parts[0])
            if row is not None:
                break
        else:
            continue
        try:
            index = tuple(map(int, parts[1:]))
        except ValueError:
            raise ParseError(f"{row.name}: bad index in {oid!r}") from None
        if row.type in _NUMERIC:
            try:
                out.append((row, index, int(val)))      # the common case: a bare number (-Oe)
                continue
            except ValueError:
                pass
        v = _value(typ, val, row.type)
        if v is not None:
            out.append((row, index, v))
    return out


# --- LLDP IDs, decoded by their subtype -----------------------------------------------------

class Octets(NamedTuple):
    """An OCTET STRING as the agent sent it, and whether the tool printed it as text (printable)."""
    raw: bytes
    text: bool


Value = int | str | Octets      # a value parse_walk reads: by its row's type (OidRow.type)


def _number(value: Value) -> int:
    """A numeric row's value (parse_walk reads those as int, or raises)."""
    if not isinstance(value, int):
        raise ParseError(f"not a number: {value!r}")
    return value


def _subtype(value: Value | None) -> int | None:
    """An LLDP ID subtype (an int row); None when absent."""
    return value if isinstance(value, int) else None


def _id_value(value: Value | None) -> Octets | str | None:
    """An LLDP ID (an "octets" row) as decode_id takes it; None when absent."""
    return None if isinstance(value, int) else value


# LLDP-MIB subtypes (IEEE 802.1AB): chassis ID 4 = MAC, 5 = network address; port ID 3 = MAC,
# 4 = network address; the others name something (alias, interface name, local) and read as text
CHASSIS_MAC, CHASSIS_ADDRESS = 4, 5
PORT_MAC, PORT_ADDRESS = 3, 4
PORT_NAME_SUBTYPES = (1, 5, 7)           # interfaceAlias, interfaceName, local
_MAC_TEXT = re.compile(r"^([0-9A-Fa-f]{1,2})([:\- ])([0-9A-Fa-f]{1,2})(?:\2[0-9A-Fa-f]{1,2}){4}$")
_PRINTABLE = frozenset(range(0x20, 0x7F))


def _hex(raw: bytes) -> str:
    return ":".join(f"{b:02x}" for b in raw)


def _mac_of_text(text: str) -> str | None:
    """A MAC that a recording or an agent gives as text ("74:86:e2:0a:0c:04", "e4 f0 04 fb 1f fb",
    "0:1c:73:b3:bd:72") -> aa:bb:cc:dd:ee:ff; None if it is not one."""
    t = text.strip()
    if _MAC_TEXT.match(t):
        return ":".join(f"{int(x, 16):02x}" for x in re.split(r"[:\- ]", t))
    if len(t) == 12 and all(c in "0123456789abcdefABCDEF" for c in t):
        return _hex(bytes.fromhex(t))
    return None


def _address(raw: bytes) -> str | None:
    """A network-address ID: one octet of IANA address family (1 IPv4, 2 IPv6), then the address."""
    if len(raw) == 5 and raw[0] == 1:
        return str(ipaddress.IPv4Address(raw[1:]))
    if len(raw) == 17 and raw[0] == 2:
        return str(ipaddress.IPv6Address(raw[1:]))
    return None


def decode_id(subtype: int | None, value: Octets | str | None, mac: int, address: int) -> str:
    """An LLDP chassis or port ID -> the text an operator reads: a MAC as aa:bb:cc:dd:ee:ff, a
    network address as an IP, a name as its text, anything unprintable as colon-separated hex.
    Empty (or absent) -> "" (no ID, never "0"). `mac`/`address`: the subtypes that mean MAC and
    network address for this kind of ID (chassis 4/5, port 3/4)."""
    if value is None:
        return ""
    if isinstance(value, str):
        value = Octets(value.encode("utf-8", "surrogateescape"), True)
    raw = value.raw
    if not raw:
        return ""
    printable = _PRINTABLE.issuperset(raw)
    if subtype == mac or (subtype is None and len(raw) == 6 and not printable):
        if len(raw) == 6 and not value.text:
            return _hex(raw)
        if printable:                   # printed as text: a MAC written out, else what it says
            m = _mac_of_text(raw.decode("ascii"))
            if m is not None:
                return m
    if subtype == address and not value.text:
        ip = _address(raw)
        if ip is not None:
            return ip
    if printable:
        return raw.decode("ascii").strip()
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError:
        return _hex(raw)
    return text.strip() if text.isprintable() else _hex(raw)


# lldpRemSysCapEnabled (BITS): bit n is (0x80 >> n) of the first octet
CAP_BITS = {"other": 0x80, "repeater": 0x40, "bridge": 0x20, "wlan": 0x10, "router": 0x08, "telephone": 0x04,
            "docsis": 0x02, "station": 0x01}


def decode_caps(value: Octets | None) -> frozenset[str] | None:
    """lldpRemSysCapEnabled -> the capability names it sets; None when unknown (absent, or a
    recording that stores it as text such as "28 00 2 4": more than the two octets BITS has, or
    only hex digits)."""
    if value is None or not value.raw or len(value.raw) > 2:
        return None
    if value.text and all(chr(b) in "0123456789abcdefABCDEF " for b in value.raw):
        return None
    first = value.raw[0]
    return frozenset(n for n, bit in CAP_BITS.items() if first & bit)


# --- records ----------------------------------------------------------------------------------

@dataclass(slots=True)
class LldpNeighbour:
    local_port_num: int              # lldpRemLocalPortNum (as the switch numbers its LLDP ports)
    chassis_id: str                  # decoded (decode_id): a MAC reads aa:bb:cc:dd:ee:ff
    port_id: str                     # decoded; "" when the neighbour sent none
    port_subtype: int | None
    port_desc: str
    sys_name: str
    caps: frozenset[str] | None = None   # lldpRemSysCapEnabled; None: unknown
    chassis_subtype: int | None = None

    @property
    def port_name(self) -> str:
        """The remote port as its owner names it: the port ID when it is a name (subtype 5
        interfaceName, 7 local, 1 ifAlias), else the port description, else the port ID (a MAC)."""
        if self.port_subtype in PORT_NAME_SUBTYPES and self.port_id:
            return self.port_id
        return self.port_desc or self.port_id

    @property
    def is_switch(self) -> bool:
        """It says it bridges or routes (a switch or router, not a host); False when unknown."""
        return bool(self.caps and self.caps & {"bridge", "router"})


# ifType values of a physical Ethernet port (IANAifType): ethernetCsmacd, iso88023Csmacd,
# fastEther, fastEtherFX, gigabitEthernet. LAGs (161), SVIs (135, 136), loopbacks (24), tunnels
# (131), Junos logical units (53 propVirtual) and everything else are not fabric ports.
PHYSICAL_IFTYPES = frozenset((6, 7, 62, 69, 117))
IFTYPE_NAMES = {1: "other", 24: "softwareLoopback", 53: "propVirtual", 131: "tunnel", 135: "l2vlan",
                136: "l3ipvlan", 150: "mplsTunnel", 161: "ieee8023adLag"}


@dataclass(slots=True)
class PortSet:
    """A switch's fabric ports: ifIndex -> its unique `port` label, and every other interface
    with the reason it is not one (virtual, no connector, a management port)."""
    labels: dict[int, str] = field(default_factory=dict)
    excluded: dict[int, str] = field(default_factory=dict)
    disambiguated: int = 0           # fabric ports whose name is shared, labelled <name>#<ifIndex>
    lags: dict[int, str] = field(default_factory=dict)   # fabric port -> the LAG it is a member of (its name)


@dataclass(slots=True)
class SwitchIdentity:
    """What discovery reads once per switch: names, LLDP and the port tables to join them."""
    sys_name: str = ""
    chassis_id: str = ""
    chassis_subtype: int | None = None
    ifaces: dict[int, dict[str, int | str]] = field(default_factory=dict)       # ifIndex -> fields
    lldp_ports: dict[int, dict[str, int | str]] = field(default_factory=dict)   # lldpLocPortNum -> fields
    bridge_ports: dict[int, int] = field(default_factory=dict)                  # dot1dBasePort -> ifIndex
    neighbours: list[LldpNeighbour] = field(default_factory=list)
    pfc_walk: str = ""               # the PFC walk the switch answers ("" none)
    stack: set[tuple[int, int]] = field(default_factory=set)   # ifStackTable (higher, lower), active rows

    def base_name(self, if_index: int) -> str:
        """An interface's name: ifName, else ifDescr, else "ifIndex N"."""
        f = self.ifaces.get(if_index, {})
        return str(f.get("name") or f.get("descr") or f"ifIndex {if_index}")

    def fabric_ports(self, exclude: tuple[str, ...] | list[str] = ()) -> PortSet:
        """The port model: a fabric port is a physical interface (ifType ethernetCsmacd and the
        like; ifConnectorPresent true where the switch gives it) whose name matches none of the
        `exclude` regexes (matched whole). Its label is its name (base_name) when no other fabric
        port of the switch has it, else `<name>#<ifIndex>`: stable, and unique per switch."""
        pats = [re.compile(p) for p in exclude]
        out = PortSet()
        kept: list[int] = []
        for i in sorted(self.ifaces):
            f = self.ifaces[i]
            t = f.get("type")
            name = self.base_name(i)
            if isinstance(t, int) and t not in PHYSICAL_IFTYPES:
                out.excluded[i] = f"virtual (ifType {IFTYPE_NAMES.get(t, t)})"
            elif f.get("connector") == 2:
                out.excluded[i] = "no connector (ifConnectorPresent false)"
            elif any(p.fullmatch(name) or p.fullmatch(str(f.get("descr") or "")) for p in pats):
                out.excluded[i] = "management port (fabric.ethernet.exclude_ports)"
            else:
                kept.append(i)
        count: dict[str, int] = {}
        for i in kept:
            count[self.base_name(i)] = count.get(self.base_name(i), 0) + 1
        for i in kept:
            name = self.base_name(i)
            if count[name] > 1:
                out.labels[i] = f"{name}#{i}"
                out.disambiguated += 1
            else:
                out.labels[i] = name
        for higher, lower in self.stack:    # a LAG's members: fabric ports that carry its name
            if lower in out.labels and self.ifaces.get(higher, {}).get("type") == 161:
                out.lags[lower] = self.base_name(higher)
        return out

    def if_index_of_lldp_port(self, num: int) -> int | None:
        """The local-port trap (docs/ethernet.md): lldpLocPortNum is not always the ifIndex. First the local
        port's ID, then its description, matched against ifName, ifDescr and ifAlias; then BRIDGE-MIB
        dot1dBasePortIfIndex; only then the raw number."""
        lp = self.lldp_ports.get(num, {})
        for key in ("port_id", "port_desc"):
            text = lp.get(key)
            if not text:
                continue
            for what in ("name", "descr", "alias"):
                hits = [i for i, f in self.ifaces.items() if f.get(what) == text]
                if len(hits) == 1:
                    return hits[0]
        if num in self.bridge_ports and self.bridge_ports[num] in self.ifaces:
            return self.bridge_ports[num]
        return num if num in self.ifaces else None

    def if_index_by_name(self, name: str) -> int | None:
        """A port named by a neighbour (its LLDP port ID or description) -> our ifIndex."""
        for what in ("name", "descr", "alias"):
            hits = [i for i, f in self.ifaces.items() if name and f.get(what) == name]
            if len(hits) == 1:
                return hits[0]
        return None

    def if_index_of_advertised(self, port_id: str, port_desc: str) -> int | None:
        """Our port that a neighbour saw in our LLDP (its lldpRemPortId/Desc): by interface name,
        else through our own lldpLocPortTable entry that advertises it, joined as a local port."""
        for text in (port_id, port_desc):
            i = self.if_index_by_name(text)
            if i is not None:
                return i
        for key, text in (("port_id", port_id), ("port_desc", port_desc)):
            nums = [n for n, f in self.lldp_ports.items() if text and f.get(key) == text]
            if len(nums) == 1:
                return self.if_index_of_lldp_port(nums[0])
        return None


_IF_FIELDS = frozenset(("name", "descr", "alias", "speed_mbps", "oper_status", "type", "connector"))


def identity_from_walks(texts: dict[str, str]) -> SwitchIdentity:
    """Discovery: the walks' texts (by walk name) -> the switch's identity. LLDP IDs are decoded
    by their subtype (decode_id); an entry without a chassis ID is no neighbour."""
    ident = SwitchIdentity()
    rem: dict[tuple[int, ...], dict[str, Value]] = {}
    scalars: dict[str, Value] = {}
    ports: dict[int, dict[str, Value]] = {}       # lldpLocPortNum -> fields, its port ID still undecoded
    for walk, text in texts.items():
        if walk in WALK_BY_NAME and WALK_BY_NAME[walk].vendor:
            if any(True for _ in parse_walk(walk, text)):
                ident.pfc_walk = ident.pfc_walk or walk
            continue
        for row, index, value in parse_walk(walk, text):
            if row.index == "scalar":
                if index == (0,):
                    scalars[row.field] = value
            elif row.walk == "bridge_ports":
                ident.bridge_ports[index[0]] = _number(value)
            elif row.walk == "if_stack":
                if len(index) == 2 and value == 1 and index[0] and index[1]:    # active(1); 0: top/bottom
                    ident.stack.add((index[0], index[1]))
            elif row.index == "port":
                ports.setdefault(index[0], {})[row.field] = value
            elif row.index == "lldpRem" and len(index) == 3:
                rem.setdefault(index, {})[row.field] = value
            elif row.index == "ifIndex" and len(index) == 1 and row.field in _IF_FIELDS:
                if not isinstance(value, Octets):       # never: none of those rows is "octets"
                    ident.ifaces.setdefault(index[0], {})[row.field] = value
    ident.sys_name = str(scalars.get("sys_name", "") or "").strip()
    ident.chassis_subtype = _subtype(scalars.get("chassis_subtype"))
    ident.chassis_id = decode_id(ident.chassis_subtype, _id_value(scalars.get("chassis_id")), CHASSIS_MAC,
                                 CHASSIS_ADDRESS)
    for num, p in ports.items():
        p["port_id"] = decode_id(_subtype(p.get("id_subtype")), _id_value(p.get("port_id")), PORT_MAC, PORT_ADDRESS)
        ident.lldp_ports[num] = {k: v for k, v in p.items() if not isinstance(v, Octets)}   # none left: decoded
    for (_, local, _), f in sorted(rem.items(), key=lambda kv: (kv[0][1], kv[0][2], kv[0][0])):
        csub = _subtype(f.get("chassis_subtype"))
        chassis = decode_id(csub, _id_value(f.get("chassis_id")), CHASSIS_MAC, CHASSIS_ADDRESS)
        if not chassis:
            continue
        psub = _subtype(f.get("port_subtype"))
        caps = f.get("caps")
        ident.neighbours.append(LldpNeighbour(
            local, chassis, decode_id(psub, _id_value(f.get("port_id")), PORT_MAC, PORT_ADDRESS), psub,
            str(f.get("port_desc", "")).strip(), str(f.get("sys_name", "")).strip(),
            decode_caps(caps if isinstance(caps, Octets) else None), csub))
    return ident


@dataclass(slots=True)
class SwitchCounters:
    """Sweep: one switch's ports. counters: ifIndex -> canonical counter -> raw value; pause:
    ifIndex -> (priority, direction) -> frames (priority -1: all priorities)."""
    counters: dict[int, dict[str, int]] = field(default_factory=dict)
    oper_status: dict[int, int] = field(default_factory=dict)
    speed_mbps: dict[int, int] = field(default_factory=dict)
    pause: dict[int, dict[tuple[int, str], int]] = field(default_factory=dict)
    bits: dict[str, int] = field(default_factory=dict)


def _reads(row: OidRow) -> bool:
    return row.field in ("pause", "oper_status", "speed_mbps") or row.type in COUNTER_BITS


# walk -> the columns counters_from_walks reads from it, in OID order (a client that can walk
# columns reads only these; the parser takes a whole table's text as well)
SWEEP_COLUMNS: dict[str, tuple[str, ...]] = {
    w: tuple(sorted((r.oid for r in rows if _reads(r)), key=lambda o: tuple(map(int, o.split(".")))))
    for w, rows in ROWS_BY_WALK.items()}


def counters_from_walks(texts: dict[str, str]) -> SwitchCounters:
    """Sweep: the walks' texts (by walk name) -> counters, state and pause frames per ifIndex."""
    sc = SwitchCounters()
    for walk, text in texts.items():
        for row, index, value in parse_walk(walk, text):
            port = index[0]
            if row.field == "pause":
                prio = index[1] if row.index == "ifIndex.prio" and len(index) > 1 else ALL_PRIORITIES
                sc.pause.setdefault(port, {})[(prio, row.direction)] = _number(value)
            elif row.type in COUNTER_BITS:
                sc.counters.setdefault(port, {})[row.field] = _number(value)
                sc.bits[row.field] = COUNTER_BITS[row.type]
            elif row.field == "oper_status":
                sc.oper_status[port] = _number(value)
            elif row.field == "speed_mbps":
                sc.speed_mbps[port] = _number(value)
    return sc


__all__ = ["ALL_PRIORITIES", "CAP_BITS", "OIDS", "PFC_WALKS", "PHYSICAL_IFTYPES", "WALKS", "WALK_BY_NAME",
           "LldpNeighbour", "Octets", "OidRow", "PortSet", "decode_caps", "decode_id",
           "SWEEP_COLUMNS", "SwitchCounters", "SwitchIdentity", "Walk", "counters_from_walks", "identity_from_walks",
           "parse_lines", "parse_walk"]
