"""The host boundary: every command run and every file read goes through a HostIO.

- LiveIO reads the real host (paths rooted at the configured sysfs/procfs) and runs tools.
- RecordingIO wraps LiveIO and writes everything it sees into a bundle (`fabricmon capture`).
- ReplayIO serves a bundle back, so a support case or a real node's recording drives the very
  same pipeline as a live host.

Files are addressed as (root, relative path) with root "sysfs" or "procfs".
"""

from __future__ import annotations

import errno
import json
import os
import threading
import time
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Protocol

from fabricmon.runner import CommandResult, run_command

BUNDLE_VERSION = 1
ROOTS = ("sysfs", "procfs")


class HostIO(Protocol):
    def run(self, argv: Sequence[str], timeout: float) -> CommandResult: ...
    def read(self, root: str, rel: str) -> str: ...
    def listdir(self, root: str, rel: str) -> list[str]: ...
    def realpath(self, root: str, rel: str) -> str: ...
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

    def open_files(self) -> int:
        return len(self._fds)

    def nvml_gpus(self) -> list[dict]:
        """GPUs seen by NVML: [{index, uuid, bus_id, driver_version}]. Raises
        sources.nvml.NvmlUnavailable when libnvidia-ml or the driver is missing. Without the
        nvidia kernel driver (no <sysfs>/module/nvidia) NVML cannot work, so it is not even
        loaded (that saves importing pynvml and a failing dlopen on every poll)."""
        from fabricmon.sources import nvml
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


def _cmd_key(argv: Sequence[str]) -> str:
    return "\x00".join(argv)


class RecordingIO:
    """Wraps another HostIO and records every answer into a bundle directory."""

    def __init__(self, inner: HostIO, bundle: str | os.PathLike[str], meta: dict | None = None):
        self.inner = inner
        self.dir = Path(bundle)
        (self.dir / "files").mkdir(parents=True, exist_ok=True)
        self.commands: list[dict] = []
        self.errors: dict[str, int] = {}
        self.listings: dict[str, list[str] | int] = {}
        self.realpaths: dict[str, str] = {}
        self.meta = meta or {}
        self.nvml: list[dict] | None = None
        self.nvml_error: dict | None = None
        self._lock = threading.Lock()

    def run(self, argv: Sequence[str], timeout: float) -> CommandResult:
        res = self.inner.run(argv, timeout)
        with self._lock:
            self.commands.append({
                "argv": list(res.argv), "returncode": res.returncode, "stdout": res.stdout,
                "stderr": res.stderr, "duration": round(res.duration, 4), "error": res.error,
            })
        return res

    def read(self, root: str, rel: str) -> str:
        key = f"{root}/{rel}"
        try:
            data = self.inner.read(root, rel)
        except OSError as exc:
            with self._lock:
                self.errors[key] = exc.errno or errno.EIO
            raise
        with self._lock:
            self.errors.pop(key, None)      # the last answer for a path wins, as for commands
        target = self.dir / "files" / root / rel
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_text(data)
        return data

    def listdir(self, root: str, rel: str) -> list[str]:
        key = f"{root}/{rel}"
        try:
            names = self.inner.listdir(root, rel)
        except OSError as exc:
            with self._lock:
                self.listings[key] = exc.errno or errno.EIO
            raise
        with self._lock:
            self.listings[key] = names
        return names

    def realpath(self, root: str, rel: str) -> str:
        real = self.inner.realpath(root, rel)
        with self._lock:
            self.realpaths[f"{root}/{rel}"] = real
        return real

    def nvml_gpus(self) -> list[dict]:
        try:
            gpus = self.inner.nvml_gpus()
        except Exception as exc:
            from fabricmon.sources.nvml import NvmlUnavailable
            with self._lock:
                self.nvml_error = {"unavailable": isinstance(exc, NvmlUnavailable), "message": str(exc)}
            raise
        with self._lock:
            self.nvml = [dict(g) for g in gpus]
        return gpus

    def read_host_file(self, path: str) -> str:
        rel = _host_rel(path)
        try:
            data = self.inner.read_host_file(path)
        except OSError as exc:
            with self._lock:
                self.errors[f"host/{rel}"] = exc.errno or errno.EIO
            raise
        with self._lock:
            self.errors.pop(f"host/{rel}", None)
        target = self.dir / "files" / "host" / rel
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_text(data)
        return data

    def save(self) -> Path:
        manifest = {
            "bundle_version": BUNDLE_VERSION, "created": time.time(), **self.meta,
            "commands": self.commands, "read_errors": self.errors,
            "listings": self.listings, "realpaths": self.realpaths,
        }
        if self.nvml is not None:
            manifest["nvml"] = self.nvml
        if self.nvml_error is not None:
            manifest["nvml_error"] = self.nvml_error
        path = self.dir / "bundle.json"
        path.write_text(json.dumps(manifest, indent=1, sort_keys=True))
        return path

    def close(self) -> None:
        self.inner.close()


