"""The kernel log through /dev/kmsg: one record per read(2), `prio,seq,usec,flags;text` (plus
dictionary lines that start with a space), read non-blocking until EAGAIN.

- The descriptor stays open between polls, so each poll reads only the records logged since.
- A record at or below `after` (the last sequence number the caller has taken, this boot) is
  skipped: a restarted daemon opens the log at its oldest record and resumes after its own.
- EPIPE means the ring buffer overwrote records we had not read yet: the next read returns the
  oldest record still there. Lost records are counted from the gap in sequence numbers (that also
  counts those overwritten while the daemon was stopped).
- At most `limit` records per call: a burst is taken over several polls, never all in one.

kmsg's sequence numbers restart at each boot: the boot id (/proc/sys/kernel/random/boot_id) says
which boot a saved sequence number belongs to.
"""

from __future__ import annotations

import errno
import os
import threading
from dataclasses import dataclass, field

DEV_KMSG = "/dev/kmsg"
BOOT_ID = "/proc/sys/kernel/random/boot_id"
RECORD_MAX = 8192           # the kernel's CONSOLE_EXT_LOG_MAX: a read buffer smaller than a record fails EINVAL


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


def boot_id(procfs: str = "/proc") -> str:
    """This boot's id, or "" where it cannot be read."""
    try:
        with open(os.path.join(procfs, "sys/kernel/random/boot_id"), "rb") as fh:
            return fh.read(64).decode("ascii", "replace").strip()
    except OSError:
        return ""


class KmsgReader:
    """One open /dev/kmsg descriptor, read non-blocking. Raises OSError when it cannot be opened
    (ENOENT, EACCES, EPERM: the caller falls back to the journal)."""

    def __init__(self, path: str = DEV_KMSG):
        self.path = path
        self._fd: int | None = None
        self._next: int | None = None       # the sequence number expected next on this descriptor
        self._lock = threading.Lock()

    def _open(self) -> int:
        if self._fd is None:
            self._fd = os.open(self.path, os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC)
            self._next = None
        return self._fd

    def read(self, after: int | None, limit: int) -> KmsgRead:
        with self._lock:
            fd = self._open()
            out = KmsgRead(last_seq=after)
            expect = self._next if self._next is not None else (after + 1 if after is not None else None)
            while True:
                if len(out.records) >= limit:
                    out.more = True
                    break
                try:
                    raw = os.read(fd, RECORD_MAX)
                except BlockingIOError:
                    break
                except OSError as exc:
                    if exc.errno == errno.EPIPE:        # overwritten under us: the gap counts it
                        continue
                    if exc.errno == errno.EINTR:
                        continue
                    self.close()
                    raise
                if not raw:
                    break
                rec = parse_record(raw)
                if rec is None:
                    continue
                if expect is not None and rec.seq > expect:
                    out.lost += rec.seq - expect
                expect = rec.seq + 1
                if after is not None and rec.seq <= after:
                    continue            # taken before the restart
                out.records.append(rec)
                out.last_seq = rec.seq
            self._next = expect
            return out

    def close(self) -> None:
        fd, self._fd = self._fd, None
        self._next = None
        if fd is not None:
            try:
                os.close(fd)
            except OSError:
                pass


__all__ = ["BOOT_ID", "DEV_KMSG", "KmsgRead", "KmsgReader", "KmsgRecord", "boot_id", "parse_record"]
