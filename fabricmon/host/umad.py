"""rdma-core's libibumad through ctypes: one umad port, agents registered per class, send and receive.

libibumad's ABI (umad.h) is stable across distributions: `umad_init`, `umad_get_cas_names`,
`umad_open_port`, `umad_register`, `umad_size`, `umad_get_mad`, `umad_unregister` and `umad_close_port` open
and close the port and say how its buffers are laid out. A umad buffer is the kernel's `struct
ib_user_mad` header (agent id, status, timeout_ms, retries, length, the address:
include/uapi/rdma/ib_user_mad.h) followed by the 256-byte MAD; `umad_size()` is the header's size and
`umad_get_mad()` where the MAD starts.

Sending and receiving are the kernel's umad ABI itself (Documentation/infiniband/user_mad.rst), as
libibumad's own `umad_send` and `umad_recv` do them (rdma-core libibumad/umad.c): a send is one
`write()` of a whole umad buffer whose header the caller filled (`pack_header`: what `umad_send`
and `umad_set_addr` write), a receive one `read()` of a buffer of the header and 256 bytes, and a
wait one `poll()` for POLLIN. They are made here with `os.write`, `os.read` and `select.poll` on the
port's descriptor rather than through ctypes (a ctypes call with its argument conversion costs more
Python than the system call itself, twice a MAD). `umad_open_port` opens the device O_RDWR |
O_NONBLOCK, so `read()` answers at once, with EAGAIN when nothing is queued (`UmadPort.reader` raises
it): the engine reads what is queued without a `poll()` per answer and waits only when nothing is.

Under ibsim the process must run with LD_PRELOAD=umad2sim (and IBSIM_SOCKNAME): umad2sim interposes
libc's open/ioctl/read/write/poll as libibumad calls them, so the port opened here is the
simulator's (docs/mad-engine.md, "Under the simulator"); CPython's `os.read`, `os.write` and
`select.poll` call the same libc `read`, `write` and `poll`, so they reach it too (umad2sim's `read`
of an empty queue returns -EWOULDBLOCK without setting errno: OSError with errno 0, read as nothing
queued too). Without the preload, on a host with no /dev/infiniband/umad*, `UmadPort.open` raises
UmadUnavailable and the sweep uses the infiniband-diags tools instead. The engine over this port,
and the HostIO methods that reach it, are host/mad.py.

No privilege beyond the umad device: the port is opened read/write as the tools open it; QP0 (SMPs)
needs what `smpquery` needs, nothing more."""

from __future__ import annotations

import ctypes
import ctypes.util
import errno
import functools
import glob
import os
import select
import struct
import threading
from collections.abc import Callable
from typing import NoReturn

LIB_NAMES = ("libibumad.so.3", "libibumad.so")
CA_NAME_LEN = 20                     # UMAD_CA_NAME_LEN
MAX_CAS = 32


UMAD_GLOB = "/dev/infiniband/umad*"      # the MAD device nodes (the kernel's ib_umad, one per HCA port)


def umad_devices(pattern: str = UMAD_GLOB) -> tuple[list[str], list[str]]:
    """The umad device nodes there are, and those this process may open read-write (os.access): what a
    tool that printed "can't open UMAD port" could not say (missing, or not permitted)."""
    devices = sorted(glob.glob(pattern))
    return devices, [d for d in devices if os.access(d, os.R_OK | os.W_OK)]


class UmadUnavailable(OSError):
    """No umad port can be opened here (no libibumad, no CA, or the device refused)."""


_lib = None
_lib_lock = threading.Lock()


