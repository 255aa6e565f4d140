"""host.snmp: the BER codec (round trips, limits, malformed datagrams) and the in-process GETBULK
client against small scripted agents on loopback (tooBig, OIDs that do not increase, garbage, a
silent switch, stale answers, the deadline), and hostile or broken ones, each bounded: a table that
never ends (the row cap), values wider than their type, trailing bytes, one malformed datagram, a
host name that takes seconds to resolve. The client against a real agent (snmpsim) is
tests/sim/test_ethernet_sim.py, and in SNMPv3 tests/host/test_snmp_v3.py."""

from __future__ import annotations

import random
import select
import socket
import threading
import time
from bisect import bisect_right

import pytest

from fabricmon.host import snmp as S
from fabricmon.sources.ethernet.snmp import failure

# --- codec ----------------------------------------------------------------------------------------


@pytest.mark.parametrize("tag,value", [
    (S.INTEGER, 0), (S.INTEGER, 127), (S.INTEGER, 128), (S.INTEGER, -1), (S.INTEGER, -128), (S.INTEGER, -129),
    (S.INTEGER, -2**31), (S.INTEGER, 2**31 - 1),
    (S.COUNTER32, 0), (S.COUNTER32, 2**32 - 1), (S.GAUGE32, 400000), (S.TIMETICKS, 123456789),
    (S.COUNTER64, 0), (S.COUNTER64, 2**63), (S.COUNTER64, 2**64 - 1),
    (S.OCTET_STRING, b""), (S.OCTET_STRING, b"Ethernet0"), (S.OCTET_STRING, bytes(range(256)) * 2),
    (S.OID, "1.3.6.1.4.1.9.9.813"), (S.IPADDRESS, "10.0.0.11"), (S.NULL, None),
    (S.NO_SUCH_OBJECT, None), (S.NO_SUCH_INSTANCE, None), (S.END_OF_MIB_VIEW, None),
])
def test_every_value_type_round_trips(tag, value) -> None:
    msg = S.encode_message(b"public", S.RESPONSE, 4242, 0, 0, [("1.3.6.1.2.1.31.1.1.1.6.1", tag, value)])
    resp = S.decode_message(msg)
    assert (resp.request_id, resp.error_status, resp.community, resp.pdu_tag) == (4242, 0, b"public", S.RESPONSE)
    (oid, t, body), = resp.varbinds
    assert S.oid_text(oid) == "1.3.6.1.2.1.31.1.1.1.6.1" and t == tag
    assert S.decode_value(t, body) == value


def test_counter64_max_is_nine_octets_and_negative_integers_are_twos_complement() -> None:
    assert S.encode_integer(2**64 - 1, S.COUNTER64) == bytes([0x46, 9, 0]) + b"\xff" * 8
    assert S.encode_integer(-1) == b"\x02\x01\xff"
    assert S.encode_integer(-129) == b"\x02\x02\xff\x7f"
    assert S.encode_integer(128) == b"\x02\x02\x00\x80"
    assert S.decode_value(S.COUNTER32, b"\xff\xff\xff\xff") == 2**32 - 1   # an agent that left out the 0
    with pytest.raises(ValueError):
        S.encode_integer(-1, S.COUNTER64)


def test_oids_with_long_sub_identifiers() -> None:
    assert S.oid_body("2.999.3") == bytes([0x88, 0x37, 0x03])           # X.690's example
    assert S.oid_body("1.3.6.1") == bytes([0x2B, 6, 1])
    for oid in ("1.3.6.1.4.1.4294967295.16384.16383.128.127.0", "1.0.8802.1.1.2.1.3.7.1.3", "2.999.3"):
        assert ".".join(map(str, S.decode_oid(S.oid_body(oid)))) == oid
    with pytest.raises(S.BerError):
        S.decode_oid(bytes([0x2B, 0x86]))                                  # ends inside a sub-id
    with pytest.raises(ValueError):
        S.oid_body("1.40.1")


