"""The umad header the engine writes itself (host/umad.pack_header): the kernel's struct ib_user_mad_hdr
(include/uapi/rdma/ib_user_mad.h) as libibumad's umad_send and umad_set_addr fill it."""

from __future__ import annotations

import ctypes
import socket

from fabricmon.host.umad import ADDR_OFFSET, STATUS_OFFSET, pack_header
from helpers import unavailable


class IbUserMadHdr(ctypes.Structure):
    """struct ib_user_mad_hdr, field for field (the uapi header)."""
    _fields_ = [("id", ctypes.c_uint32), ("status", ctypes.c_uint32), ("timeout_ms", ctypes.c_uint32),
                ("retries", ctypes.c_uint32), ("length", ctypes.c_uint32), ("qpn", ctypes.c_uint32),
                ("qkey", ctypes.c_uint32), ("lid", ctypes.c_uint16), ("sl", ctypes.c_uint8),
                ("path_bits", ctypes.c_uint8), ("grh_present", ctypes.c_uint8), ("gid_index", ctypes.c_uint8),
                ("hop_limit", ctypes.c_uint8), ("traffic_class", ctypes.c_uint8), ("gid", ctypes.c_uint8 * 16),
                ("flow_label", ctypes.c_uint32), ("pkey_index", ctypes.c_uint16), ("reserved", ctypes.c_uint8 * 6)]


def test_pack_header_fills_the_kernels_header() -> None:
    assert ctypes.sizeof(IbUserMadHdr) == 64
    assert IbUserMadHdr.status.offset == STATUS_OFFSET and IbUserMadHdr.qpn.offset == ADDR_OFFSET
    buf = bytearray(b"\xff" * 64)
    pack_header(buf, 0, agent=3, timeout_ms=200, retries=1, lid=0x1234, qp=1, qkey=0x80010000, sl=2)
    h = IbUserMadHdr.from_buffer_copy(buf)
    assert (h.id, h.status, h.timeout_ms, h.retries) == (3, 0, 200, 1)          # host order, as umad_send
    assert socket.ntohl(h.qpn) == 1 and socket.ntohl(h.qkey) == 0x80010000     # network order, as umad_set_addr
    assert socket.ntohs(h.lid) == 0x1234 and h.sl == 2


def test_pack_header_addresses_as_libibumads_umad_set_addr() -> None:
    try:
        lib = ctypes.CDLL("libibumad.so.3")
    except OSError:
        # a system package (rdma-core's libibumad3, which infiniband-diags pulls in): skipped without it,
        # failed under $CI, which installs it
        unavailable("libibumad.so.3 is not installed (rdma-core's libibumad3)")
    lib.umad_set_addr.argtypes = [ctypes.c_void_p, ctypes.c_int, ctypes.c_int, ctypes.c_int, ctypes.c_int]
    for lid, qp, qkey, sl in ((5, 1, 0x80010000, 0), (0xBFFF, 0, 0, 0), (1, 1, 0x80010000, 3)):
        theirs = ctypes.create_string_buffer(64)
        lib.umad_set_addr(theirs, lid, qp, sl, qkey)
        ours = bytearray(64)
        pack_header(ours, 0, 0, 0, 0, lid, qp, qkey, sl)
        assert ours[ADDR_OFFSET:ADDR_OFFSET + 11] == theirs.raw[ADDR_OFFSET:ADDR_OFFSET + 11]
