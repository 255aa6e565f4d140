"""The subnet administrator's reports in this process, as a method family of the host interface
(HostIO.sa_open/sa_run/sa_reports/sa_close): a umad port of its own with one agent, class 0x03 (SA)
version 2, registered for the SubnAdmReport method (0x06) as well as the answers to its own requests, and
a thread that reads it.

Why a port of its own: the sweep's engine (host/mad.py) is synchronous and reads only while it runs, but a
report comes whenever a link changes and must be answered at once (the SM resends one it has no
SubnAdmReportResp to); the kernel hands an unsolicited MAD to the agent registered for its class and
method, on whichever descriptor registered it, so this port's reader gets every report and the engine
never sees one. Under ibsim, umad2sim hands a MAD to the descriptor that registered its class, which is
the same rule.

- `request(mads, timeout)`: SubnAdmSet/Get requests to a LID on QP1 (the GSI Q_Key), each with its own
  transaction ID (the low 32 bits; the kernel owns the high half), sent at once, answers matched by TID
  by the reader; None where none came by the timeout (the kernel answers a request it timed out itself
  with status ETIMEDOUT: None too).
- reports: the reader answers each SubnAdmReport with a SubnAdmReportResp (the same MAD, method 0x86,
  status 0) to where it came from, then queues it with the monotonic time it arrived (at most MAX_QUEUED;
  what does not fit is counted, `dropped`); `reports(timeout)` waits for the first and hands over every
  one queued. What a report says is the source's to decode (sources/infiniband/mad/notice.py).

Nothing here is recorded in a capture bundle: a report is an event of the live fabric, not an answer a
replay could give again (host/bundle.py's ReplayIO has no SA port, so a replayed collector sweeps).
Under ibsim the subscription is real (opensm accepts it and forwards trap 128), but ibsim hands an
unsolicited MAD only to a client that registered as an SM (ibsim.c find_client), so no report reaches this
port there: docs/latency.md says what that leaves untested and how it is covered."""

from __future__ import annotations

import errno
import os
import select
import struct
import threading
import time
from collections import deque
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from fabricmon.host.umad import STATUS_OFFSET, UmadPort, UmadUnavailable, pack_header

CLASS_SA, SA_VERSION = 0x03, 2
METHOD_REPORT, METHOD_REPORT_RESP = 0x06, 0x86
QP_GSI, GSI_QKEY = 1, 0x80010000
MAD_SIZE = 256
MAX_QUEUED = 65536                   # reports kept until the source takes them (a whole fabric's ports)
FABRIC_ENV = ("LD_PRELOAD", "IBSIM_SOCKNAME", "SIM_HOST")
_TID = struct.Struct(">I")
_ADDR = struct.Struct(">IIH")        # the umad header's qpn, qkey, lid (at ADDR_OFFSET)
_ADDR_OFFSET = 20


@dataclass(frozen=True, slots=True)
class SaReport:
    received: float                  # time.monotonic() when the reader read it
    lid: int                         # the LID it came from (the SM's)
    mad: bytes                       # the 256-byte SubnAdmReport


