"""parsers.ethtool_module against real `ethtool -m` recordings (tests/fixtures/ethtool_module,
PROVENANCE.md there): SFP (SFF-8472) and QSFP28/QSFP+ (SFF-8636)."""

from __future__ import annotations

import math

import pytest

from fabricmon.model.optics import DBM_FLOOR, mw_to_dbm
from fabricmon.parsers.errors import ParseError
from fabricmon.parsers.ethtool_module import module_class, parse_module
from helpers import FIXTURES

HERE = FIXTURES / "ethtool_module"


def load(name: str):
    return parse_module((HERE / name).read_text())


def test_qsfp28_four_lanes_with_module_thresholds() -> None:
    m = load("qsfp28_sr4_mellanox.txt")
    assert m.module_class == "QSFP"
    assert (m.vendor, m.part_number, m.serial) == ("Mellanox", "MMA1B00-C100D", "MT1708FT01255")
    assert sorted(m.lanes) == [1, 2, 3, 4]
    assert [m.lanes[n].rx_power_mw for n in (1, 2, 3, 4)] == [0.9720, 0.9798, 1.1340, 1.1340]
    # dBm from mW agrees with what ethtool printed, to its two decimals
    for n, printed in zip((1, 2, 3, 4), (-0.12, -0.09, 0.55, 0.55)):
        assert m.lanes[n].rx_power_dbm == pytest.approx(printed, abs=0.005)
    assert [m.lanes[n].tx_power_mw for n in (1, 2, 3, 4)] == [1.3924, 1.3181, 1.3378, 1.3397]
    assert all(m.lanes[n].tx_bias_ma == 6.75 for n in (1, 2, 3, 4))
    assert m.temperature_c == 30.56 and m.voltage_v == 3.235
    rx = m.limits["rx_power"]
    assert (rx.high_alarm, rx.low_alarm, rx.high_warning, rx.low_warning) == (5.40, -13.31, 2.40, -10.30)
    assert m.limits["tx_power"].low_alarm == -11.40
    assert (m.limits["tx_bias"].high_alarm, m.limits["tx_bias"].low_alarm) == (8.5, 5.492)
    assert (m.limits["temperature"].high_alarm, m.limits["temperature"].low_warning) == (80.0, 0.0)
    assert m.limits["voltage"].low_alarm == 3.1
    assert m.raised == ()


def test_sfp_one_lane_with_module_thresholds() -> None:
    m = load("sfp_1000base_sx_jdsu.txt")
    assert m.module_class == "SFP"
    assert m.vendor == "JDSU" and m.part_number == "PLRXPL-VI-S24-22"
    assert list(m.lanes) == [1]
    ln = m.lanes[1]
    assert (ln.rx_power_mw, ln.tx_power_mw, ln.tx_bias_ma) == (0.3195, 0.3186, 21.348)
    assert ln.rx_power_dbm == pytest.approx(-4.96, abs=0.005)
    assert m.temperature_c == 41.70 and m.voltage_v == 3.2947
    assert (m.limits["rx_power"].low_alarm, m.limits["rx_power"].low_warning) == (-20.0, -16.99)
    assert m.limits["tx_bias"].high_alarm == 10.0


def test_dark_qsfp_reads_zero_not_inf() -> None:
    m = load("qsfp_plus_sr4_finisar_dark.txt")
    assert m.module_class == "QSFP" and m.has_readings
    assert all(m.lanes[n].rx_power_mw == 0.0 for n in (1, 2, 3, 4))
    assert all(m.lanes[n].rx_power_dbm == DBM_FLOOR for n in (1, 2, 3, 4))
    assert all(m.lanes[n].transmitter_off for n in (1, 2, 3, 4))


def test_raised_flags_are_kept() -> None:
    text = (HERE / "qsfp28_sr4_mellanox.txt").read_text().replace(
        "Laser rx power low alarm    (Channel 2)   : Off", "Laser rx power low alarm    (Channel 2)   : On")
    assert load_text(text).raised == ("Laser rx power low alarm (Channel 2)",)


def load_text(text: str):
    return parse_module(text)


def test_no_diagnostics_is_a_record_without_readings() -> None:
    text = "\tIdentifier : 0x03 (SFP)\n\tVendor name : FS\n\tOptical diagnostics support : No\n"
    m = parse_module(text)
    assert m.module_class == "SFP" and not m.has_readings and m.lanes == {}


def test_cmis_style_lines_zero_based_channels_and_dbm_only() -> None:
    text = "\n".join([
        "\tIdentifier                                : 0x18 (QSFP-DD Double Density 8X Pluggable Transceiver)",
        "\tModule temperature                        : 36.6 degrees C / 97.9 degrees F",
        *[f"\tRcvr signal avg optical power (Channel {i}) : {v} dBm" for i, v in enumerate((3.1, 2.7, -9.0))],
        "\tLaser rx power low alarm threshold        : -10.4 dBm",
    ])
    m = parse_module(text)
    assert m.module_class == "CMIS"
    assert sorted(m.lanes) == [1, 2, 3]
    assert m.lanes[3].rx_power_dbm == pytest.approx(-9.0, abs=1e-9)
    assert m.limits["rx_power"].low_alarm == -10.4


@pytest.mark.parametrize("text", ["", "netlink error: Operation not supported\n", "[{\"identifier\": 3}]"])
def test_not_module_information(text: str) -> None:
    with pytest.raises(ParseError):
        parse_module(text)


def test_module_class_by_identifier() -> None:
    assert module_class("0x03 (SFP)") == "SFP"
    assert module_class("0x11 (QSFP28)") == "QSFP"
    assert module_class("0x1e (QSFP+ or later with CMIS)") == "CMIS"
    assert module_class("") == "unknown"
    assert mw_to_dbm(1.0) == 0.0 and math.isclose(mw_to_dbm(0.5), -3.0103, abs_tol=1e-3)
