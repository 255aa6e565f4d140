"""MAD encoders and decoders on bytes laid out by hand from the IBTA spec's offsets (not from the codec's
own structs), so a wrong offset in the codec fails here."""

from __future__ import annotations

from pathlib import Path

import pytest

from fabricmon.model.link_ability import LinkAbility, best_common
from fabricmon.sources.infiniband.mad import codec

D = 64                                   # attribute data offset (SMP and PerfMgt)


def answer(cls: int, attr: int, mod: int = 0, status: int = 0, tid: int = 0x1234_0000_0000_0007) -> bytearray:
    mad = bytearray(256)
    mad[0], mad[1], mad[2], mad[3] = 1, cls, 1, 0x81                  # base version, class, version, GetResp
    mad[4:6] = status.to_bytes(2, "big")
    mad[8:16] = tid.to_bytes(8, "big")
    mad[16:18] = attr.to_bytes(2, "big")
    mad[20:24] = mod.to_bytes(4, "big")
    return mad


def test_get_requests_carry_class_attribute_modifier_and_port_select() -> None:
    m = codec.encode_port_counters(255, 0xABCDEF01)
    assert len(m) == 256
    assert (m[0], m[1], m[2], m[3]) == (1, 0x04, 1, 0x01)             # PerfMgt Get
    assert m[12:16] == bytes.fromhex("ABCDEF01")
    assert m[16:18] == b"\x00\x12" and m[20:24] == b"\0\0\0\0"
    assert m[D + 1] == 255                                             # PortSelect
    e = codec.encode_port_counters_ext(7, 1)
    assert e[16:18] == b"\x00\x1d" and e[D + 1] == 7
    p = codec.encode_port_info(33, 2)
    assert (p[1], p[3]) == (0x01, 0x01) and p[16:18] == b"\x00\x15" and p[20:24] == (33).to_bytes(4, "big")
    assert p[24:32] == bytes(8)                                        # M_Key 0
    assert codec.encode_class_port_info(3)[16:18] == b"\x00\x01"
    assert codec.tid_low(answer(4, 0x12, tid=0x00000001_00000099)) == 0x99


def test_port_counters_fields_at_their_spec_offsets() -> None:
    m = answer(0x04, 0x12)
    m[D + 1] = 255
    m[D + 4:D + 6] = (65535).to_bytes(2, "big")          # SymbolErrorCounter, saturated
    m[D + 6] = 3                                         # LinkErrorRecoveryCounter
    m[D + 7] = 255                                       # LinkDownedCounter
    m[D + 8:D + 10] = (10).to_bytes(2, "big")            # PortRcvErrors
    m[D + 10:D + 12] = (11).to_bytes(2, "big")           # PortRcvRemotePhysicalErrors
    m[D + 12:D + 14] = (12).to_bytes(2, "big")           # PortRcvSwitchRelayErrors
    m[D + 14:D + 16] = (13).to_bytes(2, "big")           # PortXmitDiscards
    m[D + 16], m[D + 17] = 14, 15                        # Xmit/RcvConstraintErrors
    m[D + 19] = 0x9A                                     # LocalLinkIntegrity 9 (high nibble), ExcessiveBufferOverrun 10
    m[D + 20:D + 22] = (77).to_bytes(2, "big")           # QP1Dropped (not exported)
    m[D + 22:D + 24] = (16).to_bytes(2, "big")           # VL15Dropped
    m[D + 24:D + 28] = (1000).to_bytes(4, "big")         # PortXmitData
    m[D + 28:D + 32] = (2000).to_bytes(4, "big")         # PortRcvData
    m[D + 32:D + 36] = (30).to_bytes(4, "big")           # PortXmitPkts
    m[D + 36:D + 40] = (40).to_bytes(4, "big")           # PortRcvPkts
    m[D + 40:D + 44] = (0xFFFFFFFF).to_bytes(4, "big")   # PortXmitWait
    sel, v = codec.decode_port_counters(bytes(m))
    assert sel == 255
    assert v == {
        "symbol_errors": 65535, "link_error_recovery": 3, "link_downed": 255, "receive_errors": 10,
        "receive_remote_physical_errors": 11, "receive_switch_relay_errors": 12, "transmit_discards": 13,
        "transmit_constraint_errors": 14, "receive_constraint_errors": 15, "local_link_integrity_errors": 9,
        "excessive_buffer_overrun_errors": 10, "vl15_dropped": 16, "transmit_bytes": 1000, "receive_bytes": 2000,
        "transmit_packets": 30, "receive_packets": 40, "transmit_wait": 0xFFFFFFFF,
    }


