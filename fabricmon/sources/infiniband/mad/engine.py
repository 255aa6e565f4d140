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
        order: deque[tuple[float, int]] = deque()     # (expiry, tid) in send order (one timeout: expiry order)
        timeout = self.timeout_ms / 1000.0
        timeout_ms, retries, give_up = self.timeout_ms, self.retries, self.give_up_after
        send, recv, clock = port.send_raw, port.recv, self.clock
        window, per_target = self.window, self.per_target
        pack_tid = _TID.pack_into
        tid = self._tid
        pos = 0
        skipped = 0

        def hold(i: int, k: int, first: bool) -> None:
            h = held[k]
            if h is None:
                h = held[k] = deque()
            if first:
                h.appendleft(i)
            else:
                h.append(i)

        def freed(k: int) -> None:
            """One of target k's requests completed: its next held one may go."""
            in_t[k] -= 1
            h = held[k]
            if h:
                ready.append(h.popleft())

        def lost(i: int) -> None:
            k = tk[i]
            silent[k] += 1
            if tries[i] <= retries and clock() + timeout < deadline and silent[k] < give_up:
                st.retried += 1
                hold(i, k, True)                      # retries first: a lossy switch is known sooner
            else:
                st.unanswered += 1
            freed(k)

        while True:
            # send while both windows allow: ready ones (retries, held) first, then the sequence
            if len(pending) < window and (ready or pos < n):
                expiry = clock() + timeout
                while len(pending) < window:
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
                    pack_tid(block, off + mad_off + 12, tid)
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
                if len(pending) > st.peak_in_flight:
                    st.peak_in_flight = len(pending)
            if not pending:
                if ready or pos < n:
                    continue
                break
            # wait for one answer, at most until the oldest request expires
            now = clock()
            if now >= deadline:
                break
            wait = min(order[0][0], deadline) - now
            got = recv(int(wait * 1000) + 1) if wait > 0 else None
            if got is not None:
                status, mad = got
                i = pending.pop(int.from_bytes(mad[12:16], "big"), None) if len(mad) >= 24 else None
                if i is not None:
                    if status:                          # the kernel timed it out (ETIMEDOUT)
                        lost(i)
                    else:
                        if mad[4] & 0x7F or mad[5]:
                            st.errors += 1
                        answers[i] = mad
                        st.answered += 1
                        silent[tk[i]] = 0
                        freed(tk[i])
            # expire what is overdue (and drop answered ones from the front)
            if order and (order[0][1] not in pending or order[0][0] <= now):
                now = clock()
                while order and (order[0][1] not in pending or order[0][0] <= now):
                    _, old = order.popleft()
                    i = pending.pop(old, None)
                    if i is not None:
                        lost(i)
            if now >= deadline:
                break
        self._tid = tid
        # the deadline: what is still queued, held or in flight is unanswered
        left = len(pending) + len(ready) + (n - pos) + sum(len(h) for h in held if h)
        st.skipped = skipped + sum(len(h) for k, h in enumerate(held) if h and silent[k] >= give_up)
        st.sent = sum(tries)
        st.unanswered += skipped + left
        for k in self.totals:
            self.totals[k] += getattr(st, k)
        return answers


_TID = struct.Struct(">I")
