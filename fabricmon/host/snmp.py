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
import os
import selectors
import socket
import threading
import time
from collections.abc import Sequence
from dataclasses import dataclass, field

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


def encode_value(tag: int, value) -> bytes:
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
    vbs = b"".join(tlv(SEQUENCE, tlv(OID, o if isinstance(o, bytes) else oid_body(o)) + encode_value(t, v))
                   for o, t, v in varbinds)
    pdu = tlv(pdu_tag, encode_integer(request_id) + encode_integer(field1) + encode_integer(field2)
              + tlv(SEQUENCE, vbs))
    return tlv(SEQUENCE, encode_integer(VERSION_2C) + tlv(OCTET_STRING, community) + pdu)


def encode_getbulk(community: bytes, request_id: int, max_repetitions: int, oids: Sequence[bytes],
                   non_repeaters: int = 0) -> bytes:
    """A GETBULK request for the given encoded OIDs (values NULL)."""
    return encode_message(community, GET_BULK_REQUEST, request_id, non_repeaters, max_repetitions,
                          [(o, NULL, None) for o in oids])


def _header(data: bytes, pos: int, end: int) -> tuple[int, int, int]:
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


def _int_at(data: bytes, pos: int, end: int) -> tuple[int, int]:
    tag, s, e = _header(data, pos, end)
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
    Raises BerError on anything malformed."""
    end = len(data)
    tag, pos, mend = _header(data, 0, end)
    if tag != SEQUENCE:
        raise BerError("not an SNMP message")
    _version, pos = _int_at(data, pos, mend)
    tag, s, pos = _header(data, pos, mend)
    if tag != OCTET_STRING:
        raise BerError("expected the community")
    community = data[s:pos]
    pdu_tag, pos, pend = _header(data, pos, mend)
    if pdu_tag not in (GET_REQUEST, GET_NEXT_REQUEST, RESPONSE, SET_REQUEST, GET_BULK_REQUEST):
        raise BerError(f"unexpected PDU type 0x{pdu_tag:02x}")
    request_id, pos = _int_at(data, pos, pend)
    status, pos = _int_at(data, pos, pend)
    index, pos = _int_at(data, pos, pend)
    tag, pos, lend = _header(data, pos, pend)
    if tag != SEQUENCE:
        raise BerError("expected the varbind list")
    vbs = []
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
            _, pos, vend = _header(data, pos, lend)
        if pos + 2 > vend or data[pos] != OID:
            raise BerError("expected an OID")
        n = data[pos + 1]
        if n < 0x80:
            oid = data[pos + 2:pos + 2 + n]
            pos += 2 + n
            if pos > vend:
                raise BerError("truncated")
        else:
            _, s, pos = _header(data, pos, vend)
            oid = data[s:pos]
        if pos + 2 > vend:
            raise BerError("truncated")
        vtag, n = data[pos], data[pos + 1]
        if n < 0x80:
            s, pos = pos + 2, pos + 2 + n
            if pos != vend:
                raise BerError("bad varbind length")
        else:
            vtag, s, pos = _header(data, pos, vend)
        append((oid, vtag, data[s:pos]))
        pos = vend
    return Response(request_id, status, index, vbs, community, pdu_tag)


def decode_value(tag: int, body: bytes):
    """A varbind's value as Python: int, bytes, dotted OID text, IP text, or None (NULL and the
    exceptions noSuchObject, noSuchInstance, endOfMibView)."""
    if tag == INTEGER:
        if not body:
            raise BerError("empty INTEGER")
        return int.from_bytes(body, "big", signed=True)
    if tag in _UNSIGNED:
        if not body:
            raise BerError("empty number")
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
        return f"{_NUMBER_TYPE[tag]}: {decode_value(tag, body)}"
    if tag == OCTET_STRING:
        if not body:
            return '""'
        if _PRINTABLE.issuperset(body):
            return 'STRING: "' + body.decode("ascii").replace("\\", "\\\\").replace('"', '\\"') + '"'
        return "Hex-STRING: " + body.hex(" ").upper() + " "
    if tag == OID:
        return "OID: ." + oid_text(body)
    if tag == IPADDRESS:
        return f"IpAddress: {decode_value(tag, body)}"
    if tag == NULL:
        return "NULL"
    if tag == OPAQUE:
        return "Opaque: " + body.hex(" ").upper()
    if tag in _EXCEPTION_TEXT:
        return _EXCEPTION_TEXT[tag]
    raise BerError(f"unknown value type 0x{tag:02x}")


# --- walks --------------------------------------------------------------------------------------

@dataclass(frozen=True, slots=True)
class WalkSpec:
    """One walk: the subtree `root` of the switch at `address` (host[:port]), or only the given
    columns of that table (each walked to its own end in the same requests)."""
    address: str
    root: str
    columns: tuple[str, ...] = ()
    community: str = field(default="", repr=False)
    timeout: float = 2.0             # seconds per request
    retries: int = 1
    max_repetitions: int = 25

    def argv(self) -> tuple[str, ...]:
        """What `fabric capture` records it under (no secret): a command line in net-snmp's
        words, named for the in-process client."""
        return (INPROCESS_PROGRAM, "-v2c", "-On", "-Oe", "-Ot", "-t", f"{self.timeout:g}", "-r",
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


def _suffix(raw: bytes) -> tuple[str, tuple[int, ...]]:
    hit = _suffix_cache.get(raw)
    if hit is None:
        subs = decode_subids(raw)
        hit = ("." + ".".join(map(str, subs)), subs)
        if len(_suffix_cache) < _SUFFIX_CACHE_MAX:
            _suffix_cache[raw] = hit
    return hit


class _Column:
    __slots__ = ("prefix", "text", "last", "last_subs", "lines", "done")

    def __init__(self, oid: str):
        self.prefix = oid_body(oid)
        self.text = "." + oid.strip(".")
        self.last = self.prefix             # the OID the next request asks for the successor of
        self.last_subs: tuple[int, ...] = ()
        self.lines: list[str] = []
        self.done = False


class _Walk:
    __slots__ = ("spec", "index", "columns", "max_rep", "request_id", "packet", "sent_at", "tries",
                 "error", "stderr", "started", "finished", "community")

    def __init__(self, spec: WalkSpec, index: int):
        self.spec = spec
        self.index = index
        self.columns = [_Column(c) for c in (spec.columns or (spec.root,))]
        self.max_rep = max(1, spec.max_repetitions)
        self.request_id = 0
        self.packet = b""
        self.sent_at = 0.0
        self.tries = 0
        self.error: str | None = None       # CommandResult.error
        self.stderr = ""
        self.started = 0.0
        self.finished = False
        self.community = spec.community.encode()

    def active(self) -> list[_Column]:
        return [c for c in self.columns if not c.done]

    def result(self, now: float) -> CommandResult:
        out = "".join(line for c in self.columns for line in c.lines)
        rc = None if self.error in ("timeout", "parse", "exec_error") else (1 if self.stderr else 0)
        return CommandResult(self.spec.argv(), rc, out, self.stderr, now - self.started if self.started else 0.0,
                             self.error)

    def absorb(self, resp: Response) -> None:
        """A response to this walk's request: add its objects, mark columns that ended."""
        cols = self.active()
        n = len(cols)
        vbs = resp.varbinds
        if not vbs:
            for c in cols:
                c.done = True
            return
        suffix, unsigned, from_bytes = _suffix, _UNSIGNED_TEXT, int.from_bytes
        for j, col in enumerate(cols):
            prefix, plen, lines = col.prefix, len(col.prefix), col.lines
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
                kind = unsigned.get(tag)
                if kind is not None and body:           # the common case: a counter or gauge
                    lines.append(f"{col.text}{text} = {kind}{from_bytes(body, 'big')}\n")
                else:
                    lines.append(f"{col.text}{text} = {value_text(tag, body)}\n")
            # a column that got nothing in a short answer goes on in the next request


