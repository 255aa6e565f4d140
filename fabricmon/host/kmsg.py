"""The kernel log through /dev/kmsg: one record per read(2), `prio,seq,usec,flags;text` (plus
dictionary lines that start with a space), read non-blocking until EAGAIN.

- The descriptor stays open between polls, so each poll reads only the records logged since.
- A record at or below `after` (the last sequence number the caller has taken, this boot) is
  skipped: a restarted daemon opens the log at its oldest record and resumes after its own.
- EPIPE means the ring buffer overwrote records we had not read yet: the next read returns the
  oldest record still there. Lost records are counted from the gap in sequence numbers (that also
  counts those overwritten while the daemon was stopped).
- At most `limit` records per call: a burst is taken over several polls, never all in one.
- Between polls a follower thread (poll(2) on the descriptor) moves new records into a bounded
  queue as they are logged, so a burst larger than the ring buffer between two polls is not
  overwritten before it is read; should the queue itself fill (FOLLOW_MAX), the records it drops
  are counted lost like the ring buffer's.

kmsg's sequence numbers restart at each boot: the caller keeps the boot id
(/proc/sys/kernel/random/boot_id) beside a saved sequence number (sources/kernel_log.py).
"""

from __future__ import annotations

import errno
import os
import select
import threading
from collections import deque
from dataclasses import dataclass, field

DEV_KMSG = "/dev/kmsg"
RECORD_MAX = 8192           # the kernel's CONSOLE_EXT_LOG_MAX: a read buffer smaller than a record fails EINVAL
FOLLOW_MAX = 100_000        # records the follower holds between polls at most (~20 MB of text at worst)


@dataclass(frozen=True, slots=True)
class KmsgRecord:
    seq: int
    usec: int           # microseconds since boot (CLOCK_MONOTONIC)
    prio: int           # syslog priority (0 emerg .. 7 debug); the facility is not kept
    text: str


@dataclass(slots=True)
class KmsgRead:
    records: list[KmsgRecord] = field(default_factory=list)
    lost: int = 0               # records overwritten before they were read (sequence gaps)
    more: bool = False          # the limit was reached: more records wait
    last_seq: int | None = None  # the highest sequence number taken (records and skipped ones)


def parse_record(raw: bytes) -> KmsgRecord | None:
    """One /dev/kmsg record, or None for one that is not `prio,seq,usec,flags;text`. The text keeps
    the kernel's escapes (`\\x0a` for a byte it will not print); dictionary lines are dropped."""
    head, sep, rest = raw.partition(b";")
    if not sep:
        return None
    fields = head.split(b",")
    if len(fields) < 3:
        return None
    try:
        prio, seq, usec = int(fields[0]), int(fields[1]), int(fields[2])
    except ValueError:
        return None
    text = rest.split(b"\n", 1)[0].decode("utf-8", "replace")
    return KmsgRecord(seq, usec, prio & 7, text)


class KmsgReader:
    """One open /dev/kmsg descriptor, read non-blocking, and its follower thread. Raises OSError
    when it cannot be opened (ENOENT, EACCES, EPERM: the caller falls back to the journal)."""

    def __init__(self, path: str = DEV_KMSG, follow: bool = True):
        self.path = path
        self.follow = follow
        self._fd: int | None = None
        self._lock = threading.Lock()
        self._queue: deque[KmsgRecord] = deque()
        self._dropped = 0                   # records the full queue could not take
        self._next: int | None = None       # the sequence number expected next on this descriptor
        self._lost = 0                      # gaps seen by the follower, not yet reported
        self._fresh = True                  # no record taken from this descriptor yet
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._wake: int | None = None       # the write end of the follower's wake pipe (close() writes to it)

    def _open(self) -> int:
        if self._fd is None:
            self._fd = os.open(self.path, os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC)
            self._next, self._lost, self._fresh = None, 0, True
            if self.follow:
                self._stop.clear()
                wake_r, self._wake = os.pipe2(os.O_NONBLOCK | os.O_CLOEXEC)
                self._thread = threading.Thread(target=self._follow, args=(self._fd, wake_r),
                                                name="fabricmon-kmsg", daemon=True)
                self._thread.start()
        return self._fd

    def _drain(self, fd: int, room: int) -> bool:
        """Move records from the descriptor to the queue (at most `room`); False once it is closed."""
        while room > 0:
            try:
                raw = os.read(fd, RECORD_MAX)
            except BlockingIOError:
                return True
            except OSError as exc:
                if exc.errno in (errno.EPIPE, errno.EINTR):
                    continue            # overwritten under us: the sequence gap counts it
                return False
            if not raw:
                return True
            rec = parse_record(raw)
            if rec is None:
                continue
            if self._next is not None and rec.seq > self._next:
                self._lost += rec.seq - self._next
            self._next = rec.seq + 1
            if len(self._queue) >= FOLLOW_MAX:
                self._dropped += 1
            else:
                self._queue.append(rec)
            room -= 1
        return True

    def _follow(self, fd: int, wake_r: int) -> None:
        """Drain records as they come: poll(2) on the descriptor and the wake pipe, with no timeout (a thread
        that woke every few seconds to look for its stop cost more than the records), until close() writes
        to the pipe. Its read end is closed here as the thread ends; close() closes the write end."""
        poller = select.poll()          # poll(2), not select(2): a descriptor number above 1023 is fine
        poller.register(fd, select.POLLIN)
        poller.register(wake_r, select.POLLIN)
        try:
            while not self._stop.is_set() and self._fd == fd:
                try:
                    ready = poller.poll()
                except OSError:
                    return
                if any(r == fd for r, _ in ready):
                    with self._lock:
                        if self._fd != fd or not self._drain(fd, 4096):
                            return
        finally:
            os.close(wake_r)

    def read(self, after: int | None, limit: int) -> KmsgRead:
        with self._lock:
            fd = self._open()
            out = KmsgRead(last_seq=after)
            expect = after + 1 if after is not None and self._fresh else None
            while len(out.records) < limit:
                if not self._queue:
                    if not self._drain(fd, limit - len(out.records)):
                        self._close()
                        raise OSError(errno.EIO, "reading the kernel log failed", self.path)
                    if not self._queue:
                        break           # nothing more logged
                rec = self._queue.popleft()
                if after is not None and rec.seq <= after:
                    continue            # taken before the restart
                if expect is not None and rec.seq > expect:
                    out.lost += rec.seq - expect        # overwritten while the daemon was stopped
                expect, self._fresh = None, False
                out.records.append(rec)
                out.last_seq = rec.seq
            out.lost += self._lost + self._dropped
            self._lost = self._dropped = 0
            out.more = bool(self._queue) or len(out.records) >= limit
            return out

    def _close(self) -> None:
        self._stop.set()
        if self._wake is not None:
            try:
                os.write(self._wake, b"x")      # the follower wakes and ends (an ended one: EPIPE)
            except OSError:
                pass
            os.close(self._wake)
            self._wake = None
        fd, self._fd = self._fd, None
        self._next = None
        self._queue.clear()
        if fd is not None:
            try:
                os.close(fd)
            except OSError:
                pass

    def close(self) -> None:
        with self._lock:
            self._close()
        t = self._thread
        if t is not None and t is not threading.current_thread():
            t.join(2.0)


__all__ = ["DEV_KMSG", "FOLLOW_MAX", "KmsgRead", "KmsgReader", "KmsgRecord", "parse_record"]
