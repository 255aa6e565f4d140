"""The simulator only: umad2sim's connection to ibsim, attached again after ibsim restarted.

umad2sim (ibsim's LD_PRELOAD library) connects the process to ibsim once, when the process first opens a
umad device (umad2sim.c `umad2sim_init` -> sim_client.c `sim_init`), and never again: two abstract
datagram sockets, `@<IBSIM_SOCKNAME>:ctl<pid>` connected to ibsim's `@<name>:ctl` (the control
requests) and `@<name>:in<pid>` connected to `@<name>:out<client id>` (the MADs both ways). When ibsim
exits, the first MAD written fails with ECONNREFUSED and every later one with ENOTCONN ("Transport
endpoint is not connected"), and closing and opening the umad port (umad_close_port, umad_open_port)
does not help: umad2sim serves the new descriptor from the same dead connection. A restarted ibsim
(the same socket name) knows no client until one sends it SIM_CTL_CONNECT.

`reattach()` does what `sim_init` did, on umad2sim's own two sockets (found by their names among the
process's descriptors; the socket calls are not interposed): it connects the control socket to ibsim's
again, sends SIM_CTL_CONNECT (this process's pid, SIM_HOST, SIM_SET_ISSM as umad2sim sent them) and
connects the data socket to the `out` socket of the client id ibsim answers. umad2sim's receiving thread
reads the same socket and carries on; its agents and descriptors are its own and were never lost.

The client id umad2sim keeps (it sends it with SIM_CTL_DISCONNECT when the process exits) is the old
simulator's, which the new one may have given to another client: at exit this module disconnects its own
id and leaves umad2sim's control socket connected to nothing, so that umad2sim's stale DISCONNECT reaches
no one (umad2sim prints "ctl failed(write)" for it).

Structures (ibsim include/ibsim.h): struct sim_ctl {u32 magic, clientid, type, len; u8 data[64]};
struct sim_client_info {u32 id, qp, issm; char nodeid[32]}; SIM_MAGIC 0xdeadbeef; names as umad2sim's
make_name() makes them: a NUL, the name, and a NUL counted in the address length. The inet mode
(IBSIM_SERVER_NAME) is not handled."""

from __future__ import annotations

import atexit
import ctypes
import errno
import os
import select
import socket
import struct
import threading
from collections.abc import Iterator, Mapping
from contextlib import contextmanager

SIM_MAGIC = 0xDEADBEEF
CTL_ERROR, CTL_CONNECT, CTL_DISCONNECT = 0, 1, 2
_CTL = struct.Struct("=IIII64s")            # struct sim_ctl
_INFO = struct.Struct("=III32s")            # struct sim_client_info
DEFAULT_SOCKNAME = "sim"                    # SIM_BASENAME: IBSIM_SOCKNAME unset

_lock = threading.Lock()
_client: int | None = None                  # the client id this module attached as (None: never)


def preloaded(environ: Mapping[str, str] | None = None) -> bool:
    """Whether this process runs under umad2sim (its LD_PRELOAD names it)."""
    return "umad2sim" in (os.environ if environ is None else environ).get("LD_PRELOAD", "")


def _addr(name: str) -> bytes:
    return b"\0" + name.encode() + b"\0"


@contextmanager
def _own_sockets() -> Iterator[tuple[socket.socket | None, socket.socket | None]]:
    """umad2sim's control and data sockets of this process, wrapped without a dup (a dup'd descriptor of
    1024 or more would be umad2sim's to close) and detached again after: (None, None) before umad2sim
    connected (no umad device opened yet)."""
    base = os.environ.get("IBSIM_SOCKNAME") or DEFAULT_SOCKNAME
    pid = os.getpid()
    want = {_addr(f"{base}:ctl{pid}").rstrip(b"\0"): 0, _addr(f"{base}:in{pid}").rstrip(b"\0"): 1}
    found: list[socket.socket | None] = [None, None]
    wrapped: list[socket.socket] = []
    try:
        for name in os.listdir("/proc/self/fd"):
            fd = int(name)
            try:
                if not os.readlink(f"/proc/self/fd/{fd}").startswith("socket:"):
                    continue
                blocking = os.get_blocking(fd)
                s = socket.socket(fileno=fd)
            except OSError:
                continue
            wrapped.append(s)
            if os.get_blocking(fd) != blocking:         # a process-wide default timeout made it non-blocking
                os.set_blocking(fd, blocking)
            if s.family != socket.AF_UNIX or s.type != socket.SOCK_DGRAM:
                continue
            try:
                bound = s.getsockname()
            except OSError:
                continue
            key = (bound if isinstance(bound, bytes) else bound.encode()).rstrip(b"\0")
            if key in want:
                found[want[key]] = s
        yield found[0], found[1]
    finally:
        for s in wrapped:
            s.detach()


