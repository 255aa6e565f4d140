"""The subnet manager's reports, as bytes: pure encoders and decoders of what the `events` source sends and
receives (no I/O; unit-tested on bytes laid out from the spec's offsets and from what opensm and ibsim send).

Layouts from the IBTA spec (vol. 1, chapters 13.4, 14.2.5 and 15.2) as opensm's `ib_types.h` declares them;
every multi-byte field is big-endian.

- An SA MAD (class 0x03, class version 2) is the 24-byte common header, the RMPP header (12 bytes), the
  SM_Key (8 bytes at 36), the AttributeOffset (2 at 44), 2 reserved, the ComponentMask (8 at 48) and the
  attribute at SA_DATA (56).
- InformInfo (0x0003), 36 bytes: GID (16; zero: by LID range), LIDRangeBegin (16: 0xFFFF, every port the
  SM manages), LIDRangeEnd (18), reserved (20), IsGeneric (22), Subscribe (23), Type (24: 0xFFFF, any),
  TrapNumber (26), QPN (24 bits) and RespTimeValue (5 bits) at 28, reserved (32), ProducerType (24 bits at
  33: 0xFFFFFF, any). A SubnAdmSet(InformInfo) with Subscribe 1 subscribes; the SM answers with a
  SubnAdmGetResp carrying the InformInfo (status 0: accepted; opensm's osm_sa_informinfo.c refuses with
  status 0x0200 (request invalid) an unknown requester, a LID range outside its table, or a security trap
  (256-259) without the SM_Key).
- Notice (0x0002), 80 bytes, in a SubnAdmReport (method 0x06): IsGeneric (bit 7) and Type (7 bits) at 0,
  ProducerType (24 bits at 1), TrapNumber (4), IssuerLID (6), NoticeToggle and NoticeCount (8),
  DataDetails (54 at 10), IssuerGID (16 at 64). The subscriber answers each with a SubnAdmReportResp
  (method 0x86) of the same TID (host/sa.py does: the SM resends a report it has no answer to).
  DataDetails by trap: 128 (link state change) the switch's LID at 10; 129-131 (local link integrity,
  excessive buffer overrun, flow control watchdog) the LID at 12 and the port at 14; 64/65 (GID in and out
  of service, sent by the SM itself) the port's GID at 16.
- SMP SMInfo (0x0020): GUID (8), SM_Key (8), ActCount (4), Priority (4 bits) and SMState (4 bits) at 20:
  who the master is, and whether it restarted (a new GUID, or an activity count that went back).
- A directed-route SMP (class 0x81) with hop count 0 reaches the local port itself, whatever its LID:
  PortInfo (0x0015) of the port the collector sends from, whose LID is at data byte 16 and MasterSMLID at
  18 (as libibmad's `ib_resolve_smlid` asks it). A DR SMP's DrSLID and DrDLID (at 32 and 34, after the
  M_Key; its initial and return paths at 128 and 192) are the permissive LID 0xFFFF, and so is the LID it
  is addressed to.

What opensm forwards (osm_trap_rcv.c, osm_inform.c; checked against its log on ibsim): trap 128 from a
switch (it forwards it after its sweep of the trap's port), the SM's own 64 and 65 as ports come and go,
144 and 145; never 129-131 (it counts them to silence a noisy port, then drops them). Other SMs may
forward those; a subscription to them costs nothing where they are not forwarded."""

from __future__ import annotations

import struct
from dataclasses import dataclass

from fabricmon.sources.infiniband.mad.codec import (ATTR_PORT_INFO, BASE_VERSION, CLASS_SMP_DR, CLASS_SMP_LID,
                                                    DATA_OFFSET, MAD_SIZE, METHOD_GET, METHOD_GET_RESP, MadError)

