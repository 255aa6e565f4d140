"""Capture bundles: RecordingIO writes everything a HostIO answers into a bundle directory
(`fabricmon capture`), ReplayIO serves a bundle back, so a support case or a real node's
recording drives the very same pipeline as a live host.

MADs are recorded as request -> answer (host.mad.exchange_key: per MAD by destination LID and
the request itself; the last answer to a request wins, as for commands) under the manifest's
"mad" key, or why no umad port opened under "mad_error"; a bundle without either (recorded with
the infiniband-diags tools, or before MADs were recorded) replays the tools."""

from __future__ import annotations

import errno
import json
import os
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from typing import Any
from pathlib import Path

from fabricmon.host.io import HostFileRead, HostIO, read_answer
from fabricmon.host.mad import MadSettings, Request, answer_bytes, answer_text, exchange_key
from fabricmon.host.sa import SaReport
from fabricmon.host.kmsg import KmsgRead
from fabricmon.host.ras import RasExchange
from fabricmon.host.nvml import NvmlError, NvmlUnavailable
from fabricmon.host.runner import CommandResult
from fabricmon.host.snmp import WalkSpec
from fabricmon.host.umad import UmadUnavailable

BUNDLE_VERSION = 1


def _cmd_key(argv: Sequence[str]) -> str:
    return "\x00".join(argv)


class _Unrecorded:
    """What a bundle does not hold, for recording and replay alike: the kernel log, NCCL's Inspector files
    and RAS (each source reading them reports it as an error of its own, nothing else is lost)."""

    def kmsg(self, path: str, after: int | None, limit: int) -> KmsgRead:
        raise OSError(errno.EOPNOTSUPP, "the kernel log is not recorded in a bundle", path)

    def read_host_file_bounded(self, path: str, max_bytes: int, tail: bool = False,
                               min_mtime: float = 0.0) -> HostFileRead:
        raise OSError(errno.EOPNOTSUPP, "NCCL Inspector files are not recorded in a bundle", path)

    def ras_status(self, address: str, port: int, timeout: float, max_bytes: int,
                   fmt: str = "json") -> RasExchange:
        raise OSError(errno.EOPNOTSUPP, "NCCL RAS is not recorded in a bundle", f"{address}:{port}")


