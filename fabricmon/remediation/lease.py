"""Who may act: only the holder of the lease. Two collectors of one fabric (an HA pair) both sweep,
judge and show what they would do; only the one holding the lease changes the fabric or Slurm, and the
other takes over when the holder goes away.

The interface is one method, `hold()`: asked before every round, it says whether this process holds the
lease now (and how, or why not). The holder must stop acting before its lease can end, never after:
a round acts only on a `hold()` that said so at its start, and the kinds here cannot end while the
process lives.
- `single` (the default): this process is the only collector of its fabric, so it holds the lease.
- `file`: an flock on a file (`remediation.lease.path`): collectors on one host (two units of one fabric
  on a management node). The kernel releases it when its holder exits, however it exits, so the other
  takes it on its next round. It does not reach past one host (an flock on NFS is not to be trusted).
- `etcd`: a lease on an etcd cluster (`remediation.lease.endpoints`), for collectors on several hosts: a
  lease granted with a TTL and kept alive, and one key (`remediation.lease.key`) created with it only
  where no one holds it (one transaction). The holder is who created the key; etcd deletes the key when
  the lease expires (its holder died or lost etcd) or is revoked (its holder exits: `release`).
  The holder stops acting before its lease can expire: etcd ends a lease no sooner than its TTL after
  the last keep-alive it answered, and that keep-alive was sent at or after the time the holder noted
  before sending it, so the holder counts its lease valid until that time + the granted TTL, and
  holds only while more than `guard` seconds of it are left (the longest one step of a round can
  take: a round asks again before each step). Keep-alives go three times in the rest of the TTL
  ((TTL - guard) / 3): one lost keep-alive is ridden out, two (a partition) are not. A holder that cannot reach etcd stops acting `guard`
  seconds before the others may start; a process killed outright is replaced once etcd expires
  its lease (at most TTL seconds later). The etcd client is fabricmon/host/etcd.py (the v3 HTTP/JSON
  gateway, no library)."""

from __future__ import annotations

import fcntl
import os
import threading
import time
from collections.abc import Callable
from typing import Protocol

import structlog

from fabricmon.host.etcd import EtcdClient, EtcdError
from fabricmon.remediation.settings import LeaseSettings

log = structlog.get_logger("fabricmon.remediation")


class Lease(Protocol):
    def hold(self) -> tuple[bool, str]: ...
    def release(self) -> None: ...


class SingleHolder:
    """The only collector of its fabric (or a node daemon, which acts on its own node only)."""

    def __init__(self, why: str = "the only collector of its fabric (remediation.lease.kind: single)"):
        self.why = why

    def hold(self) -> tuple[bool, str]:
        return True, self.why

    def release(self) -> None:
        pass


class FileLease:
    """An flock(LOCK_EX | LOCK_NB) on `path`, taken when free and kept while this process lives; the holder's
    pid is written into the file for the one that waits."""

    def __init__(self, path: str):
        self.path = path
        self._fd: int | None = None

    def hold(self) -> tuple[bool, str]:
        if self._fd is not None:
            return True, f"holds the lease file {self.path} (flock)"
        try:
            os.makedirs(os.path.dirname(os.path.abspath(self.path)), exist_ok=True)
            fd = os.open(self.path, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o640)
        except OSError as exc:
            return False, f"cannot open the lease file {self.path}: {exc.strerror or exc}"
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError:
            try:
                holder = os.pread(fd, 64, 0).decode("ascii", "replace").strip()
            except OSError:
                holder = ""
            os.close(fd)
            return False, f"another collector holds the lease file {self.path}" + (f" (pid {holder})" if holder else "")
        os.ftruncate(fd, 0)
        os.pwrite(fd, f"{os.getpid()}\n".encode(), 0)
        self._fd = fd
        return True, f"holds the lease file {self.path} (flock)"

    def release(self) -> None:
        if self._fd is not None:
            os.close(self._fd)
            self._fd = None


