"""The renderer keeps each switch port family's values and text between renders (issue 40: the render's
CPU on a 26,000-port fabric): render after render of a fabric whose data counters move on some ports,
an error counter that rises, a link that goes down and a sweep that changes nothing, every exposition
equals prometheus_client's for the same snapshot; a family whose values stayed reuses its bytes, and
one that moved keeps no text until its values stay."""

from __future__ import annotations

from fabric_snap import _state, ibnetdiscover_text

from fabricmon import ibspec
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
    first = sorted(disc.switches)[0]

    def sweep(i: int, moving: bool, symbol: int = 0, down: tuple[str, int] | None = None) -> SweepData:
        sw = SweepData(bits={n: 64 for n in NAMES})
        for g, node in disc.switches.items():
            for port in range(1, node.nports + 1):
                tx = 1000 * i + port if moving and g == first else port
                sw.ports[(g, port)] = PortCounters.pack({n: (tx if "bytes" in n else symbol if n == "symbol_errors"
                                                              and (g, port) == (first, 1) else 0) for n in NAMES})
                sw.link_up[(g, port)] = port in node.links and (g, port) != down
            sw.switches.add(g)
        return sw

    steps = [dict(moving=True), dict(moving=True), dict(moving=False), dict(moving=False, symbol=3),
             dict(moving=False, symbol=3, down=(first, 1)), dict(moving=False, symbol=3, down=(first, 1))]
    kept = []
    for i, step in enumerate(steps):
        clock[0] += 15.0
        states["sweep"] = _state(SweepData, sweep(i, **step), clock[0])
        sections, findings = model.build(states)
        builds = BuildStats(1, 0.1, [1] * len(BUILD_BUCKETS))
        snap = Snapshot(time=clock[0], findings=findings, sources=dict(states), builds=builds, **sections)
        assert renderer.render(snap) == render_reference(snap)
        kept.append({k: v[2] for k, v in renderer._kept_ports.items()})
    assert kept[1][TX] is None                  # moved at its last render: only its values kept
    assert kept[3][TX] is not None              # stayed: kept again ...
    assert kept[4][TX] is kept[3][TX] and kept[5][TX] is kept[3][TX]     # ... and reused
    assert kept[3][SYMBOL] is None and kept[4][SYMBOL] is not None and kept[5][SYMBOL] is kept[4][SYMBOL]
