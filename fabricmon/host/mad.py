"""MADs in this process, as a method family of the host interface (HostIO.mad_open/mad_run): a umad
port per host interface (MadHost) (host.umad: rdma-core's libibumad through ctypes) and the engine that
keeps many requests in flight over it. A source builds the requests (the encoded Get()s of
sources/infiniband/mad/codec.py) and decodes the answers; the I/O, its environment and its
recording live here.

`MadEngine.run(requests, deadline)` sends every request and returns each one's answer (the MAD's
bytes) or None (unanswered). The fabric is kept safe and one switch's silence costs only its own
requests:

- a window per target (`per_target`: at most that many requests to one switch in flight) and a
  global one (`window`); requests go out one target after another in turn (a request whose target
  has its window full waits in that target's own queue, O(1) a request), so no switch gets a flood
  and a switch that does not answer holds only its own window;
- each request has its timeout (`timeout_ms`, also given to the kernel, which answers a request it
  timed out with status ETIMEDOUT) and `retries` further tries, sent again at the back of its target's
  queue (first in it) while the sweep's one `deadline` allows; a target whose `give_up_after` tries
  in a row went unanswered (it answered nothing in between) is not asked the rest: they are
  unanswered too, so a dead switch costs about give_up_after / per_target timeouts (4 x 200 ms by
  default), not one per port and try. ibsim's 30% loss on a switch's ports drops the request or
  its answer, about 51% of the exchanges: 16 losses in a row are then a 2e-5 chance a try (8 were
  too few: on the director the lossy switch was given up within most sweeps);
- answers match their request by the low 32 bits of the transaction ID (the kernel owns the high
  half); an answer to a request already timed out is dropped.

A device error under a run loses the port (an HCA reset, the simulator gone): MadHost closes it and opens it
again with a capped backoff, sweeps failing meanwhile (docs/mad-engine.md "When the umad port is lost").

Measured defaults (docs/mad-engine.md): window 32, per_target 4 (ibsim's own MAD rate is the floor
there: 32 in flight is 11 us a query against 65 us one at a time; on hardware a switch's SMA/PMA
answers in microseconds and ibdiagnet keeps up to 128 GMPs in flight).

A capture bundle records a run's exchanges as request -> answer (`exchange_key`, `answer_text`):
one entry per MAD keyed by the destination LID and the request itself (class, method, attribute,
modifier and its data, where PortCounters' PortSelect lives), the answer with its transaction ID
zeroed. Retries, windows, timing and transaction IDs are the live engine's business and are not
recorded, so a bundle holds one entry per distinct question of the sweep and replays the same
answers whatever order or timing the replaying process has (host.bundle).
"""

from __future__ import annotations

import errno
import itertools
import os
import struct
import threading
import time
from collections import deque
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field

import structlog

from fabricmon.host import umad2sim
from fabricmon.host.umad import STATUS_OFFSET, UmadPort, UmadUnavailable, pack_header

QP_SMP, QP_GSI = 0, 1
MAD_SIZE = 256
CLASS_PERF = 0x04                    # performance management: GMPs on QP1 with the GSI Q_Key
GSI_QKEY = 0x80010000
# what decides which fabric libibumad reaches (umad2sim's preload and its simulator; the simulated
# node): tools run with another fabric's environment than this process's cannot share its engine
FABRIC_ENV = ("LD_PRELOAD", "IBSIM_SOCKNAME", "SIM_HOST")
log = structlog.get_logger("fabricmon.host.mad")


@dataclass(slots=True)
class Request:
    target: str                      # what the per-target window counts (a switch GUID)
    lid: int
    mad: bytes                       # the encoded Get() (a shared template: the engine sets the TID in its own copy)


@dataclass(slots=True)
class RunStats:
    sent: int = 0                    # MADs sent, retries included
    answered: int = 0
    retried: int = 0
    unanswered: int = 0              # requests without an answer after every try
    skipped: int = 0                 # requests not sent: their target had stopped answering
    errors: int = 0                  # answers with an error status (kept as answers; the decoder says so)
    peak_in_flight: int = 0
    by_target: dict[str, int] = field(default_factory=dict)    # requests per target (first tries)


