"""Tests for fabricmon.checks.degraded_link."""

from __future__ import annotations

import pytest

from fabricmon.checks import CRITICAL, OK, WARNING, degraded_link
from fabricmon.checks.degraded_link import CHECK, REASONS
from fabricmon.config import Config, from_dict
from fabricmon.model.ports import LinkVerdict, PortView


def cfg(expected: list | None = None, **checks):
    return from_dict({"expected_links": expected or [], "checks": checks}, check_paths=False)


def evaluate_port(p: PortView, c: Config) -> LinkVerdict:
    """The check with what it receives of the config: the `checks` section and the expected links."""
    return degraded_link.evaluate_port(p, c.checks, c.expected_links)


def port(device: str = "mlx5_0", num: int = 1, *, width: int | None = 4, gen: str | None = "NDR",
         state: int | None = 4, phys: int | None = 5, layer: str = "InfiniBand",
         could_w: int | None = None, could_g: str | None = None) -> PortView:
    p = PortView(device=device, port=num, link_layer=layer, state_id=state, phys_state_id=phys,
                 width=width, generation=gen, could_be_width=could_w, could_be_generation=could_g)
    if width and gen:
        from fabricmon.model import ibspec
        p.rate_gbps = width * ibspec.generation(gen).lane_gbps
    if state is not None and not p.up:
        p.rate_gbps = 0.0
    return p


NDR4 = [{"device": "mlx5_*", "width": "4X", "speed": "NDR"}]


def flags(v) -> set[str]:
    return {r for r, on in v.degraded.items() if on}


def test_healthy_port_at_expectation() -> None:
    v = evaluate_port(port(), cfg(NDR4))
    assert flags(v) == set()
    assert set(v.degraded) == set(REASONS)
    assert v.expected_rate_gbps == 400.0
    f = v.finding
    assert (f.check, f.device, f.port, f.status) == (CHECK, "mlx5_0", 1, OK)
    assert "up at 4X NDR" in f.message


def test_faster_than_expected_is_fine() -> None:
    v = evaluate_port(port(gen="XDR"), cfg(NDR4))
    assert flags(v) == set() and v.finding.status == OK


def test_width_below_expectation() -> None:
    v = evaluate_port(port(width=1), cfg(NDR4))
    assert flags(v) == {"width"}
    assert v.finding.status == CRITICAL
    assert "1X NDR" in v.finding.message and "100 Gb/s" in v.finding.message
    assert "expected 4X NDR" in v.finding.message
    assert "too few lanes" in v.finding.message and "reseat or replace" in v.finding.message
    assert v.expected_rate_gbps == 400.0


def test_speed_below_expectation() -> None:
    v = evaluate_port(port(gen="HDR"), cfg(NDR4))
    assert flags(v) == {"speed"}
    assert v.finding.status == CRITICAL
    assert "4X HDR" in v.finding.message and "200 Gb/s" in v.finding.message
    assert "too slow a speed" in v.finding.message and "lanes" not in v.finding.message


def test_width_and_speed_both_below() -> None:
    v = evaluate_port(port(width=2, gen="HDR"), cfg(NDR4))
    assert flags(v) == {"width", "speed"}
    assert "too few lanes and too slow a speed" in v.finding.message


def test_fdr10_is_below_fdr_but_above_qdr() -> None:
    exp = [{"device": "mlx4_*", "width": "4X", "speed": "FDR"}]
    assert flags(evaluate_port(port("mlx4_0", gen="FDR10"), cfg(exp))) == {"speed"}
    exp = [{"device": "mlx4_*", "width": "4X", "speed": "FDR10"}]
    assert flags(evaluate_port(port("mlx4_0", gen="FDR10"), cfg(exp))) == set()
    assert flags(evaluate_port(port("mlx4_0", gen="QDR"), cfg(exp))) == {"speed"}


def test_speed_only_expectation_uses_the_active_width_for_the_rate() -> None:
    v = evaluate_port(port(width=2), cfg([{"device": "mlx5_*", "speed": "NDR"}]))
    assert flags(v) == set()              # no width expected: 2X is not judged
    assert v.expected_rate_gbps == 200.0


@pytest.mark.parametrize("width,gen,reason", [(4, "HDR", "speed"), (2, "NDR", "width"), (1, "XDR", "width")])
def test_bare_rate_expectation_blames_width_or_speed(width: int, gen: str, reason: str) -> None:
    v = evaluate_port(port(width=width, gen=gen), cfg([{"device": "mlx5_*", "rate_gbps": 400}]))
    assert flags(v) == {reason}
    assert v.expected_rate_gbps == 400.0
    assert "400 Gb/s" in v.finding.message


def test_bare_rate_expectation_met() -> None:
    v = evaluate_port(port(), cfg([{"device": "mlx5_*", "rate_gbps": 400}]))
    assert flags(v) == set() and v.finding.status == OK


def test_first_matching_expectation_wins_and_globs_apply() -> None:
    exp = [{"device": "mlx5_[0-3]", "port": "1", "width": "4X", "speed": "NDR"},
           {"device": "mlx5_*", "width": "4X", "speed": "HDR"}]
    c = cfg(exp)
    assert flags(evaluate_port(port("mlx5_2", gen="HDR"), c)) == {"speed"}     # first entry
    assert flags(evaluate_port(port("mlx5_5", gen="HDR"), c)) == set()         # second entry
    assert flags(evaluate_port(port("mlx5_2", 2, gen="HDR"), c)) == set()      # port glob: second
    assert evaluate_port(port("mlx5_5", gen="HDR"), c).expected_rate_gbps == 200.0
    assert evaluate_port(port("ib0_1", gen="HDR"), c).expected_rate_gbps is None