CLASS_SA = 0x03
SA_CLASS_VERSION = 2
SA_DATA = 56                         # where an SA MAD's attribute starts
METHOD_SET = 0x02
METHOD_REPORT = 0x06
METHOD_REPORT_RESP = 0x86
ATTR_NOTICE = 0x0002
ATTR_INFORM_INFO = 0x0003
ATTR_SM_INFO = 0x0020
PERMISSIVE_LID = 0xFFFF
ALL_LIDS = 0xFFFF                    # LIDRangeBegin: every port the SM manages
ANY = 0xFFFF                         # Type: any
ANY_PRODUCER = 0xFFFFFF
QP_GSI = 1
RESP_TIME_VALUE = 19                 # 4.096 us x 2^19: about 2 s for the subscriber to answer a report

# the traps the `events` source subscribes to: the GID in/out of service notices and the port traps
GID_IN_SERVICE, GID_OUT_OF_SERVICE = 64, 65
LINK_STATE_CHANGE = 128
LINK_INTEGRITY, BUFFER_OVERRUN, WATCHDOG = 129, 130, 131
TRAPS = (GID_IN_SERVICE, GID_OUT_OF_SERVICE, LINK_STATE_CHANGE, LINK_INTEGRITY, BUFFER_OVERRUN, WATCHDOG)
TRAP_NAMES = {GID_IN_SERVICE: "GID in service", GID_OUT_OF_SERVICE: "GID out of service",
              LINK_STATE_CHANGE: "link state change", LINK_INTEGRITY: "local link integrity threshold",
              BUFFER_OVERRUN: "excessive buffer overrun threshold", WATCHDOG: "flow control update watchdog"}
SM_STATES = {0: "NOTACTIVE", 1: "DISCOVERING", 2: "STANDBY", 3: "MASTER"}

_HDR = struct.Struct(">BBBBHHQHHI")  # the 24-byte common header


def _sa_mad(method: int, attr: int, tid: int, data: bytes = b"", status: int = 0) -> bytearray:
    mad = bytearray(MAD_SIZE)
    _HDR.pack_into(mad, 0, BASE_VERSION, CLASS_SA, SA_CLASS_VERSION, method, status, 0, tid, attr, 0, 0)
    mad[SA_DATA:SA_DATA + len(data)] = data
    return mad


def inform_info(trap: int, subscribe: bool = True) -> bytes:
    """The InformInfo of a subscription to one generic trap from every port the SM manages (GID 0, LID
    range 0xFFFF), of any type and producer, to be reported to QP1 (the GSI, where the request comes from:
    opensm takes a subscription's QPN from the request's address, and matches an unsubscription by the QPN
    it carries: osm_inform.c match_inf_rec)."""
    d = bytearray(36)
    struct.pack_into(">HH", d, 16, ALL_LIDS, 0)
    d[22], d[23] = 1, 1 if subscribe else 0
    struct.pack_into(">HHI", d, 24, ANY, trap, QP_GSI << 8 | RESP_TIME_VALUE)
    struct.pack_into(">I", d, 32, ANY_PRODUCER)         # reserved byte 32 is 0: the producer is its low 24 bits
    return bytes(d)


def encode_subscribe(trap: int, tid: int, subscribe: bool = True) -> bytearray:
    """SubnAdmSet(InformInfo): subscribe to (or, subscribe False, unsubscribe from) one trap."""
    return _sa_mad(METHOD_SET, ATTR_INFORM_INFO, tid, inform_info(trap, subscribe))


@dataclass(frozen=True, slots=True)
class SubscribeAnswer:
    trap: int
    status: int                      # the MAD status: 0 accepted
    subscribed: bool                 # the InformInfo's Subscribe as answered (o13-13.1.1: 0 on a refusal)

    @property
    def accepted(self) -> bool:
        return self.status == 0 and self.subscribed


def decode_subscribe_answer(mad: bytes) -> SubscribeAnswer:
    """The SM's SubnAdmGetResp to a SubnAdmSet(InformInfo). Raises MadError where it is not one."""
    if len(mad) < SA_DATA + 36:
        raise MadError(f"short MAD: {len(mad)} bytes")
    _bv, cls, _cv, method, status, _cs, _tid, attr, _r, _mod = _HDR.unpack_from(mad, 0)
    if cls != CLASS_SA or method != METHOD_GET_RESP or attr != ATTR_INFORM_INFO:
        raise MadError(f"class 0x{cls:02x} method 0x{method:02x} attribute 0x{attr:04x} is no InformInfo answer")
    d = SA_DATA
    return SubscribeAnswer(struct.unpack_from(">H", mad, d + 26)[0], status, bool(mad[d + 23]))


