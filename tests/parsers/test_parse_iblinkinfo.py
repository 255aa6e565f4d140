"""Tests for fabricmon.parsers.iblinkinfo."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from fabricmon.model import ibspec
from fabricmon.parsers.errors import ParseError
from fabricmon.parsers.iblinkinfo import parse_iblinkinfo
from helpers import CAPTURES, FIXTURES, skip_without_captures

HERE = FIXTURES / "iblinkinfo"
LEAF = "MF0;ib-leaf-03:MQM9700/U1"
ACTIVE, DOWN, INIT = ibspec.STATE_ACTIVE, 1, 2
LINKUP, POLLING, DISABLED = ibspec.PHYS_LINKUP, 2, 3


def fixture(name: str) -> list:
    return parse_iblinkinfo((HERE / name).read_text())


def by_port(links: list) -> dict:
    return {li.port: li for li in links}


def test_local_ca_ndr_4x() -> None:
    (li,) = fixture("ca_ndr_4x.txt")
    assert (li.lid, li.port) == (112, 1)
    assert li.width == 4
    assert li.lane_signal_gbps == 106.25
    assert li.generation == "NDR"
    assert (li.state_id, li.phys_state_id) == (ACTIVE, LINKUP)
    assert (li.remote_lid, li.remote_port, li.remote_desc) == (37, 17, LEAF)
    assert li.could_be_width is None and li.could_be_generation is None
    assert li.node_desc == "dgx-b07 mlx5_0"


def test_1x_link_that_could_be_4x() -> None:
    (li,) = fixture("ca_ndr_1x_could_be_4x.txt")
    assert (li.width, li.generation) == (1, "NDR")
    assert li.could_be_width == 4
    assert li.could_be_generation is None
    assert li.node_desc == "dgx-b07 mlx5_3"


def test_could_be_width_and_speed() -> None:
    (li,) = fixture("ca_hdr_2x_could_be_4x_ndr.txt")
    assert (li.width, li.generation, li.lane_signal_gbps) == (2, "HDR", 53.125)
    assert li.could_be_width == 4
    assert li.could_be_generation == "NDR"       # "(Could be 4X Could be 106.25 Gbps)"


def test_init_state_without_sm() -> None:
    (li,) = fixture("ca_init_no_sm.txt")
    assert (li.state_id, li.phys_state_id) == (INIT, LINKUP)
    assert li.lid == 0
    assert (li.width, li.generation) == (4, "NDR")


def test_switch_with_down_polling_disabled_and_every_generation() -> None:
    links = by_port(fixture("switch_mixed_states.txt"))
    assert sorted(links) == [17, 18, 19, 20, 33, 34, 35, 36]
    assert {li.node_desc for li in links.values()} == {LEAF}
    assert {li.lid for li in links.values()} == {37}

    down = links[18]
    assert (down.state_id, down.phys_state_id) == (DOWN, POLLING)
    assert down.width is None and down.generation is None and down.lane_signal_gbps is None
    assert down.remote_lid is None and down.remote_port is None and down.remote_desc == ""
    assert down.could_be_width is None
    assert (links[19].state_id, links[19].phys_state_id) == (DOWN, DISABLED)

    assert (links[20].width, links[20].could_be_width) == (1, 4)
    assert links[20].remote_desc == "dgx-b07 mlx5_3"
    gens = {p: (links[p].width, links[p].generation) for p in (17, 33, 34, 35, 36)}
    assert gens == {17: (4, "NDR"), 33: (4, "XDR"), 34: (4, "EDR"), 35: (4, "FDR"), 36: (4, "SDR")}
    assert links[34].could_be_generation == "NDR"
    assert links[34].could_be_width is None
    assert links[36].could_be_generation == "QDR"        # "Could be 10.0 Gbps"
    assert links[33].remote_desc == "MF0;ib-spine-01:Q3400/U1"


def test_p_mode_hoq_and_vl_stall_do_not_hide_lines() -> None:
    links = by_port(fixture("switch_p_mode.txt"))
    assert sorted(links) == [17, 18, 20]
    assert (links[17].width, links[17].generation, links[17].remote_lid) == (4, "NDR", 112)
    assert links[18].state_id == DOWN
    assert links[20].could_be_width == 4


def test_line_mode_takes_the_node_description_from_each_line() -> None:
    links = fixture("line_mode.txt")
    assert [(li.node_desc, li.lid, li.port) for li in links] == [
        ("dgx-b07 mlx5_0", 112, 1), (LEAF, 37, 17), (LEAF, 37, 18), (LEAF, 37, 20)]
    assert (links[0].remote_lid, links[0].remote_port, links[0].remote_desc) == (37, 17, LEAF)
    assert (links[1].remote_lid, links[1].remote_desc) == (112, "dgx-b07 mlx5_0")
    assert links[2].state_id == DOWN and links[2].remote_lid is None
    assert links[3].could_be_width == 4 and links[3].width == 1


def test_default_and_line_mode_agree() -> None:
    """The same links in both layouts parse to the same link facts."""
    def facts(links: list) -> set:
        return {(li.lid, li.port, li.width, li.generation, li.state_id, li.phys_state_id,
                 li.remote_lid, li.remote_port, li.remote_desc, li.could_be_width) for li in links}
    line = facts(fixture("line_mode.txt"))
    default = facts(fixture("ca_ndr_4x.txt") + fixture("switch_p_mode.txt"))
    assert line == default
    assert len(line) == 4         # line_mode.txt's four lines are four different links: none lost


def test_fdr10_and_could_be_fdr10() -> None:
    links = by_port(fixture("switch_fdr10.txt"))
    assert sorted(links) == [1, 2]
    assert (links[1].width, links[1].generation) == (4, "FDR10")
    assert (links[2].width, links[2].generation) == (4, "QDR")
    assert links[2].could_be_generation == "FDR10"
    assert links[2].remote_desc == "hpc-n002 mlx4_0"


def test_port_not_available() -> None:
    text = ("CA: dgx-b07 mlx5_0:\n      0x946dae0300a1b2c4    112    1[  ] "
            "==( 4X        106.25 Gbps Active/  LinkUp)==>      \"Port not available\"\n")
    (li,) = parse_iblinkinfo(text)
    assert (li.width, li.generation, li.state_id) == (4, "NDR", ACTIVE)
    assert li.remote_lid is None and li.remote_desc == ""


def test_error_output_raises() -> None:
    with pytest.raises(ParseError, match="iberror|UMAD"):
        parse_iblinkinfo((HERE / "error_no_sm.txt").read_text())


@pytest.mark.parametrize("text", ["", "CA: lonely mlx5_0:\n", "Switch: 0x0 leaf:\n"])
def test_no_port_line_raises(text: str) -> None:
    with pytest.raises(ParseError):
        parse_iblinkinfo(text)


# --- compatibility with the real captures (not shipped with the project) ---------------------


PORT_LINE = re.compile(r"\d+\[[^\]]*\] ==\(")


def test_every_real_iblinkinfo_capture() -> None:
    skip_without_captures(CAPTURES)
    files = sorted(p for p in (CAPTURES / "iblinkinfo").iterdir() if p.is_file())
    assert files
    for f in files:
        text = f.read_text()
        expected = [ln for ln in text.splitlines() if PORT_LINE.search(ln)]
        if not expected:                       # the ibsim net file is an input, not tool output
            with pytest.raises(ParseError):
                parse_iblinkinfo(text)
            continue
        links = parse_iblinkinfo(text)
        assert len(links) == len(expected), f.name     # no port line is silently dropped
        for ln, li in zip(expected, links):
            assert li.node_desc, f"{f.name}: {ln}"
            if "Down/" in ln:
                assert li.state_id == DOWN and li.width is None and li.remote_lid is None, ln
            else:
                assert li.state_id == ACTIVE and li.phys_state_id == LINKUP, ln
                assert li.width in (1, 4) and li.generation == "HDR", ln    # ibsim: HDR only
                assert li.remote_lid and li.remote_port and li.remote_desc, ln
                assert li.could_be_width == 12, ln                         # ibsim artefact
        if "default_hdr_fabric" in f.name:
            ca = {li.node_desc: li for li in links if li.node_desc.startswith("gpu-node")}
            assert sorted(ca) == ["gpu-node01 mlx5_0", "gpu-node02 mlx5_0", "gpu-node03 mlx5_0",
                                  "gpu-node04 mlx5_0"]
            assert ca["gpu-node04 mlx5_0"].width == 1          # the degraded host link
            assert ca["gpu-node01 mlx5_0"].width == 4
