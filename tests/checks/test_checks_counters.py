"""Tests for fabricmon.checks.link_errors (rate-based counter checks, flaps, saturation), and for the
collector feeding them from counters that change between polls."""

from __future__ import annotations

from fabricmon.model.health import health_status

import shutil
from pathlib import Path

import pytest

from fabricmon.model import ibspec
from fabricmon.checks import CRITICAL, OK, WARNING
from fabricmon.checks.link_errors import SATURATION_CHECK, evaluate_port
from fabricmon.model.history import saturation
from fabricmon.pipeline.scheduler import Pipeline
from fabricmon.config import from_dict
from fabricmon.checks.settings import COUNTER_CHECKS
from fabricmon.config import registered
from fabricmon.model.history import CounterHistory
from fabricmon.host import LiveIO
from fabricmon.model.ports import PortView
from helpers import FIXTURES

FIXTURE = FIXTURES / "sysfs" / "two_hca"
HOUR = 3600.0


def cfg(**checks):
    """The `checks` section, all a counter check receives."""
    return from_dict({"checks": checks}, check_paths=False).checks


def port(counters: dict[str, int], bits: dict[str, int] | None = None) -> PortView:
    p = PortView(device="mlx5_0", port=1, state_id=4, phys_state_id=5, width=4, generation="NDR")
    p.counters = dict(counters)
    p.counter_bits = bits if bits is not None else {
        k: (64 if ibspec.COUNTER_BY_NAME[k].kind == "traffic" else ibspec.COUNTER_BY_NAME[k].bits)
        for k in counters}
    return p


def history(series: dict[str, list[tuple[float, int | None]]]) -> CounterHistory:
    h = CounterHistory(horizon=43200)
    for name, samples in series.items():
        for t, v in samples:
            if v is not None:
                h.record(("mlx5_0", 1, name), t, v)
            else:
                h.add(("mlx5_0", 1, name), t, v)
    return h


def by_check(findings: list) -> dict:
    return {f.check: f for f in findings}


def zeros() -> dict[str, int]:
    return {c.name: 0 for c in ibspec.COUNTERS}


def test_one_finding_per_check_ok_included() -> None:
    p = port(zeros())
    fs = evaluate_port(p, history({}), cfg(), 1000.0)
    assert [f.check for f in fs] == [*COUNTER_CHECKS, SATURATION_CHECK]
    assert all(f.status == OK and f.device == "mlx5_0" and f.port == 1 for f in fs)


def test_a_check_whose_counters_were_not_read_has_no_status() -> None:
    """No finding (no status: absent, never OK) for a check none of whose counters the port has; one for
    each check whose counters it has, and counter_saturation only where a counter that can saturate was read."""
    assert evaluate_port(port({}), history({}), cfg(), 1000.0) == []
    fs = evaluate_port(port({"symbol_errors": 0, "transmit_bytes": 5}), history({}), cfg(), 1000.0)
    assert [f.check for f in fs] == ["symbol_errors", SATURATION_CHECK] and all(f.status == OK for f in fs)
    fs = evaluate_port(port({"receive_errors": 0}), history({}), cfg(), 1000.0, sat={})     # a counter that wraps
    assert [f.check for f in fs] == ["receive_errors"]


@pytest.mark.parametrize("rise,status", [(0, OK), (119, OK), (120, WARNING), (1199, WARNING), (1200, CRITICAL)])
def test_symbol_error_thresholds(rise: int, status: int) -> None:
    h = history({"symbol_errors": [(0, 1000), (1800, 1000 + rise)]})
    f = by_check(evaluate_port(port({"symbol_errors": 1000 + rise}), h, cfg(), 1800))["symbol_errors"]
    assert f.status == status
    if status != OK:
        assert f"rose by {rise}" in f.message
        assert "per 1h" in f.message
        assert "clean or reseat" in f.message
        assert ("threshold 120" if status == WARNING else "threshold 1200") in f.message


def test_increases_outside_the_window_do_not_count() -> None:
    # 5000 symbol errors two hours ago, nothing since
    h = history({"symbol_errors": [(0, 0), (600, 5000), (4000, 5000), (7800, 5000)]})
    f = by_check(evaluate_port(port({"symbol_errors": 5000}), h, cfg(), 7800))["symbol_errors"]
    assert f.status == OK
    # a shorter configured window sees even less; a longer one sees the burst
    f = by_check(evaluate_port(port({"symbol_errors": 5000}), h, cfg(symbol_errors={"window": 86400}),
                               7800))["symbol_errors"]
    assert f.status == CRITICAL


def test_a_single_flap_warns_and_three_are_critical() -> None:
    one = history({"link_downed": [(0, 4), (60, 5)]})
    assert by_check(evaluate_port(port({"link_downed": 5}), one, cfg(), 60))["link_flap"].status == WARNING
    three = history({"link_downed": [(0, 4), (3600, 5), (7200, 6), (36000, 7)]})
    f = by_check(evaluate_port(port({"link_downed": 7}), three, cfg(), 36000))["link_flap"]
    assert f.status == CRITICAL and "link_downed rose by 3" in f.message
    assert "went down and retrained" in f.message


