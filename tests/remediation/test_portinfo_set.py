"""SubnSet(PortInfo) as remediation sends it (sources/infiniband/mad/codec.py encode_port_info_set), on bytes: the
port's own PortInfo as a Get answered it, changed as ibportstate changes it (infiniband-diags ibportstate.c) and
nothing else. (That ibsim takes it, and opensm then routes around the port: tests/remediation/test_isolate_sim.py.)"""

from __future__ import annotations

import pytest

from fabricmon.sources.infiniband.mad import codec


def get_answer() -> bytes:
    """A GetResp(PortInfo) of port 3: LID 0 (a switch's external port has none), SMLID 1, widths 1X|4X enabled,
    supported 1X-12X, active 4X, LinkSpeedSupported SDR-QDR | PortState Active, PortPhysicalState LinkUp |
    LinkDownDefault Polling, LinkSpeedActive QDR | Enabled SDR-QDR, the extended speeds enabled FDR-HDR."""
    mad = bytearray(codec.encode_port_info(3, 0x1234))
    mad[3] = codec.METHOD_GET_RESP
    d = bytearray(64)
    d[0:8] = bytes.fromhex("0102030405060708")     # M_Key
    d[16:18] = (0).to_bytes(2, "big")
    d[18:20] = (1).to_bytes(2, "big")
    d[29], d[30], d[31] = 0x03, 0x1F, 0x02
    d[32] = 0x74                                  # LinkSpeedSupported 7 | PortState 4
    d[33] = 0x52                                  # PortPhysicalState 5 | LinkDownDefaultState 2
    d[35] = 0x47                                  # LinkSpeedActive 4 | LinkSpeedEnabled 7
    d[56] = 0x2F
    d[62], d[63] = 0x47, 0x07
    mad[codec.DATA_OFFSET:codec.DATA_OFFSET + 64] = d
    return bytes(mad)


def test_disable_is_ibportstates_set() -> None:
    cur = get_answer()
    mad = codec.encode_port_info_set(3, 0x77, cur, codec.PHYS_DISABLED)
    h = codec.decode_header(mad)
    assert (h.mgmt_class, h.method, h.attr_id, h.attr_mod, h.tid) == (0x01, 0x02, 0x0015, 3, 0x77)
    d, was = mad[64:128], cur[64:128]
    assert d[16:18] == (0x1234).to_bytes(2, "big")          # an invalid LID replaced, as ibportstate does
    assert d[18:20] == was[18:20]                           # a valid SMLID kept
    assert d[29] == 0                                       # LinkWidthEnabled: no change
    assert d[32] == 0x70                                    # PortState 0 (no change), LinkSpeedSupported kept
    assert d[33] == 0x32                                    # PortPhysicalState Disabled, LinkDownDefault kept
    assert d[35] == 0x40                                    # LinkSpeedEnabled 0, LinkSpeedActive kept
    assert d[56] == 0x28 and d[63] == 0x00 and d[62] == was[62]
    changed = {i for i in range(64) if d[i] != was[i]}
    assert changed == {16, 17, 29, 32, 33, 35, 56, 63}
    assert d[0:8] == was[0:8]                               # the M_Key it read, sent back
    enable = codec.encode_port_info_set(3, 1, cur[64:128], codec.PHYS_POLLING)   # the data alone works too
    assert enable[64 + 33] == 0x22


def test_only_disable_or_poll_and_whole_data() -> None:
    with pytest.raises(ValueError):
        codec.encode_port_info_set(3, 1, get_answer(), codec.PHYS_LINK_UP)
    with pytest.raises(codec.MadError):
        codec.encode_port_info_set(3, 1, b"\0" * 40, codec.PHYS_DISABLED)
