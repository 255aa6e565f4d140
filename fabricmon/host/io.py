"""The host boundary: every command run, file read, NVML query, SNMP walk and MAD goes through a HostIO.

- LiveIO reads the real host (paths rooted at the configured sysfs/procfs) and runs tools.
- RecordingIO and ReplayIO (fabricmon.host.bundle) record a bundle and serve it back.

Files are addressed as (root, relative path) with root "sysfs" or "procfs". HostIO declares
every method that sources call; nothing is looked up with getattr.
"""

from __future__ import annotations

import errno
import os
import socket
import stat
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Protocol

from fabricmon import fsutil
from fabricmon.host import mad, nvml, sa
from fabricmon.host.kmsg import KmsgRead, KmsgReader
from fabricmon.host.mad import MadSettings, Request
from fabricmon.host.sa import SaReport
from fabricmon.host.ras import RasExchange, ras_status
from fabricmon.host.snmp import WalkSpec, walk_many
from fabricmon.host.runner import DEFAULT_TOOL_DIRS, CommandResult, kill_all, resolve_program, run_command

ROOTS = ("sysfs", "procfs")
# read_many's first try reads this much of each file: a counter or a state is a few bytes, so a
# file that fills it may hold more and is read again whole (up to 64 KiB, a sysfs page on arm64)
SMALL_READ = 256


@dataclass(frozen=True, slots=True)
class HostFileRead:
    """A bounded read of a host file (HostIO.read_host_file_bounded)."""
    data: bytes             # at most max_bytes: the head, or the end with `tail`; b"" when older than min_mtime
    size: int               # the file's size when opened
    mtime: float            # its modification time when opened
    changed: bool = False   # it was written while read (size or mtime differ after the read): read it again


class HostIO(Protocol):
    # env: variables added to the tool's environment (never recorded: e.g. where a secret file is)
    def run(self, argv: Sequence[str], timeout: float, env: Mapping[str, str] | None = None) -> CommandResult: ...
    def which(self, program: str) -> str | None: ...
    # SNMPv2c walks in this process (host.snmp), one result per spec, in order, each shaped as the
    # `snmpbulkwalk -On -Oe -Ot` run it stands for (argv: spec.argv()); no child process
    def snmp_walks(self, specs: Sequence[WalkSpec], deadline: float, concurrency: int = 16,
                   cancel: threading.Event | None = None) -> list[CommandResult]: ...
    # MADs in this process (host.mad: the one umad port, many requests in flight). mad_open returns the
    # port's epoch (how many times it was opened: a change means it was lost and opened again) and raises
    # UmadUnavailable (an OSError) where no umad port opens here or the bundle holds no MADs (UmadLost
    # while a lost port is not open again); mad_run returns each request's answer (None: unanswered),
    # with `times` each answered request's time.monotonic() when it was taken (a replay sets none), and
    # raises OSError when the device fails under it (the port is lost: host.mad.MadHost reopens it)
    def mad_open(self, settings: MadSettings) -> int: ...
    def mad_run(self, requests: Sequence[Request], deadline: float,
                times: list[float] | None = None) -> list[bytes | None]: ...
    # the subnet administrator's reports (host.sa: a umad port of its own, its SA agent registered for
    # SubnAdmReport, a reader answering each): sa_open raises UmadUnavailable where none opens here (a
    # replayed bundle has none); sa_run sends (LID, MAD) requests and returns their answers (None:
    # unanswered by the timeout); sa_reports waits up to timeout for the reports queued since
    def sa_open(self) -> None: ...
    def sa_run(self, requests: Sequence[tuple[int, bytes]], timeout: float) -> list[bytes | None]: ...
    def sa_reports(self, timeout: float) -> list[SaReport]: ...
    def sa_close(self) -> None: ...
    def read(self, root: str, rel: str) -> str: ...
    def read_many(self, root: str, rels: Sequence[str]) -> list[str | OSError]: ...
    def listdir(self, root: str, rel: str) -> list[str]: ...
    def realpath(self, root: str, rel: str) -> str: ...
    def nvml_gpus(self) -> list[dict[str, Any]]: ...
    def read_host_file(self, path: str) -> str: ...
    def list_host_dir(self, path: str) -> list[str]: ...
    # a host file that may be large or rewritten while read: at most max_bytes (its end with `tail`),
    # nothing read where it was last modified before min_mtime; OSError where it cannot be opened
    def read_host_file_bounded(self, path: str, max_bytes: int, tail: bool = False,
                               min_mtime: float = 0.0) -> HostFileRead: ...
    def hostname(self) -> str: ...
    # the kernel log (/dev/kmsg at `path`): the records after sequence number `after`, at most `limit`;
    # OSError where it cannot be opened (the caller falls back to the journal)
    def kmsg(self, path: str, after: int | None, limit: int) -> KmsgRead: ...
    # NCCL's RAS port: one STATUS conversation, in JSON or text (host.ras; never VERBOSE); OSError where none answers
    def ras_status(self, address: str, port: int, timeout: float, max_bytes: int,
                   fmt: str = "json") -> RasExchange: ...
    def close_unread(self, root: str, rel: str) -> None: ...
    def commit_file(self, tmp: str, final: str) -> None: ...
    # the daemon (this pipeline) is stopping: kill the tools this HostIO has in flight, no others
    def kill_tools(self) -> None: ...
    def close(self) -> None: ...


