"""Tests for fabricmon.parsers.ethtool."""

from __future__ import annotations

from pathlib import Path

import pytest

from fabricmon.parsers.errors import ParseError
from fabricmon.parsers.ethtool import (
    CURATED_ERROR_COUNTERS,
    RoceNetdevStats,
    curate_roce_stats,
    parse_ethtool_stats,
)
from helpers import CAPTURES, FIXTURES, skip_without_captures

HERE = FIXTURES / "ethtool"
CAPTURED = CAPTURES / "ethtool"


def fixture(name: str) -> str:
    return (HERE / name).read_text()


# --- parse_ethtool_stats ------------------------------------------------------


def test_parses_mlx5_dump() -> None:
    text = fixture("mlx5_pfc_prio3.txt")
    stats = parse_ethtool_stats(text)
    assert len(stats) == len(text.splitlines()) - 1  # every line but the header
    assert stats["rx_packets"] == 918273645
    assert stats["tx_bytes"] == 6998123456789
    assert stats["rx_vport_unicast_packets"] == 918100020
    assert stats["ch0_events"] == 6890123
    assert stats["rx_prio3_pause_duration"] == 8841
    assert all(isinstance(v, int) for v in stats.values())


def test_duplicate_keys_last_wins_and_names_with_spaces() -> None:
    text = (
        "NIC statistics:\n"
        "     rx_discards_phy: 1\n"
        "     tx errors (total): 7\n"
        "     port.rx_dropped: 12\n"
        "     rx_discards_phy: 9\n"
    )
    assert parse_ethtool_stats(text) == {
        "rx_discards_phy": 9,
        "tx errors (total)": 7,
        "port.rx_dropped": 12,
    }


def test_non_integer_values_are_skipped() -> None:
    text = (
        "NIC statistics:\n"
        "     rx_packets: 10\n"
        "     link_state: up\n"
        "     fw_ratio: 0.5\n"
        "     hex_value: 0x1f\n"
        "     empty_value: \n"
        "     tx_packets: 20\n"
    )
    assert parse_ethtool_stats(text) == {"rx_packets": 10, "tx_packets": 20}


def test_tolerates_command_echo_blank_lines_and_crlf() -> None:
    text = "# ethtool -S eth3\r\nNIC statistics:\r\n\r\n     rx_packets: 5\r\n"
    assert parse_ethtool_stats(text) == {"rx_packets": 5}


def test_header_only_is_empty_not_an_error() -> None:
    assert parse_ethtool_stats("NIC statistics:\n") == {}


def test_headerless_grep_output_is_accepted() -> None:
    text = "     rx_prio3_pause: 4\n     tx_prio3_pause: 6\n"
    assert parse_ethtool_stats(text) == {"rx_prio3_pause": 4, "tx_prio3_pause": 6}


@pytest.mark.parametrize(
    "text",
    [
        "",
        " \n\n",
        "hello world\n",
        "Cannot get stats strings information: Operation not supported\n",
        "<html><body>502 Bad Gateway</body></html>",
    ],
)
def test_garbage_raises_parse_error(text: str) -> None:
    with pytest.raises(ParseError):
        parse_ethtool_stats(text)


def test_no_stats_available_raises_parse_error() -> None:
    with pytest.raises(ParseError, match="no stats available"):
        parse_ethtool_stats("no stats available\n")


# --- curate_roce_stats --------------------------------------------------------


def test_curated_pfc_on_priority_3() -> None:
    roce = curate_roce_stats(parse_ethtool_stats(fixture("mlx5_pfc_prio3.txt")))
    assert roce.pause == {(3, "rx"): 1533, (3, "tx"): 2387}
    assert roce.pause_duration_us == {(3, "rx"): 8841, (3, "tx"): 12904}
    assert roce.pause_transitions == {(3, "rx"): 702}
    assert roce.pause_storm == {"warning": 0, "error": 0}
    assert roce.errors == {
        "rx_out_of_buffer": 17,
        "rx_crc_errors_phy": 3,
        "rx_symbol_err_phy": 0,
        "rx_discards_phy": 42,
        "link_down_events_phy": 1,
        "rx_prio0_discards": 0,
        "rx_prio3_discards": 5,
    }
    assert not roce.is_empty()


def test_curated_pause_storm() -> None:
    roce = curate_roce_stats(parse_ethtool_stats(fixture("mlx5_pause_storm.txt")))
    assert roce.pause_storm == {"warning": 14, "error": 2}
    assert roce.pause == {(3, "rx"): 310, (3, "tx"): 98123001, (4, "rx"): 0, (4, "tx"): 454}
    assert roce.pause_duration_us[(3, "tx")] == 812334567
    assert roce.pause_transitions == {(3, "rx"): 155, (4, "rx"): 0}
    assert roce.errors["rx_discards_phy"] == 1207734
    assert roce.errors["rx_prio3_discards"] == 1207001
    assert roce.errors["rx_out_of_buffer"] == 80412


def test_curation_keeps_nothing_else() -> None:
    stats = parse_ethtool_stats(fixture("mlx5_pfc_prio3.txt"))
    roce = curate_roce_stats(stats)
    kept = set(roce.errors)
    assert kept <= set(CURATED_ERROR_COUNTERS) | {f"rx_prio{p}_discards" for p in range(8)}
    for unrelated in ("rx_packets", "tx_bytes", "rx_vport_unicast_packets", "ch0_events",
                      "rx_pause_ctrl_phy", "rx_prio3_bytes", "tx_discards_phy"):
        assert unrelated in stats
        assert unrelated not in kept
    total = (len(roce.pause) + len(roce.pause_duration_us) + len(roce.pause_transitions)
             + len(roce.pause_storm) + len(roce.errors))
    assert total == 14


def test_curation_ignores_global_pause_and_bad_priorities() -> None:
    roce = curate_roce_stats({
        "rx_global_pause": 1, "tx_global_pause_duration": 2, "rx_prio8_pause": 3,
        "rx_prio3_pause_extra": 4, "tx_prio10_discards": 5, "rx_prio7_pause": 6,
    })
    assert roce == RoceNetdevStats(pause={(7, "rx"): 6})


def test_absent_keys_stay_absent() -> None:
    roce = curate_roce_stats({"rx_prio3_pause": 1})
    assert roce.pause == {(3, "rx"): 1}
    assert roce.pause_duration_us == {} and roce.pause_storm == {} and roce.errors == {}
    assert curate_roce_stats({}).is_empty()


def test_real_e1000e_capture_parses_with_no_roce_data() -> None:
    path = CAPTURED / "prometheus-node_exporter__eth0_statistics"
    skip_without_captures(path)
    stats = parse_ethtool_stats(path.read_text())
    assert stats["rx_packets"] == 1260062
    assert stats["port.rx_dropped"] == 12028
    assert stats["duplicate metric"] == 1 and stats["duplicate_metric"] == 2
    assert len(stats) == 16
    assert curate_roce_stats(stats).is_empty()
    assert curate_roce_stats(stats) == RoceNetdevStats()