def _split_address(address: str) -> tuple[str, int]:
    host, port = address, 161
    if address.startswith("["):
        host, _, rest = address[1:].partition("]")
        if rest.startswith(":"):
            port = int(rest[1:])
    elif address.count(":") == 1:
        host, p = address.split(":")
        port = int(p)
    return host, port


def walk_many(specs: Sequence[WalkSpec], deadline: float, concurrency: int = 16,
              cancel: threading.Event | None = None) -> list[CommandResult]:
    """Run every walk from this one thread: at most `concurrency` switches (addresses) at once,
    each switch's walks one after the other with one request in flight (as net-snmp's tool and
    snmp_exporter do: a switch's agent is not flooded), over one connected socket. A walk that
    gets no answer after its retries ends with net-snmp's "Timeout: No Response from ..." (exit
    status 1), and so do the switch's walks after it; one still running at `deadline` ends with
    error "timeout"; a datagram that is not SNMP, or a walk whose OIDs do not increase, with error
    "parse". `cancel` set (the daemon stopping) ends every walk at once, as the deadline does.
    Results in the order of `specs`."""
    walks = [_Walk(s, i) for i, s in enumerate(specs)]
    by_address: dict[str, list[_Walk]] = {}
    for w in walks:
        by_address.setdefault(w.spec.address, []).append(w)
    queue = list(by_address.items())
    queue.reverse()
    sel = selectors.DefaultSelector()
    open_socks: dict[str, socket.socket] = {}
    pending: dict[tuple[str, int], _Walk] = {}           # (address, request id) -> walk
    req_ids = iter(range(int.from_bytes(os.urandom(3), "big") + 1, 1 << 31))
    live: dict[str, list[_Walk]] = {}                     # address -> its walks not yet finished

    def send(w: _Walk, sock: socket.socket, now: float) -> None:
        pending.pop((w.spec.address, w.request_id), None)
        w.request_id = next(req_ids)
        cols = w.active()
        # max-repetitions counts values per answer, as net-snmp's -Cr does for its one column: k
        # columns walked together ask for max_repetitions // k rows (answers stay the size the tool
        # gets; agents that cap values per answer, such as snmpsim's 64, are not pushed past it)
        w.packet = encode_getbulk(w.community, w.request_id, max(1, w.max_rep // len(cols)), [c.last for c in cols])
        w.tries = 0
        transmit(w, sock, now)

    def transmit(w: _Walk, sock: socket.socket, now: float) -> None:
        pending[(w.spec.address, w.request_id)] = w
        w.sent_at = now
        w.tries += 1
        try:
            sock.send(w.packet)
        except OSError as exc:   # e.g. ECONNREFUSED from an earlier ICMP: the retry timer goes on
            if exc.errno not in (errno.ECONNREFUSED, errno.EAGAIN, errno.EHOSTUNREACH, errno.ENETUNREACH):
                finish(w, "exec_error", f"send: {exc.strerror or exc}")

    def finish(w: _Walk, error: str | None, stderr: str) -> None:
        if w.finished:
            return
        w.finished = True
        if error or stderr:
            w.error, w.stderr = error, stderr
        address = w.spec.address
        pending.pop((address, w.request_id), None)
        group = live.get(address)
        if group is None:
            return
        group.remove(w)
        if group and stderr.startswith("Timeout"):      # no answer: the switch's next walks need not wait
            for x in group:
                x.finished, x.stderr = True, stderr
            group.clear()
        if group:
            group[0].started = time.monotonic()
            send(group[0], open_socks[address], group[0].started)
        else:
            close(address)

    def close(address: str) -> None:
        live.pop(address, None)
        sock = open_socks.pop(address, None)
        if sock is not None:
            sel.unregister(sock)
            sock.close()

    def start_next(now: float) -> None:
        while queue and len(live) < max(1, concurrency):
            address, group = queue.pop()
            try:
                host, port = _split_address(address)
                info = socket.getaddrinfo(host, port, type=socket.SOCK_DGRAM)[0]
                sock = socket.socket(info[0], socket.SOCK_DGRAM)
                sock.setblocking(False)
                sock.connect(info[4])           # only this switch's datagrams reach this socket
            except (OSError, ValueError) as exc:
                for w in group:
                    w.finished = True
                    w.stderr = f"{address}: unknown host or bad address ({getattr(exc, 'strerror', None) or exc})"
                continue
            open_socks[address] = sock
            live[address] = list(group)
            sel.register(sock, selectors.EVENT_READ, address)
            group[0].started = now
            send(group[0], sock, now)

    try:
        start_next(time.monotonic())
        while live or queue:
            now = time.monotonic()
            if now >= deadline or (cancel is not None and cancel.is_set()):
                break
            wake = deadline if cancel is None else min(deadline, now + CANCEL_CHECK)
            for address, group in list(live.items()):
                w = group[0]                            # the switch's walk in flight
                due = w.sent_at + w.spec.timeout
                if now >= due:
                    if w.tries > w.spec.retries:
                        finish(w, None, f"Timeout: No Response from {address}.")
                        continue
                    transmit(w, open_socks[address], now)
                    due = now + w.spec.timeout
                wake = min(wake, due)
            start_next(now)
            if not live:
                continue
            for key, _ in sel.select(max(0.0, wake - time.monotonic())):
                address = key.data
                sock = key.fileobj
                for _ in range(64):                  # bounded: drain what has arrived
                    if address not in live:
                        break
                    try:
                        data = sock.recv(65535)
                    except (BlockingIOError, InterruptedError):
                        break
                    except OSError:
                        break                        # ICMP port unreachable: the retry timer decides
                    on_datagram(address, data, sock, pending, finish, send)
    finally:
        end = time.monotonic()
        for w in walks:
            if not w.finished:
                w.finished = True
                w.error, w.stderr = "timeout", w.stderr or "no answer before the deadline"
        for address in list(open_socks):
            close(address)
        sel.close()
    return [w.result(end) for w in walks]


def on_datagram(address, data, sock, pending, finish, send) -> None:
    try:
        resp = decode_message(data)
    except (BerError, IndexError) as exc:
        for w in [w for (a, _), w in pending.items() if a == address]:
            finish(w, "parse", f"{address}: not an SNMP answer ({exc})")
        return
    w = pending.get((address, resp.request_id))
    if w is None or resp.pdu_tag != RESPONSE:
        return                       # a late answer to an earlier try, or not for us
    if resp.error_status == TOO_BIG and w.max_rep > 1:
        w.max_rep //= 2
        send(w, sock, time.monotonic())
        return
    if resp.error_status:
        name = ERROR_STATUS.get(resp.error_status, str(resp.error_status))
        finish(w, None, f"Error in packet.\nReason: {name} (error index {resp.error_index})")
        return
    try:
        w.absorb(resp)
    except (BerError, ValueError, UnicodeDecodeError) as exc:
        finish(w, "parse", f"{address}: bad value in an SNMP answer ({exc})")
        return
    if w.error:
        finish(w, w.error, w.stderr)
    elif not w.active():
        finish(w, None, "")
    else:
        send(w, sock, time.monotonic())


__all__ = ["BerError", "INPROCESS_PROGRAM", "Response", "WalkSpec", "decode_message", "decode_oid",
           "decode_value", "encode_getbulk", "encode_message", "oid_body", "value_text", "walk_many"]