def test_value_text_is_net_snmps() -> None:
    assert S.value_text(S.COUNTER64, S.encode_integer(2**64 - 1, S.COUNTER64)[2:]) == f"Counter64: {2**64 - 1}"
    assert S.value_text(S.INTEGER, b"\xff") == "INTEGER: -1"
    assert S.value_text(S.TIMETICKS, b"\x10") == "Timeticks: 16"
    assert S.value_text(S.OCTET_STRING, b'say "hi" \\') == 'STRING: "say \\"hi\\" \\\\"'
    assert S.value_text(S.OCTET_STRING, b"\x0c\x42\xa1\x00") == "Hex-STRING: 0C 42 A1 00 "
    assert S.value_text(S.OCTET_STRING, b"a\nb").startswith("Hex-STRING")  # one line per object
    assert S.value_text(S.OCTET_STRING, b"") == '""'
    assert S.value_text(S.IPADDRESS, b"\x0a\x00\x00\x0b") == "IpAddress: 10.0.0.11"
    assert S.value_text(S.OID, S.oid_body("1.3.6.1")) == "OID: .1.3.6.1"


def test_truncated_and_garbage_datagrams_raise_ber_error_only() -> None:
    msg = S.encode_message(b"public", S.RESPONSE, 7, 0, 0,
                           [(f"1.3.6.1.2.1.31.1.1.1.6.{i}", S.COUNTER64, 2**40 + i) for i in range(40)])
    assert len(S.decode_message(msg).varbinds) == 40
    for n in range(len(msg)):
        with pytest.raises(S.BerError):
            S.decode_message(msg[:n])
    rng = random.Random(17)
    for _ in range(3000):
        if rng.random() < 0.5:
            data = bytes(rng.randrange(256) for _ in range(rng.randrange(1, 80)))
        else:
            b = bytearray(msg)
            for _ in range(rng.randrange(1, 6)):
                b[rng.randrange(len(b))] = rng.randrange(256)
            data = bytes(b)
        try:
            resp = S.decode_message(data)
        except S.BerError:
            continue
        for _, tag, body in resp.varbinds:          # what decodes is well-formed or a clear error
            try:
                S.value_text(tag, body)
            except (S.BerError, ValueError):
                pass


# --- a scripted agent -----------------------------------------------------------------------------

class Agent:
    """A GETBULK responder on 127.0.0.1 over a table {OID tuple: (tag, value)}, with hooks to
    misbehave. Its loop is bounded by stop() and a 60 s cap."""

    def __init__(self, table: dict[tuple[int, ...], tuple[int, object]], *, silent: bool = False,
                 max_values: int = 1000, script=None):
        self.oids = sorted(table)
        self.table = table
        self.silent = silent
        self.max_values = max_values        # more values than this in one answer: tooBig
        self.script = script                # (agent, request) -> list of datagrams, or None: normal
        self.requests: list[S.Response] = []
        self.sock = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
        self.sock.bind(("127.0.0.1", 0))
        self.address = "127.0.0.1:%d" % self.sock.getsockname()[1]
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._serve, daemon=True)

    def __enter__(self):
        self._thread.start()
        return self

    def __exit__(self, *exc):
        self._stop.set()
        self._thread.join(5)
        self.sock.close()

    def answer(self, req: S.Response, max_values: int | None = None) -> bytes:
        m = req.error_index                   # max-repetitions (the GETBULK PDU's second field)
        cols = [S.decode_oid(o) for o, _, _ in req.varbinds]
        if len(cols) * m > (max_values or self.max_values):
            return S.encode_message(b"public", S.RESPONSE, req.request_id, S.TOO_BIG, 0, [])
        out = []
        for _ in range(m):
            row = []
            for j, oid in enumerate(cols):
                i = bisect_right(self.oids, oid)
                if i < len(self.oids):
                    nxt = self.oids[i]
                    row.append((nxt, *self.table[nxt]))
                    cols[j] = nxt
                else:
                    row.append((oid, S.END_OF_MIB_VIEW, None))
            out += row
        return S.encode_message(b"public", S.RESPONSE, req.request_id, 0, 0, out)

    def _serve(self) -> None:
        end = time.monotonic() + 60
        while not self._stop.is_set() and time.monotonic() < end:
            if not select.select([self.sock], [], [], 0.05)[0]:
                continue
            data, peer = self.sock.recvfrom(65535)
            req = S.decode_message(data)
            self.requests.append(req)
            if self.silent:
                continue
            replies = self.script(self, req) if self.script else None
            for r in (replies if replies is not None else [self.answer(req)]):
                self.sock.sendto(r, peer)


