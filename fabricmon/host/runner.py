"""Run external tools safely: an argv list (never a shell), a timeout that kills the whole
process group (and any descendant that escaped it), and a result that never raises."""

from __future__ import annotations

import atexit
import itertools
import os
import re
import shutil
import signal
import subprocess
import tempfile
import threading
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

import psutil

# What is kept of a tool's stdout and stderr each (the pipes are read whole either way). A SuperPOD-class
# fabric's `dump_fts` prints about 40 MB, a 2,000-switch fabric's about five times that; output cut at
# this bound is marked (CommandResult.truncated), an error of the source, never taken as complete.
MAX_OUTPUT = 256 * 1024 * 1024
# Where tools are looked for after PATH: infiniband-diags installs into /usr/sbin, which is not on
# an ordinary user's PATH on Debian.
DEFAULT_TOOL_DIRS = ("/usr/local/sbin", "/usr/sbin", "/sbin")
# Every process we start carries this variable (inherited by its whole tree), so that on a
# timeout we can find descendants that both left our process group (setsid) and were
# re-parented away from us when their parent exited.
RUN_MARK = "FABRICMON_RUN_ID"
_run_ids = itertools.count(1)
# Tools in flight: pid -> (run id, owner). kill_all() kills them when the daemon stops, so that a
# SIGTERM never waits for a hung tool's timeout and never leaves one behind; kill_all(owner) only
# those one owner (a HostIO) started, so that one pipeline stopping never kills the tools of another
# in the same process (the demo's node daemon and collectors).
_live: dict[int, tuple[str, object]] = {}
_live_lock = threading.Lock()


@dataclass(frozen=True, slots=True)
class CommandResult:
    argv: tuple[str, ...]
    returncode: int | None
    stdout: str
    stderr: str
    duration: float
    error: str | None = None   # None, "not_found", "timeout", "exec_error", "not_recorded"
    truncated: bool = False    # stdout or stderr was longer than MAX_OUTPUT and is cut there
    finished: float | None = None   # time.monotonic() when the answer was complete (None: not known, a replay)

    @property
    def ok(self) -> bool:
        return self.error is None and self.returncode == 0

    def describe(self) -> str:
        """One line for logs and findings."""
        cmd = " ".join(self.argv)
        if self.error == "not_found":
            return f"{cmd}: command not found"
        if self.error == "timeout":
            return f"{cmd}: timed out after {self.duration:.1f}s (process group killed)"
        if self.error:
            return f"{cmd}: {self.error}: {self.stderr.strip()[:200]}"
        if self.truncated:
            return f"{cmd}: output longer than {MAX_OUTPUT / 2**20:g} MiB, cut there (not read whole)"
        tail = (self.stderr.strip() or self.stdout.strip()).splitlines()[-1:] or [""]
        return f"{cmd}: exit {self.returncode}: {tail[0][:200]}"