def load() -> ctypes.CDLL:
    """libibumad, loaded once, with its prototypes declared. Raises UmadUnavailable."""
    global _lib
    with _lib_lock:
        if _lib is not None:
            return _lib
        last = None
        for name in (*LIB_NAMES, ctypes.util.find_library("ibumad")):
            if not name:
                continue
            try:
                lib = ctypes.CDLL(name, use_errno=True)
                break
            except OSError as exc:
                last = exc
        else:
            raise UmadUnavailable(errno.ENOENT, f"libibumad not found ({last})")
        c_int, c_void_p, c_char_p = ctypes.c_int, ctypes.c_void_p, ctypes.c_char_p
        lib.umad_init.argtypes, lib.umad_init.restype = [], c_int
        lib.umad_get_cas_names.argtypes = [ctypes.c_char_p, c_int]
        lib.umad_get_cas_names.restype = c_int
        lib.umad_open_port.argtypes, lib.umad_open_port.restype = [c_char_p, c_int], c_int
        lib.umad_close_port.argtypes, lib.umad_close_port.restype = [c_int], c_int
        lib.umad_register.argtypes = [c_int, c_int, c_int, ctypes.c_uint8, c_void_p]
        lib.umad_register.restype = c_int
        lib.umad_unregister.argtypes, lib.umad_unregister.restype = [c_int, c_int], c_int
        lib.umad_size.argtypes, lib.umad_size.restype = [], ctypes.c_size_t
        lib.umad_get_mad.argtypes, lib.umad_get_mad.restype = [c_void_p], c_void_p
        if lib.umad_init() < 0:
            raise UmadUnavailable(errno.EIO, "umad_init failed")
        _lib = lib
        return lib


def ca_names() -> list[str]:
    lib = load()
    buf = ctypes.create_string_buffer(CA_NAME_LEN * MAX_CAS)
    n = lib.umad_get_cas_names(buf, MAX_CAS)
    if n < 0:
        raise UmadUnavailable(errno.EIO, "umad_get_cas_names failed")
    return [buf.raw[i * CA_NAME_LEN:(i + 1) * CA_NAME_LEN].split(b"\0", 1)[0].decode() for i in range(n)]


# struct ib_user_mad_hdr (the kernel's uapi, rdma/ib_user_mad.h): __u32 id (the agent) at 0, __u32 status
# at 4, __u32 timeout_ms at 8, __u32 retries at 12, __u32 length at 16 (host order); __be32 qpn at 20,
# __be32 qkey at 24, __be16 lid at 28, __u8 sl at 30 (what umad_set_addr fills)
_ADDR = struct.Struct(">IIHB")
_HEAD = struct.Struct("=IIII")       # id, status, timeout_ms, retries (what umad_send fills)
ADDR_OFFSET = 20
STATUS_OFFSET = 4                    # the header's status (host order: what umad_status returns)


def pack_header(buf: bytearray, offset: int, agent: int, timeout_ms: int, retries: int, lid: int, qp: int,
                qkey: int, sl: int = 0) -> None:
    """Fill the umad header at `offset` of `buf` as umad_send (the agent, the kernel's timeout and
    retries) and umad_set_addr (the address) fill it; the status starts at 0."""
    _HEAD.pack_into(buf, offset, agent, 0, timeout_ms, retries)
    _ADDR.pack_into(buf, offset + ADDR_OFFSET, qp, qkey, lid, sl)