def test_ethernet_port_is_skipped_unless_the_entry_says_ethernet() -> None:
    roce = port("mlx5_bond_0", width=2, gen="NDR", layer="Ethernet", could_w=4, could_g="XDR")
    v = evaluate_port(roce, cfg(NDR4))              # the IB entry does not apply
    assert flags(v) == set() and v.finding.status == OK
    assert v.expected_rate_gbps is None
    exp = [{"device": "mlx5_bond_*", "rate_gbps": 400, "link_layer": "Ethernet"}]
    v = evaluate_port(roce, cfg(exp))
    assert flags(v) == {"width"}                     # 2 lanes < 4: blamed on the width
    assert v.expected_rate_gbps == 400.0
    exp = [{"device": "mlx5_bond_*", "rate_gbps": 200, "link_layer": "any"}]
    assert flags(evaluate_port(roce, cfg(exp))) == set()
    # and an Ethernet-only entry leaves InfiniBand ports alone
    exp = [{"device": "mlx5_*", "rate_gbps": 800, "link_layer": "Ethernet"}]
    assert evaluate_port(port(), cfg(exp)).expected_rate_gbps is None


def test_compare_with_supported_without_expectation() -> None:
    v = evaluate_port(port(width=1, could_w=4), cfg())
    assert flags(v) == {"width"}
    assert "both ends support 4X" in v.finding.message
    v = evaluate_port(port(width=2, gen="HDR", could_w=4, could_g="NDR"), cfg())
    assert flags(v) == {"width", "speed"}
    assert "both ends support NDR" in v.finding.message
    assert v.expected_rate_gbps is None
    # could-be not above the active values: healthy
    assert flags(evaluate_port(port(could_w=4, could_g="NDR"), cfg())) == set()


def test_compare_with_supported_can_be_turned_off_and_never_judges_ethernet() -> None:
    assert flags(evaluate_port(port(width=1, could_w=4), cfg(compare_with_supported=False))) == set()
    eth = port(width=1, could_w=4, layer="Ethernet")
    assert flags(evaluate_port(eth, cfg())) == set()


def test_an_expectation_overrides_could_be() -> None:
    # ibsim says "Could be 12X" everywhere; an explicit 4X expectation must not report 4X as degraded
    v = evaluate_port(port(gen="HDR", could_w=12), cfg([{"device": "*", "width": "4X", "speed": "HDR"}]))
    assert flags(v) == set()


@pytest.mark.parametrize("state,phys,text,action", [
    (1, 2, "DOWN/Polling", "peer switch port"),
    (1, 3, "DOWN/Disabled", "transceiver"),
    (2, 5, "INIT/LinkUp", "subnet manager"),
    (3, 5, "ARMED/LinkUp", "subnet manager"),
    (4, 6, "ACTIVE/LinkErrorRecovery", "cable"),
    (1, 7, "DOWN/Phy Test", "cable"),
])
def test_down_ports(state: int, phys: int, text: str, action: str) -> None:
    v = evaluate_port(port(state=state, phys=phys), cfg(NDR4))
    assert flags(v) == {"down"}
    assert v.finding.status == CRITICAL
    assert text in v.finding.message and action in v.finding.message
    assert v.expected_rate_gbps == 400.0         # still known, for the dashboard


def test_down_port_with_a_stale_rate_is_down_not_degraded() -> None:
    p = port(width=4, gen="SDR", state=1, phys=2)     # sysfs keeps "10 Gb/sec (4X SDR)" when down
    v = evaluate_port(p, cfg(NDR4))
    assert flags(v) == {"down"}


def test_down_ethernet_port_is_down_too() -> None:
    v = evaluate_port(port("mlx5_1", state=1, phys=3, layer="Ethernet"), cfg(NDR4))
    assert flags(v) == {"down"}
    assert "(Ethernet)" in v.finding.message


def test_severities_come_from_the_config() -> None:
    c = cfg(NDR4, down_severity="warning", degraded_severity="warning")
    assert evaluate_port(port(state=1, phys=2), c).finding.status == WARNING
    assert evaluate_port(port(width=1), c).finding.status == WARNING
    c = cfg(NDR4, down_severity="ok")
    v = evaluate_port(port(state=1, phys=2), c)
    assert v.finding.status == OK and v.degraded["down"]     # still flagged for the metric


def test_unknown_state_is_not_judged() -> None:
    """A port whose state no source read gets no verdict: no finding, no degraded series (never an OK)."""
    assert evaluate_port(port(state=None, phys=None, width=1), cfg(NDR4)) is None


def test_unknown_width_or_speed_is_not_degraded() -> None:
    assert flags(evaluate_port(port(width=None, gen=None), cfg(NDR4))) == set()
    v = evaluate_port(port(width=None, gen="HDR"), cfg(NDR4))
    assert flags(v) == {"speed"}
    assert "(? Gb/s;" in v.finding.message           # unknown rate is not printed as 0