IFX = (1, 3, 6, 1, 2, 1, 31, 1, 1, 1)


def ifx_table(ports: int = 60) -> dict:
    t = {(1, 3, 6, 1, 2, 1, 1, 5, 0): (S.OCTET_STRING, b"leaf01")}
    for p in range(1, ports + 1):
        t[(*IFX, 1, p)] = (S.OCTET_STRING, f"Ethernet{p}".encode())
        t[(*IFX, 6, p)] = (S.COUNTER64, 2**64 - p)
        t[(*IFX, 10, p)] = (S.COUNTER64, p * 1000)
        t[(*IFX, 15, p)] = (S.GAUGE32, 400000)
    t[(1, 3, 6, 1, 4, 1, 9, 9, 813, 1, 2, 1, 2, 1, 3)] = (S.COUNTER64, 5)
    return t


def spec(agent: Agent, root: str = "1.3.6.1.2.1.31.1.1.1", columns=(), **kw) -> S.WalkSpec:
    return S.WalkSpec(agent.address, root, tuple(columns), community="public",
                      **{"timeout": 0.3, "retries": 1, "max_repetitions": 25, **kw})


def lines(res) -> list[str]:
    return res.stdout.splitlines()


def test_a_whole_table_walk_stops_at_the_end_of_its_subtree() -> None:
    with Agent(ifx_table()) as a:
        res, = S.walk_many([spec(a)], time.monotonic() + 10)
    assert res.ok and res.error is None and failure(res) is None
    out = lines(res)
    assert len(out) == 4 * 60
    assert out[0] == '.1.3.6.1.2.1.31.1.1.1.1.1 = STRING: "Ethernet1"'
    assert out[60] == f".1.3.6.1.2.1.31.1.1.1.6.1 = Counter64: {2**64 - 1}"
    assert out[-1] == ".1.3.6.1.2.1.31.1.1.1.15.60 = Gauge32: 400000"
    assert res.argv[0] == S.INPROCESS_PROGRAM and "public" not in res.argv


def test_columns_walk_together_each_to_its_end_in_oid_order() -> None:
    cols = ("1.3.6.1.2.1.31.1.1.1.6", "1.3.6.1.2.1.31.1.1.1.15")
    with Agent(ifx_table(30)) as a:
        res, = S.walk_many([spec(a, columns=cols, max_repetitions=10)], time.monotonic() + 10)
        reqs = list(a.requests)
    out = lines(res)
    assert len(out) == 60 and all(".1.1.1.6." in x for x in out[:30]) and all(".1.1.1.15." in x for x in out[30:])
    assert {len(r.varbinds) for r in reqs} == {2} and {r.error_index for r in reqs} == {5}   # 10 values a request


def test_too_big_halves_max_repetitions() -> None:
    with Agent(ifx_table(), max_values=8) as a:
        res, = S.walk_many([spec(a, max_repetitions=25)], time.monotonic() + 10)
        reps = [r.error_index for r in a.requests]
    assert res.ok and len(lines(res)) == 240
    assert reps[:3] == [25, 12, 6] and set(reps[3:]) == {6}


def test_too_big_at_one_repetition_is_an_error_not_a_loop() -> None:
    with Agent(ifx_table(), max_values=0) as a:
        res, = S.walk_many([spec(a, max_repetitions=4)], time.monotonic() + 10)
    assert res.returncode == 1 and "tooBig" in res.stderr
    assert failure(res)[0] == "exit_code"


def test_oids_that_do_not_increase_end_the_walk_as_a_parse_error() -> None:
    def stuck(agent, req):                    # answers the asked OID itself, for ever
        oid = S.decode_oid(req.varbinds[0][0])
        if len(oid) == len(IFX):
            return None
        return [S.encode_message(b"public", S.RESPONSE, req.request_id, 0, 0, [(oid, S.COUNTER64, 1)])]

    with Agent(ifx_table(), script=stuck) as a:
        res, = S.walk_many([spec(a)], time.monotonic() + 10)
        n = len(a.requests)
    assert res.error == "parse" and "not increasing" in res.stderr and n <= 3
    assert failure(res)[0] == "parse"


