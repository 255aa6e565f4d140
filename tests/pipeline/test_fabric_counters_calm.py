"""The fabric counter checks do not judge again a port that had nothing to say and whose counters, rate and
history did not move since (checks/fabric_link_errors.py CountersState): after a leaf's 40 ports went down their
counters' steps keep them in the history for hours, and judging them at every sweep cost more than the rest of
the build (bench/link_storm.py). What a build says must be what judging every port would say: a port that rises
past a threshold is flagged in that very build, and a model that judges every port each time gives the same
findings build after build."""

from __future__ import annotations

from fabric_snap import _state, ibnetdiscover_text

from fabricmon.model import ibspec
from fabricmon.config import from_dict
from fabricmon.model.compact import PortCounters
from fabricmon.model.fabric import DiscoveryData, SweepData
from fabricmon.parsers.ibnetdiscover import parse_ibnetdiscover
from fabricmon.pipeline.fabric import FabricModel
from fabricmon.sim.fabric import fat_tree_netfile

NAMES = [c.name for c in ibspec.COUNTERS]
COUNTER_CHECKS = {"symbol_errors", "link_flap", "link_error_recovery", "link_integrity", "receive_errors",
                  "transmit_discards", "counter_saturation"}


class Fabric:
    def __init__(self, judge_all: bool = False) -> None:
        self.disc = parse_ibnetdiscover(ibnetdiscover_text(fat_tree_netfile(spines=2, leaves=2, hosts_per_leaf=8)))
        self.clock = [1.9e9]
        self.model = FabricModel(from_dict({}, check_paths=False), clock=lambda: self.clock[0])
        self.states = {"discovery": _state(DiscoveryData, self.disc, self.clock[0])}
        self.leaf = next(g for g, sw in self.disc.switches.items() if sw.name == "leaf02")
        self.judge_all = judge_all

    def counters(self):
        return next(c for c in self.model.checks.ports.checks if type(c).__name__ == "FabricCounters")

    def sweep(self, errors: dict[tuple[str, int], dict[str, int]]):
        sw = SweepData(bits={n: 64 for n in NAMES}, duration=1.0)
        for g, node in self.disc.switches.items():
            for port in range(1, node.nports + 1):
                values = {n: 0 for n in NAMES}
                values.update(errors.get((g, port), {}))
                sw.ports[(g, port)] = PortCounters.pack(values)
                if port in node.links:
                    sw.link_up[(g, port)] = True
            sw.switches.add(g)
        self.clock[0] += 15.0
        self.states["sweep"] = _state(SweepData, sw, self.clock[0])
        if self.judge_all:
            self.counters().state.calm.clear()
        _, findings = self.model.build(self.states)
        return sorted((f.check, f.device, f.port, f.status, f.message) for f in findings
                      if f.check in COUNTER_CHECKS)


def test_a_calm_port_is_not_judged_again_until_it_moves_and_says_what_judging_it_would() -> None:
    fast, full = Fabric(), Fabric(judge_all=True)
    leaf = fast.leaf
    # eight ports whose receive errors were 5 and then reset to 0 (a counter cleared): in the history, nothing to say
    cleared = {(leaf, p): {"receive_errors": 5} for p in range(1, 9)}
    zero = {(leaf, p): {"receive_errors": 0} for p in range(1, 9)}
    plan = [cleared, zero, zero, zero,
            {**zero, (leaf, 3): {"receive_errors": 5000}},             # one rises past the critical 1200 an hour
            {**zero, (leaf, 3): {"receive_errors": 5000}},
            zero, zero, zero]                                            # cleared: the rise stays in the hour
    for i, errors in enumerate(plan):
        got, want = fast.sweep(errors), full.sweep(errors)
        assert got == want, f"sweep {i}"
        calm = fast.counters().state.calm
        if i in (2, 3):
            assert {(leaf, p) for p in range(1, 9)} <= set(calm)           # judged once with nothing to say
        if i == 4:
            assert [(c, p, s) for c, _, p, s, _ in got] == [("receive_errors", 3, 2)]     # in that very build
            assert (leaf, 3) not in calm
        if i > 4:
            assert [(c, p, s) for c, _, p, s, _ in got] == [("receive_errors", 3, 2)] and (leaf, 3) not in calm
