"""Tests for fabricmon.parsers.ibstat."""

from __future__ import annotations

from pathlib import Path

import pytest

from fabricmon.parsers.errors import ParseError
from fabricmon.parsers.ibstat import parse_ibstat
from helpers import CAPTURES, FIXTURES, skip_without_captures

HERE = FIXTURES / "ibstat"


def fixture(name: str) -> str:
    return (HERE / name).read_text()


def test_adapters_ports_and_identity() -> None:
    res = parse_ibstat(fixture("four_cas_mixed.txt"))
    assert [ca.name for ca in res.cas] == ["mlx5_0", "mlx5_1", "mlx5_2", "qib0"]
    assert res.errors == []
    ca = res.cas[0]
    assert ca.ca_type == "MT4129"
    assert ca.num_ports == 1
    assert ca.firmware_version == "28.40.1202"
    assert ca.hardware_version == "0"
    assert ca.node_guid == "0x946dae0300a1b2c4"          # lower-cased
    assert ca.system_image_guid == "0x946dae0300a1b2c4"
    (p,) = ca.ports
    assert (p.port, p.state, p.physical_state) == (1, "Active", "LinkUp")
    assert p.rate_gbps == 400.0
    assert (p.base_lid, p.sm_lid) == (112, 1)
    assert p.port_guid == "0x946dae0300a1b2c4"
    assert p.link_layer == "InfiniBand"


def test_down_port_keeps_its_stale_rate_and_state_words() -> None:
    res = parse_ibstat(fixture("four_cas_mixed.txt"))
    (p,) = res.cas[1].ports
    assert (p.state, p.physical_state) == ("Down", "Polling")
    assert p.rate_gbps == 40.0          # stale: the merge layer must not trust it
    assert p.base_lid == 65535


def test_two_port_ethernet_adapter() -> None:
    ca = parse_ibstat(fixture("four_cas_mixed.txt")).cas[2]
    assert ca.num_ports == 2
    assert [p.port for p in ca.ports] == [1, 2]
    assert [p.link_layer for p in ca.ports] == ["Ethernet", "Ethernet"]
    assert ca.ports[1].physical_state == "Disabled"
    assert ca.ports[0].port_guid == "0x0e42a1fffed4e5f6"


def test_fractional_rate_ib_link_layer_and_empty_firmware() -> None:
    ca = parse_ibstat(fixture("four_cas_mixed.txt")).cas[3]
    assert ca.ca_type == "InfiniPath_QLE7340"
    assert ca.firmware_version is None              # "Firmware version: " with nothing after it
    (p,) = ca.ports
    assert p.rate_gbps == 2.5                       # 1X SDR
    assert p.link_layer == "InfiniBand"             # ibsim-style "IB" is normalised
    assert p.state == "Initializing"


def test_partial_output_before_ibpanic_keeps_the_adapters() -> None:
    res = parse_ibstat(fixture("partial_ibpanic.txt"))
    assert [ca.name for ca in res.cas] == ["mlx5_0", "mlx5_1"]
    assert all(ca.ports and ca.ports[0].state == "Active" for ca in res.cas)
    assert len(res.errors) == 1
    assert res.errors[0].startswith("ibpanic:")
    assert "mlx5_2" in res.errors[0]


def test_ibpanic_only_raises_with_the_panic_text() -> None:
    with pytest.raises(ParseError) as exc:
        parse_ibstat(fixture("no_devices.txt"))
    assert "can't find any IB device" in str(exc.value)


@pytest.mark.parametrize("text", ["", "   \n\n", "ibstat: command not recognised\n",
                                  "Port 1:\n\tState: Active\n"])
def test_garbage_raises(text: str) -> None:
    with pytest.raises(ParseError):
        parse_ibstat(text)


def test_space_indented_output_parses_like_tab_indented() -> None:
    tabbed = fixture("partial_ibpanic.txt")
    spaced = tabbed.replace("\t", "        ")
    a, b = parse_ibstat(tabbed), parse_ibstat(spaced)
    assert [(c.name, c.node_guid, [(p.port, p.rate_gbps, p.base_lid) for p in c.ports]) for c in a.cas] == \
           [(c.name, c.node_guid, [(p.port, p.rate_gbps, p.base_lid) for p in c.ports]) for c in b.cas]


def test_crlf_and_trailing_spaces() -> None:
    text = fixture("partial_ibpanic.txt").replace("\n", "  \r\n")
    res = parse_ibstat(text)
    assert res.cas[1].ports[0].base_lid == 302
    assert res.cas[1].ports[0].link_layer == "InfiniBand"


# --- compatibility with the real captures (not shipped with the project) ---------------------


def _captures(tool: str) -> list[Path]:
    d = CAPTURES / tool
    skip_without_captures(CAPTURES)
    return sorted(p for p in d.iterdir() if p.is_file())


def test_every_real_ibstat_capture() -> None:
    files = _captures("ibstat")
    assert files
    for f in files:
        text = f.read_text()
        res = parse_ibstat(text)
        assert len(res.cas) == text.count("CA '"), f.name
        for ca in res.cas:
            assert ca.ports, f"{f.name}: {ca.name} has no port"
            assert ca.num_ports == len(ca.ports), f.name
            for p in ca.ports:
                assert p.state and p.physical_state and p.rate_gbps, f"{f.name}: {ca.name}"
                assert p.link_layer in ("InfiniBand", "Ethernet"), f.name
        if "ibpanic" in f.name:
            assert res.errors and res.errors[0].startswith("ibpanic:"), f.name
            assert len(res.cas) == 8
        else:
            assert res.errors == [], f.name
        if "down.with.polling" in f.name:
            downs = [(ca.name, p.physical_state) for ca in res.cas for p in ca.ports if p.state == "Down"]
            assert downs, f.name
            assert {ph for _, ph in downs} <= {"Polling", "Disabled"}, f.name
            assert "Polling" in {ph for _, ph in downs}, f.name
