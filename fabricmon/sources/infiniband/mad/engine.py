"""The MAD engine: many requests in flight over one umad port, matched by transaction ID.

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

Measured defaults (docs/mad-engine.md): window 32, per_target 4 (ibsim's own MAD rate is the floor
there: 32 in flight is 11 us a query against 65 us one at a time; on hardware a switch's SMA/PMA
answers in microseconds and ibdiagnet keeps up to 128 GMPs in flight).
"""

from __future__ import annotations

import ctypes
import errno
import itertools
import struct
import time
from collections import deque
from dataclasses import dataclass, field

from fabricmon.sources.infiniband.mad import codec
from fabricmon.sources.infiniband.mad.umad import pack_address

QP_SMP, QP_GSI = 0, 1


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
    def __init__(self, port, window: int = 32, per_target: int = 4, timeout_ms: int = 200, retries: int = 2,
                 give_up_after: int = 16, clock=time.monotonic) -> None:
        if window < 1 or per_target < 1:
            raise ValueError("window and per_target must be >= 1")
        self.port = port
        self.window, self.per_target = window, per_target
        self.timeout_ms, self.retries, self.give_up_after = timeout_ms, retries, give_up_after
        self.clock = clock
        self._tid = 0
        self.stats = RunStats()
        self.totals = {"sent": 0, "answered": 0, "retried": 0, "unanswered": 0}   # over every run of this engine

    def run(self, requests: list[Request], deadline: float) -> list[bytes | None]:
        """Answers in the order of `requests` (None: unanswered by the deadline or after every try)."""
        st = self.stats = RunStats()
        n = len(requests)
        answers: list[bytes | None] = [None] * n
        if not n:
            return answers
        port = self.port
        # every request's umad buffer (header with its address, then the MAD) in one block: a send
        # is then the TID written in place and one umad_send
        size, mad_off = port.hdr + codec.MAD_SIZE, port.mad_offset
        block = bytearray(size * n)
        agents: dict[int, int] = {}
        names: dict[str, int] = {}                    # target -> its index
        tk = [0] * n                                  # request -> its target's index
        agent_of = [0] * n
        per: list[list[int]] = []                     # target index -> its requests, in order
        for i, r in enumerate(requests):
            off = i * size
            cls = r.mad[1]
            if cls not in agents:
                agents[cls] = port.register(cls, 1)
            agent_of[i] = agents[cls]
            qp, qkey = (QP_GSI, codec.GSI_QKEY) if cls == codec.CLASS_PERF else (QP_SMP, 0)
            pack_address(block, off, r.lid, qp, qkey)
            block[off + mad_off:off + mad_off + len(r.mad)] = r.mad
            k = names.get(r.target)
            if k is None:
                k = names[r.target] = len(per)
                per.append([])
            tk[i] = k
            per[k].append(i)
        for t, k in names.items():
            st.by_target[t] = len(per[k])
        # the send order: one request of each target in turn; a request whose target has its window
        # full waits in that target's `held` queue and moves to `ready` when one of its own completes
        seq = [i for group in itertools.zip_longest(*per) for i in group if i is not None]
        base = ctypes.addressof((ctypes.c_char * len(block)).from_buffer(block))
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
        timeout = self.timeout_ms / 1000.0
        timeout_ms, retries, give_up = self.timeout_ms, self.retries, self.give_up_after
        send, recv, clock = port.send_raw, port.recv, self.clock
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
                    off = i * size
                    pack_tid(block, off + tid_at, tid)
                    try:
                        send(agent_of[i], base + off, timeout_ms, 0)
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
            # wait for one answer, at most until the front request expires (or the deadline)
            now = clock()
            front = order[0][0]
            if front > now and now < deadline:
                got = recv(int(((front if front < deadline else deadline) - now) * 1000) + 1)
                if got is not None:
                    status, mad = got
                    i = pending.pop(_TID.unpack_from(mad, 12)[0], None) if len(mad) >= 24 else None
                    if i is not None:
                        if status:                          # the kernel timed it out (ETIMEDOUT)
                            r = lost(i)
                            retried += r
                            unanswered += 1 - r
                        else:
                            if mad[4] & 0x7F or mad[5]:
                                errors += 1
                            answers[i] = mad
                            answered += 1
                            k = tk[i]
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
                i = pending.pop(order.popleft()[1], None)
                if i is not None:
                    r = lost(i)
                    retried += r
                    unanswered += 1 - r
            while order and order[0][1] not in pending:
                order.popleft()
        self._tid = tid
        # the deadline: what is still queued, held or in flight is unanswered
        left = len(pending) + len(ready) + (n - pos) + sum(len(h) for h in held if h)
        st.skipped = skipped + sum(len(h) for k, h in enumerate(held) if h and silent[k] >= give_up)
        st.sent = sum(tries)
        st.answered, st.retried, st.errors, st.peak_in_flight = answered, retried, errors, peak
        st.unanswered = unanswered + skipped + left
        for k in self.totals:
            self.totals[k] += getattr(st, k)
        return answers


_TID = struct.Struct(">I")
