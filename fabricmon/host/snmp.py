"""An in-process SNMPv2c GETBULK client: a small BER codec and walks of many switches driven by one
thread (a selector), standard library only.

Why (bench/ethernet_sweep.py, docs/ethernet.md): net-snmp's `snmpbulkwalk` costs about 6 ms of CPU
per process to start, three per switch and sweep; here a walk costs a few microseconds per value.
SNMPv3 (authPriv needs AES/DES, which the standard library lacks) stays on net-snmp's tools.

What it speaks: GETBULK requests, Response PDUs, and the value types a walk of interface and PFC
tables meets (INTEGER, OCTET STRING, NULL, OBJECT IDENTIFIER, IpAddress, Counter32, Gauge32,
TimeTicks, Opaque, Counter64, noSuchObject, noSuchInstance, endOfMibView). A walk's answer is
the text `snmpbulkwalk -On -Oe -Ot` would print (one `.OID = TYPE: value` line per object), so
that parsers.snmp reads both paths alike and `fabric capture` records and replays it as a
command (host.bundle).

The hot path is per varbind: an object's OID is checked against its column's encoded prefix
(bytes, no tuple), and its index is turned into text through a cache (the same indexes come
back every sweep).
"""

from __future__ import annotations

import errno
import ipaddress
import os
import queue
import selectors
import socket
import threading
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any, Generic, Protocol, TypeVar, cast

from fabricmon.host.runner import CommandResult

# --- BER ----------------------------------------------------------------------------------------

INTEGER, OCTET_STRING, NULL, OID, SEQUENCE = 0x02, 0x04, 0x05, 0x06, 0x30
IPADDRESS, COUNTER32, GAUGE32, TIMETICKS, OPAQUE, COUNTER64 = 0x40, 0x41, 0x42, 0x43, 0x44, 0x46
NO_SUCH_OBJECT, NO_SUCH_INSTANCE, END_OF_MIB_VIEW = 0x80, 0x81, 0x82
GET_REQUEST, GET_NEXT_REQUEST, RESPONSE, SET_REQUEST, GET_BULK_REQUEST = 0xA0, 0xA1, 0xA2, 0xA3, 0xA5
VERSION_2C = 1
TOO_BIG = 1
ERROR_STATUS = {0: "noError", 1: "tooBig", 2: "noSuchName", 3: "badValue", 4: "readOnly", 5: "genErr",
                6: "noAccess", 7: "wrongType", 8: "wrongLength", 9: "wrongEncoding", 10: "wrongValue",
                11: "noCreation", 12: "inconsistentValue", 13: "resourceUnavailable", 14: "commitFailed",
                15: "undoFailed", 16: "authorizationError", 17: "notWritable", 18: "inconsistentName"}
_UNSIGNED = frozenset((COUNTER32, GAUGE32, TIMETICKS, COUNTER64))


class BerError(ValueError):
    """A datagram that is not a well-formed SNMP message."""