def status_text(status: int) -> str:
    """An SA MAD status as the spec names it (13.4.7.2 and 15.2.1.1)."""
    common = {1: "busy", 2: "redirect required", 4: "bad version", 8: "method not supported",
              12: "method/attribute combination not supported", 28: "invalid attribute or modifier"}
    sa = {1: "no resources", 2: "request invalid", 3: "no records", 4: "too many records",
          5: "invalid GID", 6: "insufficient component mask"}
    low, high = status & 0xFF, status >> 8
    parts = [common.get(low & 0x1F, f"0x{low:02x}")] if low else []
    if high:
        parts.append(sa.get(high, f"SA status {high}"))
    return f"0x{status:04x} ({', '.join(parts)})" if parts else "0x0000"


@dataclass(frozen=True, slots=True)
class Notice:
    """One Notice of a SubnAdmReport."""
    generic: bool
    type: int                        # 0 fatal, 1 urgent, 2 security, 3 subnet management, 4 informational
    producer: int                    # 1 CA, 2 switch, 3 router, 4 class manager (the SM)
    trap: int
    issuer_lid: int
    count: int                       # NoticeCount (15 bits)
    lid: int | None                  # the LID the notice is about (128: the switch's; 129-131: the port's)
    port: int | None                 # 129-131: the port
    gid: str                         # 64/65: the port's GID (32 hex digits); the issuer's otherwise
    issuer_gid: str
    tid: int                         # the report's transaction ID

    @property
    def port_guid(self) -> str:
        """The low 64 bits of `gid` (a port's GUID), 16 hex digits."""
        return self.gid[16:]


def decode_report(mad: bytes) -> Notice:
    """A SubnAdmReport(Notice) -> its Notice. Raises MadError where it is not one."""
    if len(mad) < SA_DATA + 80:
        raise MadError(f"short MAD: {len(mad)} bytes")
    _bv, cls, _cv, method, _st, _cs, tid, attr, _r, _mod = _HDR.unpack_from(mad, 0)
    if cls != CLASS_SA or method != METHOD_REPORT or attr != ATTR_NOTICE:
        raise MadError(f"class 0x{cls:02x} method 0x{method:02x} attribute 0x{attr:04x} is no Report(Notice)")
    n = bytes(mad[SA_DATA:SA_DATA + 80])
    head, producer = n[0], int.from_bytes(n[1:4], "big")
    trap, issuer, toggle = struct.unpack_from(">HHH", n, 4)
    issuer_gid = n[64:80].hex()
    lid = port = None
    gid = issuer_gid
    if head & 0x80:
        if trap == LINK_STATE_CHANGE:
            lid = struct.unpack_from(">H", n, 10)[0] or issuer
        elif trap in (LINK_INTEGRITY, BUFFER_OVERRUN, WATCHDOG):
            lid, port = struct.unpack_from(">H", n, 12)[0], n[14]
        elif trap in (GID_IN_SERVICE, GID_OUT_OF_SERVICE):
            gid = n[16:32].hex()
    return Notice(bool(head & 0x80), head & 0x7F, producer, trap, issuer, toggle & 0x7FFF, lid, port, gid, issuer_gid,
                  tid)


def encode_report(notice: bytes, tid: int) -> bytearray:
    """A SubnAdmReport carrying `notice` (80 bytes) as opensm's send_report builds it (tests and benchmarks
    hand the collector what a forwarding SM would send)."""
    return _sa_mad(METHOD_REPORT, ATTR_NOTICE, tid, notice)