def test_port_counters_extended_are_64_bit_from_byte_8() -> None:
    m = answer(0x04, 0x1D)
    m[D + 1] = 5
    for i, name in enumerate(codec.PCE_NAMES):
        m[D + 8 + 8 * i:D + 16 + 8 * i] = ((1 << 40) + i).to_bytes(8, "big")
    sel, v = codec.decode_port_counters_ext(bytes(m))
    assert sel == 5
    assert v == {name: (1 << 40) + i for i, name in enumerate(codec.PCE_NAMES)}
    assert v["transmit_bytes"] == (1 << 40) and v["receive_multicast_packets"] == (1 << 40) + 7


def test_class_port_info_capability_mask() -> None:
    m = answer(0x04, 0x01)
    m[D + 2:D + 4] = (codec.CAP_ALL_PORT_SELECT | codec.CAP_EXT_WIDTH | codec.CAP_XMIT_WAIT).to_bytes(2, "big")
    cap = codec.decode_class_port_info(bytes(m))
    assert cap & codec.CAP_ALL_PORT_SELECT and cap & codec.CAP_EXT_WIDTH and cap == 0x1300


@pytest.mark.parametrize("b32,b33,b35,b62,width,up,speed,state", [
    (0x54, 0x52, 0x00, 0x40, 0x02, True, "HDR", 4),     # Active, LinkUp, 4X, ext HDR
    (0x51, 0x23, 0x00, 0x00, 0x02, False, None, 1),     # Down, Polling
    (0x52, 0x52, 0x40, 0x00, 0x01, True, "QDR", 2),     # Init (cable there, SM not done): up
    (0x54, 0x32, 0x00, 0x80, 0x10, False, "NDR", 4),    # Active but Disabled phys: not up; 2X NDR
])
def test_port_info_state_width_speed(b32, b33, b35, b62, width, up, speed, state) -> None:
    m = answer(0x01, 0x15, mod=9, status=0x8000)       # an SMP's D bit alone is no error
    m[D + 31], m[D + 32], m[D + 33], m[D + 35], m[D + 62] = width, b32, b33, b35, b62
    st = codec.decode_port_info(bytes(m))
    assert st.port == 9 and st.state == state and st.up is up and st.speed == speed
    assert st.width == codec.WIDTHS[width]
    # the sweep's decoder (ten bytes looked up) agrees
    assert codec.decode_port_link(bytes(m))[:3] == (up, codec.WIDTHS[width], speed)


def test_node_info_and_description() -> None:
    m = answer(0x01, 0x11)
    m[D:D + 4] = bytes((1, 1, 2, 41))
    m[D + 4:D + 12] = (0x0C42A10300A9B000).to_bytes(8, "big")
    m[D + 12:D + 20] = (0x0C42A10300A9B026).to_bytes(8, "big")
    m[D + 20:D + 28] = (0x0C42A10300A9B026).to_bytes(8, "big")
    m[D + 39] = 0
    ni = codec.decode_node_info(bytes(m))
    assert (ni.node_type, ni.nports, ni.node_guid) == (2, 41, "0c42a10300a9b026")
    d = answer(0x01, 0x10)
    d[D:D + 18] = b"MF0;sw01:QM8700/U1"
    assert codec.decode_node_desc(bytes(d)) == "MF0;sw01:QM8700/U1"


def test_wrong_answers_raise() -> None:
    with pytest.raises(codec.MadError, match="status"):
        codec.decode_port_counters(bytes(answer(0x04, 0x12, status=0x000C)))     # unsupported attribute
    with pytest.raises(codec.MadError, match="attribute"):
        codec.decode_port_counters(bytes(answer(0x04, 0x1D)))
    with pytest.raises(codec.MadError, match="short"):
        codec.decode_port_info(bytes(answer(0x01, 0x15))[:80])
    req = codec.encode_port_info(1, 1)
    with pytest.raises(codec.MadError, match="GetResp"):
        codec.decode_port_info(bytes(req))
    for bad, why in ((bytes(answer(0x01, 0x15))[:80], "short"), (bytes(req), "GetResp"),
                     (bytes(answer(0x01, 0x15, status=0x801C)), "status"), (bytes(answer(0x01, 0x11)), "attribute")):
        with pytest.raises(codec.MadError, match=why):
            codec.decode_port_link(bad)
    for bad, why in ((bytes(answer(0x04, 0x1D))[:100], "short"), (bytes(codec.encode_port_counters_ext(1, 1)), "GetResp"),
                     (bytes(answer(0x04, 0x1D, status=0x000C)), "status"), (bytes(answer(0x04, 0x12)), "attribute")):
        with pytest.raises(codec.MadError, match=why):
            codec.port_counters_ext_values(bad)