class RecordingIO(_Unrecorded):
    """Wraps another HostIO and records every answer into a bundle directory."""

    def __init__(self, inner: HostIO, bundle: str | os.PathLike[str], meta: dict[str, Any] | None = None):
        self.inner = inner
        self.dir = Path(bundle)
        (self.dir / "files").mkdir(parents=True, exist_ok=True)
        self.commands: list[dict[str, Any]] = []
        self.errors: dict[str, int] = {}
        self.listings: dict[str, list[str] | int] = {}
        self.realpaths: dict[str, str] = {}
        self.meta = meta or {}
        self.nvml: list[dict[str, Any]] | None = None
        self.nvml_error: dict[str, Any] | None = None
        self.programs: dict[str, str | None] = {}
        self.mads: dict[str, str | None] | None = None       # exchange key -> answer; None: never opened
        self.mad_error: str | None = None
        self._lock = threading.Lock()

    def which(self, program: str) -> str | None:
        path = self.inner.which(program)
        with self._lock:
            self.programs[program] = path
        return path

    def run(self, argv: Sequence[str], timeout: float, env: Mapping[str, str] | None = None) -> CommandResult:
        res = self.inner.run(argv, timeout, env) if env else self.inner.run(argv, timeout)
        self._record(res)
        return res

    def _record(self, res: CommandResult) -> None:
        with self._lock:
            self.commands.append({
                "argv": list(res.argv), "returncode": res.returncode, "stdout": res.stdout,
                "stderr": res.stderr, "duration": round(res.duration, 4), "error": res.error,
                **({"truncated": True} if res.truncated else {}),
            })

    def snmp_walks(self, specs: Sequence[WalkSpec], deadline: float, concurrency: int = 16,
                   cancel: threading.Event | None = None) -> list[CommandResult]:
        """Recorded as commands under each walk's argv (WalkSpec.argv: no secret in it)."""
        results = self.inner.snmp_walks(specs, deadline, concurrency, cancel)
        for res in results:
            self._record(res)
        return results

    def mad_open(self, settings: MadSettings) -> int:
        try:
            epoch = self.inner.mad_open(settings)
        except OSError as exc:
            with self._lock:
                self.mad_error = exc.strerror or str(exc)
            raise
        with self._lock:
            self.mad_error = None
            if self.mads is None:
                self.mads = {}
        return epoch

    # the SA port is not recorded (host.sa): a report is an event of the live fabric, which a replay has not
    def sa_open(self) -> None:
        self.inner.sa_open()

    def sa_run(self, requests: Sequence[tuple[int, bytes]], timeout: float) -> list[bytes | None]:
        return self.inner.sa_run(requests, timeout)

    def sa_reports(self, timeout: float) -> list[SaReport]:
        return self.inner.sa_reports(timeout)

    def sa_close(self) -> None:
        self.inner.sa_close()

    def mad_run(self, requests: Sequence[Request], deadline: float,
                times: list[float] | None = None) -> list[bytes | None]:
        answers = self.inner.mad_run(requests, deadline, times)
        recorded = {exchange_key(r): answer_text(a) for r, a in zip(requests, answers)}
        with self._lock:
            if self.mads is None:
                self.mads = {}
            self.mads.update(recorded)
        return answers

    def _file(self, key: str, target: Path, call: Callable[[], str]) -> str:
        """The one wrapper of a recorded file read: its text copied into the bundle, or its errno noted (the
        last answer for a path wins, as for commands) and the error raised on."""
        try:
            data = call()
        except OSError as exc:
            with self._lock:
                self.errors[key] = exc.errno or errno.EIO
            raise
        with self._lock:
            self.errors.pop(key, None)
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_text(data)
        return data

    def _listing(self, key: str, call: Callable[[], list[str]]) -> list[str]:
        """The one wrapper of a recorded directory listing: the names, or the errno, noted; the error raised on."""
        try:
            names = call()
        except OSError as exc:
            with self._lock:
                self.listings[key] = exc.errno or errno.EIO
            raise
        with self._lock:
            self.listings[key] = names
        return names

    def read(self, root: str, rel: str) -> str:
        return self._file(f"{root}/{rel}", self.dir / "files" / root / rel, lambda: self.inner.read(root, rel))

    def read_many(self, root: str, rels: Sequence[str]) -> list[str | OSError]:
        return [read_answer(self.read, root, rel) for rel in rels]

    def listdir(self, root: str, rel: str) -> list[str]:
        return self._listing(f"{root}/{rel}", lambda: self.inner.listdir(root, rel))

    def realpath(self, root: str, rel: str) -> str:
        real = self.inner.realpath(root, rel)
        with self._lock:
            self.realpaths[f"{root}/{rel}"] = real
        return real

    def nvml_gpus(self) -> list[dict[str, Any]]:
        try:
            gpus = self.inner.nvml_gpus()
        except Exception as exc:
            with self._lock:
                self.nvml_error = {"unavailable": isinstance(exc, NvmlUnavailable), "message": str(exc)}
            raise
        with self._lock:
            self.nvml = [dict(g) for g in gpus]
        return gpus

    def read_host_file(self, path: str) -> str:
        rel = _host_rel(path)
        return self._file(f"host/{rel}", self.dir / "files" / "host" / rel, lambda: self.inner.read_host_file(path))

    def list_host_dir(self, path: str) -> list[str]:
        return self._listing(f"host/{_host_rel(path)}", lambda: self.inner.list_host_dir(path))

    def hostname(self) -> str:
        name = self.inner.hostname()
        with self._lock:
            self.meta["hostname"] = name
        return name

    def save(self) -> Path:
        manifest = {
            "bundle_version": BUNDLE_VERSION, "created": time.time(), **self.meta,
            "commands": self.commands, "read_errors": self.errors,
            "listings": self.listings, "realpaths": self.realpaths, "programs": self.programs,
        }
        if self.nvml is not None:
            manifest["nvml"] = self.nvml
        if self.nvml_error is not None:
            manifest["nvml_error"] = self.nvml_error
        if self.mads is not None:
            manifest["mad"] = self.mads
        if self.mad_error is not None:
            manifest["mad_error"] = self.mad_error
        path = self.dir / "bundle.json"
        path.write_text(json.dumps(manifest, indent=1, sort_keys=True))
        return path

    def close_unread(self, root: str, rel: str) -> None:
        self.inner.close_unread(root, rel)

    def commit_file(self, tmp: str, final: str) -> None:
        self.inner.commit_file(tmp, final)

    def kill_tools(self) -> None:
        self.inner.kill_tools()

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


