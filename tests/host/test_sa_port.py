"""host/sa.py's SA port over a stand-in for the kernel's umad device (a SOCK_SEQPACKET pair: one umad buffer a
message, as the device reads and writes them): requests go out with this port's agent, transaction IDs and the
GSI address, their answers are matched by TID whatever order they come in, an unanswered one is None by the
timeout and a kernel-timed-out one (status ETIMEDOUT) is None at once; a SubnAdmReport is answered with a
SubnAdmReportResp of its TID to where it came from before it is queued, and handed over by reports()."""

from __future__ import annotations

import errno
import os
import socket
import struct
import time

from fabricmon.host.sa import SaPort
from fabricmon.host.umad import pack_header
from fabricmon.sources.infiniband.mad import notice

HDR = 64                             # sizeof(struct ib_user_mad_hdr)


class FakeUmad:
    """What SaPort uses of host.umad.UmadPort, over one end of a socket pair."""

    def __init__(self, sock: socket.socket) -> None:
        self.sock = sock
        self.fd = sock.fileno()
        self.mad_offset, self.size = HDR, HDR + 256
        self.writer = lambda buf: os.write(self.fd, bytes(buf))
        self.reader = lambda: os.read(self.fd, self.size)
        os.set_blocking(self.fd, False)

    def close(self) -> None:
        self.sock.close()


def kernel_read(k: socket.socket) -> tuple[tuple, bytes]:
    k.settimeout(2)
    buf = k.recv(HDR + 256)
    agent, status, timeout_ms, retries = struct.unpack_from("=IIII", buf, 0)
    qpn, qkey, lid = struct.unpack_from(">IIH", buf, 20)
    return (agent, timeout_ms, qpn, qkey, lid), buf[HDR:]


def kernel_send(k: socket.socket, mad: bytes, lid: int = 1, qpn: int = 1, status: int = 0) -> None:
    buf = bytearray(HDR + 256)
    pack_header(buf, 0, 7, 0, 0, lid, qpn, 0)
    struct.pack_into("=I", buf, 4, status)
    buf[HDR:HDR + len(mad)] = mad
    k.send(bytes(buf))


def pair() -> tuple[SaPort, socket.socket]:
    a, b = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
    return SaPort(FakeUmad(a), agent=7, timeout_ms=300, retries=1), b


def test_requests_are_answered_by_tid_in_any_order_and_a_silent_one_is_none() -> None:
    import threading
    port, k = pair()
    try:
        got: list = []
        t = threading.Thread(target=lambda: got.extend(port.request(
            [(1, bytes(notice.encode_subscribe(128, 0))), (1, bytes(notice.encode_subscribe(65, 0))),
             (1, bytes(notice.encode_subscribe(64, 0)))], 0.4)))
        t.start()
        sent = [kernel_read(k) for _ in range(3)]
        assert {s[0] for s in sent} == {(7, 300, 1, 0x80010000, 1)}     # this port's agent, the GSI on the SM's LID
        tids = [struct.unpack_from(">I", m, 12)[0] for _, m in sent]
        assert len(set(tids)) == 3 and all(tids)
        for i in (1, 0):                                   # answered out of order; the third not at all
            ans = bytearray(sent[i][1])
            ans[3] = 0x81
            kernel_send(k, bytes(ans))
        t0 = time.monotonic()
        t.join(3)
        assert time.monotonic() - t0 < 2
        assert [a is not None for a in got] == [True, True, False]
        assert struct.unpack_from(">H", got[0], 56 + 26)[0] == 128 and struct.unpack_from(">H", got[1], 56 + 26)[0] == 65
    finally:
        port.close()
        k.close()


def test_a_request_the_kernel_timed_out_is_none_at_once() -> None:
    import threading
    port, k = pair()
    try:
        got: list = []
        t = threading.Thread(target=lambda: got.extend(port.request([(1, bytes(notice.encode_sm_info(0)))], 5.0)))
        t.start()
        _, m = kernel_read(k)
        kernel_send(k, m, status=errno.ETIMEDOUT)          # the kernel gave up: the request comes back with ETIMEDOUT
        t0 = time.monotonic()
        t.join(3)
        assert got == [None] and time.monotonic() - t0 < 2
    finally:
        port.close()
        k.close()


def test_a_report_is_answered_with_its_tid_then_handed_over() -> None:
    port, k = pair()
    try:
        assert port.reports(0.05) == []
        report = notice.encode_report(notice.trap128_notice(6, "0000000000200002"), 0x02DAB007)
        kernel_send(k, bytes(report), lid=1, qpn=1)
        (agent, timeout_ms, qpn, qkey, lid), resp = kernel_read(k)
        assert (agent, qpn, qkey, lid) == (7, 1, 0x80010000, 1)
        assert resp[3] == 0x86 and struct.unpack_from(">Q", resp, 8)[0] == 0x02DAB007     # ReportResp, same TID
        got = port.reports(1.0)
        assert len(got) == 1 and got[0].lid == 1 and notice.decode_report(got[0].mad).lid == 6
        assert port.answered == 1 and port.reports(0.0) == []
    finally:
        port.close()
        k.close()