# --- PortInfo: what a port may train at (fixtures: ibsim's own bytes, tests/fixtures/portinfo/README.md) ---

PORTINFO = Path(__file__).parents[2] / "fixtures" / "portinfo"


def smpdump(name: str, port: int = 1) -> bytes:
    """A GetResp(PortInfo) carrying the 64 data bytes `smpdump -L` printed."""
    data = bytes.fromhex("".join((PORTINFO / f"{name}.smpdump").read_text().split()))
    assert len(data) == 64
    mad = answer(0x01, 0x15, mod=port)
    mad[D:D + 64] = data
    return bytes(mad)


def test_port_link_decodes_ibsim_edr_host_on_an_hdr_leaf() -> None:
    up, width, speed, sw = codec.decode_port_link(smpdump("hdr-edr-switch-port"))
    assert (up, width, speed) == (True, 4, "EDR")
    assert sw == LinkAbility(frozenset({1, 4}), frozenset({"SDR", "DDR", "QDR", "FDR", "EDR"}))
    ca = codec.decode_port_link(smpdump("hdr-edr-ca-port"))[3]
    assert ca == sw and best_common(sw, ca) == (4, "EDR")          # running at the best both ends enable
    up, width, speed, hdr = codec.decode_port_link(smpdump("hdr-edr-switch-port2", 2))
    assert (width, speed) == (4, "HDR") and "HDR" in hdr.speeds and best_common(hdr, ca) == (4, "EDR")
    assert codec.decode_port_info(smpdump("hdr-edr-switch-port")).speed == "EDR"


def test_port_link_decodes_ibsim_ddr_host_on_a_qdr_leaf() -> None:
    up, width, speed, ca = codec.decode_port_link(smpdump("qdr-ddr-ca-port"))
    assert (up, width, speed) == (True, 4, "DDR") and ca.speeds == {"SDR", "DDR"}     # no extended speed
    qdr = codec.decode_port_link(smpdump("qdr-ddr-switch-port2", 2))[3]
    assert qdr.speeds == {"SDR", "DDR", "QDR"} and best_common(qdr, ca) == (4, "DDR")


def test_port_link_fields_at_their_spec_offsets() -> None:
    m = answer(0x01, 0x15, mod=9)
    m[D + 29], m[D + 30], m[D + 31] = 0x13, 0x03, 0x02    # width enabled 1X/4X/2X, supported 1X/4X, active 4X
    m[D + 32], m[D + 33] = 0x74, 0x50                     # speed supported SDR-QDR, Active; LinkUp
    m[D + 35] = 0x47                                      # speed active QDR, enabled SDR-QDR
    m[D + 56] = 0b0_01_01_001                             # XDR active2, supported2, enabled2
    m[D + 62], m[D + 63] = 0x4F, 0x0C                     # ext active HDR, supported FDR-NDR; enabled HDR, NDR
    up, width, speed, ab = codec.decode_port_link(bytes(m))
    assert up and width == 4 and speed == "XDR"           # ExtActive2 wins over ExtActive
    assert ab.widths == {1, 4} and ab.speeds == {"SDR", "DDR", "QDR", "HDR", "NDR", "XDR"}   # 2X not supported
    m[D + 56], m[D + 63] = 0, 30                          # no XDR; extended speeds disabled
    assert codec.decode_port_link(bytes(m))[3].speeds == {"SDR", "DDR", "QDR"}
    assert codec.decode_port_link(bytes(m))[2] == "HDR"
    m[D + 62] = 0x00                                      # no extended speed: LinkSpeedActive
    assert codec.decode_port_link(bytes(m))[2] == "QDR"
    m[D + 33] = 0x20                                      # Polling: down
    assert codec.decode_port_link(bytes(m))[0] is False
    with pytest.raises(codec.MadError):
        codec.decode_port_link(bytes(answer(0x01, 0x11)))