def test_flaps_older_than_twelve_hours_are_forgotten() -> None:
    h = history({"link_downed": [(0, 0), (100, 3), (50000, 3)]})
    f = by_check(evaluate_port(port({"link_downed": 3}), h, cfg(), 50000))["link_flap"]
    assert f.status == OK


def test_link_integrity_sums_its_counters_and_has_no_warning_level() -> None:
    h = history({"local_link_integrity_errors": [(0, 0), (60, 1)],
                 "excessive_buffer_overrun_errors": [(0, 2), (60, 2)]})
    p = port({"local_link_integrity_errors": 1, "excessive_buffer_overrun_errors": 2})
    f = by_check(evaluate_port(p, h, cfg(), 60))["link_integrity"]
    assert f.status == CRITICAL
    assert "local_link_integrity_errors+excessive_buffer_overrun_errors" in f.message


def test_receive_errors_sum_both_counters() -> None:
    h = history({"receive_errors": [(0, 0), (60, 70)], "receive_remote_physical_errors": [(0, 0), (60, 60)]})
    p = port({"receive_errors": 70, "receive_remote_physical_errors": 60})
    assert by_check(evaluate_port(p, h, cfg(), 60))["receive_errors"].status == WARNING


def test_configured_thresholds_are_used() -> None:
    h = history({"transmit_discards": [(0, 0), (60, 5)]})
    p = port({"transmit_discards": 5})
    assert by_check(evaluate_port(p, h, cfg(), 60))["transmit_discards"].status == OK
    c = cfg(transmit_discards={"warning": 1, "critical": 5})
    assert by_check(evaluate_port(p, h, c, 60))["transmit_discards"].status == CRITICAL
    c = cfg(transmit_discards={"warning": None, "critical": None})
    assert by_check(evaluate_port(p, h, c, 60))["transmit_discards"].status == OK


def test_a_reset_is_not_a_negative_rate_nor_an_alarm() -> None:
    # somebody ran perfquery -R: 900 -> 0, then 5 more
    h = history({"symbol_errors": [(0, 900), (60, 0), (120, 5)]})
    f = by_check(evaluate_port(port({"symbol_errors": 5}), h, cfg(), 120))["symbol_errors"]
    assert f.status == OK and "5 symbol_errors" in f.message


def test_saturation_is_reported_and_never_turned_into_a_rate() -> None:
    spec = ibspec.COUNTER_BY_NAME["symbol_errors"]
    top = ibspec.counter_max(spec)
    assert top == 65535
    # the collector records a saturated value as a gap (None)
    h = history({"symbol_errors": [(0, 10), (60, None), (120, None)]})
    p = port({"symbol_errors": top, "link_downed": 255, "local_link_integrity_errors": 15,
              "transmit_wait": 2**32 - 1, "transmit_bytes": 2**32 - 1})
    sat = saturation(p.counters, p.counter_bits)
    assert sat["symbol_errors"] and sat["link_downed"] and sat["local_link_integrity_errors"]
    assert sat["transmit_wait"]
    assert "transmit_bytes" not in sat                 # traffic counters are not judged
    assert "receive_errors" not in sat                 # a counter not read: no entry (no data, no verdict)
    fs = by_check(evaluate_port(p, h, cfg(), 120))
    assert "symbol_errors" not in fs                   # no rate from a saturated counter: not judged, never OK
    s = fs[SATURATION_CHECK]
    assert s.status == OK                              # default severity "ok": informational
    assert "saturated" in s.message and "symbol_errors" in s.message and "link_downed" in s.message
    assert "rates are unknown" in s.message
    assert by_check(evaluate_port(p, h, cfg(saturation_severity="warning"), 120))[SATURATION_CHECK].status == WARNING


def test_saturation_depends_on_the_width_the_value_came_from() -> None:
    # perfquery -x with the additional counters: 64-bit, so 65535 is just a number
    p = port({"symbol_errors": 65535, "link_downed": 255}, bits={"symbol_errors": 64, "link_downed": 64})
    assert not any(saturation(p.counters, p.counter_bits).values())
    p = port({"symbol_errors": 65534, "link_downed": 254})
    assert not any(saturation(p.counters, p.counter_bits).values())
    p = port({"excessive_buffer_overrun_errors": 15})
    assert saturation(p.counters, p.counter_bits)["excessive_buffer_overrun_errors"]
    fs = by_check(evaluate_port(p, history({}), cfg(), 0))
    assert "no saturated counter" not in fs[SATURATION_CHECK].message


def test_short_coverage_is_reported_in_the_message() -> None:
    h = history({"symbol_errors": [(0, 0), (30, 200)]})
    f = by_check(evaluate_port(port({"symbol_errors": 200}), h, cfg(), 30))["symbol_errors"]
    assert f.status == WARNING
    assert "in the last 30s" in f.message


