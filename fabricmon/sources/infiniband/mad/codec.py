"""MAD encoders and decoders: pure functions on the 256-byte MAD, no I/O (unit-tested on bytes).

Layouts from the IBTA spec as rdma-core's libibmad (`fields.c`) and infiniband-diags use them; every
multi-byte field is big-endian. A MAD is a 24-byte common header, then for both SMPs (LID-routed,
class 0x01) and PerfMgt GMPs (class 0x04) the attribute's data starts at byte 64:

- header: BaseVersion, MgmtClass, ClassVersion, Method, Status(16), ClassSpecific(16),
  TransactionID(64), AttributeID(16), Reserved(16), AttributeModifier(32);
- SMP: M_Key(64) at 24, 32 reserved bytes, data (64 bytes) at 64;
- PerfMgt: 40 reserved bytes, data (192 bytes) at 64.

Attributes read here:
- PerfMgt ClassPortInfo (0x0001): CapabilityMask bit 8 AllPortSelect (an aggregate of every port
  with PortSelect 255), bit 9 extended width (PortCountersExtended's 64-bit counters).
- PerfMgt PortCounters (0x0012): the error counters (saturating at 16/8/4 bits), PortXmitWait and
  the 32-bit data counters. PortSelect 255 with AllPortSelect: the sums over every port.
- PerfMgt PortCountersExtended (0x001D): 64-bit data and packet counters.
- SMP PortInfo (0x0015, modifier: port): PortState, PortPhysicalState, LinkWidthActive,
  LinkSpeedActive/LinkSpeedExtActive/LinkSpeedExtActive2, and what the port may train at
  (`decode_port_link`): LinkWidthEnabled/Supported (data bytes 29, 30), LinkSpeedSupported (byte 32,
  high nibble), LinkSpeedEnabled (byte 35, low nibble), LinkSpeedExtSupported (byte 62, low nibble),
  LinkSpeedExtEnabled (byte 63, low 5 bits) and IBA 1.7's LinkSpeedExtActive2/Supported2/Enabled2
  (byte 56: bits 1-2, 3-4, 5-7 from the top), as libibmad's fields.c places them.
- SMP NodeInfo (0x0011) and NodeDescription (0x0010).

One Set is written (remediation isolates a port, remediation/actuators.py): SubnSet(PortInfo)
(`encode_port_info_set`), the port's own PortInfo as a Get answered it, changed as ibportstate changes it
(infiniband-diags' ibportstate.c): a LID or MasterSMLID of 0 or 0xFFFF replaced by 0x1234 (an SMA refuses
a Set carrying an invalid one), PortState 0 (no change), PortPhysicalState 3 (Disabled) or 2 (Polling:
enable), LinkWidthEnabled, LinkSpeedEnabled and LinkSpeedExtEnabled(2) 0 (no change). Its answer is a
GetResp of PortInfo, read with decode_port_info."""

from __future__ import annotations

import functools
import struct
from dataclasses import dataclass

from fabricmon.model.link_ability import LinkAbility, from_masks

MAD_SIZE = 256
DATA_OFFSET = 64                     # attribute data of both SMPs and PerfMgt GMPs
BASE_VERSION = 1

CLASS_SMP_LID = 0x01                 # subnet management, LID-routed (QP0)
CLASS_SMP_DR = 0x81                  # subnet management, directed route (QP0)
CLASS_PERF = 0x04                    # performance management (QP1)
GSI_QKEY = 0x80010000

METHOD_GET = 0x01
METHOD_SET = 0x02
METHOD_GET_RESP = 0x81
PHYS_POLLING, PHYS_DISABLED, PHYS_LINK_UP = 2, 3, 5     # PortPhysicalState

ATTR_CLASS_PORT_INFO = 0x0001
ATTR_NODE_DESC = 0x0010
ATTR_NODE_INFO = 0x0011
ATTR_PORT_INFO = 0x0015
ATTR_PORT_COUNTERS = 0x0012
ATTR_PORT_COUNTERS_EXT = 0x001D

ALL_PORTS = 0xFF                     # PortSelect of an AllPortSelect aggregate
CAP_ALL_PORT_SELECT = 1 << 8
CAP_EXT_WIDTH = 1 << 9
CAP_XMIT_WAIT = 1 << 12

_HDR = struct.Struct(">BBBBHHQHHI")  # the 24-byte common header

