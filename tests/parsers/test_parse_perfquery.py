"""Tests for fabricmon.parsers.perfquery."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from fabricmon.model import ibspec

# PortCounters (the basic attribute) has every counter but the 64-bit-only packet counters of
# PortCountersExtended and sysfs-only port_rcv_discards.
EXT_ONLY = {"transmit_unicast_packets", "receive_unicast_packets", "transmit_multicast_packets",
            "receive_multicast_packets"}
BASIC = {c.name for c in ibspec.COUNTERS if c.perfquery and c.name not in EXT_ONLY}
from fabricmon.parsers.errors import ParseError
from fabricmon.parsers.perfquery import parse_perfquery
from helpers import CAPTURES, FIXTURES, skip_without_captures

HERE = FIXTURES / "perfquery"
HEADER = re.compile(r"^# Port (extended )?counters:", re.M)


def fixture(name: str) -> str:
    return (HERE / name).read_text()


def test_basic_port_counters() -> None:
    (b,) = parse_perfquery(fixture("basic.txt"))
    assert (b.lid, b.port, b.extended) == (112, 1, False)
    assert b.counters["symbol_errors"] == 17
    assert b.counters["link_error_recovery"] == 2
    assert b.counters["link_downed"] == 1
    assert b.counters["receive_errors"] == 5
    assert b.counters["transmit_discards"] == 9
    assert b.counters["vl15_dropped"] == 3
    assert b.counters["transmit_wait"] == 424242
    assert b.counters["transmit_bytes"] == 3141592653      # raw words; the exporter scales by 4
    assert b.counters["receive_bytes"] == 2718281828
    assert b.counters["transmit_packets"] == 11223344
    assert b.counters["receive_packets"] == 55667788
    # every PortCounters counter is there, and nothing else
    assert set(b.counters) == BASIC
    # fields we do not map are still available raw, hex included
    assert b.raw["CounterSelect"] == 0 and b.raw["QP1Dropped"] == 0 and b.raw["PortSelect"] == 1


def test_basic_widths_are_the_spec_widths() -> None:
    (b,) = parse_perfquery(fixture("basic.txt"))
    for c in ibspec.COUNTERS:
        if c.name in BASIC:
            assert b.bits[c.name] == c.bits, c.name
    assert b.bits["symbol_errors"] == 16
    assert b.bits["link_downed"] == 8
    assert b.bits["local_link_integrity_errors"] == 4
    assert b.bits["transmit_bytes"] == 32
    assert b.bits["transmit_wait"] == 32


def test_saturated_basic_counters_sit_at_their_width_max() -> None:
    (b,) = parse_perfquery(fixture("basic_saturated.txt"))
    # PortCounters widths (IBTA vol. 1, 16.1.3.5), written out rather than computed by the code
    # under test: (raw value, width in bits) of each counter the fixture saturates
    want = {"symbol_errors": (65535, 16), "receive_errors": (65535, 16), "link_downed": (255, 8),
            "local_link_integrity_errors": (15, 4), "excessive_buffer_overrun_errors": (15, 4),
            "transmit_wait": (4294967295, 32), "transmit_bytes": (4294967295, 32)}
    assert {n: (b.counters[n], b.bits[n]) for n in want} == want
    assert (b.counters["link_error_recovery"], b.bits["link_error_recovery"]) == (2, 8)


def test_extended_counters_are_64_bit() -> None:
    (b,) = parse_perfquery(fixture("extended.txt"))
    assert (b.lid, b.port, b.extended) == (112, 1, True)
    assert b.counters == {
        "transmit_bytes": 98765432109876, "receive_bytes": 87654321098765,
        "transmit_packets": 123456789012, "receive_packets": 123450000001,
        "transmit_unicast_packets": 123456000000, "receive_unicast_packets": 123449000000,
        "transmit_multicast_packets": 789012, "receive_multicast_packets": 1000001,
    }
    assert set(b.bits.values()) == {64}
    assert b.raw["PortUnicastXmitPkts"] == 123456000000


def test_extended_with_additional_error_counters() -> None:
    # CapMask2 0x2 (IsAdditionalPortCountersExtendedSupported): error counters come as 64-bit
    (b,) = parse_perfquery(fixture("extended_with_errors.txt"))
    assert (b.lid, b.port, b.extended) == (4410, 3, True)
    assert b.counters["symbol_errors"] == 70000            # above 16 bits: not saturated
    assert b.counters["link_downed"] == 300
    assert b.counters["transmit_wait"] == 9876543210
    assert b.counters["receive_switch_relay_errors"] == 2
    assert b.bits["symbol_errors"] == 64
    assert set(b.counters) == {c.name for c in ibspec.COUNTERS if c.perfquery}


def test_loop_mode_gives_one_block_per_port() -> None:
    blocks = parse_perfquery(fixture("extended_loop_two_ports.txt"))
    assert [(b.lid, b.port) for b in blocks] == [(21, 5), (21, 7)]
    assert [b.counters["transmit_bytes"] for b in blocks] == [44000000000, 11000000000]
    assert all(b.extended for b in blocks)


def test_basic_and_extended_in_one_text() -> None:
    blocks = parse_perfquery(fixture("basic.txt") + fixture("extended.txt"))
    assert [b.extended for b in blocks] == [False, True]
    assert blocks[0].counters["transmit_bytes"] == 3141592653
    assert blocks[1].counters["transmit_bytes"] == 98765432109876


@pytest.mark.parametrize("name", ["error_bad_lid.txt", "error_no_ca.txt", "rcv_error_details.txt"])
def test_error_outputs_raise(name: str) -> None:
    with pytest.raises(ParseError) as exc:
        parse_perfquery(fixture(name))
    # the message carries the first line, so the operator sees why
    assert fixture(name).splitlines()[0].strip()[:40] in str(exc.value)


def test_empty_output_raises() -> None:
    with pytest.raises(ParseError, match="empty output"):
        parse_perfquery("")


def test_non_numeric_value_is_skipped_not_fatal() -> None:
    text = fixture("basic.txt").replace("PortRcvErrors:...................5", "PortRcvErrors:...................N/A")
    (b,) = parse_perfquery(text)
    assert "receive_errors" not in b.counters
    assert b.counters["symbol_errors"] == 17


# --- compatibility with the real captures (not shipped with the project) ---------------------


def _sections(text: str) -> list[tuple[str, int | None]]:
    """Split a transcript ('=== cmd' ... 'rc=N') into (output, rc); a bare output is one section."""
    if not text.lstrip().startswith("=== "):
        return [(text, None)]
    out: list[tuple[str, int | None]] = []
    body: list[str] = []
    rc: int | None = None
    for line in text.splitlines():
        if line.startswith("=== "):
            if body or rc is not None:
                out.append(("\n".join(body), rc))
            body, rc = [], None
        elif re.fullmatch(r"rc=\d+", line.strip()):
            rc = int(line.strip()[3:])
        else:
            body.append(line)
    out.append(("\n".join(body), rc))
    return out


def test_every_real_perfquery_capture() -> None:
    skip_without_captures(CAPTURES)
    files = sorted(p for p in (CAPTURES / "perfquery").iterdir() if p.is_file())
    assert files
    parsed = 0
    for f in files:
        for i, (text, rc) in enumerate(_sections(f.read_text())):
            where = f"{f.name}#{i}"
            headers = HEADER.findall(text)
            if not headers:
                with pytest.raises(ParseError):
                    parse_perfquery(text)
                continue
            assert rc in (None, 0), where
            blocks = parse_perfquery(text)
            parsed += 1
            assert len(blocks) == len(headers), where
            # every known field printed in a block is captured with its value and width
            for chunk, b in zip(re.split(r"^# Port .*$", text, flags=re.M)[1:], blocks):
                fields = dict(re.findall(r"^(\w+):\.+(\S+)$", chunk, re.M))
                known = {k: v for k, v in fields.items() if k in ibspec.COUNTER_BY_PERFQUERY}
                assert known, where
                for k, v in known.items():
                    spec = ibspec.COUNTER_BY_PERFQUERY[k]
                    assert b.counters[spec.name] == int(v), f"{where} {k}"
                    assert b.bits[spec.name] == (64 if b.extended else spec.bits), f"{where} {k}"
                assert b.port == int(fields["PortSelect"]), where
    assert parsed >= 10


def test_real_saturation_capture_matches_the_console_log() -> None:
    """The ibsim basic capture was made with counters set past their widths."""
    f = CAPTURES / "perfquery" / "ibsim-infiniband-diags44__basic.txt"
    skip_without_captures(f)
    (b,) = parse_perfquery(f.read_text())
    # ibsim-0.10__counter_saturation_console.txt: 16-bit SymbolErrorCounter -> 65535, 8-bit
    # LinkDowned -> 255, 4-bit LocalLinkIntegrity -> 15, 32-bit XmitData/XmitWait -> 4294967295
    want = {"symbol_errors": (65535, 16), "link_downed": (255, 8), "local_link_integrity_errors": (15, 4),
            "transmit_wait": (4294967295, 32), "transmit_bytes": (4294967295, 32)}
    assert {n: (b.counters[n], b.bits[n]) for n in want} == want


def test_loop_ports_output_gives_one_block_per_port() -> None:
    """`perfquery -x -l <lid> 255` (the sharded fabric sweep) prints a header per port (ibsim, infiniband-diags)."""
    text = "".join(
        f"# Port extended counters: Lid 3 port {p} (CapMask: 0x1300 CapMask2: 0x0000000)\n"
        f"PortSelect:......................{p}\nCounterSelect:...................0x0000\n"
        f"PortXmitData:....................{p * 100}\nPortRcvData:.....................432\n"
        "PortXmitPkts:....................6\nPortRcvPkts:.....................6\n"
        "PortUnicastXmitPkts:.............0\nPortUnicastRcvPkts:..............0\n"
        "PortMulticastXmitPkts:...........0\nPortMulticastRcvPkts:............0\n"
        for p in (1, 2, 8))
    blocks = parse_perfquery(text)
    assert [(b.lid, b.port, b.extended) for b in blocks] == [(3, 1, True), (3, 2, True), (3, 8, True)]
    assert blocks[2].counters["transmit_bytes"] == 800 and blocks[2].bits["transmit_bytes"] == 64
    assert set(blocks[0].counters) == {"transmit_bytes", "receive_bytes", "transmit_packets", "receive_packets",
                                       "transmit_unicast_packets", "receive_unicast_packets",
                                       "transmit_multicast_packets", "receive_multicast_packets"}