class LiveIO:
    """The real host. sysfs files are kept open and re-read with pread (cheap, no re-open)."""

    MAX_OPEN = 512
    # A program that was not found is looked for again after this many seconds (installed later).
    MISSING_RECHECK = 60.0

    def __init__(self, sysfs: str = "/sys", procfs: str = "/proc", env: Mapping[str, str] | None = None,
                 tool_dirs: Sequence[str] = DEFAULT_TOOL_DIRS):
        self.roots = {"sysfs": os.path.abspath(sysfs), "procfs": os.path.abspath(procfs)}
        self.env = dict(env) if env is not None else None
        self._sysfs = self.roots["sysfs"]
        self.tool_dirs = tuple(tool_dirs)
        self._programs: dict[str, tuple[str | None, float]] = {}    # name -> (path or None, when looked up)
        self._fds: dict[str, int] = {}        # sysfs files kept open, by path relative to the sysfs root
        self._used: set[str] = set()
        self._lock = threading.Lock()
        self._kmsg: dict[str, KmsgReader] = {}     # /dev/kmsg kept open between polls, by path
        self.mad_host = mad.MadHost()               # this host interface's umad port and MAD engine

    def path(self, root: str, rel: str) -> str:
        return os.path.join(self.roots[root], rel)

    def which(self, program: str) -> str | None:
        """The program's file: PATH (of the tools' environment), then the tool dirs (/usr/sbin,
        /sbin). A found program is resolved once; a missing one is looked for again after
        MISSING_RECHECK seconds, so a tool installed later is picked up."""
        now = time.monotonic()
        with self._lock:
            hit = self._programs.get(program)
        if hit is not None and (hit[0] is not None or now - hit[1] < self.MISSING_RECHECK):
            return hit[0]
        env = self.env if self.env is not None else os.environ
        path = resolve_program(program, env.get("PATH", os.defpath), self.tool_dirs)
        with self._lock:
            self._programs[program] = (path, now)
        return path

    def run(self, argv: Sequence[str], timeout: float, env: Mapping[str, str] | None = None) -> CommandResult:
        exe = self.which(argv[0]) if argv else None
        if exe is None:
            return CommandResult(tuple(argv), None, "", "", 0.0, "not_found")
        child_env = self.env if not env else {**(self.env if self.env is not None else os.environ), **env}
        res = run_command(argv, timeout, child_env, executable=exe, owner=self)
        if res.error == "not_found":        # removed since it was resolved: look for it again
            with self._lock:
                self._programs.pop(argv[0], None)
        return res

    def snmp_walks(self, specs: Sequence[WalkSpec], deadline: float, concurrency: int = 16,
                   cancel: threading.Event | None = None) -> list[CommandResult]:
        return walk_many(specs, deadline, concurrency, cancel)

    def mad_open(self, settings: MadSettings) -> int:
        """This interface's umad port (opened once, and again after it was lost): it must reach the fabric
        this host's tools reach, so a LiveIO whose tools run with another fabric's environment (umad2sim's
        preload given to the tools only) has none."""
        return self.mad_host.open(settings, self.env)

    def mad_run(self, requests: Sequence[Request], deadline: float,
                times: list[float] | None = None) -> list[bytes | None]:
        return self.mad_host.run(requests, deadline, times)

    def sa_open(self) -> None:
        """The process's SA port (opened once), reaching the fabric this host's tools reach (as mad_open)."""
        sa.open_sa(self.env)

    def sa_run(self, requests: Sequence[tuple[int, bytes]], timeout: float) -> list[bytes | None]:
        return sa.run_sa(requests, timeout)

    def sa_reports(self, timeout: float) -> list[SaReport]:
        return sa.sa_reports(timeout)

    def sa_close(self) -> None:
        sa.close_sa()

    def read(self, root: str, rel: str) -> str:
        if root != "sysfs":
            with open(self.path(root, rel), "rb") as fh:
                return fh.read().decode("utf-8", "replace")
        # The hot path (every counter, every poll): a dict lookup and a pread. dict.get and
        # set.add are atomic; inserting and closing take the lock.
        fd = self._fds.get(rel)
        self._used.add(rel)
        if fd is not None:
            try:
                return os.pread(fd, 65536, 0).decode("utf-8", "replace")
            except OSError:
                self._forget(rel)           # device gone or file replaced: reopen below
        fd = os.open(self._sysfs + "/" + rel, os.O_RDONLY | os.O_CLOEXEC)
        try:
            data = os.pread(fd, 65536, 0)
        except OSError:
            os.close(fd)
            raise
        with self._lock:
            if len(self._fds) < self.MAX_OPEN and rel not in self._fds:
                self._fds[rel] = fd
                fd = -1
        if fd >= 0:
            os.close(fd)
        return data.decode("utf-8", "replace")

    def read_many(self, root: str, rels: Sequence[str]) -> list[str | OSError]:
        """Read several files; each answer is its text or the OSError reading it raised. One
        call per port: the per-file cost is a dict lookup and a pread."""
        if root != "sysfs":
            return [read_answer(self.read, root, rel) for rel in rels]
        fds, pread = self._fds, os.pread
        self._used.update(rels)
        try:
            # the common case: every file open, read whole (a counter is a few bytes; a sysfs file
            # holds at most a page) and ASCII; anything else reads them all again one by one below
            texts = [pread(fds[rel], SMALL_READ, 0) for rel in rels]
            if max(map(len, texts), default=0) < SMALL_READ:
                return [t.decode() for t in texts]
        except (KeyError, OSError, UnicodeDecodeError):
            pass
        out: list[str | OSError] = []
        append = out.append
        for rel in rels:
            fd = fds.get(rel)
            if fd is not None:
                try:
                    append(pread(fd, 65536, 0).decode("utf-8", "replace"))
                    continue
                except OSError:
                    pass
            append(read_answer(self.read, root, rel))     # first read, or reopen: the slow path
        return out

    def _forget(self, rel: str) -> None:
        with self._lock:
            fd = self._fds.pop(rel, None)
        if fd is not None:
            try:
                os.close(fd)
            except OSError:
                pass

    def close_unread(self, root: str, rel: str) -> None:
        """Close cached files under root/rel not read since the last sweep (a removed HCA, a
        vanished port). Only the source that owns that subtree calls it, from its own thread, so
        no other thread can be reading one of these descriptors while it is closed."""
        if root != "sysfs":
            return                  # only sysfs files are kept open
        prefix = rel.rstrip("/") + "/"
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
        that a reader never sees it half written; it keeps its directory's owner (fsutil)."""
        fsutil.commit_file(tmp, final)

    def open_files(self) -> int:
        return len(self._fds)

    def nvml_gpus(self) -> list[dict[str, Any]]:
        """GPUs seen by NVML: [{index, uuid, bus_id, driver_version}]. Raises
        sources.nvml.NvmlUnavailable when libnvidia-ml or the driver is missing. Without the
        nvidia kernel driver (no <sysfs>/module/nvidia) NVML cannot work, so it is not even
        loaded (that saves importing pynvml and a failing dlopen on every poll)."""
        if not os.path.isdir(self.path("sysfs", "module/nvidia")):
            raise nvml.NvmlUnavailable(f"NVIDIA driver not loaded (no {self.path('sysfs', 'module/nvidia')})")
        return nvml.query_gpus()

    # a configured host file is read whole up to this (a SuperPOD's design or node name map is a few MiB);
    # a larger one is an error naming it, never a silently cut file
    MAX_HOST_FILE = 64 << 20

    def read_host_file(self, path: str) -> str:
        """A configured host file outside sysfs/procfs (e.g. gpu.nccl_env_file, a design, topology.conf), by
        absolute path, whole; OSError EFBIG over MAX_HOST_FILE."""
        with open(path, "rb") as fh:
            data = fh.read(self.MAX_HOST_FILE + 1)
        if len(data) > self.MAX_HOST_FILE:
            raise OSError(errno.EFBIG, f"larger than {self.MAX_HOST_FILE >> 20} MiB, the most a configured "
                          "host file may be", path)
        return data.decode("utf-8", "replace")

    def list_host_dir(self, path: str) -> list[str]:
        """The entries of a host directory outside sysfs/procfs (e.g. slurmd's spool directory)."""
        return sorted(os.listdir(path))

    def read_host_file_bounded(self, path: str, max_bytes: int, tail: bool = False,
                               min_mtime: float = 0.0) -> HostFileRead:
        """A file another program rewrites in place (NCCL's Inspector files): one open, fstat before
        and after the read, at most max_bytes read (a file larger than that is cut, its head or with
        `tail` its end), nothing read from a file last modified before min_mtime."""
        fd = os.open(path, os.O_RDONLY | os.O_CLOEXEC | os.O_NONBLOCK)
        try:
            before = os.fstat(fd)
            if not stat.S_ISREG(before.st_mode):
                raise OSError(errno.EINVAL, "not a regular file", path)
            if before.st_mtime < min_mtime:
                return HostFileRead(b"", before.st_size, before.st_mtime)
            start = max(0, before.st_size - max_bytes) if tail else 0
            chunks, got = [], 0
            while got < max_bytes:
                chunk = os.pread(fd, min(1 << 20, max_bytes - got), start + got)
                if not chunk:
                    break
                chunks.append(chunk)
                got += len(chunk)
            after = os.fstat(fd)
        finally:
            os.close(fd)
        changed = (after.st_size, after.st_mtime_ns) != (before.st_size, before.st_mtime_ns)
        return HostFileRead(b"".join(chunks), before.st_size, before.st_mtime, changed)

    def hostname(self) -> str:
        return socket.gethostname()

    def kill_tools(self) -> None:
        kill_all(owner=self)

    def ras_status(self, address: str, port: int, timeout: float, max_bytes: int,
                   fmt: str = "json") -> RasExchange:
        return ras_status(address, port, timeout, max_bytes, fmt)

    def kmsg(self, path: str, after: int | None, limit: int) -> KmsgRead:
        with self._lock:
            reader = self._kmsg.setdefault(path, KmsgReader(path))
        return reader.read(after, limit)

    def close(self) -> None:
        self.mad_host.close()
        with self._lock:
            readers, self._kmsg = list(self._kmsg.values()), {}
        for r in readers:
            r.close()
        with self._lock:
            fds, self._fds = list(self._fds.values()), {}
        for fd in fds:
            try:
                os.close(fd)
            except OSError:
                pass


def read_answer(read: Callable[[str, str], str], root: str, rel: str) -> str | OSError:
    """read(root, rel), or the OSError it raised (for read_many)."""
    try:
        return read(root, rel)
    except OSError as exc:
        return exc
