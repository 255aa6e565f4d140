"""host.kmsg.KmsgReader on this machine's real /dev/kmsg (root): records come back in order with their
sequence numbers, a reader resumed after a sequence number takes nothing twice, the limit holds the
rest for the next read, and the follower thread stops on close."""

from __future__ import annotations

import os
import threading
import time
import uuid

import pytest

from fabricmon.host.kmsg import KmsgReader
from helpers import require_writable_kmsg, wait_until


@pytest.fixture(autouse=True, scope="module")
def _writable_kmsg() -> None:
    """Every test here writes the real /dev/kmsg (root)."""
    require_writable_kmsg()


def write(lines: list[str]) -> None:
    fd = os.open("/dev/kmsg", os.O_WRONLY)
    try:
        for ln in lines:
            os.write(fd, f"<4>{ln}\n".encode())
    finally:
        os.close(fd)


def mine(reader: KmsgReader, tag: str, after: int | None, limit: int = 100_000) -> tuple[list, object]:
    got = reader.read(after, limit)
    return [r for r in got.records if tag in r.text], got


def test_resume_after_a_sequence_number_and_the_limit() -> None:
    tag = f"fabricmon-kmsg-test-{uuid.uuid4().hex[:12]}"
    r = KmsgReader()
    try:
        _, first = mine(r, tag, None)            # everything up to now
        write([f"{tag} {i}" for i in range(5)])
        recs: list = []

        def read_back() -> list:
            got, res = mine(r, tag, first.last_seq)
            recs.extend(got)
            first.last_seq = res.last_seq if res.last_seq is not None else first.last_seq
            return recs
        wait_until(read_back, 5, lambda: f"five records read back (got {[x.text for x in recs]})",
                   until=lambda recs: len(recs) >= 5)
        assert [x.text for x in recs] == [f"{tag} {i}" for i in range(5)]
        assert [x.seq for x in recs] == sorted(x.seq for x in recs) and all(x.prio == 4 for x in recs)
    finally:
        r.close()
    # a new reader (a restarted daemon) resumed after the third: only the last two
    r2 = KmsgReader()
    try:
        got, _ = mine(r2, tag, recs[2].seq)
        assert [x.text for x in got] == [f"{tag} 3", f"{tag} 4"]
    finally:
        r2.close()
    # at most `limit` per read; the rest waits
    r3 = KmsgReader(follow=False)
    try:
        res = r3.read(recs[0].seq - 1, 2)
        assert len(res.records) == 2 and res.more and res.records[0].seq == recs[0].seq
        res = r3.read(res.last_seq, 100_000)
        assert [x.text for x in res.records if tag in x.text] == [f"{tag} {i}" for i in range(2, 5)]
    finally:
        r3.close()


def test_the_follower_thread_ends_on_close() -> None:
    before = {t.ident for t in threading.enumerate()}
    r = KmsgReader()
    r.read(None, 10)
    threads = [t for t in threading.enumerate() if t.name == "fabricmon-kmsg" and t.ident not in before]
    assert len(threads) == 1
    t0 = time.monotonic()
    r.close()
    threads[0].join(5)
    # at once: close() wakes it through its pipe (it waits on the descriptor without a timeout, never waking
    # every few seconds to look for its stop)
    assert not threads[0].is_alive() and time.monotonic() - t0 < 0.5
