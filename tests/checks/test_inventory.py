"""Tests for fabricmon.checks.inventory (expected_inventory): a dead adapter fails the check."""

from __future__ import annotations

import pytest

from fabricmon.checks import CRITICAL, OK
from fabricmon.checks import degraded_link
from fabricmon.checks.inventory import CHECK, ExpectedInventory, InventorySettings, evaluate, expand_glob
from fabricmon.checks.node_inputs import NodeInputs
from fabricmon.model.history import CounterHistory
from fabricmon.model.node_records import SysfsData
from fabricmon.model.ports import Inventory
from fabricmon.model.snapshot import IbSection, SourceState, Unjudged
from fabricmon.stores.learned import LearnedStore
from fabricmon.config import ConfigError, from_dict
from fabricmon.model.ports import PortView


def cfg(expected: list | None = None):
    return from_dict({"expected_links": expected or []}, check_paths=False).expected_links


def ports(*specs: tuple[str, int] | tuple[str, int, str]) -> dict:
    out = {}
    for s in specs:
        dev, num, layer = (*s, "InfiniBand")[:3]
        out[(dev, num)] = PortView(device=dev, port=num, link_layer=layer, state_id=4, phys_state_id=5)
    return out


EIGHT = ports(*((f"mlx5_{i}", 1) for i in range(8)), ("mlx5_bond_0", 1, "Ethernet"))


@pytest.mark.parametrize("pattern,names", [
    ("mlx5_[0-7]", [f"mlx5_{i}" for i in range(8)]),
    ("mlx5_[03]", ["mlx5_0", "mlx5_3"]),
    ("ib[0-1]_[ab]", ["ib0_a", "ib0_b", "ib1_a", "ib1_b"]),
    ("mlx5_0", ["mlx5_0"]),
    ("mlx5_*", None), ("mlx5_?", None), ("mlx5_[!0]", None), ("x[0-9][0-9][0-9]", None),
])
def test_expand_glob(pattern: str, names: list[str] | None) -> None:
    assert expand_glob(pattern) == names


def test_count_met_is_ok() -> None:
    [f] = evaluate(EIGHT, cfg([{"device": "mlx5_*", "count": 8}]))
    assert (f.check, f.device, f.port, f.status) == (CHECK, "expected_links[0]", None, OK)
    assert f.message == "expected_links[0] (mlx5_*, InfiniBand, count 8): 8 port(s) found"


def test_fewer_than_count_is_critical_naming_what_was_seen() -> None:
    seven = {k: v for k, v in EIGHT.items() if k != ("mlx5_4", 1)}
    [f] = evaluate(seven, cfg([{"device": "mlx5_*", "width": "4X", "speed": "NDR", "count": 8}]))
    assert f.status == CRITICAL
    assert "7 of 8 port(s) found, 1 missing" in f.message
    assert "seen: mlx5_0 port 1, mlx5_1 port 1, mlx5_2 port 1, mlx5_3 port 1, mlx5_5 port 1" in f.message
    assert "mlx5_bond_0" not in f.message                   # an Ethernet port is not an InfiniBand one


def test_a_finite_glob_names_the_missing_device() -> None:
    seven = {k: v for k, v in EIGHT.items() if k != ("mlx5_4", 1)}
    [f] = evaluate(seven, cfg([{"device": "mlx5_[0-7]", "count": 8}]))
    assert f.status == CRITICAL and "; not seen: mlx5_4;" in f.message


def test_a_port_seen_before_is_named_as_missing() -> None:
    seven = {k: v for k, v in EIGHT.items() if k != ("mlx5_4", 1)}
    [f] = evaluate(seven, cfg([{"device": "mlx5_*", "count": 8}]), {("mlx5_4", 1): "InfiniBand"})
    assert f.status == CRITICAL and "missing (seen earlier): mlx5_4 port 1" in f.message