def test_garbage_is_a_parse_error_for_that_switch_only() -> None:
    with Agent(ifx_table(), script=lambda a, r: [b"\x30\x05garbage"]) as bad, Agent(ifx_table()) as good:
        r_bad, r_good = S.walk_many([spec(bad), spec(good)], time.monotonic() + 10)
    assert r_bad.error == "parse" and failure(r_bad)[0] == "parse"
    assert failure(r_bad)[1].startswith(f"{bad.address}: not an SNMP answer (")
    assert r_good.ok and len(lines(r_good)) == 240


def test_a_silent_switch_times_out_after_its_retries_and_costs_only_itself() -> None:
    with Agent({}, silent=True) as dead, Agent(ifx_table()) as good:
        t0 = time.monotonic()
        r_dead, r_dead2, r_good = S.walk_many(
            [spec(dead, retries=2), spec(dead, root="1.3.6.1.2.1.2.2.1", retries=2), spec(good)],
            time.monotonic() + 10)
        sent = len(dead.requests)
    took = time.monotonic() - t0
    assert sent == 3                                   # 1 + 2 retries; the second walk does not wait again
    assert r_dead.returncode == 1 and r_dead.stderr.startswith("Timeout: No Response")
    assert failure(r_dead)[0] == failure(r_dead2)[0] == "timeout"
    assert r_good.ok and 0.85 < took < 3


def test_a_stale_answer_is_ignored_and_the_deadline_holds() -> None:
    def stale_first(agent, req):
        old = S.encode_message(b"public", S.RESPONSE, req.request_id - 1, 0, 0,
                               [((*IFX, 99, 1), S.COUNTER64, 1)])
        return [old, agent.answer(req)]

    with Agent(ifx_table(), script=stale_first) as a:
        res, = S.walk_many([spec(a)], time.monotonic() + 10)
    assert res.ok and len(lines(res)) == 240
    with Agent({}, silent=True) as dead:
        t0 = time.monotonic()
        res, = S.walk_many([spec(dead, timeout=5, retries=3)], time.monotonic() + 0.3)
    assert res.error == "timeout" and time.monotonic() - t0 < 1.5
    assert failure(res)[0] == "timeout"


def test_an_empty_subtree_and_a_bad_address() -> None:
    with Agent(ifx_table()) as a:
        empty, = S.walk_many([spec(a, root="1.3.6.1.4.1.30065.3.11.1.1.1")], time.monotonic() + 10)
    assert empty.ok and empty.stdout == ""
    bad, = S.walk_many([S.WalkSpec("no-such-host.invalid:161", "1.3.6.1", community="x")], time.monotonic() + 10)
    assert bad.returncode == 1 and "unknown host" in bad.stderr and failure(bad)[0] == "exit_code"


def test_cancel_ends_the_walks_at_once() -> None:
    cancel = threading.Event()
    with Agent({}, silent=True) as dead:
        timer = threading.Timer(0.2, cancel.set)
        timer.start()
        t0 = time.monotonic()
        res, = S.walk_many([spec(dead, timeout=5, retries=3)], time.monotonic() + 30, cancel=cancel)
        timer.join()
    assert res.error == "timeout" and time.monotonic() - t0 < 1.5


# --- hostile or broken agents: the client stays bounded -------------------------------------------

