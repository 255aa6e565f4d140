"""Tests for fabricmon.parsers.sysfs_ib (the values of /sys/class/infiniband/<dev>/ports/<n>/*)."""

from __future__ import annotations

from pathlib import Path

import pytest

from fabricmon.model import ibspec
from fabricmon.parsers.errors import ParseError
from fabricmon.parsers.sysfs_ib import parse_counter, parse_enum, parse_rate
from helpers import CAPTURES, FIXTURES, skip_without_captures

HERE = FIXTURES / "sysfs"


@pytest.mark.parametrize("text,expected", [
    ("400 Gb/sec (4X NDR)\n", (400.0, 4, "NDR")),
    ("400 Gb/sec (4X NDR)", (400.0, 4, "NDR")),              # no trailing newline
    ("200 Gb/sec (2X NDR)\n", (200.0, 2, "NDR")),            # RoCE 200GbE: IB names on Ethernet
    ("100 Gb/sec (2X HDR)\n", (100.0, 2, "HDR")),
    ("200 Gb/sec (4X HDR)\n", (200.0, 4, "HDR")),
    ("100 Gb/sec (4X EDR)\n", (100.0, 4, "EDR")),
    ("25 Gb/sec (1X EDR)\n", (25.0, 1, "EDR")),
    ("56 Gb/sec (4X FDR)\n", (56.0, 4, "FDR")),
    ("40 Gb/sec (4X FDR10)\n", (40.0, 4, "FDR10")),
    ("40 Gb/sec (4X QDR)\n", (40.0, 4, "QDR")),
    ("20 Gb/sec (4X DDR)\n", (20.0, 4, "DDR")),
    ("2.5 Gb/sec (1X SDR)\n", (2.5, 1, "SDR")),
    ("800 Gb/sec (4X XDR)\n", (800.0, 4, "XDR")),
    ("120 Gb/sec (12X QDR)\n", (120.0, 12, "QDR")),
    ("  400 Gb/sec (4X NDR)  \n", (400.0, 4, "NDR")),
])
def test_parse_rate(text: str, expected: tuple) -> None:
    assert parse_rate(text) == expected


@pytest.mark.parametrize("text,expected", [
    ("10 Gb/sec (4X)\n", (10.0, 4, "SDR")),       # old kernels print no name for SDR
    ("2.5 Gb/sec (1X)\n", (2.5, 1, "SDR")),
    ("400 Gb/sec (4X)\n", (400.0, 4, "NDR")),
    ("100 Gb/sec\n", (100.0, None, None)),        # no width at all
])
def test_parse_rate_without_generation_recomputes_it(text: str, expected: tuple) -> None:
    assert parse_rate(text) == expected


@pytest.mark.parametrize("text", ["", "fast\n", "400 Mb/sec (4X NDR)\n", "N/A\n", "Gb/sec (4X NDR)"])
def test_parse_rate_rejects_garbage(text: str) -> None:
    with pytest.raises(ParseError):
        parse_rate(text)


@pytest.mark.parametrize("text,expected", [
    ("4: ACTIVE\n", (4, "ACTIVE")),
    ("1: DOWN", (1, "DOWN")),
    ("2: INIT\n", (2, "INIT")),
    ("3: ARMED\n", (3, "ARMED")),
    ("5: ACTIVE_DEFER\n", (5, "ACTIVE_DEFER")),
    ("5: LinkUp\n", (5, "LinkUp")),
    ("2: Polling\n", (2, "Polling")),
    ("3: Disabled", (3, "Disabled")),
    ("4: PortConfigurationTraining\n", (4, "PortConfigurationTraining")),
    ("6: LinkErrorRecovery\n", (6, "LinkErrorRecovery")),
    ("7: Phy Test\n", (7, "Phy Test")),                 # the name holds a space
    ("0: NOP\n", (0, "NOP")),
])
def test_parse_enum(text: str, expected: tuple) -> None:
    assert parse_enum(text) == expected


def test_enum_ids_agree_with_ibspec_names() -> None:
    for i, name in ibspec.PHYS_STATES.items():
        assert parse_enum(f"{i}: {name}\n") == (i, name)
        assert ibspec.phys_state_id(name) == i
    for i, name in ibspec.PORT_STATES.items():
        assert parse_enum(f"{i}: {name}") == (i, name)


