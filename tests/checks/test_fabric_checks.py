"""ECMP judgement and link-class norms on records alone (no tools)."""

from __future__ import annotations

from fabricmon.checks import fabric_ecmp, fabric_links
from fabricmon.config import from_dict
from fabricmon.checks.fabric_ecmp import FabricThresholds
from fabricmon.model.fabric import FabricPort, Link, SwitchNode

LEAF, SPINE = "00000000000000a1", "00000000000000b1"


def leaf(rates: dict[int, float], widths: dict[int, int] | None = None, down: tuple[int, ...] = ()):
    ports = {}
    for p, r in rates.items():
        lk = Link(p, SPINE, p, "Switch", "spine01", (widths or {}).get(p, 4), "HDR")
        ports[(LEAF, p)] = FabricPort(LEAF, p, "up", lk, up=p not in down, tx_rate=r)
    switches = {LEAF: SwitchNode(LEAF, "leaf07", 8, 1), SPINE: SwitchNode(SPINE, "spine01", 8, 2)}
    levels = {LEAF: 1, SPINE: 2}
    verdicts, _ = fabric_links.judge(ports, switches, levels, from_dict({}, check_paths=False).checks)
    fabric_links.apply(ports, verdicts)
    return ports, {LEAF: switches[LEAF]}, levels


def run(rates, sweeps, th=FabricThresholds(), **kw):
    ports, switches, levels = leaf(rates, **kw)
    counts: dict = {}
    for _ in range(sweeps):
        gs = fabric_ecmp.groups(ports, switches, levels)
        findings, counts = fabric_ecmp.judge(gs, counts, th, True, ports)
    return gs[0], findings


def test_flagged_only_after_n_consecutive_sweeps() -> None:
    hot = {1: 20e9, 2: 5e9, 3: 5e9, 4: 5e9}
    g, f = run(hot, 2)
    assert g.ratio > 2 and not g.imbalanced and not f
    g, f = run(hot, 3)
    assert g.judged and g.imbalanced and f[0].port is None and "leaf07 uplinks: port 1" in f[0].message


def test_every_port_over_the_threshold_is_named_not_one_of_two_equally_hot() -> None:
    """Issue 53: two equally hot ports (158.6 Gb/s each) were named one per sweep, by turns."""
    g, f = run({9: 19.825e9, 10: 19.825e9, 11: 0.0, 12: 0.0}, 3)
    assert g.imbalanced and g.hot == [9, 10] and len(f) == 1
    msg = f[0].message
    assert msg.startswith('leaf07 uplinks: ports 9-10 carry over 1.2x the mean '
                          '(port 9 to "spine01"[9] at 158.6 Gb/s, 2.0x; port 10 to "spine01"[10] at 158.6 Gb/s, 2.0x; '
                          'mean 79.3 Gb/s, max/mean 2.00'), msg
    assert "idle: ports 11-12" in msg
    # one hot port alone: named as before
    g, f = run({1: 20e9, 2: 5e9, 3: 5e9, 4: 5e9}, 3)
    assert g.hot == [1] and 'leaf07 uplinks: port 1 to "spine01"[1] carries 2.3x the mean' in f[0].message


def test_idle_group_never_flagged_whatever_its_ratio() -> None:
    g, f = run({1: 2e6, 2: 0.0, 3: 0.0, 4: 0.0}, 5)
    assert g.ratio == 4.0 and g.utilisation < 0.01 and not g.judged and not g.imbalanced and not f


def test_balanced_group_not_flagged_and_cv_threshold_optional() -> None:
    g, f = run({1: 10e9, 2: 10.5e9, 3: 9.5e9, 4: 10e9}, 5)
    assert g.ratio < 1.1 and not f
    g, f = run({1: 10e9, 2: 10.5e9, 3: 9.5e9, 4: 10e9}, 5, th=FabricThresholds(ecmp_cv=0.01))
    assert g.imbalanced


def test_down_and_degraded_links_left_out_and_reported() -> None:
    g, f = run({1: 10e9, 2: 10e9, 3: 10e9, 4: 1e9, 5: 0.0}, 5, widths={4: 1}, down=(5,))
    assert g.ports == [1, 2, 3] and g.excluded == [4, 5] and not g.imbalanced
    ports, _, levels = leaf({1: 1.0, 2: 1.0, 3: 1.0, 4: 1.0}, widths={4: 1}, down=(3,))
    assert ports[(LEAF, 4)].degraded == {"down": False, "width": True, "speed": False}
    assert ports[(LEAF, 3)].degraded["down"] and ports[(LEAF, 3)].rate_bps == 0.0
    assert ports[(LEAF, 1)].rate_bps == 25e9 and ports[(LEAF, 1)].expected == "4X HDR"