def test_values_wider_than_their_type_are_an_error_for_that_value() -> None:
    assert S.decode_value(S.COUNTER64, b"\x00" + b"\xff" * 8) == 2**64 - 1
    for tag, body in ((S.COUNTER64, b"\x01" * 12), (S.COUNTER64, b"\x01" + b"\x00" * 8), (S.COUNTER32, b"\x01" * 5),
                      (S.GAUGE32, b"\x00" * 6), (S.TIMETICKS, b""), (S.INTEGER, b"\x01" * 5)):
        with pytest.raises(S.BerError):
            S.decode_value(tag, body)
        with pytest.raises(S.BerError):
            S.value_text(tag, body)
    table = ifx_table(10)
    table[(*IFX, 6, 3)] = (S.COUNTER64, 2**88)             # 12 octets
    table[(*IFX, 6, 4)] = (S.COUNTER64, 2**64)             # 9 octets, not a leading 0
    table[(*IFX, 15, 5)] = (S.GAUGE32, 2**40)
    with Agent(table) as a:
        res, = S.walk_many([spec(a, columns=("1.3.6.1.2.1.31.1.1.1.6", "1.3.6.1.2.1.31.1.1.1.15"))],
                           time.monotonic() + 10)
    out = lines(res)
    assert res.ok and failure(res) is None and len(out) == 20 - 3           # the rest is read
    assert not any(".6.3 = " in x or ".6.4 = " in x or ".15.5 = " in x for x in out)
    assert f".1.3.6.1.2.1.31.1.1.1.6.5 = Counter64: {2**64 - 5}" in out
    err = res.stderr.splitlines()
    assert [e.split(": ")[0] for e in err] == ["Bad value at .1.3.6.1.2.1.31.1.1.1.6.3",
                                               "Bad value at .1.3.6.1.2.1.31.1.1.1.6.4",
                                               "Bad value at .1.3.6.1.2.1.31.1.1.1.15.5"]
    assert err[0].endswith("Counter64 of 12 octets") and err[2].endswith("Gauge32 of 6 octets")


def test_trailing_bytes_are_an_error() -> None:
    msg = S.encode_message(b"public", S.RESPONSE, 7, 0, 0, [("1.3.6.1.2.1.1.5.0", S.OCTET_STRING, b"leaf")])
    assert S.decode_message(msg).varbinds
    with pytest.raises(S.BerError, match="trailing"):
        S.decode_message(msg + b"\x00")
    # a varbind list, a PDU and a varbind that end before their container does
    vb = S.tlv(S.SEQUENCE, S.tlv(S.OID, S.oid_body("1.3.6.1.2.1.1.5.0")) + S.tlv(S.OCTET_STRING, b"x"))
    head = S.encode_integer(7) + S.encode_integer(0) + S.encode_integer(0)
    for pdu in (S.tlv(S.RESPONSE, head + S.tlv(S.SEQUENCE, vb) + b"\x05\x00"),
                S.tlv(S.RESPONSE, head + S.tlv(S.SEQUENCE, S.tlv(S.SEQUENCE, vb[2:] + b"\x05\x00")))):
        with pytest.raises(S.BerError):
            S.decode_message(S.tlv(S.SEQUENCE, S.encode_integer(1) + S.tlv(S.OCTET_STRING, b"public") + pdu))
    # an agent that always adds a byte: nothing it sends is an answer
    with Agent(ifx_table(), script=lambda a, r: [a.answer(r) + b"\x00"]) as a:
        res, = S.walk_many([spec(a)], time.monotonic() + 10)
    assert res.error == "parse" and "trailing bytes" in res.stderr and res.stdout == ""


def test_one_malformed_datagram_costs_one_request_not_the_switchs_walks() -> None:
    """Garbage for one request (and no answer to it): that request is sent again and answered;
    the walk and the switch's other walks are read in full."""
    seen = []

    def garbage_once(agent, req):
        seen.append(req.request_id)
        if len(seen) == 3:                    # the third request: garbage instead of its answer
            return [b"\x30\x03\x02\x01", b"\xff" * 7]
        return None

    with Agent(ifx_table(), script=garbage_once) as a:
        specs = [spec(a, max_repetitions=10, retries=1), spec(a, root="1.3.6.1.2.1.1", retries=1),
                 spec(a, columns=("1.3.6.1.2.1.31.1.1.1.15",), retries=1)]
        r1, r2, r3 = S.walk_many(specs, time.monotonic() + 10)
    assert r1.ok and len(lines(r1)) == 240 and r1.stderr == ""
    assert r2.ok and lines(r2) == ['.1.3.6.1.2.1.1.5.0 = STRING: "leaf01"']
    assert r3.ok and len(lines(r3)) == 60
    assert seen[2] == seen[3]                 # the same request again, once