class EtcdLease:
    """A lease on etcd held by a thread of its own (started by the first `hold()`): while this process does
    not hold the key it tries to create it every `wait_every` seconds with its lease; while it does, it
    keeps the lease alive every (TTL - guard) / 3 seconds and reads the key back (still its own, with its
    lease).
    `hold()` only reads what the thread found: a round costs no request. `clock` is monotonic."""

    def __init__(self, client: EtcdClient, key: str, ttl: int, guard: float, identity: str,
                 clock: Callable[[], float] = time.monotonic, wait_every: float = 2.0, background: bool = True):
        if ttl <= guard:
            raise ValueError(f"a lease of {ttl} s cannot cover a step of {guard:g} s")
        self.client, self.key, self.ttl, self.guard, self.identity = client, key, ttl, guard, identity
        self.clock = clock
        self.period = (ttl - guard) / 3            # keep-alives while holding: three in what it acts on
        self.wait_every = min(wait_every, self.period)
        self._lock = threading.Lock()
        self._lease: int | None = None          # our lease (granted, kept alive while we wait or hold)
        self._holding = False                   # the key is ours (created with our lease, read back so)
        self._valid_until = float("-inf")       # the earliest our lease can end (the clock's time)
        self._why = "not asked etcd yet"
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._error = ""                        # the last request's error, logged when it changes
        self._answered = threading.Event()      # the first period is over (answered or failed)
        self._background = background           # False: no thread (a test calls step())

    # --- what a round asks ----------------------------------------------------------------------------
    def hold(self) -> tuple[bool, str]:
        if self._thread is None and self._background:
            self._thread = threading.Thread(target=self._loop, name="fabricmon-lease", daemon=True)
            self._thread.start()
            self._wake_once()
        with self._lock:
            left = self._valid_until - self.clock()
            if self._holding and left > self.guard:
                return True, f"holds the etcd lease {self.key} ({left:.0f} s of its {self.ttl} s TTL left)"
            if self._holding:
                return False, (f"stopped acting: its etcd lease {self.key} may end in {max(left, 0):.1f} s and no "
                               f"keep-alive was answered ({self._error or 'none yet'})")
            return False, self._why

    def release(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(self.client.timeout * len(self.client.endpoints) + 1.0)
        with self._lock:
            lease, self._lease, self._holding, self._valid_until = self._lease, None, False, float("-inf")
        if lease is not None:
            try:
                self.client.revoke(lease)           # the key goes with it: the next holder need not wait the TTL
                log.info("remediation lease released", key=self.key)
            except EtcdError as exc:
                log.warning("remediation lease not revoked: it expires by itself", key=self.key, error=str(exc))

    # --- the lease's thread ---------------------------------------------------------------------------
    def _wake_once(self) -> None:
        """The first round waits for the first answer (at most two requests' timeouts), not a period."""
        self._answered.wait(self.client.timeout * 2 * len(self.client.endpoints) + 0.5)

    def _loop(self) -> None:
        while not self._stop.is_set():
            self.step()
            self._stop.wait(self.period if self._holding else self.wait_every)

    def step(self) -> None:
        """One period of the lease's thread (a test without the thread calls it)."""
        try:
            self._step()
            self._note_error("")
        except (EtcdError, ValueError, KeyError) as exc:
            self._note_error(str(exc))
        self._answered.set()

    def _note_error(self, error: str) -> None:
        if error != self._error:
            if error:
                log.warning("remediation lease: etcd unreachable or failing", key=self.key, error=error)
            else:
                log.info("remediation lease: etcd answers again", key=self.key)
        self._error = error
        if error and not self._holding:
            with self._lock:
                self._why = f"cannot reach etcd for the lease {self.key}: {error}"

    def _step(self) -> None:
        """One period: keep our lease alive (and, holding, read the key back), else grant one; then, not
        holding, try to create the key with it."""
        if self._lease is not None:
            sent = self.clock()
            ttl = self.client.keepalive(self._lease)
            if ttl <= 0:                        # expired (a partition longer than the TTL, or etcd lost it)
                with self._lock:
                    was = self._holding
                    self._lease, self._holding, self._valid_until = None, False, float("-inf")
                    self._why = f"its etcd lease {self.key} expired: asking again"
                if was:
                    log.warning("remediation lease lost: it expired", key=self.key)
            elif self._holding:
                kv = self.client.get(self.key)
                with self._lock:
                    if kv is not None and kv.lease == self._lease:
                        self._valid_until = sent + ttl
                        return
                    self._holding, self._valid_until = False, sent + ttl
                    self._why = (f"another collector holds the etcd lease {self.key} ({kv.value})" if kv else
                                 f"its etcd key {self.key} was deleted: asking again")
                log.warning("remediation lease lost: the key is not ours", key=self.key, holder=kv.value if kv else None)
                return
            else:
                with self._lock:
                    self._valid_until = sent + ttl
        if self._lease is None:
            sent = self.clock()
            lease, ttl = self.client.grant(self.ttl)
            with self._lock:
                self._lease, self._valid_until = lease, sent + ttl
        created, kv = self.client.create(self.key, self.identity, self._lease)
        with self._lock:
            if created or (kv is not None and kv.lease == self._lease):     # ours (a create whose answer was lost)
                self._holding = True
            else:
                self._why = f"another collector holds the etcd lease {self.key}" + (f" ({kv.value})" if kv else "")
        if self._holding:
            log.info("remediation lease taken", key=self.key, identity=self.identity, ttl=self.ttl)


def make_lease(settings: LeaseSettings, state_dir: str, scope: str, guard: float = 12.0,
               shard: tuple[int, int] = (0, 1)) -> Lease:
    if scope == "node":
        return SingleHolder("a node daemon acts on its own node only")
    if settings.kind == "file":
        return FileLease(settings.path or os.path.join(state_dir, "remediation.lease"))
    if settings.kind == "etcd":
        client = EtcdClient(settings.endpoints, timeout=settings.timeout, ca_file=settings.ca_file,
                            cert_file=settings.cert_file, key_file=settings.key_file)
        key = settings.key.replace("{shard}", str(shard[0])).replace("{shards}", str(shard[1]))
        return EtcdLease(client, key, settings.ttl, guard, f"{os.uname().nodename} pid {os.getpid()}")
    return SingleHolder()


__all__ = ["EtcdLease", "FileLease", "Lease", "SingleHolder", "make_lease"]