def test_an_entry_matching_nothing_is_critical_without_count() -> None:
    fs = evaluate(EIGHT, cfg([{"device": "mlx5_*", "width": "4X"}, {"device": "ib*", "speed": "HDR"}]))
    assert [f.status for f in fs] == [OK, CRITICAL]
    assert fs[1].device == "expected_links[1]"
    assert "no matching port found" in fs[1].message and "seen only: mlx5_0 port 1 (InfiniBand)" in fs[1].message


def test_an_empty_node_with_an_expectation_is_critical() -> None:
    [f] = evaluate({}, cfg([{"device": "mlx5_*", "width": "4X", "speed": "NDR"}]))
    assert f.status == CRITICAL
    assert "no matching port found; no InfiniBand or RoCE port at all" in f.message


def test_link_layer_counts() -> None:
    [ib, eth] = evaluate(EIGHT, cfg([{"device": "mlx5_*", "count": 9},
                                     {"device": "mlx5_bond_*", "link_layer": "Ethernet", "count": 1}]))
    assert ib.status == CRITICAL and "8 of 9" in ib.message
    assert eth.status == OK
    [anyl] = evaluate(EIGHT, cfg([{"device": "mlx5_*", "link_layer": "any", "count": 9}]))
    assert anyl.status == OK


def test_without_expectations_one_node_wide_ok_that_says_what_is_there() -> None:
    assert evaluate({}, cfg()) == []        # nothing expected, nothing found: nothing judged (the node is UNKNOWN)
    [f] = evaluate(EIGHT, cfg())
    assert f.message == "9 InfiniBand/RoCE port(s) found (no expected_links configured)"


def test_before_the_inventory_is_read_nothing_is_judged_and_the_node_is_unknown() -> None:
    """Before the inventory sources answered, and when none gave a port list: no finding (no status: a
    check that read nothing has none, never an OK "waiting"), and the snapshot's `unknown` says why."""
    check = ExpectedInventory(InventorySettings(cfg([{"device": "a", "count": 2}])), LearnedStore())
    sysfs = SourceState("sysfs", True, 15.0, 5.0, records=SysfsData, ran=True, data=None)

    def run(known: bool, states: dict) -> tuple[list, str]:
        out = check.run(NodeInputs(states, Inventory(), IbSection(), CounterHistory(), 1.0, known,
                                   "/sys/class/infiniband"))
        assert isinstance(out.derived, Unjudged)
        return list(out.findings), out.derived.reason

    findings, why = run(False, {"sysfs": sysfs})
    assert findings == [] and "not been read yet" in why
    findings, why = run(True, {"sysfs": sysfs})       # sysfs ran and gave no port list (it failed)
    assert findings == [] and "sysfs gave no port list" in why
    ok = SourceState("sysfs", True, 15.0, 5.0, records=SysfsData, ran=True, data=SysfsData())
    findings, why = run(True, {"sysfs": ok})          # it answered: no port, one expected: CRITICAL
    assert [f.status for f in findings] == [CRITICAL] and why == ""


def test_a_count_only_entry_sets_no_rate() -> None:
    """`{device, count}` alone: only the inventory is judged; a later entry still sets the rate."""
    c = cfg([{"device": "mlx5_*", "count": 8}, {"device": "mlx5_*", "width": "4X", "speed": "NDR"}])
    p = PortView(device="mlx5_0", port=1, state_id=4, phys_state_id=5, width=1, generation="NDR", rate_gbps=100)
    v = degraded_link.evaluate_port(p, from_dict({}, check_paths=False).checks, c)
    assert v.finding.status == CRITICAL and v.degraded["width"]


@pytest.mark.parametrize("count", [0, -1, "8", True, 1.5])
def test_bad_count(count: object) -> None:
    with pytest.raises(ConfigError) as e:
        cfg([{"device": "mlx5_*", "count": count}])
    assert e.value.key == "expected_links[0].count"