_PC = struct.Struct(">xBHHBBHHHHBBxBHHIIIII")      # PortCounters data bytes 0-43
_PCE = struct.Struct(">xBH4xQQQQQQQQ")            # PortCountersExtended data bytes 0-71
_PCE_VALUES = struct.Struct(">8xQQQQQQQQ")       # ... its eight counters alone
PCE_NAMES = ("transmit_bytes", "receive_bytes", "transmit_packets", "receive_packets",
             "transmit_unicast_packets", "receive_unicast_packets",
             "transmit_multicast_packets", "receive_multicast_packets")

WIDTHS = {1: 1, 2: 4, 4: 8, 8: 12, 16: 2}                    # LinkWidthActive bit -> lanes
SPEEDS = {1: "SDR", 2: "DDR", 4: "QDR"}                       # LinkSpeedActive
SPEEDS_EXT = {1: "FDR", 2: "EDR", 4: "HDR", 8: "NDR", 16: "XDR"}  # LinkSpeedExtActive (wins when set)
SPEEDS_EXT2 = {1: "XDR"}                                      # LinkSpeedExtActive2 (wins over both)


class MadError(ValueError):
    """The bytes are not the answer asked for (short, wrong attribute, or an error status)."""


@dataclass(frozen=True, slots=True)
class Header:
    mgmt_class: int
    method: int
    status: int
    tid: int
    attr_id: int
    attr_mod: int


def encode_get(mgmt_class: int, attr_id: int, attr_mod: int, tid: int, data: bytes = b"") -> bytearray:
    """A Get() request: the common header, zeros (M_Key 0 for SMPs) and `data` at DATA_OFFSET."""
    mad = bytearray(MAD_SIZE)
    _HDR.pack_into(mad, 0, BASE_VERSION, mgmt_class, 1, METHOD_GET, 0, 0, tid, attr_id, 0, attr_mod)
    mad[DATA_OFFSET:DATA_OFFSET + len(data)] = data
    return mad


def port_select(port: int) -> bytes:
    """PerfMgt PortCounters/PortCountersExtended data selecting one port (255: every port), with
    CounterSelect all ones as perfquery sends it (it only matters to a Set, which is never sent)."""
    return bytes((0, port & 0xFF, 0xFF, 0xFF))


def encode_port_counters(port: int, tid: int) -> bytearray:
    return encode_get(CLASS_PERF, ATTR_PORT_COUNTERS, 0, tid, port_select(port))


def encode_port_counters_ext(port: int, tid: int) -> bytearray:
    return encode_get(CLASS_PERF, ATTR_PORT_COUNTERS_EXT, 0, tid, port_select(port))


def encode_class_port_info(tid: int) -> bytearray:
    return encode_get(CLASS_PERF, ATTR_CLASS_PORT_INFO, 0, tid)


def encode_port_info(port: int, tid: int) -> bytearray:
    return encode_get(CLASS_SMP_LID, ATTR_PORT_INFO, port, tid)


def encode_port_info_set(port: int, tid: int, current: bytes, phys_state: int) -> bytearray:
    """SubnSet(PortInfo) of a switch port: `current` is its PortInfo attribute (the 64 data bytes of a Get's
    answer, or the whole answer), changed as ibportstate does (module doc) to PortPhysicalState `phys_state`
    (PHYS_DISABLED or PHYS_POLLING)."""
    if phys_state not in (PHYS_DISABLED, PHYS_POLLING):
        raise ValueError(f"PortPhysicalState {phys_state} cannot be set (2 Polling or 3 Disabled)")
    data = bytearray(current[DATA_OFFSET:DATA_OFFSET + 64] if len(current) >= DATA_OFFSET + 64 else current[:64])
    if len(data) != 64:
        raise MadError(f"PortInfo data is {len(data)} bytes, expected 64")
    for at in (16, 18):                                   # LID, MasterSMLID
        if int.from_bytes(data[at:at + 2], "big") in (0, 0xFFFF):
            data[at:at + 2] = (0x1234).to_bytes(2, "big")
    data[29] = 0                                          # LinkWidthEnabled: no change
    data[32] &= 0xF0                                      # PortState: no change (LinkSpeedSupported kept)
    data[33] = (phys_state << 4) | (data[33] & 0x0F)      # PortPhysicalState (LinkDownDefaultState kept)
    data[35] &= 0xF0                                      # LinkSpeedEnabled: no change (LinkSpeedActive kept)
    data[56] &= 0xF8                                      # LinkSpeedExtEnabled2: no change
    data[63] &= 0xE0                                      # LinkSpeedExtEnabled: no change
    mad = encode_get(CLASS_SMP_LID, ATTR_PORT_INFO, port, tid, bytes(data))
    mad[3] = METHOD_SET
    return mad


