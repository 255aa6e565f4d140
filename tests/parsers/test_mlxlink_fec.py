"""mlxlink -m -c, ethtool -I --show-fec and the mlx5 phy counters of ethtool -S: format-exact fixtures
(tests/fixtures/mlxlink, tests/fixtures/ethtool_fec, their PROVENANCE.md) parse into raw, effective and
symbol error counters, the FEC mode, the module's identity and medium; bad input costs only itself."""

from __future__ import annotations

import pytest

from fabricmon.model.ber import fec_mode, medium_of, settle_rs
from fabricmon.parsers.errors import ParseError
from fabricmon.parsers.ethtool import parse_ethtool_stats
from fabricmon.parsers.ethtool_fec import parse_show_fec
from fabricmon.parsers.mlxlink import parse_ber, parse_mlxlink
from fabricmon.parsers.phy_ber import phy_counters
from helpers import FIXTURES

MLX = FIXTURES / "mlxlink"
FEC = FIXTURES / "ethtool_fec"


def test_ndr_infiniband_port_with_an_optical_module() -> None:
    r = parse_mlxlink((MLX / "ndr_ib_optical.txt").read_text(), "mlx5_0", 1)
    assert (r.state, r.speed, r.width) == ("Active", "IB-NDR", 4)
    assert r.fec == "rs544_plr" and r.fec_text.startswith("Interleaved_Standard_RS_FEC_PLR")
    assert r.counters.counters == {"raw_errors_lane0": 18233, "raw_errors_lane1": 20117, "raw_errors_lane2": 17651,
                                   "raw_errors_lane3": 19054, "raw_errors": 75055, "effective_errors": 0,
                                   "symbol_errors": 0}
    assert r.raw_ber == pytest.approx(3e-10) and r.effective_ber == 0.0 and r.symbol_ber == 0.0
    assert r.raw_ber_lanes == {0: pytest.approx(3e-10), 1: pytest.approx(3e-10), 2: pytest.approx(3e-10),
                               3: pytest.approx(3e-10)}
    assert r.since_clear_minutes == 4310.7 and r.link_down == 0
    assert r.module is not None and (r.module.serial, r.module.vendor, r.module.part_number) == \
        ("MT2330FT01234", "Mellanox", "MMA4Z00-NS")
    assert r.module.medium == "optical" and r.module.kind == "OSFP" and r.module.length_m == 50


def test_hdr_dac_with_ansi_colours_and_the_older_padding() -> None:
    r = parse_mlxlink((MLX / "hdr_ib_dac_ansi.txt").read_text(), "mlx5_3", 1)
    assert r.state == "Active" and r.width == 2 and r.fec == "rs544_plr"
    assert r.counters.get("raw_errors") == 4100733 + 391002 and r.counters.lanes() == {0: 4100733, 1: 391002}
    assert r.raw_ber == pytest.approx(2e-8) and r.symbol_ber == 0.0
    assert r.module is not None and r.module.medium == "copper" and r.module.serial == "MT2104VS07777"
    assert r.link_down is None          # an InfiniBand port of this version prints no Link Down Counter


def test_roce_port_rs528_and_its_link_counters() -> None:
    r = parse_mlxlink((MLX / "roce_100g_dac.txt").read_text(), "mlx5_0", 1)
    assert r.fec == "rs528" and r.speed == "100G"
    assert "symbol_errors" not in r.counters.counters          # Ethernet: no symbol lines
    assert r.counters.get("effective_errors") == 0 and r.counters.get("raw_errors") == 22
    assert r.link_down == 1 and r.module is not None and r.module.medium == "copper"


@pytest.mark.parametrize("text", ["", "   \n", (MLX / "not_mlxlink.txt").read_text(), "garbage\x00\xff\n" * 3])
def test_not_mlxlink_output_is_a_parse_error(text: str) -> None:
    with pytest.raises(ParseError):
        parse_mlxlink(text)


def test_a_truncated_answer_keeps_what_it_has() -> None:
    text = (MLX / "ndr_ib_optical.txt").read_text()
    r = parse_mlxlink(text[: text.index("Module Info")])
    assert r.fec == "rs544_plr" and r.counters.counters == {} and r.module is None and r.note


@pytest.mark.parametrize("text,value", [("2E-9", 2e-9), ("15E-255", 0.0), ("\x1b[32m1E-13\x1b[0m", 1e-13),
                                        ("N/A", None), ("", None), ("1.5E-7", 1.5e-7), ("abc", None)])
def test_ber_values(text: str, value: float | None) -> None:
    got = parse_ber(text)
    assert got == (pytest.approx(value) if value else value)


