"""The kernel log matcher (parsers.kmsg) on real published lines (tests/fixtures/kmsg, with provenance)
and on lines made from the Linux format strings; the journal's JSON; the /dev/kmsg record format."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from fabricmon.host.kmsg import parse_record
from fabricmon.model.kernel_log import BY_EVENT, PATTERNS
from fabricmon.parsers.errors import ParseError
from fabricmon.parsers.kmsg import match, parse_journal_json
from tests.helpers import CAPTURES, skip_without_captures

FIXTURE = Path(__file__).resolve().parents[1] / "fixtures" / "kmsg" / "lines.tsv"


def published() -> list[tuple[str, str, str]]:
    rows = []
    for ln in FIXTURE.read_text().splitlines():
        if ln and not ln.startswith("#"):
            event, klass, line = ln.split("\t", 2)
            rows.append((event, klass, line))
    return rows


@pytest.mark.parametrize("event,klass,line", published())
def test_every_published_line_is_its_event_with_its_class(event: str, klass: str, line: str) -> None:
    m = match(line)
    assert m is not None and m.event == event, line
    assert BY_EVENT[event].klass == klass


def test_the_device_is_taken_from_the_dev_printk_prefix() -> None:
    m = match("mlx5_core 0000:5C:00.0: mlx5_pcie_event:299:(pid 268269): Detected insufficient power on the PCIe slot (27W).")
    assert (m.pci, m.detail) == ("0000:5c:00.0", "27W")
    m = match("NETDEV WATCHDOG: ens1f0np0 (mlx5_core): transmit queue 3 timed out 5120 ms")
    assert (m.event, m.pci, m.netdev, m.detail) == ("tx_watchdog", "", "ens1f0np0", "transmit queue 3")
    m = match("mlx5_core 0000:12:00.1 ens1f1np1: Link down")
    assert (m.event, m.pci, m.netdev) == ("link_down", "0000:12:00.1", "ens1f1np1")
    # a line with no device in it (gpud's test line) is matched, with no device: the check counts it unattributed
    m = match("mlx5_port_module_event:1131:(pid 0): Port module event[error]: module 0, Cable error, High Temperature")
    assert (m.event, m.pci, m.netdev, m.ibdev) == ("module_high_temperature", "", "", "")


# Made from the format strings (tests/fixtures/kmsg/PROVENANCE.md names each).
FORMAT_LINES = [
    ("fw_fatal_error", "mlx5_core 0000:41:00.0: poll_health:861:(pid 0): Fatal error 3 detected"),
    ("tx_timeout", "mlx5_core 0000:12:00.0 ens1f0np0: TX timeout detected"),
    ("tx_timeout", "mlx5_core 0000:12:00.0 ens1f0np0: TX timeout on queue: 5, SQ: 0x10b, CQ: 0x40c, SQ Cons: 0x0 "
                   "SQ Prod: 0x3, usecs since last trans: 8192000"),
    ("module_error", "mlx5_core 0000:12:00.0: mlx5_port_module_event:223:(pid 0): Port module event[error]: module 0, "
                     "Cable error, Power Budget Exceeded"),
    ("module_plugged", "mlx5_core 0000:12:00.0: Port module event: module 0, Cable plugged"),
    ("pcie_aer_fatal", "mlx5_core 0000:12:00.0: PCIe Bus Error: severity=Uncorrected (Fatal), type=Transaction Layer, "
                       "(Receiver ID)"),
    ("pcie_aer_fatal", "mlx5_core 0000:12:00.0: PCIe Bus Error: severity=Uncorrectable (Fatal), type=Transaction Layer, "
                       "(Receiver ID)"),
    ("pcie_aer_nonfatal", "mlx5_core 0000:12:00.0: PCIe Bus Error: severity=Uncorrected (Non-Fatal), type=Transaction "
                          "Layer, (Requester ID)"),
    ("pcie_aer_corrected", "mlx5_core 0000:12:00.0: PCIe Bus Error: severity=Corrected, type=Physical Layer, (Receiver ID)"),
    ("link_up", "mlx5_core 0000:12:00.0 ens1f0np0: Link up"),
    ("soft_lockup", "watchdog: BUG: soft lockup - CPU#17 stuck for 23s! [napi/eth0-8195:2345]"),
    ("peermem_load_failed", "nvidia_peermem: Unknown symbol ib_register_peer_memory_client (err -2)"),
    ("peermem_load_failed", "nvidia_peermem: disagrees about version of symbol ib_register_peer_memory_client"),
    # issue 52: lines seen in the field (PROVENANCE.md names where), written here from their format strings
    ("cmd_alloc_failed", "mlx5_core 0000:01:00.0: cmd_work_handler:887:(pid 383): failed to allocate command entry"),
    ("cmd_no_completion", "mlx5_core 0000:56:00.0: wait_func_handle_exec_timeout:1159:(pid 72061): cmd[0]: "
                          "ACCESS_REG(0x805) No done completion"),
    ("cmd_late_completion", "mlx5_core 0000:56:00.0: mlx5_cmd_comp_handler:1709:(pid 0): Command completion arrived "
                            "after timeout (entry idx = 0)."),
    ("pcie_power_not_advertised", "mlx5_core 0000:41:00.0: mlx5_pcie_event:293:(pid 918): PCIe slot power capability "
                                  "was not advertised."),
    ("probe_failed", "mlx5_core 0000:01:00.0: mlx5e_create_mdev_resources:104:(pid 1): alloc td failed, -11"),
    ("probe_failed", "mlx5_core 0000:6f:08.2: _mlx5e_probe:6076:(pid 650): mlx5e_resume failed, -22"),
    ("probe_failed", "mlx5_core 0000:6f:08.2: mlx5e_create_mdev_resources:174:(pid 650): alloc tises failed, -22"),
    ("health_issue", "mlx5_core 0000:41:00.0: print_health_info:401:(pid 0): Health issue observed, firmware internal "
                     "error, severity(3) ERROR:"),
    ("health_syndrome", "mlx5_core 0000:41:00.0: print_health_info:421:(pid 0): synd 0xff: unrecognized error"),
    ("access_reg_failed", "mlx5_core 0000:d2:00.0: mlx5_cmd_check:772:(pid 1234): ACCESS_REG(0x805) op_mod(0x1) "
                          "failed, status bad parameter(0x3), syndrome (0x15c356)"),     # 5.x: mlx5_cmd_check
]


@pytest.mark.parametrize("event,line", FORMAT_LINES)
def test_lines_made_from_the_format_strings(event: str, line: str) -> None:
    m = match(line)
    assert m is not None and m.event == event


def test_every_pattern_is_tested() -> None:
    covered = {e for e, _, _ in published()} | {e for e, _ in FORMAT_LINES} | {"link_down"}
    assert covered == {p.event for p in PATTERNS}


@pytest.mark.parametrize("line", [
    "", "some other log message", "mlx5_core 0000:12:00.0: E-Switch: cleanup",
    "mlx5_port_module_event: Port module event[error]: module 0, Cable error, Low Signal",      # gpud's negative
    "High Temperature detected but not in a port module event",
    "mlx5_core 0000:12:00.0: mlx5_pcie_event:299: PCIe slot advertised sufficient power (75W).",
    "mlx5_core 0000:41:00.0: print_health_info:422:(pid 0): ext_synd 0xffff",          # a report line, no reason
    "mlx5_core 0000:41:00.0: print_health_info:410:(pid 0): assert_var[0] 0xffffffff",
    "e1000e 0000:00:1f.6 eth0: Link down",       # another driver's link
])
def test_lines_that_are_no_event(line: str) -> None:
    m = match(line)
    assert m is None or m.event == "module_error" and "Low Signal" in line


def test_gpud_peermem_capture() -> None:
    path = CAPTURES / "dmesg" / "leptonai-gpud__dmesg.peermem.log.0"
    skip_without_captures(path)
    events = [match(ln.split("+00:00 ", 1)[-1]) for ln in path.read_text().splitlines()]
    assert [m.event if m else None for m in events] == ["peermem_invalid_context"] * 7 + [None]


def test_kmsg_records() -> None:
    r = parse_record(b"3,1234,5678901,-;mlx5_core 0000:12:00.0: Port module event: module 0, Cable plugged\n"
                     b" SUBSYSTEM=pci\n DEVICE=+pci:0000:12:00.0\n")
    assert (r.prio, r.seq, r.usec, r.text) == (3, 1234, 5678901, "mlx5_core 0000:12:00.0: Port module event: module 0, "
                                                                 "Cable plugged")
    assert parse_record(b"11,5,6,-;user line\n").prio == 3          # facility 1 (user) is not kept
    assert parse_record(b"no header") is None and parse_record(b"x,y,z;text") is None


def test_journal_json() -> None:
    lines = [json.dumps({"__CURSOR": "s=1;i=1", "__MONOTONIC_TIMESTAMP": "17982092", "_BOOT_ID": "b",
                         "MESSAGE": "mlx5_core 0000:41:00.0: poll_health:852:(pid 0): device's health compromised - "
                                    "reached miss count"}),
             json.dumps({"__CURSOR": "s=1;i=2", "MESSAGE": list(b"bytes \xff line")})]
    got = parse_journal_json("\n".join(lines) + "\n")
    assert [e.cursor for e in got] == ["s=1;i=1", "s=1;i=2"]
    assert got[0].usec == 17982092 and match(got[0].text).event == "health_miss_count"
    assert got[1].text.startswith("bytes ")
    with pytest.raises(ParseError, match="line 1"):
        parse_journal_json("not json\n")