def decode_header(mad: bytes) -> Header:
    if len(mad) < 24:
        raise MadError(f"short MAD: {len(mad)} bytes")
    _bv, cls, _cv, method, status, _cs, tid, attr, _r, mod = _HDR.unpack_from(mad, 0)
    return Header(cls, method, status, tid, attr, mod)


def tid_low(mad: bytes) -> int:
    """The low 32 bits of the transaction ID (the kernel owns the high 32 bits of a request's TID)."""
    low: int = struct.unpack_from(">I", mad, 12)[0]
    return low


def _answer(mad: bytes, attr_id: int, need: int) -> None:
    """Raise MadError unless `mad` is a GetResp of `attr_id`, long enough, with a zero status."""
    if len(mad) < DATA_OFFSET + need:
        raise MadError(f"short MAD: {len(mad)} bytes")
    if mad[3] != METHOD_GET_RESP or mad[16] != attr_id >> 8 or mad[17] != attr_id & 0xFF or mad[4] & 0x7F or mad[5]:
        h = decode_header(mad)
        if h.method != METHOD_GET_RESP:
            raise MadError(f"method 0x{h.method:02x} is not GetResp")
        if h.attr_id != attr_id:
            raise MadError(f"attribute 0x{h.attr_id:04x}, asked 0x{attr_id:04x}")
        raise MadError(f"MAD status 0x{h.status:04x}")   # bit 15 of an SMP's status is the D (direction) bit


def decode_class_port_info(mad: bytes) -> int:
    """PerfMgt ClassPortInfo -> CapabilityMask (16 bits)."""
    _answer(mad, ATTR_CLASS_PORT_INFO, 4)
    mask: int = struct.unpack_from(">H", mad, DATA_OFFSET + 2)[0]
    return mask


def decode_port_counters(mad: bytes) -> tuple[int, dict[str, int]]:
    """PerfMgt PortCounters -> (PortSelect, {canonical counter name: value})."""
    _answer(mad, ATTR_PORT_COUNTERS, _PC.size)
    (sel, _csel, sym, ler, ld, rcv, rrp, rsr, xd, xce, rce, lli_ebo, _qp1, vl15,
     xdata, rdata, xpkts, rpkts, xwait) = _PC.unpack_from(mad, DATA_OFFSET)
    return sel, {
        "symbol_errors": sym, "link_error_recovery": ler, "link_downed": ld, "receive_errors": rcv,
        "receive_remote_physical_errors": rrp, "receive_switch_relay_errors": rsr, "transmit_discards": xd,
        "transmit_constraint_errors": xce, "receive_constraint_errors": rce,
        "local_link_integrity_errors": lli_ebo >> 4, "excessive_buffer_overrun_errors": lli_ebo & 0xF,
        "vl15_dropped": vl15, "transmit_wait": xwait, "transmit_bytes": xdata, "receive_bytes": rdata,
        "transmit_packets": xpkts, "receive_packets": rpkts,
    }


def decode_port_counters_ext(mad: bytes) -> tuple[int, dict[str, int]]:
    """PerfMgt PortCountersExtended -> (PortSelect, {canonical counter name: 64-bit value})."""
    _answer(mad, ATTR_PORT_COUNTERS_EXT, _PCE.size)
    sel, _csel, *vals = _PCE.unpack_from(mad, DATA_OFFSET)
    return sel, dict(zip(PCE_NAMES, vals))


def port_counters_ext_values(mad: bytes) -> tuple[int, ...]:
    """PerfMgt PortCountersExtended -> its eight 64-bit counters in PCE_NAMES order: what a sweep keeps
    of every port, without decode_port_counters_ext's dict (the answer checked in line: one call a port)."""
    if len(mad) < DATA_OFFSET + _PCE.size or mad[3] != METHOD_GET_RESP or mad[16] or mad[17] != ATTR_PORT_COUNTERS_EXT \
            or mad[4] & 0x7F or mad[5]:
        _answer(mad, ATTR_PORT_COUNTERS_EXT, _PCE.size)     # raises MadError with the reason
    return _PCE_VALUES.unpack_from(mad, DATA_OFFSET)