def _kill_tree(proc: subprocess.Popen[bytes], descendants: list[psutil.Process]) -> None:
    try:
        os.killpg(proc.pid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        pass
    for child in descendants:      # children that called setsid() left our group
        try:
            child.kill()
        except psutil.Error:
            pass


def _descendants(pid: int) -> list[psutil.Process]:
    try:
        return psutil.Process(pid).children(recursive=True)
    except psutil.Error:
        return []


def processes_with_environment(key: str, value: str) -> list[psutil.Process]:
    """Live processes, other than this one, whose environment has key=value (those whose environment
    cannot be read, another user's, are left out)."""
    found = []
    me = os.getpid()
    for p in psutil.process_iter():
        if p.pid == me:
            continue
        try:
            if p.environ().get(key) == value:
                found.append(p)
        except (psutil.Error, OSError):
            continue
    return found


def _marked(token: str) -> list[psutil.Process]:
    """Live processes whose environment carries our run id (only scanned after a timeout)."""
    return processes_with_environment(RUN_MARK, token)


def resolve_program(program: str, path: str | None = None,
                    extra_dirs: Sequence[str] = DEFAULT_TOOL_DIRS) -> str | None:
    """The executable a program name stands for: a name with a slash as it is (if executable),
    otherwise the first match on `path` (a PATH string; os.defpath when None), then in
    `extra_dirs`. None when not found. No shell is involved."""
    if not program:
        return None
    if os.sep in program:
        return program if os.path.isfile(program) and os.access(program, os.X_OK) else None
    found = shutil.which(program, path=path if path is not None else os.defpath)
    if found is None and extra_dirs:
        found = shutil.which(program, path=os.pathsep.join(extra_dirs))
    return os.path.abspath(found) if found else None


_scratch: tuple[int, str | None] | None = None       # (pid, the tools' working directory)


def scratch_dir() -> str | None:
    """The tools' working directory: a private temporary directory of this process, removed when
    it exits. A tool may leave files in its working directory (under the umad2sim preload each
    one writes ./sys-<pid>/, left behind when it is killed), so tools never run in the caller's
    (a checkout, an operator's home). None (the caller's) when no temporary directory can be made."""
    global _scratch
    with _live_lock:
        if _scratch is None or _scratch[0] != os.getpid() or (_scratch[1] and not os.path.isdir(_scratch[1])):
            # first use, a forked child, or a temp cleaner (systemd-tmpfiles) removed it: a new one
            path: str | None = None
            try:
                made = tempfile.mkdtemp(prefix="fabricmon-tools-")
            except OSError:
                pass
            else:
                atexit.register(_remove_scratch, os.getpid(), made)
                path = made
            _scratch = (os.getpid(), path)
        return _scratch[1]


def _remove_scratch(pid: int, path: str) -> None:
    if os.getpid() == pid:          # not in a forked child
        shutil.rmtree(path, ignore_errors=True)


def run_command(argv: Sequence[str], timeout: float, env: Mapping[str, str] | None = None,
                executable: str | None = None, owner: object = None, cwd: str | None = None) -> CommandResult:
    """Run argv with a timeout. Never raises for tool failures; see CommandResult.error.
    `executable`, when given, is the resolved program file; argv (argv[0] included) is passed
    and reported unchanged. `owner`: who kill_all(owner) stops it for; `cwd`: the tool's working
    directory (default: this process's scratch directory, never the caller's)."""
    args = tuple(argv)
    start = time.monotonic()
    token = f"{os.getpid()}-{next(_run_ids)}-{time.time_ns()}"
    child_env = dict(env) if env is not None else dict(os.environ)
    child_env[RUN_MARK] = token
    if timeout <= 0:
        return CommandResult(args, None, "", "", 0.0, "timeout")
    if executable is None and args and os.sep in args[0]:
        executable = args[0]
    if executable is not None and not os.path.isabs(executable):
        executable = os.path.abspath(executable)        # relative to our directory, not the tool's
    try:
        proc = subprocess.Popen(
            args, executable=executable, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
            start_new_session=True, env=child_env, close_fds=True, cwd=cwd or scratch_dir(),
        )
    except FileNotFoundError:
        return CommandResult(args, None, "", "", time.monotonic() - start, "not_found")
    except OSError as exc:
        return CommandResult(args, None, "", str(exc), time.monotonic() - start, "exec_error")
    with _live_lock:
        _live[proc.pid] = (token, owner)
    try:
        return _wait(proc, args, timeout, token, start)
    finally:
        with _live_lock:
            _live.pop(proc.pid, None)


def kill_all(owner: object = None) -> None:
    """Kill every tool in flight (and its descendants), or only those `owner` started: the daemon
    (or that pipeline) is stopping. Each killed run returns to its caller at once."""
    with _live_lock:
        live = [(pid, token) for pid, (token, who) in _live.items() if owner is None or who is owner]
    for pid, token in live:
        try:
            os.killpg(pid, signal.SIGKILL)
        except (ProcessLookupError, PermissionError):
            pass
        for child in _marked(token):
            try:
                child.kill()
            except psutil.Error:
                pass


def _wait(proc: subprocess.Popen[bytes], args: tuple[str, ...], timeout: float, token: str,
          start: float) -> CommandResult:
    try:
        out, err = proc.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        _kill_tree(proc, _descendants(proc.pid))
        # Orphans that called setsid() and whose parent already exited are neither in our
        # group nor our descendants: find them by the run id in their environment.
        _kill_tree(proc, _marked(token))
        try:
            out, err = proc.communicate(timeout=2)
        except subprocess.TimeoutExpired:    # a descendant still holds the pipes
            proc.kill()
            out, err = b"", b""
            proc.wait()
        return CommandResult(args, None, out[:MAX_OUTPUT].decode("utf-8", "replace"),
                             err[:MAX_OUTPUT].decode("utf-8", "replace"),
                             time.monotonic() - start, "timeout", _cut(out, err))
    done = time.monotonic()             # its whole answer read (CommandResult.finished)
    # The tool exited; a child it left behind (daemonised, pipes closed) must not outlive it.
    try:
        os.killpg(proc.pid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        pass
    return CommandResult(args, proc.returncode, out[:MAX_OUTPUT].decode("utf-8", "replace"),
                         err[:MAX_OUTPUT].decode("utf-8", "replace"), done - start,
                         truncated=_cut(out, err), finished=done)


def _cut(out: bytes, err: bytes) -> bool:
    return len(out) > MAX_OUTPUT or len(err) > MAX_OUTPUT


_SAFE_ARG = re.compile(r"^[A-Za-z0-9_.:\-]+$")


def safe_arg(value: str) -> str:
    """Validate a command argument built from a discovered name (device, GUID, netdev)."""
    if not _SAFE_ARG.match(value) or value.startswith("-"):
        raise ValueError(f"refusing unsafe command argument {value!r}")
    return value
