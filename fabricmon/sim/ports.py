"""Ports for the services a simulator starts that must be told their port rather than bind port 0
themselves: snmpsimd's UDP endpoints, slurmctld and every slurmd, a test's Prometheus.

A port found by binding port 0 and closing the socket again is free only until someone else takes it:
another service that was handed the same number, or any client socket, which the kernel numbers from
the same range (net.ipv4.ip_local_port_range). With FABRICMON_SIM_PORTS=<a directory> in the environment
(the test suite sets it for every test process), each process draws its ports from a block of its own
below that range instead: it claims the block with an exclusive lock (flock) on a file in that
directory, held until the process exits. Processes that share the directory (two pytest-xdist workers,
two test sessions on one machine, a test and the `fabricmon demo` it runs, whatever its TMPDIR) then
never draw the same port, and the kernel never gives one of them to a client. Without the variable (the
demo, a script of one's own) a port is the kernel's choice, as it always was.
"""

from __future__ import annotations

import fcntl
import os
import socket
import tempfile
import threading
from pathlib import Path

ENV = "FABRICMON_SIM_PORTS"         # the directory of the blocks' lock files
FIRST_PORT = 10000          # the blocks start here (below: well-known services, Slurm's 6817/6818, 9090, ...)
BLOCK = 200                 # ports per process


def lock_dir() -> Path:
    """Where the test suite keeps the blocks' locks: one directory for every user of the machine's ports."""
    return Path(tempfile.gettempdir()) / "fabricmon-sim-ports"


class _Block:
    """The block this process claimed: its first port, the next one to try, the lock's descriptor."""

    def __init__(self, pid: int, first: int, fd: int) -> None:
        self.pid, self.first, self.fd, self.next = pid, first, fd, first


_lock = threading.Lock()
_block: _Block | None = None


def ephemeral_low() -> int:
    """The first port of the kernel's ephemeral range (32768 when it cannot be read)."""
    try:
        return int(Path("/proc/sys/net/ipv4/ip_local_port_range").read_text().split()[0])
    except (OSError, ValueError, IndexError):
        return 32768


def _claim(where: Path) -> _Block:
    """Lock the first free block's file in `where`; the lock goes with the process (or its descriptor)."""
    if not where.is_dir():
        where.mkdir(parents=True, exist_ok=True)
        try:
            os.chmod(where, 0o1777)     # like /tmp: a test's process run as another user claims blocks too
        except OSError:
            pass                        # made by another user meanwhile: theirs to set
    blocks = range(FIRST_PORT, ephemeral_low() - BLOCK + 1, BLOCK)
    for first in blocks:
        fd = os.open(where / f"{first}.lock", os.O_RDONLY | os.O_CREAT | os.O_CLOEXEC, 0o644)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            os.close(fd)
            continue
        return _Block(os.getpid(), first, fd)
    raise RuntimeError(f"{ENV}: all {len(blocks)} port blocks of {BLOCK} below the ephemeral range "
                       f"({FIRST_PORT}-{ephemeral_low() - 1}) are held by other processes ({where})")


def _bindable(port: int) -> bool:
    """Nothing holds this port on 127.0.0.1, over TCP (a listener, or a connection in TIME_WAIT) or UDP."""
    for kind in (socket.SOCK_STREAM, socket.SOCK_DGRAM):
        with socket.socket(socket.AF_INET, kind) as s:
            try:
                s.bind(("127.0.0.1", port))
            except OSError:
                return False
    return True


def _kernel_ports(n: int, kind: int) -> list[int]:
    """n distinct ports the kernel picks (each bound to port 0, held open together while picking)."""
    socks = []
    try:
        for _ in range(n):
            s = socket.socket(socket.AF_INET, kind)
            s.bind(("127.0.0.1", 0))
            socks.append(s)
        return [s.getsockname()[1] for s in socks]
    finally:
        for s in socks:
            s.close()


def free_ports(n: int, kind: int = socket.SOCK_STREAM) -> list[int]:
    """n distinct ports on 127.0.0.1 that are free now, for a service to be told (`kind`: TCP or UDP).
    With FABRICMON_SIM_PORTS set, from this process's own block (module docstring): a port is handed
    out once per pass through the block, and only while neither TCP nor UDP holds it."""
    global _block
    where = os.environ.get(ENV, "").strip()
    if not where:
        return _kernel_ports(n, kind)
    with _lock:
        if _block is None or _block.pid != os.getpid():        # a forked child claims its own block
            _block = _claim(Path(where))
        b, out = _block, []
        for _ in range(2 * BLOCK):                   # twice round: the ports handed out before may be free again
            port = b.next
            b.next = b.first + (b.next + 1 - b.first) % BLOCK
            if port not in out and _bindable(port):
                out.append(port)
                if len(out) == n:
                    return out
        raise RuntimeError(f"{ENV}: {n} free port(s) wanted, {len(out)} found in this process's block "
                           f"{b.first}-{b.first + BLOCK - 1}")


def free_port(kind: int = socket.SOCK_STREAM) -> int:
    """One free port (free_ports)."""
    return free_ports(1, kind)[0]


__all__ = ["ENV", "free_port", "free_ports", "lock_dir"]
