"""rdma-core's libibumad through ctypes: one umad port, agents registered per class, send and receive.

libibumad's ABI (umad.h) is stable across distributions: `umad_init`, `umad_get_cas_names`,
`umad_open_port`, `umad_register`, `umad_send`, `umad_recv`, `umad_poll`, `umad_size`,
`umad_get_mad`, `umad_set_addr`, `umad_status`. A umad buffer is the kernel's `struct ib_user_mad`
header (agent id, status, timeout_ms, retries, length, the address) followed by the 256-byte MAD;
`umad_size()` is the header's size and `umad_get_mad()` where the MAD starts.

Under ibsim the process must run with LD_PRELOAD=umad2sim (and IBSIM_SOCKNAME): umad2sim interposes
libc's open/ioctl/read/write/poll as libibumad calls them, so the port opened here is the
simulator's (docs/mad-engine.md, "Under the simulator"). Without the preload, on a host with no
/dev/infiniband/umad*, `UmadPort.open` raises UmadUnavailable and the sweep uses the infiniband-diags
tools instead. The engine over this port, and the HostIO methods that reach it, are host/mad.py.

No privilege beyond the umad device: the port is opened read/write as the tools open it; QP0 (SMPs)
needs what `smpquery` needs, nothing more."""

from __future__ import annotations

import ctypes
import ctypes.util
import errno
import os
import struct
import threading

LIB_NAMES = ("libibumad.so.3", "libibumad.so")
CA_NAME_LEN = 20                     # UMAD_CA_NAME_LEN
MAX_CAS = 32


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
        lib.umad_send.argtypes = [c_int, c_int, c_void_p, c_int, c_int, c_int]
        lib.umad_send.restype = c_int
        lib.umad_recv.argtypes = [c_int, c_void_p, ctypes.POINTER(c_int), c_int]
        lib.umad_recv.restype = c_int
        lib.umad_poll.argtypes, lib.umad_poll.restype = [c_int, c_int], c_int
        lib.umad_size.argtypes, lib.umad_size.restype = [], ctypes.c_size_t
        lib.umad_get_mad.argtypes, lib.umad_get_mad.restype = [c_void_p], c_void_p
        lib.umad_set_addr.argtypes = [c_void_p, c_int, c_int, c_int, c_int]
        lib.umad_set_addr.restype = c_int
        lib.umad_status.argtypes, lib.umad_status.restype = [c_void_p], c_int
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


# struct ib_user_mad_hdr (the kernel's uapi, rdma/ib_user_mad.h): __be32 qpn at 20, __be32 qkey at 24,
# __be16 lid at 28, __u8 sl at 30 (what umad_set_addr fills)
_ADDR = struct.Struct(">IIHB")
_STATUS = struct.Struct("=I")        # the header's status (host order) at 4
ADDR_OFFSET = 20


def pack_address(buf: bytearray, offset: int, lid: int, qp: int, qkey: int, sl: int = 0) -> None:
    """Fill a umad header's address at `offset` of `buf`, as umad_set_addr does."""
    _ADDR.pack_into(buf, offset + ADDR_OFFSET, qp, qkey, lid, sl)


class UmadPort:
    """One open umad port with an agent per management class. Not thread-safe: one engine uses it."""

    def __init__(self, lib: ctypes.CDLL, fd: int, ca: str, port: int) -> None:
        self.lib, self.fd, self.ca, self.port = lib, fd, ca, port
        self.agents: dict[tuple[int, int], int] = {}          # (class, version) -> agent id
        self.hdr = int(lib.umad_size())
        self.size = self.hdr + 256
        self._send = ctypes.create_string_buffer(self.size)
        self._recv = ctypes.create_string_buffer(self.size)
        self._len = ctypes.c_int(0)
        self._len_ref = ctypes.byref(self._len)
        self._recv_fn = lib.umad_recv
        mad_at = lib.umad_get_mad(self._send)
        self.mad_offset = (mad_at - ctypes.addressof(self._send)) if mad_at else self.hdr

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

    def send(self, agent: int, mad: bytes, lid: int, qp: int, qkey: int, timeout_ms: int, retries: int = 0) -> None:
        """Send one MAD to `lid` (QP0 for SMPs with Q_Key 0, QP1 for GMPs with the GSI Q_Key). The
        kernel times the request out after timeout_ms x (retries+1) and answers it with status
        ETIMEDOUT. Raises OSError."""
        ctypes.memset(self._send, 0, self.hdr)
        ctypes.memmove(ctypes.addressof(self._send) + self.mad_offset, bytes(mad), len(mad))
        self.lib.umad_set_addr(self._send, lid, qp, 0, qkey)
        rc = self.lib.umad_send(self.fd, agent, self._send, len(mad), timeout_ms, retries)
        if rc < 0:
            err = ctypes.get_errno() or (-rc if rc < -1 else errno.EIO)
            raise OSError(err, f"umad_send: {os.strerror(err)}")

    def send_raw(self, agent: int, address: int, timeout_ms: int, retries: int = 0) -> None:
        """Send the umad buffer at `address` (header with the address filled by the caller, see
        pack_address, then the 256-byte MAD): the engine's batch path, one ctypes call a MAD."""
        if self.lib.umad_send(self.fd, agent, address, 256, timeout_ms, retries) < 0:
            err = ctypes.get_errno() or errno.EIO
            raise OSError(err, f"umad_send: {os.strerror(err)}")

    def recv(self, timeout_ms: int) -> tuple[int, bytes] | None:
        """One answer: (umad status, the MAD's bytes), or None when none came within timeout_ms (at least
        1 ms: libibumad reads without polling, blocking, at 0). The status is the header's u32 at 4
        (what umad_status returns: ETIMEDOUT when the kernel timed the request out)."""
        self._len.value = 256
        if self._recv_fn(self.fd, self._recv, self._len_ref, timeout_ms if timeout_ms > 1 else 1) < 0:
            return None
        n = self._len.value
        o = self.mad_offset
        return _STATUS.unpack_from(self._recv, 4)[0], self._recv[o:o + (n if 0 <= n <= 256 else 0 if n < 0 else 256)]

    def close(self) -> None:
        if self.fd >= 0:
            self.lib.umad_close_port(self.fd)
            self.fd = -1