class MadEngine:
    def __init__(self, port: UmadPort, window: int = 32, per_target: int = 4, timeout_ms: int = 200,
                 retries: int = 2, give_up_after: int = 16, clock: Callable[[], float] = time.monotonic) -> None:
        if window < 1 or per_target < 1:
            raise ValueError("window and per_target must be >= 1")
        self.port = port
        self.window, self.per_target = window, per_target
        self.timeout_ms, self.retries, self.give_up_after = timeout_ms, retries, give_up_after
        self.clock = clock
        self._tid = 0
        self.stats = RunStats()
        self.totals = {"sent": 0, "answered": 0, "retried": 0, "unanswered": 0}   # over every run of this engine

    def run(self, requests: Sequence[Request], deadline: float,
            times: list[float] | None = None) -> list[bytes | None]:
        """Answers in the order of `requests` (None: unanswered by the deadline or after every try). `times`
        (as long as `requests`): each answered request's slot set to the engine clock's time it was taken
        (within the wait that got it), the rest left as they were: a sweep's rates take each switch at its
        own read, not at the end of a run that may last as long again next sweep."""
        st = self.stats = RunStats()
        n = len(requests)
        answers: list[bytes | None] = [None] * n
        if not n:
            return answers
        port = self.port
        # a send is one umad buffer (its header: agent, the kernel's timeout, the address; then the MAD)
        # assembled in one scratch buffer from the request's header, made once per (class, LID), and its
        # MAD (a template shared by every switch), the TID written in place, and one write
        mad_off = port.mad_offset                     # the header's size (umad_get_mad)
        size = mad_off + MAD_SIZE
        timeout_ms = self.timeout_ms
        heads: dict[tuple[int, int], bytes] = {}
        hd: list[bytes] = [b""] * n                   # request -> its header
        mads: list[bytes] = [b""] * n                 # request -> its MAD (MAD_SIZE bytes)
        names: dict[str, int] = {}                    # target -> its index
        tk = [0] * n                                  # request -> its target's index
        per: list[list[int]] = []                     # target index -> its requests, in order
        for i, r in enumerate(requests):
            mad = r.mad
            key = (mad[1], r.lid)
            head = heads.get(key)
            if head is None:
                cls = mad[1]
                qp, qkey = (QP_GSI, GSI_QKEY) if cls == CLASS_PERF else (QP_SMP, 0)
                buf = bytearray(mad_off)
                pack_header(buf, 0, port.register(cls, 1), timeout_ms, 0, r.lid, qp, qkey)
                head = heads[key] = bytes(buf)
            hd[i] = head
            mads[i] = mad if len(mad) == MAD_SIZE else bytes(mad[:MAD_SIZE]) + bytes(MAD_SIZE - len(mad))
            k = names.get(r.target)
            if k is None:
                k = names[r.target] = len(per)
                per.append([])
            tk[i] = k
            per[k].append(i)
        scratch = bytearray(size)
        for t, k in names.items():
            st.by_target[t] = len(per[k])
        # the send order: one request of each target in turn; a request whose target has its window
        # full waits in that target's `held` queue and moves to `ready` when one of its own completes
        seq = [i for group in itertools.zip_longest(*per) for i in group if i is not None]
        nt = len(per)
        in_t = [0] * nt
        silent = [0] * nt                             # tries in a row unanswered (reset by an answer)
        held: list[deque[int] | None] = [None] * nt
        ready: deque[int] = deque()                   # retries and held requests whose target has room
        tries = [0] * n
        pending: dict[int, int] = {}                  # tid -> request index
        # (expiry, tid) in send order: one timeout, so expiry order. Answered ones stay until they reach
        # the front and are dropped there: only the front's expiry is ever compared
        order: deque[tuple[float, int]] = deque()
        timeout = timeout_ms / 1000.0
        retries, give_up = self.retries, self.give_up_after
        write, read, wait, clock = port.writer, port.reader, port.wait, self.clock
        window, per_target = self.window, self.per_target
        pack_tid = _TID.pack_into
        tid_at = mad_off + 12
        tid = self._tid
        pos = 0
        skipped = answered = retried = unanswered = errors = peak = 0

        def hold(i: int, k: int, first: bool) -> None:
            h = held[k]
            if h is None:
                h = held[k] = deque()
            if first:
                h.appendleft(i)
            else:
                h.append(i)

        def lost(i: int) -> int:
            """Request i went unanswered (timed out): retried (1) or given up (0); frees its target's slot."""
            k = tk[i]
            silent[k] += 1
            again = tries[i] <= retries and clock() + timeout < deadline and silent[k] < give_up
            if again:
                hold(i, k, True)                      # retries first: a lossy switch is known sooner
            in_t[k] -= 1
            h = held[k]
            if h:
                ready.append(h.popleft())
            return 1 if again else 0

        while True:
            # send while both windows allow: ready ones (retries, held) first, then the sequence
            npend = len(pending)
            if npend < window and (ready or pos < n):
                expiry = clock() + timeout
                while npend < window:
                    if ready:
                        i = ready.popleft()
                        first = True
                    elif pos < n:
                        i = seq[pos]
                        pos += 1
                        first = False
                    else:
                        break
                    k = tk[i]
                    if silent[k] >= give_up:          # stopped answering: the rest is unanswered
                        skipped += 1
                        continue
                    if in_t[k] >= per_target:
                        hold(i, k, first)
                        continue
                    tid = (tid + 1) & 0xFFFFFFFF or 1
                    scratch[:mad_off] = hd[i]
                    scratch[mad_off:] = mads[i]
                    pack_tid(scratch, tid_at, tid)
                    try:
                        if write(scratch) != size:
                            raise OSError(errno.EIO, "short umad write")
                    except OSError as exc:
                        if exc.errno in (errno.EAGAIN, errno.ENOBUFS, errno.ENOMEM):
                            ready.appendleft(i)             # the device is full: wait for answers
                            break
                        raise
                    tries[i] += 1
                    pending[tid] = i
                    order.append((expiry, tid))
                    in_t[k] += 1
                    npend += 1
                if npend > peak:
                    peak = npend
            if not npend:
                if ready or pos < n:
                    continue
                break
            # take one answer: one already queued is read at once (no poll: the device is non-blocking);
            # only when none is, wait for one, at most until the front request expires (or the deadline)
            now = clock()
            front = order[0][0]
            if front > now and now < deadline:
                try:
                    got = read()
                except OSError:                             # nothing queued (EAGAIN)
                    got = None
                    if wait(int(((front if front < deadline else deadline) - now) * 1000) + 1):
                        try:
                            got = read()
                        except OSError:                     # a read that fails: what it answered times out
                            pass
                        if times is not None:
                            now = clock()                   # when the wait ended (the answer it waited for)
                if got is not None:
                    j = pending.pop(_TID.unpack_from(got, tid_at)[0], None) if len(got) >= tid_at + 12 else None
                    if j is not None:
                        if _STATUS.unpack_from(got, STATUS_OFFSET)[0]:     # the kernel timed it out (ETIMEDOUT)
                            again = lost(j)
                            retried += again
                            unanswered += 1 - again
                        else:
                            mad = got[mad_off:]
                            if mad[4] & 0x7F or mad[5]:
                                errors += 1
                            answers[j] = mad
                            if times is not None:
                                times[j] = now
                            answered += 1
                            k = tk[j]
                            silent[k] = 0
                            in_t[k] -= 1
                            h = held[k]
                            if h:
                                ready.append(h.popleft())
                    continue
                now = clock()
            if now >= deadline:
                break
            # the front expired: drop what was answered, count what was not as lost
            while order and order[0][0] <= now:
                j = pending.pop(order.popleft()[1], None)
                if j is not None:
                    again = lost(j)
                    retried += again
                    unanswered += 1 - again
            while order and order[0][1] not in pending:
                order.popleft()
        self._tid = tid
        # the deadline: what is still queued, held or in flight is unanswered
        left = len(pending) + len(ready) + (n - pos) + sum(len(h) for h in held if h)
        st.skipped = skipped + sum(len(h) for k, h in enumerate(held) if h and silent[k] >= give_up)
        st.sent = sum(tries)
        st.answered, st.retried, st.errors, st.peak_in_flight = answered, retried, errors, peak
        st.unanswered = unanswered + skipped + left
        for name in self.totals:
            self.totals[name] += getattr(st, name)
        return answers