def test_a_walk_that_never_ends_stops_at_the_row_cap() -> None:
    """An agent that answers every request with ever larger OIDs in the column: the walk stops
    after max_rows rows (an error naming the setting), long before the deadline."""
    def endless(agent, req):
        asked = S.decode_oid(req.varbinds[0][0])
        last = asked[-1] if len(asked) > len(IFX) + 1 else 0       # the column itself: from row 1
        rows = [((*IFX, 6, last + i + 1), S.COUNTER64, i) for i in range(req.error_index)]
        return [S.encode_message(b"public", S.RESPONSE, req.request_id, 0, 0, rows)]

    with Agent({}, script=endless) as a:
        t0 = time.monotonic()
        res, = S.walk_many([spec(a, columns=("1.3.6.1.2.1.31.1.1.1.6",), max_rows=500)], time.monotonic() + 20)
        took, asked = time.monotonic() - t0, len(a.requests)
    assert res.error == "parse" and failure(res)[0] == "parse"
    assert "more than 500 rows in .1.3.6.1.2.1.31.1.1.1.6 (fabric.ethernet.snmp.max_rows)" in res.stderr
    assert asked <= 500 // 25 + 2 and took < 10
    # a subtree walk counts each table column on its own: 60 rows of 4 columns pass a cap of 60
    with Agent(ifx_table(60)) as a:
        ok, capped = S.walk_many([spec(a, max_rows=60), spec(a, max_rows=59)], time.monotonic() + 10)
    assert ok.ok and len(lines(ok)) == 240
    assert capped.error == "parse" and "more than 59 rows in .1.3.6.1.2.1.31.1.1.1.1" in capped.stderr


def test_the_row_cap_is_config_with_a_default() -> None:
    from fabricmon.config import ConfigError, from_dict
    assert S.WalkSpec("x", "1.3").max_rows == S.DEFAULT_MAX_ROWS == 50000

    def snmp(**kw):
        return from_dict({"fabric": {"kind": "ethernet", "ethernet": {
            "switches": ["10.0.0.1"], "snmp": {"community": "public", **kw}}}}, check_paths=False).fabric.ethernet.snmp

    assert snmp().max_rows == 50000 and snmp(max_rows=2000).max_rows == 2000
    with pytest.raises(ConfigError, match="max_rows"):
        snmp(max_rows=0)


def test_a_slow_name_never_stalls_the_other_switches(monkeypatch) -> None:
    """Host names resolve off the selector thread: a resolver that takes 5 s for one name holds
    back only that switch; the others (an address and a quick name) are read at once and the
    call ends at its deadline, not when the slow name resolves."""
    real = socket.getaddrinfo
    asked = []

    def resolver(host, port, *a, **kw):
        asked.append(host)
        if host == "slow.switch.test":
            time.sleep(5)                   # a slow resolver: what is tested
            return real("127.0.0.1", port, *a, **kw)
        if host == "quick.switch.test":
            return real("127.0.0.1", port, *a, **kw)
        return real(host, port, *a, **kw)

    monkeypatch.setattr(socket, "getaddrinfo", resolver)
    monkeypatch.setattr(S, "_dns_cache", {})
    with Agent(ifx_table()) as a, Agent(ifx_table()) as b, Agent(ifx_table()) as c:
        port_a = a.address.split(":")[1]
        t0 = time.monotonic()
        r_slow, r_ip, r_quick = S.walk_many(
            [S.WalkSpec(f"slow.switch.test:{port_a}", "1.3.6.1.2.1.31.1.1.1", community="public", timeout=0.5),
             spec(b), S.WalkSpec("quick.switch.test:" + c.address.split(":")[1], "1.3.6.1.2.1.31.1.1.1",
                                 community="public", timeout=0.5)],
            time.monotonic() + 1.5, concurrency=1)
        took = time.monotonic() - t0
    assert r_ip.ok and len(lines(r_ip)) == 240
    assert r_quick.ok and len(lines(r_quick)) == 240
    assert r_slow.error == "timeout" and not a.requests
    assert took < 3.5, took                    # the deadline, not the slow resolver's 5 s
    assert "127.0.0.1" not in asked and "slow.switch.test" in asked   # addresses ask no resolver
