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
- issue 49 adds a lease on etcd (`etcdctl lease grant` / keep-alive, a key put with the lease) behind
  the same interface: for collectors on several hosts."""

from __future__ import annotations

import fcntl
import os
from typing import Protocol

from fabricmon.remediation.settings import LeaseSettings


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


def make_lease(settings: LeaseSettings, state_dir: str, scope: str) -> Lease:
    if scope == "node":
        return SingleHolder("a node daemon acts on its own node only")
    if settings.kind == "file":
        return FileLease(settings.path or os.path.join(state_dir, "remediation.lease"))
    return SingleHolder()


__all__ = ["FileLease", "Lease", "SingleHolder", "make_lease"]