@dataclass(frozen=True, slots=True)
class PortInfoState:
    port: int                        # the attribute modifier answered
    state: int                       # PortState: 1 Down, 2 Init, 3 Armed, 4 Active
    phys_state: int                  # PortPhysicalState: 2 Polling, 3 Disabled, 5 LinkUp
    width: int | None                # lanes (LinkWidthActive), None when not a known value
    speed: str | None                # generation name (LinkSpeedExtActive where set, else LinkSpeedActive)

    @property
    def up(self) -> bool:
        """As parsers.portinfo.PortState.up: past Down and the physical link trained."""
        return self.state not in (0, 1) and self.phys_state == 5


def decode_port_info(mad: bytes) -> PortInfoState:
    """SMP PortInfo -> the port's link state, width and speed."""
    _answer(mad, ATTR_PORT_INFO, 64)
    d = DATA_OFFSET
    speed = _port_link(_LINK_KEY.unpack_from(mad, d + 29))[2]
    return PortInfoState(int.from_bytes(mad[20:24], "big"), mad[d + 32] & 0xF, mad[d + 33] >> 4,
                         WIDTHS.get(mad[d + 31]), speed)


# PortInfo data bytes 29-35, 56 and 62-63: every field decode_port_link reads (the link state, the
# active width and speed, what the port may train at)
_LINK_KEY = struct.Struct("7s20xB5x2s")


@functools.lru_cache(maxsize=1024)
def _port_link(key: tuple[bytes, int, bytes]) -> tuple[bool, int | None, str | None, LinkAbility]:
    """(link up, width, speed, ability) from PortInfo data bytes 29-35, 56, 62-63 (a fabric has few
    distinct combinations, so each is decoded once)."""
    head, b56, tail = key
    wen, wsup, wact, ssup_state, phys, _lmc, sact_sen = head
    b62, b63 = tail
    act2 = (b56 >> 5) & 0x3
    ext = b62 >> 4
    speed = SPEEDS_EXT2.get(act2) if act2 else SPEEDS_EXT.get(ext) if ext else SPEEDS.get(sact_sen >> 4)
    ability = from_masks(wen, wsup, sact_sen & 0xF, ssup_state >> 4, b63 & 0x1F, b62 & 0xF, b56 & 0x7, (b56 >> 3) & 0x3)
    return ssup_state & 0xF not in (0, 1) and phys >> 4 == 5, WIDTHS.get(wact), speed, ability


def decode_port_link(mad: bytes) -> tuple[bool, int | None, str | None, LinkAbility]:
    """SMP PortInfo -> (link up, active width, active speed, what the port may train at): what a
    sweep reads of every cabled port. Every one of them is in ten bytes of the attribute, so the
    answer is checked in line and those bytes looked up (`_port_link`): one call and one unpack a port."""
    if len(mad) < DATA_OFFSET + 64 or mad[3] != METHOD_GET_RESP or mad[16] or mad[17] != ATTR_PORT_INFO \
            or mad[4] & 0x7F or mad[5]:
        _answer(mad, ATTR_PORT_INFO, 64)              # raises MadError with the reason
    return _port_link(_LINK_KEY.unpack_from(mad, DATA_OFFSET + 29))


@dataclass(frozen=True, slots=True)
class NodeInfo:
    node_type: int                   # 1 CA, 2 switch, 3 router
    nports: int
    system_guid: str
    node_guid: str                   # 16 hex digits, no 0x (as the topology keys switches)
    port_guid: str
    local_port: int


def decode_node_info(mad: bytes) -> NodeInfo:
    _answer(mad, ATTR_NODE_INFO, 40)
    d = DATA_OFFSET
    _bv, _cv, ntype, nports, sysg, nodeg, portg = struct.unpack_from(">BBBBQQQ", mad, d)
    return NodeInfo(ntype, nports, f"{sysg:016x}", f"{nodeg:016x}", f"{portg:016x}", mad[d + 39])


def decode_node_desc(mad: bytes) -> str:
    _answer(mad, ATTR_NODE_DESC, 64)
    raw = bytes(mad[DATA_OFFSET:DATA_OFFSET + 64])
    return raw.split(b"\0", 1)[0].decode("utf-8", "replace").strip()