# --- through the collector: sysfs counters that move between polls ---------------------------


class Clock:
    def __init__(self, t: float = 1_000_000.0):
        self.t = t

    def __call__(self) -> float:
        return self.t


def _only_sysfs() -> dict:
    return {name: {"enabled": False} for name in registered("node") if name not in ("sysfs", "hw_counters")}


@pytest.fixture
def tree(tmp_path: Path) -> Path:
    root = tmp_path / "sys"
    shutil.copytree(FIXTURE, root, symlinks=True)
    return root


def _counter(tree: Path, dev: str, port_: int, name: str, value: int | str) -> None:
    (tree / "class/infiniband" / dev / "ports" / str(port_) / "counters" / name).write_text(f"{value}\n")


def _status(snap, check: str, dev: str = "mlx5_0", port_: int = 1) -> int | None:
    """The check's status of the port (None: not judged, no status)."""
    found = [f for f in snap.findings if (f.check, f.device, f.port) == (check, dev, port_)]
    assert len(found) <= 1, found
    return found[0].status if found else None


def test_collector_detects_a_flap_and_symbol_errors_between_polls(tree: Path) -> None:
    # counts, as configured before the BER budget (tests/checks/test_ber_budget.py): this tests the collector
    config = from_dict({"paths": {"sysfs": str(tree)}, "sources": _only_sysfs(),
                        "checks": {"symbol_errors": {"warning": 120, "critical": 1200}}})
    clock = Clock()
    col = Pipeline(config, LiveIO(str(tree)), clock=clock)
    try:
        snap = col.collect()
        # the first poll: link_downed never counted (OK); symbol_error counted 3 since it was cleared, when is
        # unknown: not judged until a second sample
        assert _status(snap, "link_flap") == OK and _status(snap, "symbol_errors") is None
        clock.t += 60
        _counter(tree, "mlx5_0", 1, "link_downed", 1)
        _counter(tree, "mlx5_0", 1, "symbol_error", 3 + 150)
        snap = col.collect(["sysfs"])
        assert _status(snap, "link_flap") == WARNING
        assert _status(snap, "symbol_errors") == WARNING
        assert health_status(snap) >= WARNING
        # the other ports are untouched
        assert _status(snap, "link_flap", "mlx5_1", 1) == OK
    finally:
        col.close()


def test_collector_never_computes_a_rate_from_a_saturated_counter(tree: Path) -> None:
    # counts, as configured before the BER budget (tests/checks/test_ber_budget.py): this tests the collector
    config = from_dict({"paths": {"sysfs": str(tree)}, "sources": _only_sysfs(),
                        "checks": {"symbol_errors": {"warning": 120, "critical": 1200}}})
    clock = Clock()
    col = Pipeline(config, LiveIO(str(tree)), clock=clock)
    try:
        _counter(tree, "mlx5_0", 1, "symbol_error", 65535)         # already at the 16-bit max
        col.collect()
        clock.t += 60
        snap = col.collect(["sysfs"])                                  # still saturated: no rate
        assert snap.ib.saturation[("mlx5_0", 1)]["symbol_errors"] is True
        assert _status(snap, "symbol_errors") is None                  # its rate is unknown: not judged
        assert _status(snap, SATURATION_CHECK) == OK
        (sat,) = [f for f in snap.findings if f.check == SATURATION_CHECK and f.device == "mlx5_0" and f.port == 1]
        assert "symbol_errors" in sat.message
        clock.t += 60
        _counter(tree, "mlx5_0", 1, "symbol_error", 0)             # cleared in a maintenance window
        snap = col.collect(["sysfs"])
        assert _status(snap, "symbol_errors") == OK                 # a reset is not an alarm
        clock.t += 60
        _counter(tree, "mlx5_0", 1, "symbol_error", 130)
        snap = col.collect(["sysfs"])
        assert _status(snap, "symbol_errors") == WARNING            # rates resume from the new baseline
    finally:
        col.close()


def test_collector_sees_the_flap_that_saturates_link_downed(tree: Path) -> None:
    _counter(tree, "mlx5_0", 1, "link_downed", 254)
    # counts, as configured before the BER budget (tests/checks/test_ber_budget.py): this tests the collector
    config = from_dict({"paths": {"sysfs": str(tree)}, "sources": _only_sysfs(),
                        "checks": {"symbol_errors": {"warning": 120, "critical": 1200}}})
    clock = Clock()
    col = Pipeline(config, LiveIO(str(tree)), clock=clock)
    try:
        col.collect()
        clock.t += 60
        _counter(tree, "mlx5_0", 1, "link_downed", 255)     # the 8-bit counter's last step
        snap = col.collect(["sysfs"])
        assert _status(snap, "link_flap") == WARNING
    finally:
        col.close()