_TID = struct.Struct(">I")
_STATUS = struct.Struct("=I")          # the umad header's status, host order


@dataclass(frozen=True, slots=True)
class MadSettings:
    """The engine's settings (fabric.mad_*), applied to the open engine at each mad_open."""
    window: int = 32
    per_target: int = 4
    timeout_ms: int = 200
    retries: int = 2
    ca: str = ""                     # "": the first CA and its first active port, as the tools pick it
    port: int = 0


REOPEN_FIRST = 1.0                   # seconds from a lost port to the first try to open it again
REOPEN_MAX = 30.0                    # the backoff's cap: tries 1, 2, 4, 8, 16, 30, 30 ... s apart


class UmadLost(UmadUnavailable):
    """The umad port this host had open was lost (a device error under a run) and is not open again yet."""


@dataclass(slots=True)
class _Lost:
    why: str                         # the device error that lost the port
    code: int                        # its errno
    since: float                     # when (the host's clock)
    delay: float                     # seconds from the last try to the next
    next_try: float
    tries: int = 0                   # opens tried since
    last: str = ""                   # why the last try failed

    def text(self, now: float) -> str:
        """What a sweep meanwhile says (the same words every sweep but its numbers: the pipeline logs an
        error once, as it starts, numbers masked)."""
        tried = f" (try {self.tries}: {self.last})" if self.last else ""
        return (f"the MAD port was lost ({self.why}); reopening{tried}, try {self.tries + 1} in "
                f"{max(0.0, self.next_try - now):.0f} s")


