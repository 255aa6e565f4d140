"""The renderer keeps each switch port family's values and text between renders (issue 40: the render's
CPU on a 26,000-port fabric): render after render of a fabric whose data counters move on some ports,
an error counter that rises, a link that goes down and a sweep that changes nothing, every exposition
equals prometheus_client's for the same snapshot; a family whose values stayed reuses its bytes, and
one that moved keeps its lines instead, so that the next render formats only the ports that moved again."""

from __future__ import annotations

import dataclasses

from fabric_snap import _state, ibnetdiscover_text

from fabricmon.model import ibspec
from fabricmon.config import from_dict
from fabricmon.exporter import render_reference
from fabricmon.exporter.render import Renderer
from fabricmon.model.compact import PortCounters
from fabricmon.model.fabric import DiscoveryData, SweepData
from fabricmon.model.snapshot import BUILD_BUCKETS, BuildStats, Snapshot
from fabricmon.parsers.ibnetdiscover import parse_ibnetdiscover
from fabricmon.pipeline.fabric import FabricModel
from fabricmon.sim.fabric import fat_tree_netfile

NAMES = [c.name for c in ibspec.COUNTERS]
TX = "fabricmon_fabric_port_transmit_bytes"
SYMBOL = "fabricmon_fabric_port_symbol_errors"


def test_kept_port_families_render_as_a_fresh_render_would() -> None:
    disc = parse_ibnetdiscover(ibnetdiscover_text(fat_tree_netfile(spines=2, leaves=4, hosts_per_leaf=2)))
    clock = [1.9e9]
    model = FabricModel(from_dict({}, check_paths=False), clock=lambda: clock[0])
    renderer = Renderer()
    states = {"discovery": _state(DiscoveryData, disc, clock[0])}
    first, second = sorted(disc.switches)[:2]

    def sweep(i: int, moving: bool, symbol: int = 0, down: tuple[str, int] | None = None, mover: str = "") -> SweepData:
        sw = SweepData(bits={n: 64 for n in NAMES})
        for g, node in disc.switches.items():
            for port in range(1, node.nports + 1):
                tx = 1000 * i + port if moving and g == (mover or first) else port
                sw.ports[(g, port)] = PortCounters.pack({n: (tx if "bytes" in n else symbol if n == "symbol_errors"
                                                              and (g, port) == (first, 1) else 0) for n in NAMES})
                sw.link_up[(g, port)] = port in node.links and (g, port) != down
            sw.switches.add(g)
        return sw

    steps = [dict(moving=True), dict(moving=True), dict(moving=False), dict(moving=False, symbol=3),
             dict(moving=False, symbol=3, down=(first, 1)), dict(moving=False, symbol=3, down=(first, 1)),
             dict(moving=True), dict(moving=True, mover=second), dict(moving=True, mover=second)]
    kept, lines = [], []
    for i, step in enumerate(steps):
        clock[0] += 15.0
        states["sweep"] = _state(SweepData, sweep(i, **step), clock[0])
        sections, findings = model.build(states)
        builds = BuildStats(1, 0.1, [1] * len(BUILD_BUCKETS))
        snap = Snapshot(time=clock[0], findings=findings, sources=dict(states), builds=builds, **sections)
        assert renderer.render(snap) == render_reference(snap)
        kept.append({k: v[2] for k, v in renderer._kept_ports.items()})
        lines.append({k: v[3] for k, v in renderer._kept_ports.items()})
    assert kept[1][TX] is None                  # moved at its last render: only its values kept
    assert kept[3][TX] is not None              # stayed: kept again ...
    assert kept[4][TX] is kept[3][TX] and kept[5][TX] is kept[3][TX]     # ... and reused
    assert kept[3][SYMBOL] is None and kept[4][SYMBOL] is not None and kept[5][SYMBOL] is kept[4][SYMBOL]
    # a family that moves keeps its lines, not its text; the next render formats only the ports that moved again
    assert lines[1][TX] is not None and lines[3][TX] is None
    labels = renderer._port_labels
    on = [i for i, lab in enumerate(labels) if f'switch_guid="{second}"' in lab]
    off = [i for i, lab in enumerate(labels) if f'switch_guid="{first}"' not in lab
           and f'switch_guid="{second}"' not in lab]
    assert on and off
    assert all(lines[7][TX][i] is lines[6][TX][i] for i in off)         # not moved: the same line, not formatted
    moved = [i for i in on if lines[8][TX][i] is not None]              # (a never-cabled down port has no line)
    assert moved and all(lines[8][TX][i] is not lines[7][TX][i] for i in moved)     # moved: formatted again


def test_large_per_port_families_are_kept_within_the_port_bound() -> None:
    """A family of a switch port's labels larger than MAX_KEPT_SAMPLES (the link info and degraded reasons of a
    26,000-port fabric) is kept within MAX_KEPT_PORT_BYTES: the same samples reuse its text; other large
    families are not kept."""
    from fabric_snap import fabric_snapshot

    snap = fabric_snapshot(fat_tree_netfile(spines=2, leaves=3, hosts_per_leaf=2), sweeps=3, drop=[("leaf02", 1)])
    snap = dataclasses.replace(snap, builds=BuildStats(1, 0.5, [1] * len(BUILD_BUCKETS)))
    renderer = Renderer()
    renderer.MAX_KEPT_SAMPLES = 4
    first = renderer.render(snap)
    assert first == render_reference(snap)
    info = renderer._kept_large["fabricmon_fabric_link_info"][1]
    assert "fabricmon_fabric_port_degraded" in renderer._kept_large
    assert renderer.render(snap) == first
    assert renderer._kept_large["fabricmon_fabric_link_info"][1] is info
    assert not any(name.startswith("fabricmon_build") for name in renderer._kept_large)
    renderer.MAX_KEPT_PORT_BYTES = 0                    # over the bound: not kept, still rendered
    renderer._kept_large.clear()
    renderer._kept_port_bytes = 0
    assert renderer.render(snap) == first and "fabricmon_fabric_link_info" not in renderer._kept_large
