"""The engine's scheduling on a port that answers in Python: TID matching (answers out of order),
windows per target and global, retries, the deadline, a silent target costing only its own requests.
The same engine against the simulator is tests/sim/test_mad_sim.py."""

from __future__ import annotations

import errno
import random
import sys
from collections import Counter

from fabricmon.host.mad import MadEngine, Request
from fabricmon.sources.infiniband.mad import codec


class FakePort:
    """Answers each sent MAD (a GetResp echoing its TID and modifier, the LID in the data) in a shuffled
    order; drops what `drop(lid, n)` says (n: the how-manieth try of that request it is)."""

    hdr = 64
    mad_offset = 64

    def __init__(self, drop=lambda lid, n: False, seed: int = 1) -> None:
        self.drop = drop
        self.rng = random.Random(seed)
        self.queue: list[bytes] = []
        self.in_flight: Counter = Counter()
        self.peak_target = 0
        self.peak = 0
        self.sent: Counter = Counter()
        self.tries: Counter = Counter()
        self.now = 0.0
        self.lid_of: dict[int, int] = {}

    def register(self, cls: int, version: int) -> int:
        return cls

    def writer(self, buf) -> int:
        raw = bytes(buf)
        assert len(raw) == self.hdr + 256
        self.written(raw)
        return len(raw)

    def written(self, raw: bytes) -> None:
        lid = int.from_bytes(raw[28:30], "big")
        qp = int.from_bytes(raw[20:24], "big")
        mad = bytearray(raw[self.hdr:])
        assert qp == (1 if mad[1] == codec.CLASS_PERF else 0)
        self.sent[lid] += 1
        self.tries[(lid, bytes(mad[20:24]))] += 1
        tid = codec.tid_low(mad)
        self.lid_of[tid] = lid
        self.in_flight[lid] += 1
        self.peak_target = max(self.peak_target, self.in_flight[lid])
        self.peak = max(self.peak, sum(self.in_flight.values()))
        if self.drop(lid, self.tries[(lid, bytes(mad[20:24]))]):
            return
        mad[3] = codec.METHOD_GET_RESP
        mad[64:66] = lid.to_bytes(2, "big")
        self.queue.append(bytes(mad))

    def reader(self) -> bytes:
        """One queued answer (a umad buffer: a header with status 0, then the MAD), never waiting."""
        if not self.queue:
            raise BlockingIOError(errno.EAGAIN, "nothing queued")
        mad = self.queue.pop(self.rng.randrange(len(self.queue)))
        self.in_flight[self.lid_of[codec.tid_low(mad)]] -= 1
        return bytes(self.hdr) + mad

    def wait(self, timeout_ms: int) -> bool:
        if not self.queue:
            self.now += timeout_ms / 1000          # nothing comes: the wait passes
            return False
        return True

    def clock(self) -> float:
        return self.now


def requests(lids, per_lid: int) -> list[Request]:
    return [Request(f"sw{lid}", lid, bytes(codec.encode_port_info(p, 0))) for lid in lids for p in range(1, per_lid + 1)]


def test_answers_match_their_requests_by_tid_out_of_order_within_both_windows() -> None:
    port = FakePort()
    eng = MadEngine(port, window=16, per_target=3, clock=port.clock)
    reqs = requests(range(1, 21), 10)
    answers = eng.run(reqs, deadline=100.0)
    assert all(a is not None for a in answers)
    for r, a in zip(reqs, answers):
        assert int.from_bytes(a[64:66], "big") == r.lid                  # the answer of its own LID
        assert a[20:24] == r.mad[20:24]                                  # and of its own port
    assert port.peak_target <= 3 and port.peak <= 16
    assert eng.stats.sent == 200 and eng.stats.answered == 200 and eng.stats.unanswered == 0


def test_few_switches_never_get_more_than_their_window() -> None:
    port = FakePort()
    eng = MadEngine(port, window=32, per_target=4, clock=port.clock)
    answers = eng.run(requests([1, 2, 3], 40), deadline=100.0)
    assert None not in answers
    assert port.peak_target == 4 and port.peak == 12


def test_lost_answers_are_retried_and_a_silent_target_costs_only_its_own_requests() -> None:
    # LID 5 never answers; LID 7 loses the first try of every request
    port = FakePort(drop=lambda lid, n: lid == 5 or (lid == 7 and n == 1))
    eng = MadEngine(port, window=8, per_target=2, timeout_ms=100, retries=2, give_up_after=5, clock=port.clock)
    reqs = requests(range(1, 11), 20)
    answers = eng.run(reqs, deadline=100.0)
    by_lid = Counter(r.lid for r, a in zip(reqs, answers) if a is not None)
    assert by_lid[5] == 0 and all(by_lid[lid] == 20 for lid in range(1, 11) if lid != 5)
    # the silent switch: tries until 5 in a row went unanswered (a window of 2 at a time), the rest is not sent
    assert port.sent[5] <= 5 + 2
    assert eng.stats.skipped >= 20 - 4
    assert eng.stats.retried >= 20            # LID 7's first tries
    assert eng.stats.unanswered == 20
    assert port.now < 2.0                   # a few timeouts of 100 ms, not one per request


def test_the_deadline_ends_the_run_with_what_is_left_unanswered() -> None:
    port = FakePort(drop=lambda lid, n: True)
    eng = MadEngine(port, window=4, per_target=4, timeout_ms=100, retries=5, give_up_after=1000, clock=port.clock)
    answers = eng.run(requests([1, 2], 50), deadline=0.35)
    assert answers == [None] * 100
    assert port.now <= 0.5
    assert eng.stats.unanswered == 100