def _host_rel(path: str) -> str:
    """Where a host file lives in a bundle (files/host/<rel>); refuses '..' escapes."""
    rel = os.path.normpath("/" + path).lstrip("/")
    if not rel or rel.startswith(".."):
        raise OSError(errno.EINVAL, "bad host path", path)
    return rel


class BundleError(ValueError):
    pass


class ReplayIO:
    """Serves a recorded bundle. Unrecorded commands answer error="not_recorded"."""

    def __init__(self, bundle: str | os.PathLike[str]):
        self.dir = Path(bundle)
        try:
            manifest = json.loads((self.dir / "bundle.json").read_text())
        except FileNotFoundError as exc:
            raise BundleError(f"{self.dir}: not a fabricmon bundle (no bundle.json)") from exc
        except (OSError, ValueError) as exc:
            raise BundleError(f"{self.dir}/bundle.json: unreadable: {exc}") from exc
        if manifest.get("bundle_version") != BUNDLE_VERSION:
            raise BundleError(f"{self.dir}: unsupported bundle version {manifest.get('bundle_version')!r}")
        self.manifest = manifest
        self._commands: dict[str, dict] = {}
        for c in manifest.get("commands", []):
            self._commands[_cmd_key(c["argv"])] = c     # the last recording of an argv wins
        self._errors = manifest.get("read_errors", {})
        self._listings = manifest.get("listings", {})
        self._realpaths = manifest.get("realpaths", {})

    def run(self, argv: Sequence[str], timeout: float) -> CommandResult:
        c = self._commands.get(_cmd_key(argv))
        if c is None:
            return CommandResult(tuple(argv), None, "", "not in the bundle", 0.0, "not_recorded")
        return CommandResult(tuple(c["argv"]), c["returncode"], c["stdout"], c["stderr"],
                             c.get("duration", 0.0), c.get("error"))

    def read(self, root: str, rel: str) -> str:
        key = f"{root}/{rel}"
        if key in self._errors:
            code = self._errors[key]
            raise OSError(code, os.strerror(code), key)
        return (self.dir / "files" / root / rel).read_text()

    def listdir(self, root: str, rel: str) -> list[str]:
        key = f"{root}/{rel}"
        got = self._listings.get(key)
        if isinstance(got, int):
            raise OSError(got, os.strerror(got), key)
        if got is not None:
            return list(got)
        return sorted(os.listdir(self.dir / "files" / root / rel))

    def realpath(self, root: str, rel: str) -> str:
        key = f"{root}/{rel}"
        if key in self._realpaths:
            return self._realpaths[key]
        raise OSError(errno.ENOENT, "no realpath recorded", key)

    def nvml_gpus(self) -> list[dict]:
        """The recorded NVML answer; no "nvml" key means no GPUs."""
        err = self.manifest.get("nvml_error")
        if err:
            from fabricmon.sources.nvml import NvmlError, NvmlUnavailable
            raise (NvmlUnavailable if err.get("unavailable") else NvmlError)(err.get("message", "NVML error"))
        return [dict(g) for g in self.manifest.get("nvml", [])]

    def read_host_file(self, path: str) -> str:
        rel = _host_rel(path)
        key = f"host/{rel}"
        if key in self._errors:
            code = self._errors[key]
            raise OSError(code, os.strerror(code), path)
        return (self.dir / "files" / "host" / rel).read_text()

    def close(self) -> None:
        pass