class SaPort:
    """One umad port with the SA agent, and its reader thread."""

    def __init__(self, port: UmadPort, agent: int, timeout_ms: int = 500, retries: int = 2) -> None:
        self.port, self.agent = port, agent
        self.timeout_ms, self.retries = timeout_ms, retries
        self._tid = 0
        self._cond = threading.Condition()
        self._answers: dict[int, bytes | None] = {}          # tid -> answer (None: the kernel timed it out)
        self._waiting: set[int] = set()
        self._reports: deque[SaReport] = deque()
        self.dropped = 0
        self.answered = 0                                    # reports answered with a ReportResp
        self._closed = False
        self._write_lock = threading.Lock()
        self._thread = threading.Thread(target=self._read_loop, name="fabricmon-sa", daemon=True)
        self._thread.start()

    @classmethod
    def open(cls, ca: str = "", port: int = 0) -> "SaPort":
        p = UmadPort.open(ca, port)
        try:
            agent = p.register_agent(CLASS_SA, SA_VERSION, methods=(METHOD_REPORT,))
        except UmadUnavailable:
            p.close()
            raise
        return cls(p, agent)

    # --- sending ------------------------------------------------------------------------
    def _send(self, mad: bytes | bytearray, lid: int, qp: int, timeout_ms: int, retries: int) -> None:
        port = self.port
        buf = bytearray(port.mad_offset + MAD_SIZE)
        pack_header(buf, 0, self.agent, timeout_ms, retries, lid, qp, GSI_QKEY)
        buf[port.mad_offset:] = bytes(mad[:MAD_SIZE]).ljust(MAD_SIZE, b"\0")
        with self._write_lock:
            if port.writer(buf) != len(buf):
                raise OSError(errno.EIO, "short umad write")

    def request(self, mads: Sequence[tuple[int, bytes]], timeout: float) -> list[bytes | None]:
        """Send each (LID, MAD) (its TID replaced by one of this port's) and return the answers in order,
        None for those unanswered within `timeout` seconds. Raises OSError where the device fails."""
        tids = []
        with self._cond:
            for _ in mads:
                self._tid = (self._tid + 1) & 0xFFFFFFFF or 1
                tids.append(self._tid)
                self._waiting.add(self._tid)
        try:
            for (lid, mad), tid in zip(mads, tids):
                m = bytearray(mad[:MAD_SIZE])
                _TID.pack_into(m, 12, tid)
                self._send(m, lid, QP_GSI, self.timeout_ms, self.retries)
            end = time.monotonic() + timeout
            with self._cond:
                while not all(t in self._answers for t in tids) and not self._closed:
                    left = end - time.monotonic()
                    if left <= 0:
                        break
                    self._cond.wait(left)
                return [self._answers.pop(t, None) for t in tids]
        finally:
            with self._cond:
                self._waiting.difference_update(tids)
                for t in tids:
                    self._answers.pop(t, None)

    def reports(self, timeout: float) -> list[SaReport]:
        """Every report queued, waiting up to `timeout` seconds for the first; [] when none came."""
        end = time.monotonic() + timeout
        with self._cond:
            while not self._reports and not self._closed:
                left = end - time.monotonic()
                if left <= 0:
                    break
                self._cond.wait(left)
            out = list(self._reports)
            self._reports.clear()
            return out

    # --- the reader ---------------------------------------------------------------------
    def _read_loop(self) -> None:
        port = self.port
        poller = select.poll()
        poller.register(port.fd, select.POLLIN)
        off = port.mad_offset
        while not self._closed:
            try:
                if not poller.poll(250):
                    continue
                got = port.reader()
            except OSError as exc:
                if self._closed:
                    return
                if exc.errno in (0, errno.EAGAIN, errno.EINTR):     # nothing queued (umad2sim: errno 0)
                    continue
                time.sleep(0.25)            # a device error: keep trying while open (the source reopens it)
                continue
            if len(got) < off + 24:
                continue
            status = struct.unpack_from("=I", got, STATUS_OFFSET)[0]
            mad = bytes(got[off:off + MAD_SIZE])
            method = mad[3]
            if method & 0x80 or status:     # an answer to one of ours, or one the kernel timed out (ETIMEDOUT)
                tid = _TID.unpack_from(mad, 12)[0]
                with self._cond:
                    if tid in self._waiting:
                        self._answers[tid] = None if status else mad
                        self._cond.notify_all()
                continue
            if method != METHOD_REPORT or mad[1] != CLASS_SA:
                continue
            qpn, _qkey, lid = _ADDR.unpack_from(got, _ADDR_OFFSET)
            resp = bytearray(mad)
            resp[3] = METHOD_REPORT_RESP
            resp[4:6] = b"\0\0"
            try:                            # answer first: the SM resends a report it has no answer to
                self._send(resp, lid, qpn or QP_GSI, 0, 0)
                self.answered += 1
            except OSError:
                pass
            with self._cond:
                if len(self._reports) >= MAX_QUEUED:
                    self.dropped += 1
                else:
                    self._reports.append(SaReport(time.monotonic(), lid, mad))
                self._cond.notify_all()

    def close(self) -> None:
        with self._cond:
            self._closed = True
            self._cond.notify_all()
        self._thread.join(1.0)
        self.port.close()


_lock = threading.Lock()
_port: SaPort | None = None


def open_sa(tool_env: Mapping[str, str] | None = None, ca: str = "", port: int = 0) -> None:
    """Open the process's SA port (once; kept). Raises UmadUnavailable where no umad port opens, the SA
    agent cannot be registered (another agent holds the Report method on this port: an SM, ibacm), or the
    host's tools reach another fabric than this process (as host.mad.open_engine)."""
    global _port
    if tool_env is not None and any(tool_env.get(k) != os.environ.get(k) for k in FABRIC_ENV):
        raise UmadUnavailable(errno.EXDEV, "the tools run with another fabric's environment "
                                           "(LD_PRELOAD/IBSIM_SOCKNAME/SIM_HOST) than this process")
    with _lock:
        if _port is None:
            _port = SaPort.open(ca, port)


def _open() -> SaPort:
    with _lock:
        if _port is None:
            raise UmadUnavailable(errno.EBADF, "no SA port open (sa_open first)")
        return _port


def run_sa(mads: Sequence[tuple[int, bytes]], timeout: float) -> list[bytes | None]:
    return _open().request(mads, timeout)


def sa_reports(timeout: float) -> list[SaReport]:
    return _open().reports(timeout)


def close_sa() -> None:
    global _port
    with _lock:
        if _port is not None:
            _port.close()
            _port = None


__all__ = ["SaPort", "SaReport", "close_sa", "open_sa", "run_sa", "sa_reports"]