class ReplayIO(_Unrecorded):
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
        self._commands: dict[str, dict[str, Any]] = {}
        for c in manifest.get("commands", []):
            self._commands[_cmd_key(c["argv"])] = c     # the last recording of an argv wins
        self._errors = manifest.get("read_errors", {})
        self._listings = manifest.get("listings", {})
        self._realpaths: dict[str, str] = manifest.get("realpaths", {})
        self._programs: dict[str, str | None] = manifest.get("programs", {})
        self._mads: dict[str, str | None] | None = manifest.get("mad")

    def which(self, program: str) -> str | None:
        """Whether the recorded host had the program: as recorded; in a bundle without that
        record, missing only when every recorded run of it was "command not found"."""
        if program in self._programs:
            return self._programs[program]
        runs = [c for c in self._commands.values() if c["argv"][:1] == [program]]
        if runs and all(c.get("error") == "not_found" for c in runs):
            return None
        return program

    def run(self, argv: Sequence[str], timeout: float, env: Mapping[str, str] | None = None) -> CommandResult:
        c = self._commands.get(_cmd_key(argv))
        if c is None:
            return CommandResult(tuple(argv), None, "", "not in the bundle", 0.0, "not_recorded")
        return CommandResult(tuple(c["argv"]), c["returncode"], c["stdout"], c["stderr"],
                             c.get("duration", 0.0), c.get("error"), bool(c.get("truncated")))

    def snmp_walks(self, specs: Sequence[WalkSpec], deadline: float, concurrency: int = 16,
                   cancel: threading.Event | None = None) -> list[CommandResult]:
        """Each walk as recorded under its argv; a bundle recorded with net-snmp's tools answers
        with the whole-table walk the tool made (WalkSpec.tool_argv; the parser picks the columns)."""
        out = []
        for spec in specs:
            c = self._commands.get(_cmd_key(spec.argv())) or self._commands.get(_cmd_key(spec.tool_argv()))
            if c is None:
                out.append(CommandResult(spec.argv(), None, "", "not in the bundle", 0.0, "not_recorded"))
            else:
                out.append(CommandResult(tuple(c["argv"]), c["returncode"], c["stdout"], c["stderr"],
                                         c.get("duration", 0.0), c.get("error")))
        return out

    def mad_open(self, settings: MadSettings) -> int:
        """As recorded: the recorded host's reason when no umad port opened there; a bundle without MADs
        (recorded with the tools) has none, and its sweep replays the tools. A bundle's port is never lost
        (epoch 1)."""
        if self._mads is None:
            why = self.manifest.get("mad_error") or "the bundle holds no MAD exchanges"
            raise UmadUnavailable(errno.ENODEV, str(why))
        return 1

    def sa_open(self) -> None:
        """A bundle records no subscription (host.sa): a replayed collector has no subnet manager to report to it."""
        raise UmadUnavailable(errno.ENODEV, "a replayed bundle has no subnet manager to subscribe to")

    def sa_run(self, requests: Sequence[tuple[int, bytes]], timeout: float) -> list[bytes | None]:
        return [None] * len(requests)

    def sa_reports(self, timeout: float) -> list[SaReport]:
        return []

    def sa_close(self) -> None:
        pass

    def mad_run(self, requests: Sequence[Request], deadline: float,
                times: list[float] | None = None) -> list[bytes | None]:
        """Each request's recorded answer; a request not in the bundle is unanswered. No times: a replay's
        answers are all taken at its sweep's end (what it recorded is one answer a request, not when)."""
        mads = self._mads or {}
        return [answer_bytes(mads.get(exchange_key(r))) for r in requests]

    def read(self, root: str, rel: str) -> str:
        key = f"{root}/{rel}"
        if key in self._errors:
            code = self._errors[key]
            raise OSError(code, os.strerror(code), key)
        return (self.dir / "files" / root / rel).read_text()

    def read_many(self, root: str, rels: Sequence[str]) -> list[str | OSError]:
        return [read_answer(self.read, root, rel) for rel in rels]

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

    def nvml_gpus(self) -> list[dict[str, Any]]:
        """The recorded NVML answer; no "nvml" key means no GPUs."""
        err = self.manifest.get("nvml_error")
        if err:
            raise (NvmlUnavailable if err.get("unavailable") else NvmlError)(err.get("message", "NVML error"))
        return [dict(g) for g in self.manifest.get("nvml", [])]

    def read_host_file(self, path: str) -> str:
        rel = _host_rel(path)
        key = f"host/{rel}"
        if key in self._errors:
            code = self._errors[key]
            raise OSError(code, os.strerror(code), path)
        return (self.dir / "files" / "host" / rel).read_text()

    def list_host_dir(self, path: str) -> list[str]:
        key = f"host/{_host_rel(path)}"
        got = self._listings.get(key)
        if isinstance(got, int):
            raise OSError(got, os.strerror(got), path)
        if got is None:
            raise OSError(errno.ENOENT, "directory not in the bundle", path)
        return list(got)

    def hostname(self) -> str:
        """The recorded host's name (bundles record it in their metadata)."""
        return str(self.manifest.get("hostname") or "")

    def close_unread(self, root: str, rel: str) -> None:
        pass

    def commit_file(self, tmp: str, final: str) -> None:
        pass            # a replayed tool wrote nothing

    def kill_tools(self) -> None:
        pass            # a replayed tool is no process

    def close(self) -> None:
        pass