@pytest.mark.parametrize("text", ["", "ACTIVE\n", ": ACTIVE", "four: ACTIVE"])
def test_parse_enum_rejects_garbage(text: str) -> None:
    with pytest.raises(ParseError):
        parse_enum(text)


@pytest.mark.parametrize("text,expected", [
    ("0\n", 0), ("12345", 12345), ("  65535 \n", 65535),
    ("230442669431839\n", 230442669431839),                  # 64-bit data counters
    ("18446744073709551615\n", 2**64 - 1),
    ("N/A (no PMA)\n", None), ("N/A (no PMA)", None), ("N/A\n", None),
    ("", None), ("\n", None),
])
def test_parse_counter(text: str, expected: int | None) -> None:
    assert parse_counter(text) == expected


@pytest.mark.parametrize("text", ["abc\n", "12 34\n", "-\n", "1.5\n"])
def test_parse_counter_rejects_garbage(text: str) -> None:
    with pytest.raises(ParseError):
        parse_counter(text)


def test_our_fixture_tree_values_all_parse() -> None:
    root = HERE / "two_hca" / "class" / "infiniband"
    for port in root.glob("*/ports/*"):
        assert parse_enum((port / "state").read_text())[0] in ibspec.PORT_STATES
        assert parse_enum((port / "phys_state").read_text())[0] in ibspec.PHYS_STATES
        gbps, width, gen = parse_rate((port / "rate").read_text())
        assert gbps > 0 and width and gen
        for f in list((port / "counters").iterdir()) + list((port / "hw_counters").glob("*")):
            v = parse_counter(f.read_text())
            assert v is None or v >= 0


def test_real_h100_tree_values_all_parse() -> None:
    root = CAPTURES / "sysfs" / "leptonai-gpud__sys-class-infiniband-h100.0"
    skip_without_captures(root)
    rates = {}
    for port in sorted(root.glob("*/ports/*")):
        assert parse_enum((port / "state").read_text()) == (4, "ACTIVE")
        assert parse_enum((port / "phys_state").read_text()) == (5, "LinkUp")
        rates[port.parent.parent.name] = parse_rate((port / "rate").read_text())
        for f in port.glob("*counters/*"):
            assert isinstance(parse_counter(f.read_text()), int), f
    assert rates.pop("mlx5_bond_0") == (200.0, 2, "NDR")
    assert len(rates) == 8 and set(rates.values()) == {(400.0, 4, "NDR")}


def test_real_ttar_excerpts_rate_state_and_counter_lines() -> None:
    """Every rate/state/counter value in the procfs and node_exporter ttar excerpts parses."""
    skip_without_captures(CAPTURES / "sysfs")
    files = sorted((CAPTURES / "sysfs").glob("*infiniband*.ttar"))
    assert files, f"no *infiniband*.ttar excerpt in {CAPTURES / 'sysfs'}"
    seen = {"rate": 0, "state": 0, "counter": 0, "na": 0}
    for f in files:
        lines = f.read_text().splitlines()
        for i, line in enumerate(lines):
            if not line.startswith("Path: "):
                continue
            path = line[6:]
            if i + 1 >= len(lines) or not lines[i + 1].startswith("Lines:"):
                continue
            n = int(lines[i + 1].split()[1])
            body = "\n".join(lines[i + 2:i + 2 + n])
            name = path.rsplit("/", 1)[-1]
            if "/ports/" not in path:
                continue
            if name == "rate":
                gbps, width, gen = parse_rate(body)
                assert gbps > 0 and width and gen, (f.name, path, body)
                seen["rate"] += 1
            elif name in ("state", "phys_state"):
                parse_enum(body)
                seen["state"] += 1
            elif "/counters/" in path or "/hw_counters/" in path:
                v = parse_counter(body)
                seen["counter"] += 1
                seen["na"] += v is None
    assert seen["rate"] >= 3 and seen["state"] >= 6 and seen["counter"] >= 20
    assert seen["na"] >= 1          # the node_exporter excerpt has `N/A (no PMA)` counters