class CountingPort(FakePort):
    """A FakePort that counts its polls, and whose writer or reader can fail as a umad device does."""

    def __init__(self, send_fails: int = 0, send_errno: int = errno.ENOBUFS, status_of=lambda n: 0,
                 read_fails: int = 0, **kw) -> None:
        super().__init__(**kw)
        self.waits = 0
        self.send_fails, self.send_errno = send_fails, send_errno
        self.status_of = status_of             # the n-th answer's umad status (ETIMEDOUT: the kernel timed it out)
        self.read_fails = read_fails
        self.answers = 0

    def writer(self, buf) -> int:
        if self.send_fails:
            self.send_fails -= 1
            raise OSError(self.send_errno, "send queue full")
        return super().writer(buf)

    def reader(self) -> bytes:
        if self.queue and self.read_fails:
            self.read_fails -= 1
            self.queue.pop()                   # the answer is lost with the failed read
            raise OSError(errno.EIO, "read failed")
        raw = bytearray(super().reader())
        self.answers += 1
        raw[4:8] = self.status_of(self.answers).to_bytes(4, sys.byteorder)
        return bytes(raw)

    def wait(self, timeout_ms: int) -> bool:
        self.waits += 1
        return super().wait(timeout_ms)


def test_answers_already_queued_are_read_without_a_poll_and_keep_their_matching() -> None:
    # every answer is queued as soon as its request is sent: none needs a poll(), and each still
    # matches its own request by TID whatever order the device hands them over in
    port = CountingPort(seed=7)
    eng = MadEngine(port, window=32, per_target=4, clock=port.clock)
    reqs = requests(range(1, 41), 12)
    answers = eng.run(reqs, deadline=100.0)
    assert port.waits == 0
    for r, a in zip(reqs, answers):
        assert a is not None and int.from_bytes(a[64:66], "big") == r.lid and a[20:24] == r.mad[20:24]
        assert len(a) == 256                                              # the MAD alone, not the umad header
    assert port.peak_target <= 4 and port.peak <= 32
    assert eng.stats.sent == eng.stats.answered == 480


def test_a_full_send_queue_waits_for_answers_and_loses_nothing() -> None:
    for err in (errno.EAGAIN, errno.ENOBUFS, errno.ENOMEM):
        port = CountingPort(send_fails=3, send_errno=err)
        eng = MadEngine(port, window=8, per_target=2, clock=port.clock)
        reqs = requests(range(1, 6), 10)
        answers = eng.run(reqs, deadline=100.0)
        assert None not in answers and eng.stats.sent == 50 and eng.stats.retried == 0
    port = CountingPort(send_fails=1, send_errno=errno.EINVAL)        # any other error is the device's
    try:
        MadEngine(port, clock=port.clock).run(requests([1], 2), deadline=100.0)
    except OSError as exc:
        assert exc.errno == errno.EINVAL
    else:
        raise AssertionError("a send error other than a full queue must be raised")


def test_the_kernels_timeout_status_and_a_failed_read_are_retried() -> None:
    # the 3rd and 5th answers read carry ETIMEDOUT (the kernel timed the request out); the first two
    # reads fail (their answers lost): all four requests are sent again and answered
    port = CountingPort(status_of=lambda n: errno.ETIMEDOUT if n in (3, 5) else 0, read_fails=2)
    eng = MadEngine(port, window=4, per_target=4, timeout_ms=100, retries=2, clock=port.clock)
    answers = eng.run(requests([1, 2], 10), deadline=100.0)
    assert None not in answers
    assert eng.stats.retried == 4 and eng.stats.sent == 24 and eng.stats.unanswered == 0


class TimedPort(FakePort):
    """A FakePort whose clock moves 1 ms with every answer read."""

    def reader(self) -> bytes:
        raw = super().reader()
        self.now += 0.001
        return raw


def test_each_answer_is_timed_when_it_was_taken_and_the_unanswered_keep_their_slot() -> None:
    """The times a sweep's rates take each switch at (SweepData.read_ago): an answer's is the engine clock's
    when it was read; a retried request's comes after its timeout; one never answered keeps what it held."""
    port = TimedPort(drop=lambda lid, n: lid == 3 or (lid == 2 and n == 1))
    eng = MadEngine(port, window=8, per_target=2, timeout_ms=100, retries=2, give_up_after=1000, clock=port.clock)
    reqs = requests([1, 2, 3], 4)
    times = [-1.0] * len(reqs)
    answers = eng.run(reqs, deadline=5.0, times=times)
    for r, a, t in zip(reqs, answers, times):
        if r.lid == 3:
            assert a is None and t == -1.0
        else:
            assert a is not None and 0.0 <= t <= port.now
    assert min(t for r, t in zip(reqs, times) if r.lid == 2) >= 0.1       # answered on their retry
    assert max(t for r, t in zip(reqs, times) if r.lid == 1) < 0.1        # at once
    # without `times` the run is as before (nothing timed, the same answers)
    port2 = TimedPort(drop=lambda lid, n: lid == 3 or (lid == 2 and n == 1))
    eng2 = MadEngine(port2, window=8, per_target=2, timeout_ms=100, retries=2, give_up_after=1000, clock=port2.clock)
    assert [a is None for a in eng2.run(reqs, deadline=5.0)] == [a is None for a in answers]
