"""The symbol-error budget as a bit error ratio (checks.link_errors.ber_limits): it scales with the
link's data rate, so a 4X NDR link is held to its own 1e-12 budget (1,440 an hour), not to the
120 an hour of a ~33 Gb/s link; configured counts keep working."""

from __future__ import annotations

import pytest

from fabricmon.checks import CRITICAL, OK, WARNING
from fabricmon.checks.link_errors import ber_limits, evaluate_port
from fabricmon.config import ConfigError, from_dict
from fabricmon.model.history import CounterHistory
from fabricmon.model.ports import PortView


def cfg(**checks):
    """The `checks` section, all a counter check receives."""
    return from_dict({"checks": checks}, check_paths=False).checks


def run(rise: int, rate_gbps: float | None, config=None, generation="NDR"):
    p = PortView(device="mlx5_0", port=1, state_id=4, phys_state_id=5, width=4, generation=generation,
                 rate_gbps=rate_gbps)
    p.counters = {"symbol_errors": rise}
    p.counter_bits = {"symbol_errors": 16}
    h = CounterHistory(horizon=43200)
    for t, v in ((0.0, 0), (3600.0, rise)):
        h.record(("mlx5_0", 1, "symbol_errors"), t, v)
    f = [x for x in evaluate_port(p, h, config or cfg(), 3600.0) if x.check == "symbol_errors"][0]
    return f


@pytest.mark.parametrize("rate,rise,status", [
    (400.0, 1439, OK), (400.0, 1440, WARNING), (400.0, 14399, WARNING), (400.0, 14400, CRITICAL),   # 4X NDR
    (100.0, 359, OK), (100.0, 360, WARNING), (100.0, 3600, CRITICAL),                            # 4X EDR
    (800.0, 2879, OK), (800.0, 2880, WARNING),                                                   # 4X XDR
])
def test_budget_scales_with_the_link(rate: float, rise: int, status: int) -> None:
    f = run(rise, rate)
    assert f.status == status, f.message
    assert f"over the {rate:g} Gb/s link" in f.message
    if status == WARNING:
        assert f"threshold {rate * 3.6:.0f} per 1h" in f.message and "budget 1e-12" in f.message


def test_ndr_is_not_held_to_the_33_gbps_budget() -> None:
    # 500 symbol errors in an hour: over the old fixed 120/h, within NDR's 1e-12 budget
    assert run(500, 400.0).status == OK
    # the same 500 without a known rate (a down port's stale rate, a switch port without a link): counts apply
    assert run(500, None).status == WARNING


def test_configured_counts_keep_working() -> None:
    counted = cfg(symbol_errors={"window": 3600, "warning": 120, "critical": 1200})
    assert counted.counters["symbol_errors"].ber_warning is None
    f = run(500, 400.0, counted)
    assert f.status == WARNING and "threshold 120 per 1h" in f.message
    # counts and a BER given together: the BER rules where the rate is known, the counts elsewhere
    both = cfg(symbol_errors={"warning": 120, "critical": 1200, "ber_warning": 1e-14})
    assert run(15, 400.0, both).status == WARNING          # 1e-14 x 400 Gb/s x 1 h = 14.4
    assert run(15, None, both).status == OK


def test_ber_limits_and_config_errors() -> None:
    cc = cfg().counters["symbol_errors"]
    assert (cc.ber_warning, cc.ber_critical) == (1e-12, 1e-11)
    assert ber_limits(cc, 400.0) == pytest.approx((1440.0, 14400.0))
    assert ber_limits(cc, 0.0) is None
    with pytest.raises(ConfigError) as e:
        cfg(symbol_errors={"ber_warning": 2})
    assert "checks.symbol_errors.ber_warning" in str(e.value)
    with pytest.raises(ConfigError) as e:
        cfg(symbol_errors={"ber_warning": 1e-10, "ber_critical": 1e-12})
    assert "ber_warning" in str(e.value)
    with pytest.raises(ConfigError):
        cfg(link_flap={"ber_warning": 1e-12})       # only symbol_errors is a bit error ratio