def reattach(timeout: float = 2.0) -> int | None:
    """Connect this process's umad2sim to the ibsim listening on IBSIM_SOCKNAME again, where its connection
    is gone (the data socket has no peer: a MAD written to the simulator that exited dropped it). Returns
    the new client id, or None where there was nothing to do (umad2sim not connected yet, or still
    connected). Raises OSError: ECONNREFUSED while no simulator listens, ETIMEDOUT when it does not answer,
    ECONNREFUSED when it refuses the client (SIM_HOST unknown, its 10 clients taken)."""
    global _client
    base = os.environ.get("IBSIM_SOCKNAME") or DEFAULT_SOCKNAME
    if os.environ.get("IBSIM_SERVER_NAME"):
        raise OSError(errno.EOPNOTSUPP, "umad2sim over the network (IBSIM_SERVER_NAME) cannot be re-attached")
    with _lock, _own_sockets() as (ctl, data):
        if ctl is None or data is None:
            return None
        try:
            data.getpeername()
            return None                                 # still connected: the loss was something else
        except OSError:
            pass
        try:
            ctl.connect(_addr(f"{base}:ctl"))
        except OSError as exc:
            raise OSError(exc.errno, f"no simulator listens on IBSIM_SOCKNAME={base} ({exc.strerror})") from None
        _drain(ctl)                                     # a late answer umad2sim's next request would read
        node = os.environ.get("SIM_HOST", "").encode()[:31]
        info = _INFO.pack(os.getpid(), 0, 1 if os.environ.get("SIM_SET_ISSM") else 0, node)
        ctl.send(_CTL.pack(SIM_MAGIC, 0, CTL_CONNECT, _INFO.size, info))
        poller = select.poll()
        poller.register(ctl.fileno(), select.POLLIN)
        if not poller.poll(int(timeout * 1000)):
            raise OSError(errno.ETIMEDOUT, f"the simulator on IBSIM_SOCKNAME={base} did not answer within {timeout:g} s")
        answer = ctl.recv(_CTL.size, socket.MSG_DONTWAIT)
        if len(answer) < _CTL.size or _CTL.unpack(answer)[0] != SIM_MAGIC:
            raise OSError(errno.EPROTO, f"the simulator on IBSIM_SOCKNAME={base} answered no control message")
        _magic, _id, kind, _len, payload = _CTL.unpack(answer)
        if kind == CTL_ERROR:
            raise OSError(errno.ECONNREFUSED, f"the simulator on IBSIM_SOCKNAME={base} refused this client "
                                              f"(SIM_HOST {node.decode() or '(default)'!r} unknown, or 10 clients attached)")
        client: int = _INFO.unpack(payload[:_INFO.size])[0]
        data.connect(_addr(f"{base}:out{client}"))
        if _client is None:
            atexit.register(_detach_at_exit)
        _client = client
        return client


def _drain(s: socket.socket) -> None:
    while True:
        try:
            s.recv(_CTL.size, socket.MSG_DONTWAIT)
        except OSError:
            return


def _detach_at_exit() -> None:
    """Disconnect the client id this module attached as and leave umad2sim's control socket connected to
    nothing (Python's atexit runs before umad2sim's C one, which would disconnect its stale id)."""
    with _lock, _own_sockets() as (ctl, _data):
        if ctl is None or _client is None:
            return
        try:
            ctl.send(_CTL.pack(SIM_MAGIC, _client, CTL_DISCONNECT, 0, b""))
            poller = select.poll()
            poller.register(ctl.fileno(), select.POLLIN)
            if poller.poll(500):
                _drain(ctl)
        except OSError:
            pass
        unspec = (ctypes.c_ushort * 8)(socket.AF_UNSPEC)     # connect(AF_UNSPEC) dissolves a datagram association
        ctypes.CDLL(None, use_errno=True).connect(ctl.fileno(), unspec, ctypes.sizeof(ctypes.c_ushort))


__all__ = ["preloaded", "reattach"]