@pytest.mark.parametrize("text,mode", [
    ("No FEC", "none"), ("Firecode FEC", "firecode"), ("Standard RS-FEC - RS(528,514)", "rs528"),
    ("Standard LL RS-FEC - RS(271,257)", "ll_rs"), ("Interleaved Quad RS-FEC - (544,514)", "rs544"),
    ("Interleaved Quad RS-FEC + PLR - (546,516)", "rs544_plr"), ("Standard_RS-FEC - (544,514)", "rs544"),
    ("RS-FEC - (544,514) + PLR", "rs544_plr"), ("LL-FEC - (271,257) + PLR", "ll_plr"),
    ("Ethernet_Consortium_LL_50G_RS_FEC_PLR -(272,257+1)", "ll_plr"),
    ("Ethernet_Consortium_LL_50G_RS_FEC- (272,257+1)", "ll_rs"), ("RS", "rs"), ("BaseR", "firecode"),
    ("Off", "none"), ("None", "none"), ("LLRS", "ll_rs"), ("something new", "unknown"), ("", "unknown")])
def test_fec_modes_as_mlxlink_and_ethtool_spell_them(text: str, mode: str) -> None:
    assert fec_mode(text) == mode


def test_ethtool_rs_is_settled_by_the_lane_rate() -> None:
    assert settle_rs("rs", 100.0) == "rs544" and settle_rs("rs", 25.0) == "rs528" and settle_rs("rs", None) == "rs"


@pytest.mark.parametrize("texts,medium", [
    (("Passive copper cable", "Copper cable, passive, unequalized"), "copper"),
    (("Copper cable, linear active equalizers",), "active_copper"), (("0x00 (850 nm VCSEL)",), "optical"),
    (("Optical Module (separated)",), "optical"), (("N/A",), "unknown"), (("",), "unknown")])
def test_media(texts: tuple[str, ...], medium: str) -> None:
    assert medium_of(*texts) == medium


def test_show_fec_rs_totals_and_baser_lanes() -> None:
    r = parse_show_fec((FEC / "mlx5_rs_totals.txt").read_text())
    assert r.netdev == "ens1f0np0" and r.active == "rs" and r.configured == ("Auto", "RS", "BaseR")
    assert r.counters.counters == {"fec_corrected_blocks": 7301229, "fec_uncorrectable_blocks": 0} and r.has_statistics
    r = parse_show_fec((FEC / "lanes_baser.txt").read_text())
    assert r.active == "firecode" and r.lanes_corrected == {0: 400, 1: 401, 2: 2, 3: 400}
    assert r.lanes_uncorrectable == {0: 0, 1: 0, 2: 9, 3: 0} and r.counters.get("fec_uncorrectable_blocks") == 9


def test_show_fec_histogram_of_ethtool_6_18() -> None:
    r = parse_show_fec((FEC / "histogram_6_18.txt").read_text())
    assert r.lanes_corrected == {0: 24501, 1: 24633, 2: 24420, 3: 24558}
    assert r.counters.bins() == {(0, 0): 912345678, (1, 3): 97001, (4, 7): 1100, (8, 15): 11}
    # the patch's code spells the bins fec_symbols_err_
    r2 = parse_show_fec((FEC / "histogram_6_18.txt").read_text().replace("fec_symbol_err_", "fec_symbols_err_"))
    assert r2.counters.bins() == r.counters.bins()


def test_show_fec_without_statistics_and_garbage() -> None:
    r = parse_show_fec((FEC / "no_fec_no_stats.txt").read_text())
    assert r.active == "none" and not r.has_statistics and r.counters.counters == {}
    for bad in ("", "netlink error: Operation not supported\n", "\x00\x01"):
        with pytest.raises(ParseError):
            parse_show_fec(bad)


def test_mlx5_phy_counters_of_ethtool_s() -> None:
    text = ("NIC statistics:\n     rx_bytes: 10\n     rx_corrected_bits_phy: 5120\n     rx_pcs_symbol_err_phy: 0\n"
            "     rx_err_lane_0_phy: 1000\n     rx_err_lane_1_phy: 2000\n     rx_err_lane_2_phy: 1500\n"
            "     rx_err_lane_3_phy: 620\n     rx_symbol_err_phy: 0\n     rx_bits_phy: 123456789012345\n")
    c = phy_counters(parse_ethtool_stats(text))
    assert c is not None and c.counters == {"corrected_bits": 5120, "effective_errors": 0, "symbol_errors": 0,
                                            "received_bits": 123456789012345, "raw_errors_lane0": 1000,
                                            "raw_errors_lane1": 2000, "raw_errors_lane2": 1500,
                                            "raw_errors_lane3": 620, "raw_errors": 5120}
    assert phy_counters({"rx_bytes": 1}) is None


def test_show_fec_capabilities_per_speed() -> None:
    r = parse_mlxlink((MLX / "roce_100g_show_fec.txt").read_text(), "mlx5_0", 1)
    assert r.fec == "rs528" and r.counters.counters == {}
    assert r.fec_capability["100G"] == "0x7 (No-FEC, Firecode_FEC, RS-FEC (528,514))"
    assert r.fec_capability["10G_40G"] == "0x3 (No-FEC, Firecode_FEC)" and len(r.fec_capability) == 4