class UmadPort:
    """One open umad port with an agent per management class. Not thread-safe: one engine uses it."""

    def __init__(self, lib: ctypes.CDLL, fd: int, ca: str, port: int) -> None:
        self.lib, self.fd, self.ca, self.port = lib, fd, ca, port
        self.agents: dict[tuple[int, int], int] = {}          # (class, version) -> agent id
        self.hdr = int(lib.umad_size())
        self.size = self.hdr + 256
        probe = ctypes.create_string_buffer(self.size)
        mad_at = lib.umad_get_mad(probe)
        self.mad_offset = (mad_at - ctypes.addressof(probe)) if mad_at else self.hdr
        # a send: one write() of a whole umad buffer (pack_header, then the 256-byte MAD), as umad_send
        # makes it, returning the bytes written; the kernel times the request out after its timeout_ms x
        # (retries+1) and answers it with status ETIMEDOUT; raises OSError (EAGAIN, ENOBUFS, ENOMEM: the
        # device's send queue is full). A receive: one read() of a queued answer's whole umad buffer
        # (the header, its status at STATUS_OFFSET, then the MAD); never waits (the device is
        # non-blocking): raises OSError when nothing is queued (EAGAIN; errno 0 under umad2sim) or the
        # read failed. Bound to os.write and os.read on the descriptor: no Python frame a MAD
        self.writer: Callable[[bytes | bytearray], int] = functools.partial(os.write, fd)
        self.reader: Callable[[], bytes] = functools.partial(os.read, fd, self.size)
        poller = select.poll()
        poller.register(fd, select.POLLIN)
        self._poll = poller.poll
        # umad_open_port opens the device non-blocking (rdma-core libibumad/umad.c); should a libibumad
        # not, reading without a poll first would block: make it so (umad2sim's descriptors are not the
        # kernel's and never block: fcntl fails on them and nothing is changed)
        try:
            if os.get_blocking(fd):
                os.set_blocking(fd, False)
        except OSError:
            pass

    @classmethod
    def open(cls, ca: str = "", port: int = 0) -> "UmadPort":
        """Open `ca` port `port` (""/0: the first CA and its first active port, as the tools do).
        Raises UmadUnavailable."""
        lib = load()
        if not ca:
            names = ca_names()
            if not names:
                raise UmadUnavailable(errno.ENODEV, "no InfiniBand CA with a umad device")
        fd = lib.umad_open_port(ca.encode() if ca else None, port)
        if fd < 0:
            raise UmadUnavailable(-fd if fd < -1 else errno.ENODEV,
                                  f"umad_open_port({ca or 'default'}, {port}) failed: {os.strerror(-fd) if fd < -1 else fd}")
        return cls(lib, fd, ca, port)

    def register(self, mgmt_class: int, version: int = 1) -> int:
        key = (mgmt_class, version)
        if key not in self.agents:
            agent = self.lib.umad_register(self.fd, mgmt_class, version, 0, None)
            if agent < 0:
                raise UmadUnavailable(errno.EPERM, f"umad_register(class 0x{mgmt_class:02x}) failed: {agent}")
            self.agents[key] = agent
        return self.agents[key]

    def register_agent(self, mgmt_class: int, version: int, methods: tuple[int, ...] = (),
                       rmpp_version: int = 0) -> int:
        """An agent that also receives the unsolicited MADs of `methods` (umad_register's method mask: the
        kernel hands it every request of this class and method that reaches the port, e.g. SubnAdmReport
        for class 0x03). Raises UmadUnavailable where the kernel refuses (another agent holds the method)."""
        mask = (ctypes.c_ulong * (16 // ctypes.sizeof(ctypes.c_ulong)))()
        bits = 8 * ctypes.sizeof(ctypes.c_ulong)
        for m in methods:
            mask[m // bits] |= 1 << (m % bits)
        agent: int = self.lib.umad_register(self.fd, mgmt_class, version, rmpp_version, mask if methods else None)
        if agent < 0:
            raise UmadUnavailable(-agent if agent < -1 else errno.EPERM,
                                  f"umad_register(class 0x{mgmt_class:02x}, methods {list(methods)}) failed: "
                                  f"{os.strerror(-agent) if agent < -1 else agent}")
        self.agents[(mgmt_class, version)] = agent
        return agent

    def wait(self, timeout_ms: int) -> bool:
        """Whether an answer is queued within timeout_ms (at least 1 ms): one poll()."""
        return bool(self._poll(timeout_ms if timeout_ms > 1 else 1))

    def close(self) -> None:
        """Unregister the agents, then close the port. Closing alone unregisters them in the kernel, but
        umad2sim frees only the first agent of a closed descriptor: a port reopened after every loss would
        leak one of its 32 agent slots each time, until umad_register fails. Errors are ignored (a port
        whose device is gone)."""
        if self.fd >= 0:
            self.writer, self.reader = _closed, _closed   # never a stale descriptor (its number is reused)
            for agent in self.agents.values():
                self.lib.umad_unregister(self.fd, agent)
            self.agents.clear()
            self.lib.umad_close_port(self.fd)
            self.fd = -1


def _closed(*_args: object) -> NoReturn:
    raise OSError(errno.EBADF, "umad port closed")
