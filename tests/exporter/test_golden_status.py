"""A status only for checks that ran, over every golden exposition (tests/golden/*.prom): no node port
and no fabric switch has a counter check's status unless the counters that check judges were read there
(exported as fabricmon_ib_port_<counter>_total or fabricmon_fabric_port_<counter>_total), nor
counter_saturation unless a counter that can saturate was read (the Ethernet sweep's ifTable counters
wrap at 32 bits instead), nor pfc_storm without pause frames; and on the fabric collector every check
that ran has a status on every switch, OK included."""

from __future__ import annotations

import re
from collections import defaultdict
from pathlib import Path

import pytest

from fabricmon.model import ibspec
from fabricmon.checks.settings import COUNTER_CHECKS
from helpers import REPO

GOLDEN = sorted((REPO / "tests" / "golden").glob("*.prom"))
# the goldens whose counters wrap rather than saturate (SweepData.wrapping of the Ethernet sweep)
WRAPPING = {"fabric-ethernet.prom"}
SERIES = re.compile(r"^(\w+)\{([^}]*)\} (\S+)$", re.M)


def labels(text: str) -> dict[str, str]:
    return dict(re.findall(r'(\w+)="([^"]*)"', text))


def exposition(path: Path) -> tuple[dict[tuple[str, ...], set[str]], list[tuple[str, tuple[str, ...]]], set[str], set[str]]:
    """(where -> counters read there, [(check, where) of every status], switches, metric names); where is
    (device, port) on the node and (switch_guid,) on the fabric."""
    read: dict[tuple[str, ...], set[str]] = defaultdict(set)
    status, switches, names = [], set(), set()
    for m in SERIES.finditer(path.read_text()):
        name, lab = m[1], labels(m[2])
        names.add(name)
        node = re.fullmatch(r"fabricmon_ib_port_(\w+)_total", name)
        fabric = re.fullmatch(r"fabricmon_fabric_port_(\w+)_total", name)
        if node and node[1] in ibspec.COUNTER_BY_NAME:
            read[(lab["device"], lab["port"])].add(node[1])
        elif fabric and fabric[1] in ibspec.COUNTER_BY_NAME:
            read[(lab["switch_guid"],)].add(fabric[1])
        elif name == "fabricmon_fabric_switch_info":
            switches.add(lab["switch_guid"])
        elif name == "fabricmon_check_status" and lab["port"]:
            status.append((lab["check"], (lab["device"], lab["port"])))
        elif name == "fabricmon_fabric_check_status" and lab["switch_guid"]:
            status.append((lab["check"], (lab["switch_guid"],)))
    return read, status, switches, names


@pytest.mark.parametrize("golden", GOLDEN, ids=[g.name for g in GOLDEN])
def test_no_status_for_a_check_whose_inputs_were_not_read(golden: Path) -> None:
    read, status, switches, names = exposition(golden)
    bad = []
    for check, where in status:
        if where[0] in switches and len(where) == 2:
            where = (where[0],)             # the collector's per-port finding: the switch read it
        have = read.get(where, set())
        if check in COUNTER_CHECKS and not have & set(COUNTER_CHECKS[check][0]):
            bad.append(f"{check} on {where}: none of {COUNTER_CHECKS[check][0]} read")
        elif check == "counter_saturation" and (golden.name in WRAPPING or not have & set(ibspec.SATURABLE)):
            bad.append(f"counter_saturation on {where}: no counter that can saturate read")
        elif check == "pfc_storm" and "fabricmon_fabric_port_pause_frames_total" not in names:
            bad.append(f"pfc_storm on {where}: no pause frames read")
    assert not bad, "\n".join(bad)


@pytest.mark.parametrize("golden", [g for g in GOLDEN if g.name.startswith("fabric-")], ids=lambda g: g.name)
def test_every_check_that_ran_has_a_status_on_every_switch_it_judged_ok_included(golden: Path) -> None:
    """The sweep's checks on every switch (the recorded sweep read them all); routing and uplink_capacity on
    every switch with uplinks (a top-level switch routes nothing up and has no uplink group: not judged, no
    status)."""
    read, status, switches, _ = exposition(golden)
    by_check: dict[str, set[str]] = defaultdict(set)
    for check, where in status:
        if len(where) == 1:
            by_check[check].add(where[0])
    assert switches and by_check
    assert all(got <= switches for got in by_check.values())
    below_top = ("routing", "uplink_capacity")
    assert all(got == switches for c, got in by_check.items() if c not in below_top), \
        {c: switches - g for c, g in by_check.items()}
    for c in below_top:
        if c in by_check:
            assert by_check[c] and by_check[c] < switches, c
    assert by_check["uplink_capacity"] == by_check.get("routing", by_check["uplink_capacity"])
    read_anywhere = set().union(*read.values())
    for check, (counters, *_) in COUNTER_CHECKS.items():
        assert (check in by_check) == bool(read_anywhere & set(counters)), check
