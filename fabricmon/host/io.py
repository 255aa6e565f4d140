"""The host boundary: every command run, file read and NVML query goes through a HostIO.

- LiveIO reads the real host (paths rooted at the configured sysfs/procfs) and runs tools.
- RecordingIO and ReplayIO (fabricmon.host.bundle) record a bundle and serve it back.

Files are addressed as (root, relative path) with root "sysfs" or "procfs". HostIO declares
every method that sources call; nothing is looked up with getattr.
"""

from __future__ import annotations

import os
import threading
from collections.abc import Mapping, Sequence
from typing import Any, Protocol

from fabricmon.host import nvml
from fabricmon.host.runner import CommandResult, run_command

ROOTS = ("sysfs", "procfs")


class HostIO(Protocol):
    def run(self, argv: Sequence[str], timeout: float) -> CommandResult: ...
    def read(self, root: str, rel: str) -> str: ...
    def listdir(self, root: str, rel: str) -> list[str]: ...
    def realpath(self, root: str, rel: str) -> str: ...
    def nvml_gpus(self) -> list[dict[str, Any]]: ...
    def read_host_file(self, path: str) -> str: ...
    def sweep(self, root: str, rel: str) -> None: ...
    def commit_file(self, tmp: str, final: str) -> None: ...
    def close(self) -> None: ...


class LiveIO:
    """The real host. sysfs files are kept open and re-read with pread (cheap, no re-open)."""

    MAX_OPEN = 512

    def __init__(self, sysfs: str = "/sys", procfs: str = "/proc", env: Mapping[str, str] | None = None):
        self.roots = {"sysfs": os.path.abspath(sysfs), "procfs": os.path.abspath(procfs)}
        self.env = dict(env) if env is not None else None
        self._fds: dict[str, int] = {}
        self._used: set[str] = set()
        self._lock = threading.Lock()

    def path(self, root: str, rel: str) -> str:
        return os.path.join(self.roots[root], rel)

    def run(self, argv: Sequence[str], timeout: float) -> CommandResult:
        return run_command(argv, timeout, self.env)

    def read(self, root: str, rel: str) -> str:
        path = self.path(root, rel)
        if root != "sysfs":
            with open(path, "rb") as fh:
                return fh.read().decode("utf-8", "replace")
        with self._lock:
            fd = self._fds.get(path)
            self._used.add(path)
        if fd is not None:
            try:
                return os.pread(fd, 65536, 0).decode("utf-8", "replace")
            except OSError:
                self._forget(path)          # device gone or file replaced: reopen below
        fd = os.open(path, os.O_RDONLY | os.O_CLOEXEC)
        try:
            data = os.pread(fd, 65536, 0)
        except OSError:
            os.close(fd)
            raise
        with self._lock:
            if len(self._fds) < self.MAX_OPEN and path not in self._fds:
                self._fds[path] = fd
                fd = -1
        if fd >= 0:
            os.close(fd)
        return data.decode("utf-8", "replace")

    def _forget(self, path: str) -> None:
        with self._lock:
            fd = self._fds.pop(path, None)
        if fd is not None:
            try:
                os.close(fd)
            except OSError:
                pass

    def sweep(self, root: str, rel: str) -> None:
        """Close cached files under root/rel not read since the last sweep (a removed HCA, a
        vanished port). Only the source that owns that subtree calls it, from its own thread, so
        no other thread can be reading one of these descriptors while it is closed."""
        prefix = self.path(root, rel)
        with self._lock:
            stale = [p for p in self._fds if p.startswith(prefix) and p not in self._used]
            self._used = {p for p in self._used if not p.startswith(prefix)}
        for p in stale:
            self._forget(p)

    def listdir(self, root: str, rel: str) -> list[str]:
        return sorted(os.listdir(self.path(root, rel)))

    def realpath(self, root: str, rel: str) -> str:
        base = self.roots[root]
        real = os.path.realpath(self.path(root, rel))
        if real.startswith(base + os.sep):
            return "/" + root.replace("fs", "") + real[len(base):]   # "/sys/devices/..."
        return real

    def commit_file(self, tmp: str, final: str) -> None:
        """Atomically move a file a tool wrote (e.g. ibnetdiscover's cache) into place, so
        that a reader never sees it half written."""
        os.replace(tmp, final)

    def open_files(self) -> int:
        return len(self._fds)

    def nvml_gpus(self) -> list[dict]:
        """GPUs seen by NVML: [{index, uuid, bus_id, driver_version}]. Raises
        sources.nvml.NvmlUnavailable when libnvidia-ml or the driver is missing. Without the
        nvidia kernel driver (no <sysfs>/module/nvidia) NVML cannot work, so it is not even
        loaded (that saves importing pynvml and a failing dlopen on every poll)."""
        if not os.path.isdir(self.path("sysfs", "module/nvidia")):
            raise nvml.NvmlUnavailable(f"NVIDIA driver not loaded (no {self.path('sysfs', 'module/nvidia')})")
        return nvml.query_gpus()

    def read_host_file(self, path: str) -> str:
        """A configured host file outside sysfs/procfs (e.g. gpu.nccl_env_file), by absolute path."""
        with open(path, "rb") as fh:
            return fh.read(1 << 20).decode("utf-8", "replace")

    def close(self) -> None:
        with self._lock:
            fds, self._fds = list(self._fds.values()), {}
        for fd in fds:
            try:
                os.close(fd)
            except OSError:
                pass