def open_port(ca: str, port: int, again: bool) -> UmadPort:
    """The umad port (UmadPort.open); `again`: after a loss, where under the simulator umad2sim's own
    connection to ibsim is attached again first (host/umad2sim.py: closing and opening the port alone
    keeps the dead connection)."""
    if again and umad2sim.preloaded():
        umad2sim.reattach()
    return UmadPort.open(ca, port)


class MadHost:
    """One umad port and its engine, owned by one host interface (LiveIO.mad_open/mad_run, so by the pipeline
    that owns that HostIO; no process-wide engine another pipeline's settings could change): opened at the
    first open() and kept, and closed by close(). Its settings are the last open()'s: the pipeline's sweep
    and its remediation both give fabric.mad_*. One run at a time on the port.

    A device error under a run (an HCA reset removing /dev/infiniband/umadN: ENODEV, EIO; the simulator gone:
    ECONNREFUSED, ENOTCONN) loses the port: it is closed, logged once ("MAD port lost"), and open() opens it
    again no sooner than REOPEN_FIRST seconds later, then with a delay doubled after each failed try up to
    REOPEN_MAX, raising UmadLost meanwhile; the first open that succeeds is logged once ("MAD port
    reopened", with the tries it took). A port lost again before any run on it succeeded keeps backing off
    from where it was. `epoch` counts the opens: what lives on the port and not in this process (an SM's
    subscription to its reports) must be made again when it changes."""

    def __init__(self, opener: Callable[[str, int, bool], UmadPort] = open_port,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self._lock = threading.Lock()
        self._engine: MadEngine | None = None
        self._opener, self._clock = opener, clock
        self._lost: _Lost | None = None
        self._unproven = False               # reopened after a loss, and no run on it succeeded yet
        self._delay = REOPEN_FIRST           # the backoff where the last loss left it
        self.epoch = 0                       # opens so far

    def open(self, settings: MadSettings, tool_env: Mapping[str, str] | None = None) -> int:
        """Open the engine (its umad port) once and apply `settings`; returns the epoch (opens so far).
        `tool_env`: the environment the host's tools run with (None: this process's own). Raises
        UmadUnavailable where no umad port opens, or where the tools would reach another fabric than this
        process's own libibumad (their LD_PRELOAD/IBSIM_SOCKNAME/SIM_HOST differ: umad2sim's preload given
        to the tools only, as the in-process test collectors and `fabricmon demo` do); UmadLost while a
        lost port is not open again."""
        if tool_env is not None and any(tool_env.get(k) != os.environ.get(k) for k in FABRIC_ENV):
            raise UmadUnavailable(errno.EXDEV, "the tools run with another fabric's environment "
                                               "(LD_PRELOAD/IBSIM_SOCKNAME/SIM_HOST) than this process")
        with self._lock:
            if self._engine is None:
                self._engine = MadEngine(self._reopen(settings))
                self.epoch += 1
            eng = self._engine
            eng.window, eng.per_target = settings.window, settings.per_target
            eng.timeout_ms, eng.retries = settings.timeout_ms, settings.retries
            return self.epoch

    def _reopen(self, settings: MadSettings) -> UmadPort:
        lost = self._lost
        if lost is None:
            return self._opener(settings.ca, settings.port, False)
        now = self._clock()
        if now < lost.next_try:
            raise UmadLost(lost.code, lost.text(now))
        lost.tries += 1
        try:
            port = self._opener(settings.ca, settings.port, True)
        except OSError as exc:
            lost.delay = min(2 * lost.delay, REOPEN_MAX)
            lost.next_try, lost.last = now + lost.delay, str(exc.strerror or exc)
            raise UmadLost(lost.code, lost.text(now)) from exc
        self._lost, self._delay, self._unproven = None, lost.delay, True
        log.info("MAD port reopened", tries=lost.tries, down_s=round(now - lost.since, 1))
        return port

    def run(self, requests: Sequence[Request], deadline: float,
            times: list[float] | None = None) -> list[bytes | None]:
        """One run of the engine (open() first; `times`: MadEngine.run's). On a device error (OSError) the port
        is lost (class doc) and the error raised."""
        with self._lock:
            eng = self._engine
            if eng is None:
                if self._lost is not None:
                    raise UmadLost(self._lost.code, self._lost.text(self._clock()))
                raise UmadUnavailable(errno.EBADF, "no umad port open (mad_open first)")
            try:
                answers = eng.run(requests, deadline, times)
            except OSError as exc:
                self._lose(exc)
                raise
            self._unproven = False
            return answers

    def _lose(self, exc: OSError) -> None:
        why = exc.strerror or str(exc)
        now = self._clock()
        delay = min(2 * self._delay, REOPEN_MAX) if self._unproven else REOPEN_FIRST
        self._lost = _Lost(why, exc.errno or errno.EIO, now, delay, now + delay)
        log.warning("MAD port lost; reopening", error=why, first_try_in_s=delay)
        self._close()

    def totals(self) -> dict[str, int]:
        """The open engine's counts over every run (sent, answered, retried, unanswered); {} when none."""
        with self._lock:
            return dict(self._engine.totals) if self._engine is not None else {}

    def close(self) -> None:
        with self._lock:
            self._close()
            self._lost, self._unproven = None, False

    def _close(self) -> None:
        if self._engine is not None:
            self._engine.port.close()
            self._engine = None


def exchange_key(r: Request) -> str:
    """A recorded exchange's key: `LID/class.method/attribute/modifier/data` in hex, the data being
    what follows the 24-byte common header as `offset:bytes` from its first to its last non-zero
    byte (PortCounters' PortSelect 1 is `65:01ffff`; none: empty). The transaction ID is not in it."""
    m = r.mad
    data = bytes(m[24:])
    core = data.strip(bytes(1))
    where = f"{24 + len(data) - len(data.lstrip(bytes(1)))}:{core.hex()}" if core else ""
    return f"{r.lid}/{m[1]:02x}.{m[3]:02x}/{int.from_bytes(m[16:18], 'big'):04x}/{int.from_bytes(m[20:24], 'big'):x}/{where}"


def answer_text(mad: bytes | None) -> str | None:
    """An answer as recorded: hex, its transaction ID zeroed, trailing zeros left out (None: unanswered)."""
    if mad is None:
        return None
    return (bytes(mad[:8]) + bytes(8) + bytes(mad[16:])).rstrip(bytes(1)).hex()


def answer_bytes(text: str | None) -> bytes | None:
    """answer_text's inverse: the 256-byte MAD (None: unanswered)."""
    if text is None:
        return None
    raw = bytes.fromhex(text)
    return raw + bytes(MAD_SIZE - len(raw)) if len(raw) < MAD_SIZE else raw