def trap128_notice(switch_lid: int, switch_guid: str, prefix: int = 0xFE80000000000000) -> bytes:
    """Trap 128 as a switch sends it (ibsim's encode_trap128: generic, urgent, producer switch, its LID as
    issuer and in DataDetails) with the IssuerGID the SM writes before forwarding it (its subnet prefix and
    the switch's port GUID: osm_trap_rcv.c)."""
    n = bytearray(80)
    n[0] = 0x80 | 1
    n[1:4] = (2).to_bytes(3, "big")
    struct.pack_into(">HH", n, 4, LINK_STATE_CHANGE, switch_lid)
    struct.pack_into(">H", n, 10, switch_lid)
    struct.pack_into(">QQ", n, 64, prefix, int(switch_guid, 16))
    return bytes(n)


def encode_sm_info(tid: int) -> bytearray:
    """SubnGet(SMInfo), LID-routed to the SM."""
    mad = bytearray(MAD_SIZE)
    _HDR.pack_into(mad, 0, BASE_VERSION, CLASS_SMP_LID, 1, METHOD_GET, 0, 0, tid, ATTR_SM_INFO, 0, 0)
    return mad


@dataclass(frozen=True, slots=True)
class SmIdentity:
    guid: str                        # 16 hex digits
    activity: int                    # ActCount
    priority: int
    state: str                       # SM_STATES


def decode_sm_info(mad: bytes) -> SmIdentity:
    if len(mad) < DATA_OFFSET + 21:
        raise MadError(f"short MAD: {len(mad)} bytes")
    _bv, cls, _cv, method, status, _cs, _tid, attr, _r, _mod = _HDR.unpack_from(mad, 0)
    if method != METHOD_GET_RESP or attr != ATTR_SM_INFO or status & 0x7FFF:
        raise MadError(f"method 0x{method:02x} attribute 0x{attr:04x} status 0x{status:04x}: no SMInfo")
    guid, _key, act = struct.unpack_from(">QQI", mad, DATA_OFFSET)
    b = mad[DATA_OFFSET + 20]
    return SmIdentity(f"{guid:016x}", act, b >> 4, SM_STATES.get(b & 0xF, str(b & 0xF)))


def encode_local_port_info(tid: int) -> bytearray:
    """SubnGet(PortInfo) of the local port: a directed-route SMP of hop count 0, DrSLID and DrDLID
    permissive."""
    mad = bytearray(MAD_SIZE)
    _HDR.pack_into(mad, 0, BASE_VERSION, CLASS_SMP_DR, 1, METHOD_GET, 0, 0, tid, ATTR_PORT_INFO, 0, 0)
    struct.pack_into(">HH", mad, 32, PERMISSIVE_LID, PERMISSIVE_LID)
    return mad


def decode_local_port_info(mad: bytes) -> tuple[int, int]:
    """The local port's (LID, MasterSMLID) from a directed-route PortInfo answer."""
    if len(mad) < DATA_OFFSET + 20:
        raise MadError(f"short MAD: {len(mad)} bytes")
    _bv, cls, _cv, method, status, _cs, _tid, attr, _r, _mod = _HDR.unpack_from(mad, 0)
    if method != METHOD_GET_RESP or attr != ATTR_PORT_INFO or status & 0x7FFF:
        raise MadError(f"method 0x{method:02x} attribute 0x{attr:04x} status 0x{status:04x}: no PortInfo")
    lid, sm_lid = struct.unpack_from(">HH", mad, DATA_OFFSET + 16)
    return lid, sm_lid


__all__ = ["ALL_LIDS", "ATTR_INFORM_INFO", "ATTR_NOTICE", "ATTR_SM_INFO", "CLASS_SA", "LINK_STATE_CHANGE",
           "METHOD_REPORT", "METHOD_REPORT_RESP", "Notice", "PERMISSIVE_LID", "SA_CLASS_VERSION", "SA_DATA",
           "SmIdentity", "SubscribeAnswer", "TRAPS", "TRAP_NAMES", "decode_local_port_info", "decode_report",
           "decode_sm_info", "decode_subscribe_answer", "encode_local_port_info", "encode_report", "encode_sm_info",
           "encode_subscribe", "inform_info", "status_text", "trap128_notice"]
