"""What a port may train at, from the tools' text (`smpquery portinfo`, `saquery PIR`), checked against
the same ports' raw bytes (`smpdump`) decoded by the MAD codec: the two paths must agree.
Fixtures: ibsim's own answers on mixed-speed fabrics (tests/fixtures/portinfo/README.md)."""

from __future__ import annotations

from pathlib import Path

from fabricmon.model.link_ability import EXT_DISABLED, LinkAbility, best_common, from_masks
from fabricmon.parsers.portinfo import parse_portinfo, parse_saquery_pir
from fabricmon.sources.infiniband.mad import codec

PORTINFO = Path(__file__).parents[1] / "fixtures" / "portinfo"


def mad(name: str) -> bytes:
    m = bytearray(256)
    m[0], m[1], m[2], m[3], m[17] = 1, 0x01, 1, 0x81, 0x15
    m[64:128] = bytes.fromhex("".join((PORTINFO / f"{name}.smpdump").read_text().split()))
    return bytes(m)


def test_smpquery_text_and_raw_bytes_agree() -> None:
    for name in ("hdr-edr-switch-port", "hdr-edr-ca-port", "qdr-ddr-switch-port", "qdr-ddr-ca-port"):
        st = parse_portinfo((PORTINFO / f"{name}.txt").read_text())
        up, width, speed, ability = codec.decode_port_link(mad(name))
        assert (st.up, st.width, st.speed, st.ability) == (up, width, speed, ability), name
    edr = parse_portinfo((PORTINFO / "hdr-edr-ca-port.txt").read_text())
    assert edr.speed == "EDR" and edr.ability.speeds == {"SDR", "DDR", "QDR", "FDR", "EDR"}
    ddr = parse_portinfo((PORTINFO / "qdr-ddr-ca-port.txt").read_text())
    assert ddr.speed == "DDR" and ddr.ability.speeds == {"SDR", "DDR"} and ddr.ability.widths == {1, 4}


def test_saquery_pir_records_carry_each_ports_ability() -> None:
    recs = parse_saquery_pir((PORTINFO / "saquery-pir.txt").read_text())
    assert set(recs) == {(1, 1), (2, 0)}            # ibsim's SA: node01's port and a switch's port 0
    node01 = recs[(1, 1)]
    assert node01.up and (node01.width, node01.speed) == (4, "EDR")
    assert node01.ability == parse_portinfo((PORTINFO / "hdr-edr-ca-port.txt").read_text()).ability


def test_text_without_the_masks_claims_no_ability() -> None:
    st = parse_portinfo("# Port info: Lid 4 port 6\nLinkState:.......................Active\n"
                        "PhysLinkState:...................LinkUp\n")
    assert st.up and st.ability is None and st.width is None


def test_ability_masks_and_the_best_both_ends_enable() -> None:
    hdr = from_masks(0x03, 0x1F, 0x7, 0x7, 0x7, 0xF)              # 1X/4X; SDR-QDR; FDR-HDR
    assert hdr == LinkAbility(frozenset({1, 4}), frozenset({"SDR", "DDR", "QDR", "FDR", "EDR", "HDR"}))
    edr = from_masks(0x03, 0x1F, 0x7, 0x7, 0x3, 0xF)
    assert best_common(hdr, edr) == (4, "EDR")
    assert best_common(hdr, from_masks(0x01, 0x1F, 0x7, 0x7, 0x7, 0xF)) == (1, "HDR")
    assert from_masks(0x03, 0x1F, 0x7, 0x7, EXT_DISABLED, 0xF).speeds == {"SDR", "DDR", "QDR"}
    assert from_masks(0x0B, 0x03, 0x7, 0x7).widths == {1, 4}        # 12X enabled but not supported
    assert best_common(hdr, None) is None and best_common(hdr, LinkAbility(frozenset(), frozenset())) is None
    assert best_common(hdr, from_masks(0x08, 0x08, 0x7, 0x7)) is None     # no width in common: cannot train