def encode_length(n: int) -> bytes:
    if n < 0x80:
        return bytes((n,))
    body = n.to_bytes((n.bit_length() + 7) // 8, "big")
    return bytes((0x80 | len(body),)) + body


def tlv(tag: int, body: bytes) -> bytes:
    return bytes((tag,)) + encode_length(len(body)) + body


def encode_integer(value: int, tag: int = INTEGER) -> bytes:
    """A signed INTEGER, or (tag an unsigned type) an unsigned one, in the fewest octets."""
    if tag in _UNSIGNED or tag == IPADDRESS:
        if value < 0:
            raise ValueError(f"negative value {value} for unsigned type 0x{tag:02x}")
        body = value.to_bytes(value.bit_length() // 8 + 1, "big")        # a leading 0 when the top bit is set
    else:
        body = value.to_bytes(max(1, (value + (value < 0)).bit_length() // 8 + 1), "big", signed=True)
    return tlv(tag, body)


def oid_body(oid: str | Sequence[int]) -> bytes:
    """The contents octets of an OBJECT IDENTIFIER ("1.3.6.1..." or a sequence of sub-ids)."""
    parts = [int(p) for p in oid.strip(".").split(".")] if isinstance(oid, str) else list(oid)
    if len(parts) < 2 or parts[0] > 2 or (parts[0] < 2 and parts[1] > 39) or min(parts) < 0:
        raise ValueError(f"not an OID: {oid!r}")
    out = bytearray()
    for sub in [parts[0] * 40 + parts[1], *parts[2:]]:
        chunk = [sub & 0x7F]
        sub >>= 7
        while sub:
            chunk.append(0x80 | (sub & 0x7F))
            sub >>= 7
        out += bytes(reversed(chunk))
    return bytes(out)


def decode_subids(body: bytes) -> tuple[int, ...]:
    """Base-128 sub-identifiers (no first-two-arcs folding): an OID's tail."""
    out, sub = [], 0
    for b in body:
        sub = (sub << 7) | (b & 0x7F)
        if not b & 0x80:
            out.append(sub)
            sub = 0
    if body and body[-1] & 0x80:
        raise BerError("OID ends inside a sub-identifier")
    return tuple(out)


def decode_oid(body: bytes) -> tuple[int, ...]:
    if not body:
        raise BerError("empty OID")
    subs = decode_subids(body)
    first = subs[0]
    head = (first // 40, first % 40) if first < 80 else (2, first - 80)
    return head + subs[1:]


def oid_text(body: bytes) -> str:
    return ".".join(map(str, decode_oid(body)))


def encode_value(tag: int, value: Any) -> bytes:       # what `value` is, the tag says (module doc)
    if tag in (INTEGER, *_UNSIGNED):
        return encode_integer(int(value), tag)
    if tag in (OCTET_STRING, OPAQUE):
        return tlv(tag, value.encode() if isinstance(value, str) else bytes(value))
    if tag == IPADDRESS:
        return tlv(tag, socket.inet_aton(value) if isinstance(value, str) else bytes(value))
    if tag == OID:
        return tlv(tag, oid_body(value))
    if tag in (NULL, NO_SUCH_OBJECT, NO_SUCH_INSTANCE, END_OF_MIB_VIEW):
        return bytes((tag, 0))
    raise ValueError(f"cannot encode type 0x{tag:02x}")


def encode_message(community: bytes, pdu_tag: int, request_id: int, field1: int, field2: int,
                   varbinds: Sequence[tuple[str | Sequence[int] | bytes, int, object]]) -> bytes:
    """An SNMPv2c message. varbinds: (OID (text, sub-ids, or encoded body bytes), value tag, value).
    For GETBULK, field1 is non-repeaters and field2 max-repetitions; otherwise error status and index."""
    return tlv(SEQUENCE, encode_integer(VERSION_2C) + tlv(OCTET_STRING, community)
               + encode_pdu(pdu_tag, request_id, field1, field2, varbinds))


def encode_pdu(pdu_tag: int, request_id: int, field1: int, field2: int,
               varbinds: Sequence[tuple[str | Sequence[int] | bytes, int, object]]) -> bytes:
    """A PDU alone (what a v2c message and a v3 scoped PDU carry)."""
    vbs = b"".join(tlv(SEQUENCE, tlv(OID, o if isinstance(o, bytes) else oid_body(o)) + encode_value(t, v))
                   for o, t, v in varbinds)
    return tlv(pdu_tag, encode_integer(request_id) + encode_integer(field1) + encode_integer(field2)
               + tlv(SEQUENCE, vbs))


def encode_getbulk(community: bytes, request_id: int, max_repetitions: int, oids: Sequence[bytes],
                   non_repeaters: int = 0) -> bytes:
    """A GETBULK request for the given encoded OIDs (values NULL)."""
    return encode_message(community, GET_BULK_REQUEST, request_id, non_repeaters, max_repetitions,
                          [(o, NULL, None) for o in oids])


def ber_header(data: bytes, pos: int, end: int) -> tuple[int, int, int]:
    """(tag, start of contents, end of contents) of the TLV at pos, bounded by end."""
    if pos + 2 > end:
        raise BerError("truncated")
    tag, n = data[pos], data[pos + 1]
    pos += 2
    if n & 0x80:
        k = n & 0x7F
        if k == 0 or k > 4 or pos + k > end:
            raise BerError("bad length")
        n = int.from_bytes(data[pos:pos + k], "big")
        pos += k
    if pos + n > end:
        raise BerError("truncated")
    return tag, pos, pos + n


def ber_int_at(data: bytes, pos: int, end: int) -> tuple[int, int]:
    tag, s, e = ber_header(data, pos, end)
    if tag != INTEGER or s == e:
        raise BerError("expected an INTEGER")
    return int.from_bytes(data[s:e], "big", signed=True), e


@dataclass(slots=True)
class Response:
    request_id: int
    error_status: int
    error_index: int
    varbinds: list[tuple[bytes, int, bytes]]       # (OID contents, value tag, value contents)
    community: bytes = b""
    pdu_tag: int = RESPONSE


def decode_message(data: bytes) -> Response:
    """An SNMPv1/v2c message -> its PDU, varbinds undecoded ((OID body, tag, value body)).
    Raises BerError on anything malformed, trailing bytes included."""
    end = len(data)
    tag, pos, mend = ber_header(data, 0, end)
    if tag != SEQUENCE:
        raise BerError("not an SNMP message")
    if mend != end:
        raise BerError(f"{end - mend} trailing bytes after the message")
    _version, pos = ber_int_at(data, pos, mend)
    tag, s, pos = ber_header(data, pos, mend)
    if tag != OCTET_STRING:
        raise BerError("expected the community")
    resp = decode_pdu(data, pos, mend)
    resp.community = data[s:pos]
    return resp


_PDU_TAGS = (GET_REQUEST, GET_NEXT_REQUEST, RESPONSE, SET_REQUEST, GET_BULK_REQUEST)


def decode_pdu(data: bytes, pos: int, end: int, tags: Sequence[int] = _PDU_TAGS) -> Response:
    """The PDU at data[pos:end], which it must fill exactly (a v2c message's or a v3 scoped PDU's)."""
    pdu_tag, pos, pend = ber_header(data, pos, end)
    if pdu_tag not in tags:
        raise BerError(f"unexpected PDU type 0x{pdu_tag:02x}")
    if pend != end:
        raise BerError("trailing bytes after the PDU")
    request_id, pos = ber_int_at(data, pos, pend)
    status, pos = ber_int_at(data, pos, pend)
    index, pos = ber_int_at(data, pos, pend)
    tag, pos, lend = ber_header(data, pos, pend)
    if tag != SEQUENCE:
        raise BerError("expected the varbind list")
    if lend != pend:
        raise BerError("trailing bytes after the varbind list")
    vbs: list[tuple[bytes, int, bytes]] = []
    append = vbs.append
    while pos < lend:
        # inlined headers: the per-varbind hot path (short lengths are the common case)
        if data[pos] != SEQUENCE:
            raise BerError("expected a varbind")
        n = data[pos + 1] if pos + 1 < lend else 0x80
        if n < 0x80:
            vend = pos + 2 + n
            pos += 2
            if vend > lend:
                raise BerError("truncated")
        else:
            _, pos, vend = ber_header(data, pos, lend)
        if pos + 2 > vend or data[pos] != OID:
            raise BerError("expected an OID")
        n = data[pos + 1]
        if n < 0x80:
            oid = data[pos + 2:pos + 2 + n]
            pos += 2 + n
            if pos > vend:
                raise BerError("truncated")
        else:
            _, s, pos = ber_header(data, pos, vend)
            oid = data[s:pos]
        if pos + 2 > vend:
            raise BerError("truncated")
        vtag, n = data[pos], data[pos + 1]
        if n < 0x80:
            s, pos = pos + 2, pos + 2 + n
            if pos != vend:
                raise BerError("bad varbind length")
        else:
            vtag, s, pos = ber_header(data, pos, vend)
            if pos != vend:
                raise BerError("bad varbind length")
        append((oid, vtag, data[s:pos]))
        pos = vend
    return Response(request_id, status, index, vbs, b"", pdu_tag)


_WIDTH = {COUNTER32: 5, GAUGE32: 5, TIMETICKS: 5, COUNTER64: 9}     # octets, a leading 0 included


def check_width(tag: int, body: bytes) -> None:
    """An unsigned number that fits its type (a 12-octet Counter64 does not), else BerError."""
    w = _WIDTH[tag]
    n = len(body)
    if not n or n > w or (n == w and body[0]):
        raise BerError(f"{_NUMBER_TYPE[tag]} of {n} octets" + (f" (at most {w - 1} and a leading 0)" if n else ""))


def decode_value(tag: int, body: bytes) -> int | bytes | str | None:
    """A varbind's value as Python: int, bytes, dotted OID text, IP text, or None (NULL and the
    exceptions noSuchObject, noSuchInstance, endOfMibView)."""
    if tag == INTEGER:
        if not 0 < len(body) <= 4:
            raise BerError(f"INTEGER of {len(body)} octets (Integer32: 1 to 4)")
        return int.from_bytes(body, "big", signed=True)
    if tag in _UNSIGNED:
        check_width(tag, body)
        return int.from_bytes(body, "big")
    if tag in (OCTET_STRING, OPAQUE):
        return bytes(body)
    if tag == OID:
        return oid_text(body)
    if tag == IPADDRESS:
        if len(body) != 4:
            raise BerError("IpAddress is not 4 octets")
        return socket.inet_ntoa(body)
    if tag in (NULL, NO_SUCH_OBJECT, NO_SUCH_INSTANCE, END_OF_MIB_VIEW):
        return None
    raise BerError(f"unknown value type 0x{tag:02x}")


# --- net-snmp's text (-On -Oe -Ot) ---------------------------------------------------------------

_NUMBER_TYPE = {INTEGER: "INTEGER", COUNTER32: "Counter32", GAUGE32: "Gauge32", TIMETICKS: "Timeticks",
                COUNTER64: "Counter64"}
_EXCEPTION_TEXT = {NO_SUCH_OBJECT: "No Such Object available on this agent at this OID",
                   NO_SUCH_INSTANCE: "No Such Instance currently exists at this OID",
                   END_OF_MIB_VIEW: "No more variables left in this MIB View (It is past the end of the MIB tree)"}
_UNSIGNED_TEXT = {t: f"{_NUMBER_TYPE[t]}: " for t in _UNSIGNED}
_PRINTABLE = frozenset(range(0x20, 0x7F)) | {0x09}


def value_text(tag: int, body: bytes) -> str:
    """The right-hand side net-snmp prints for a value (after ' = ')."""
    if tag in _NUMBER_TYPE:
        return f"{_NUMBER_TYPE[tag]}: {cast(int, decode_value(tag, body))}"     # a number type's is an int
    if tag == OCTET_STRING:
        if not body:
            return '""'
        if _PRINTABLE.issuperset(body):
            return 'STRING: "' + body.decode("ascii").replace("\\", "\\\\").replace('"', '\\"') + '"'
        return "Hex-STRING: " + body.hex(" ").upper() + " "
    if tag == OID:
        return "OID: ." + oid_text(body)
    if tag == IPADDRESS:
        return f"IpAddress: {cast(str, decode_value(tag, body))}"             # an IpAddress's is its text
    if tag == NULL:
        return "NULL"
    if tag == OPAQUE:
        return "Opaque: " + body.hex(" ").upper()
    if tag in _EXCEPTION_TEXT:
        return _EXCEPTION_TEXT[tag]
    raise BerError(f"unknown value type 0x{tag:02x}")


# --- walks --------------------------------------------------------------------------------------

DEFAULT_MAX_ROWS = 50000
MAX_VALUE_WARNINGS = 20      # bad values named in a walk's stderr; more are counted


class V3Answer(Protocol):
    """An SNMPv3 message as the user-based security model decodes it (host.usm.V3Message)."""
    @property
    def flags(self) -> int: ...
    @property
    def engine_id(self) -> bytes: ...
    @property
    def boots(self) -> int: ...
    @property
    def time(self) -> int: ...
    @property
    def authenticated(self) -> bool: ...
    @property
    def pdu(self) -> Response | None: ...


E = TypeVar("E")      # the security model's record of an agent's engine (host.usm.Engine), opaque here


class V3Security(Protocol, Generic[E]):
    """What a walk asks of SNMPv3's user-based security model: host.usm.Usm, known here by this shape
    (usm.py imports this module, and a type import back would be an import circle)."""
    def argv(self) -> tuple[str, ...]: ...
    def engine(self, address: str) -> E | None: ...
    def learn(self, address: str, engine_id: bytes, boots: int, engine_time: int, now: float) -> E: ...
    def forget(self, address: str) -> None: ...
    def discovery(self, msg_id: int) -> bytes: ...
    def request(self, e: E, msg_id: int, pdu: bytes, now: float) -> bytes: ...
    def decode(self, data: bytes, e: E | None, expect: int | None = None) -> V3Answer | None: ...
    def synchronise(self, e: E, boots: int, etime: int, now: float) -> None: ...


@dataclass(frozen=True, slots=True)
class WalkSpec:
    """One walk: the subtree `root` of the switch at `address` (host[:port]), or only the given
    columns of that table (each walked to its own end in the same requests). SNMPv2c with
    `community`, or SNMPv3 authPriv when `usm` (a host.usm.Usm: the user's keys and the engines
    met) is given. A column (in a subtree walk: each table column under the root) that returns
    more than `max_rows` objects ends the walk as an error: a broken agent cannot walk us for ever."""
    address: str
    root: str
    columns: tuple[str, ...] = ()
    community: str = field(default="", repr=False)
    timeout: float = 2.0             # seconds per request
    retries: int = 1
    max_repetitions: int = 25
    max_rows: int = DEFAULT_MAX_ROWS
    usm: V3Security[Any] | None = field(default=None, repr=False, compare=False)

    def argv(self) -> tuple[str, ...]:
        """What `fabric capture` records it under (no secret, no user name): a command line in
        net-snmp's words, named for the in-process client."""
        sec = self.usm.argv() if self.usm is not None else ("-v2c",)
        return (INPROCESS_PROGRAM, *sec, "-On", "-Oe", "-Ot", "-t", f"{self.timeout:g}", "-r",
                str(self.retries), f"-Cr{self.max_repetitions}", self.address, self.root, *self.columns)

    def tool_argv(self) -> tuple[str, ...]:
        """The net-snmp command line of the same walk of the whole table (what bundles recorded
        before the in-process client: a replay falls back to it)."""
        return ("snmpbulkwalk", "-On", "-Oe", "-Ot", "-t", f"{self.timeout:g}", "-r", str(self.retries),
                f"-Cr{self.max_repetitions}", self.address, self.root)


INPROCESS_PROGRAM = "fabricmon-snmp-getbulk"
CANCEL_CHECK = 0.1           # seconds between looks at the cancel event while waiting
_suffix_cache: dict[bytes, tuple[str, tuple[int, ...]]] = {}
_SUFFIX_CACHE_MAX = 1 << 16
REPORT = 0xA8
_USM_STATS = "1.3.6.1.6.3.15.1.1."
_NOT_IN_TIME_WINDOW, _UNKNOWN_ENGINE_ID = 2, 4
_V3_RESYNCS = 2              # engine re-discoveries / clock resynchronisations per walk


def _suffix(raw: bytes) -> tuple[str, tuple[int, ...]]:
    hit = _suffix_cache.get(raw)
    if hit is None:
        subs = decode_subids(raw)
        hit = ("." + ".".join(map(str, subs)), subs)
        if len(_suffix_cache) < _SUFFIX_CACHE_MAX:
            _suffix_cache[raw] = hit
    return hit


class _Column:
    __slots__ = ("prefix", "text", "last", "last_subs", "lines", "done", "rows")

    def __init__(self, oid: str, subtree: bool):
        self.prefix = oid_body(oid)
        self.text = "." + oid.strip(".")
        self.last = self.prefix             # the OID the next request asks for the successor of
        self.last_subs: tuple[int, ...] = ()
        self.lines: list[str] = []
        self.done = False
        self.rows: dict[int, int] | None = {} if subtree else None    # a subtree walk: per table column


class _Walk:
    __slots__ = ("spec", "index", "columns", "max_rep", "request_id", "packet", "sent_at", "tries",
                 "error", "stderr", "started", "finished", "ended", "community", "bad", "warnings", "bad_values",
                 "discovering", "resyncs", "bad_auth")

    def __init__(self, spec: WalkSpec, index: int):
        self.spec = spec
        self.index = index
        subtree = not spec.columns
        self.columns = [_Column(c, subtree) for c in (spec.columns or (spec.root,))]
        self.max_rep = max(1, spec.max_repetitions)
        self.request_id = 0
        self.packet = b""
        self.sent_at = 0.0
        self.tries = 0
        self.error: str | None = None       # CommandResult.error
        self.stderr = ""
        self.started = 0.0
        self.finished = False
        self.ended: float | None = None     # time.monotonic() when it finished (its answer complete)
        self.community = spec.community.encode()
        self.bad: str | None = None         # why the last datagram for the request in flight was dropped
        self.warnings: list[str] = []       # values left out (wider than their type, unknown type)
        self.bad_values = 0
        self.discovering = False            # SNMPv3: the request in flight is an engine discovery
        self.resyncs = 0
        self.bad_auth = False               # SNMPv3: an answer came that failed authentication

    def active(self) -> list[_Column]:
        return [c for c in self.columns if not c.done]

    def result(self, now: float) -> CommandResult:
        out = "".join(line for c in self.columns for line in c.lines)
        rc = None if self.error in ("timeout", "parse", "exec_error") else (1 if self.stderr else 0)
        err = self.stderr
        if self.bad_values:
            more = self.bad_values - len(self.warnings)
            err += "".join(self.warnings) + (f"Bad values: {more} more left out\n" if more > 0 else "")
        return CommandResult(self.spec.argv(), rc, out, err, now - self.started if self.started else 0.0,
                             self.error, finished=self.ended)

    def bad_value(self, oid: str, why: str) -> None:
        """A value that cannot be read: left out of the answer and named in stderr (as net-snmp's
        tool goes on past a value it cannot print); the walk goes on."""
        self.bad_values += 1
        if len(self.warnings) < MAX_VALUE_WARNINGS:
            self.warnings.append(f"Bad value at {oid}: {why}\n")

    def absorb(self, resp: Response) -> None:
        """A response to this walk's request: add its objects, mark columns that ended."""
        cols = self.active()
        n = len(cols)
        vbs = resp.varbinds
        if not vbs:
            for c in cols:
                c.done = True
            return
        suffix, unsigned, width, from_bytes = _suffix, _UNSIGNED_TEXT, _WIDTH, int.from_bytes
        cap = self.spec.max_rows
        for j, col in enumerate(cols):
            prefix, plen, lines, rows = col.prefix, len(col.prefix), col.lines, col.rows
            for k in range(j, len(vbs), n):
                oid, tag, body = vbs[k]
                if tag == END_OF_MIB_VIEW or len(oid) <= plen or not oid.startswith(prefix):
                    col.done = True
                    break
                text, subs = suffix(oid[plen:])
                if subs <= col.last_subs:           # the agent went back or stood still: no endless walk
                    self.error, self.stderr = "parse", f"Error: OID not increasing: {col.text}{text}"
                    col.done = True
                    break
                col.last_subs = subs
                col.last = oid
                if rows is not None:                # a subtree: count each table column's rows
                    count = rows[subs[0]] = rows.get(subs[0], 0) + 1
                    if count > cap:                     # an agent that never ends a table
                        self.over_cap(col, f"{col.text}.{subs[0]}")
                        break
                kind = unsigned.get(tag)
                if kind is not None:                # the common case: a counter or gauge
                    w, blen = width[tag], len(body)
                    if 0 < blen < w or (blen == w and not body[0]):
                        lines.append(f"{col.text}{text} = {kind}{from_bytes(body, 'big')}\n")
                    else:
                        self.bad_value(col.text + text, f"{_NUMBER_TYPE[tag]} of {blen} octets")
                    continue
                try:
                    lines.append(f"{col.text}{text} = {value_text(tag, body)}\n")
                except (BerError, ValueError) as exc:
                    self.bad_value(col.text + text, str(exc))
            # a column walk counts its rows once per answer (the hot path stays per value):
            # it may pass the cap by one answer's rows before it ends
            if rows is None and not col.done and len(lines) + self.bad_values > cap:
                self.over_cap(col, col.text)
            # a column that got nothing in a short answer goes on in the next request

    def over_cap(self, col: _Column, where: str) -> None:
        cap = self.spec.max_rows
        self.error, self.stderr = "parse", f"Error: more than {cap} rows in {where} (fabric.ethernet.snmp.max_rows)"
        col.done = True


def _split_address(address: str) -> tuple[str, int]:
    host, port = address, 161
    if address.startswith("["):
        host, _, rest = address[1:].partition("]")
        if rest.startswith(":"):
            port = int(rest[1:])
    elif address.count(":") == 1:
        host, p = address.split(":")
        port = int(p)
    if not 0 < port < 65536:
        raise ValueError(f"port {port} out of range")
    return host, port


# --- names: resolved off the selector thread ---------------------------------------------------

DNS_TTL = 60.0               # seconds a resolved name is reused
DNS_THREADS = 4
# a UDP address as getaddrinfo gives it: (host, port) for IPv4, (host, port, flowinfo, scope_id) for IPv6
Sockaddr = tuple[str, int] | tuple[str, int, int, int] | tuple[int, bytes]
_dns_cache: dict[tuple[str, int], tuple[float, int, Sockaddr]] = {}
_dns_lock = threading.Lock()


def _literal(host: str, port: int) -> tuple[int, Sockaddr] | None:
    """An IP address literal, without asking a resolver; None for a name."""
    try:
        ip = ipaddress.ip_address(host)
    except ValueError:
        return None
    if ip.version == 4:
        return socket.AF_INET, (host, port)
    return socket.AF_INET6, (host, port, 0, 0)


def _resolve(host: str, port: int) -> tuple[int, Sockaddr]:
    """Blocking (a resolver thread's): the first UDP address of a name, cached DNS_TTL seconds."""
    info = socket.getaddrinfo(host, port, type=socket.SOCK_DGRAM)[0]
    with _dns_lock:
        if len(_dns_cache) > 4096:
            _dns_cache.clear()
        _dns_cache[(host, port)] = (time.monotonic() + DNS_TTL, info[0], info[4])
    return info[0], info[4]


def _cached(host: str, port: int) -> tuple[int, Sockaddr] | None:
    with _dns_lock:
        hit = _dns_cache.get((host, port))
    if hit is not None and hit[0] > time.monotonic():
        return hit[1], hit[2]
    return None


class _Resolver:
    """Names resolved by a few daemon threads (a slow DNS server stalls only the switches behind
    it, never the selector thread); each answer wakes the selector through a socket pair."""

    def __init__(self, names: list[tuple[str, str, int]], sel: selectors.BaseSelector):
        self.answers: queue.SimpleQueue[tuple[str, tuple[int, Sockaddr] | str]] = queue.SimpleQueue()
        self.todo: queue.SimpleQueue[tuple[str, str, int]] = queue.SimpleQueue()
        for item in names:
            self.todo.put(item)
        self.waiting = len(names)
        self.stopped = False
        self.rx, self.tx = socket.socketpair()
        self.rx.setblocking(False)
        self.tx.setblocking(False)
        self.sel = sel
        sel.register(self.rx, selectors.EVENT_READ, None)
        for _ in range(min(DNS_THREADS, len(names))):
            threading.Thread(target=self._work, name="fabricmon-snmp-dns", daemon=True).start()

    def _work(self) -> None:
        while not self.stopped:
            try:
                address, host, port = self.todo.get_nowait()
            except queue.Empty:
                return
            try:
                got: tuple[int, Sockaddr] | str = _resolve(host, port)
            except (OSError, UnicodeError, ValueError) as exc:
                got = getattr(exc, "strerror", None) or str(exc)
            self.answers.put((address, got))
            try:
                self.tx.send(b"x")
            except OSError:
                pass                        # the walks ended meanwhile

    def drain(self) -> list[tuple[str, tuple[int, Sockaddr] | str]]:
        try:
            while self.rx.recv(4096):
                pass
        except OSError:
            pass
        out = []
        while True:
            try:
                out.append(self.answers.get_nowait())
            except queue.Empty:
                break
        self.waiting -= len(out)
        return out

    def close(self) -> None:
        self.stopped = True
        self.sel.unregister(self.rx)
        self.rx.close()
        self.tx.close()


# --- the walks of many switches from one thread -------------------------------------------------

class _Run:
    """State of one walk_many call (see there)."""

    def __init__(self, specs: Sequence[WalkSpec], deadline: float, concurrency: int,
                 cancel: threading.Event | None):
        self.walks = [_Walk(s, i) for i, s in enumerate(specs)]
        self.deadline, self.cancel = deadline, cancel
        self.concurrency = max(1, concurrency)
        self.groups: dict[str, list[_Walk]] = {}
        for w in self.walks:
            self.groups.setdefault(w.spec.address, []).append(w)
        self.queue = list(self.groups)                       # addresses not started, in order
        self.sel = selectors.DefaultSelector()
        self.socks: dict[str, socket.socket] = {}
        self.live: dict[str, list[_Walk]] = {}               # address -> its walks not yet finished
        self.where: dict[str, tuple[int, Sockaddr] | str] = {}   # address -> (family, sockaddr) or why not
        self.req_ids = iter(range(int.from_bytes(os.urandom(3), "big") + 1, 1 << 31))
        self.resolver: _Resolver | None = None

    # --- starting switches -----------------------------------------------------------------------

    def resolve(self) -> None:
        names = []
        for address in self.queue:
            try:
                host, port = _split_address(address)
            except ValueError as exc:
                self.where[address] = str(exc)
                continue
            got = _literal(host, port) if "%" not in host else None
            got = got or _cached(host, port)
            if got is not None:
                self.where[address] = got
            else:
                names.append((address, host, port))
        if names:
            self.resolver = _Resolver(names, self.sel)

    def start_next(self, now: float) -> None:
        i = 0
        while i < len(self.queue) and len(self.live) < self.concurrency:
            address = self.queue[i]
            where = self.where.get(address)
            if where is None:                              # its name is still being resolved
                i += 1
                continue
            del self.queue[i]
            group = self.groups[address]
            try:
                if isinstance(where, str):
                    raise ValueError(where)
                sock = socket.socket(where[0], socket.SOCK_DGRAM)
                try:
                    sock.setblocking(False)
                    sock.connect(where[1])          # only this switch's datagrams reach this socket
                except OSError:
                    sock.close()
                    raise
            except (OSError, ValueError) as exc:
                for w in group:
                    w.finished = True
                    w.stderr = f"{address}: unknown host or bad address ({getattr(exc, 'strerror', None) or exc})"
                continue
            self.socks[address] = sock
            self.live[address] = list(group)
            self.sel.register(sock, selectors.EVENT_READ, address)
            group[0].started = now
            self.send(group[0], now)

    # --- requests --------------------------------------------------------------------------------

    def send(self, w: _Walk, now: float) -> None:
        w.request_id = next(self.req_ids)
        cols = w.active()
        # max-repetitions counts values per answer, as net-snmp's -Cr does for its one column: k
        # columns walked together ask for max_repetitions // k rows (answers stay the size the tool
        # gets; agents that cap values per answer, such as snmpsim's 64, are not pushed past it)
        reps = max(1, w.max_rep // len(cols))
        usm = w.spec.usm
        if usm is None:
            w.packet = encode_getbulk(w.community, w.request_id, reps, [c.last for c in cols])
        else:
            engine = usm.engine(w.spec.address)
            w.discovering = engine is None
            if engine is None:
                w.packet = usm.discovery(w.request_id)
            else:
                pdu = encode_pdu(GET_BULK_REQUEST, w.request_id, 0, reps, [(c.last, NULL, None) for c in cols])
                try:
                    w.packet = usm.request(engine, w.request_id, pdu, now)
                except (ValueError, OverflowError) as exc:     # an engine's numbers out of range
                    usm.forget(w.spec.address)
                    self.finish(w, "parse", f"{w.spec.address}: cannot make an SNMPv3 request ({exc})")
                    return
        w.tries = 0
        w.bad, w.bad_auth = None, False
        self.transmit(w, now)

    def transmit(self, w: _Walk, now: float) -> None:
        w.sent_at = now
        w.tries += 1
        try:
            self.socks[w.spec.address].send(w.packet)
        except OSError as exc:   # e.g. ECONNREFUSED from an earlier ICMP: the retry timer goes on
            if exc.errno not in (errno.ECONNREFUSED, errno.EAGAIN, errno.EHOSTUNREACH, errno.ENETUNREACH):
                self.finish(w, "exec_error", f"send: {exc.strerror or exc}")

    def no_answer(self, w: _Walk) -> None:
        """The request's retries are spent: the switch's walks end (those after it need not wait).
        SNMPv3: the engine is forgotten, so the next sweep discovers it again (an agent replaced
        under the same address, or one that drops a request outside its time window without a
        report, as snmpsim's does for an unknown engine ID, costs one sweep)."""
        address = w.spec.address
        if w.spec.usm is not None:
            w.spec.usm.forget(address)
        if w.bad_auth:               # answers signed with another key than ours
            self.finish(w, None, f"Error: SNMPv3 authentication failure: answers from {address} fail "
                                 "authentication (wrong pass phrase or protocol)", cascade=True)
        elif w.bad:                  # datagrams came, none of them an answer
            self.finish(w, "parse", f"{address}: not an SNMP answer ({w.bad})", cascade=True)
        else:
            self.finish(w, None, f"Timeout: No Response from {address}.", cascade=True)

    def finish(self, w: _Walk, error: str | None, stderr: str, cascade: bool = False) -> None:
        if w.finished:
            return
        w.finished, w.ended = True, time.monotonic()
        if error or stderr:
            w.error, w.stderr = error, stderr
        address = w.spec.address
        group = self.live.get(address)
        if group is None:
            return
        group.remove(w)
        if group and cascade:
            for x in group:
                x.finished, x.error, x.stderr = True, error, stderr
            group.clear()
        if group:
            group[0].started = time.monotonic()
            self.send(group[0], group[0].started)
        else:
            self.close(address)

    def close(self, address: str) -> None:
        self.live.pop(address, None)
        sock = self.socks.pop(address, None)
        if sock is not None:
            self.sel.unregister(sock)
            sock.close()

    # --- answers ---------------------------------------------------------------------------------

    def datagram(self, address: str, data: bytes) -> None:
        """One datagram from a switch. One that is not an answer (malformed, failing
        authentication, for an earlier request) is dropped: it costs at most the request in
        flight its retry, never the switch's other walks."""
        w = self.live[address][0]                   # the switch's walk in flight
        if w.spec.usm is not None:
            self.datagram_v3(w, data)
            return
        try:
            resp = decode_message(data)
        except (BerError, IndexError) as exc:
            w.bad = str(exc) or type(exc).__name__
            return
        if resp.request_id != w.request_id or resp.pdu_tag != RESPONSE:
            return                       # a late answer to an earlier request, or not for us
        self.answer(w, resp)

    def datagram_v3(self, w: _Walk, data: bytes) -> None:
        usm, address = w.spec.usm, w.spec.address
        assert usm is not None                  # an SNMPv3 walk's
        engine = usm.engine(address)
        try:
            m = usm.decode(data, engine, w.request_id)
        except (BerError, IndexError, ValueError) as exc:
            w.bad = str(exc) or type(exc).__name__
            w.bad_auth = w.bad_auth or type(exc).__name__ == "UsmError"
            return
        if m is None:
            return                       # an answer to an earlier request
        pdu = m.pdu
        if pdu is None:
            w.bad = "an encrypted message from an engine not yet discovered"
            return
        now = time.monotonic()
        if pdu.pdu_tag == REPORT:
            n, name = _report(pdu)
            if n == _UNKNOWN_ENGINE_ID and m.engine_id and (w.discovering or w.resyncs < _V3_RESYNCS):
                w.resyncs += not w.discovering
                usm.learn(address, m.engine_id, m.boots, m.time, now)      # keys: once per engine ID
                self.send(w, now)
                return
            if n == _NOT_IN_TIME_WINDOW and m.authenticated and engine is not None and w.resyncs < _V3_RESYNCS:
                w.resyncs += 1
                engine.boots, engine.time, engine.learned = m.boots, m.time, now
                self.send(w, now)
                return
            if w.discovering and m.engine_id:         # an agent that reports something else to a discovery
                usm.learn(address, m.engine_id, m.boots, m.time, now)
                self.send(w, now)
                return
            if n in (1, 3, 5, 6):
                self.finish(w, None, f"Error: SNMPv3 report {name} from {address}: authentication failed "
                                     "(wrong user, protocol or pass phrase)")
            else:
                self.finish(w, None, f"Error: SNMPv3 report {name} from {address}")
            return
        if not m.authenticated or w.discovering:
            w.bad = "an SNMPv3 answer without authentication"
            w.bad_auth = w.bad_auth or bool(m.flags & 1)
            return
        assert engine is not None               # an authenticated answer came from a known engine
        usm.synchronise(engine, m.boots, m.time, now)
        self.answer(w, pdu)

    def answer(self, w: _Walk, resp: Response) -> None:
        if resp.error_status == TOO_BIG and w.max_rep > 1:
            w.max_rep //= 2
            self.send(w, time.monotonic())
            return
        if resp.error_status:
            name = ERROR_STATUS.get(resp.error_status, str(resp.error_status))
            self.finish(w, None, f"Error in packet.\nReason: {name} (error index {resp.error_index})")
            return
        try:
            w.absorb(resp)
        except (BerError, ValueError, UnicodeDecodeError) as exc:
            self.finish(w, "parse", f"{w.spec.address}: bad value in an SNMP answer ({exc})")
            return
        if w.error:
            self.finish(w, w.error, w.stderr)
        elif not w.active():
            self.finish(w, None, "")
        else:
            self.send(w, time.monotonic())

    # --- the loop --------------------------------------------------------------------------------

    def run(self) -> list[CommandResult]:
        try:
            self.resolve()
            self.start_next(time.monotonic())
            while self.live or self.queue:
                now = time.monotonic()
                if now >= self.deadline or (self.cancel is not None and self.cancel.is_set()):
                    break
                wake = self.deadline if self.cancel is None else min(self.deadline, now + CANCEL_CHECK)
                for address, group in list(self.live.items()):
                    w = group[0]                            # the switch's walk in flight
                    due = w.sent_at + w.spec.timeout
                    if now >= due:
                        if w.tries > w.spec.retries:
                            self.no_answer(w)
                            continue
                        self.transmit(w, now)
                        due = now + w.spec.timeout
                    wake = min(wake, due)
                self.start_next(now)
                if not self.live and (self.resolver is None or not self.resolver.waiting):
                    continue                                # nothing to wait for: the loop's test decides
                for key, _ in self.sel.select(max(0.0, wake - time.monotonic())):
                    address = key.data
                    if address is None:                     # names resolved
                        assert self.resolver is not None    # its socket is the one registered without an address
                        for addr, got in self.resolver.drain():
                            self.where[addr] = got
                        continue
                    sock = cast(socket.socket, key.fileobj)     # a switch's UDP socket (registered with its address)
                    for _ in range(64):                  # bounded: drain what has arrived
                        if address not in self.live:
                            break
                        try:
                            data = sock.recv(65535)
                        except (BlockingIOError, InterruptedError):
                            break
                        except OSError:
                            break                        # ICMP port unreachable: the retry timer decides
                        self.datagram(address, data)
        finally:
            end = time.monotonic()
            for w in self.walks:
                if not w.finished:
                    w.finished = True
                    w.error, w.stderr = "timeout", w.stderr or "no answer before the deadline"
            for address in list(self.socks):
                self.close(address)
            if self.resolver is not None:
                self.resolver.close()
            self.sel.close()
        return [w.result(end) for w in self.walks]


def _report(pdu: Response) -> tuple[int, str]:
    """(usmStats number or 0, a name) of the counter an SNMPv3 report carries."""
    names = {1: "usmStatsUnsupportedSecLevels", 2: "usmStatsNotInTimeWindows", 3: "usmStatsUnknownUserNames",
             4: "usmStatsUnknownEngineIDs", 5: "usmStatsWrongDigests", 6: "usmStatsDecryptionErrors"}
    for oid, _tag, _body in pdu.varbinds:
        text = oid_text(oid)
        if text.startswith(_USM_STATS):
            n = int(text[len(_USM_STATS):].split(".")[0] or 0)
            return n, names.get(n, text)
        return 0, text
    return 0, "(empty)"


def walk_many(specs: Sequence[WalkSpec], deadline: float, concurrency: int = 16,
              cancel: threading.Event | None = None) -> list[CommandResult]:
    """Run every walk from this one thread: at most `concurrency` switches (addresses) at once,
    each switch's walks one after the other with one request in flight (as net-snmp's tool and
    snmp_exporter do: a switch's agent is not flooded), over one connected socket. Host names are
    resolved by resolver threads (a slow name holds back only its own switch). SNMPv3 (a spec with
    `usm`): the switch's engine is discovered by its first request (then cached in the Usm, with
    keys localised once per engine ID); a report that the engine changed or the clock drifted
    resynchronises and resends (twice at most per walk); a report of a wrong credential ends the
    walk with "Error: SNMPv3 report usmStats...".

    A walk that gets no answer after its retries ends with net-snmp's "Timeout: No Response from
    ..." (exit status 1), and so do the switch's walks after it; when datagrams came but none was
    an answer, with error "parse" ("not an SNMP answer (why)"). A datagram that is not an answer
    costs nothing else: the request's retry timer goes on. One still running at `deadline` ends
    with error "timeout"; a walk whose OIDs do not increase, or that passes `max_rows` in a
    column, with error "parse"; a value wider than its type is left out and named in stderr.
    `cancel` set (the daemon stopping) ends every walk at once, as the deadline does. Results in
    the order of `specs`."""
    return _Run(specs, deadline, concurrency, cancel).run()


__all__ = ["BerError", "DEFAULT_MAX_ROWS", "INPROCESS_PROGRAM", "Response", "WalkSpec", "ber_header", "ber_int_at",
           "check_width", "decode_message", "decode_oid", "decode_pdu", "decode_value", "encode_getbulk",
           "encode_message", "encode_pdu", "oid_body", "value_text", "walk_many"]
