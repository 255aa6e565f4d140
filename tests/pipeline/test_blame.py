"""Which end to blame where the fabric collector reads both ends of a link (leaf01 port 2 <-> spine01 port 1):
errors received at one end only name the far end's transmitter/module, at both ends the cable, in the
collector's own finding. A host link's two ends are joined in Prometheus instead (the promtool case
"FabricmonLinkErrorsBlame" in fabricmon/deploy/prometheus/fabricmon.rules.test.yml)."""

from __future__ import annotations

from fabricmon.config import from_dict
from fabricmon.model.fabric import DiscoveryData, SweepData
from fabricmon.pipeline.fabric import FabricModel
from helpers import Clock
from test_fabric_model import LEAF, SPINE, discovery, state


def run(leaf_errors: list[int], spine_errors: list[int]):
    clock = Clock(0.0)
    model = FabricModel(from_dict({}, check_paths=False), clock=clock)
    disc = state(DiscoveryData, discovery(), 0.0)
    findings = []
    for t, (le, se) in zip((1.0, 60.0, 120.0), zip(leaf_errors, spine_errors)):
        clock.t = t
        zero = {"symbol_errors": 0, "receive_errors": 0}
        sweep = SweepData(ports={(LEAF, 1): dict(zero), (LEAF, 2): {"symbol_errors": 0, "receive_errors": le},
                                 (SPINE, 1): {"symbol_errors": 0, "receive_errors": se}},
                          bits={"receive_errors": 16, "symbol_errors": 16}, switches={LEAF, SPINE})
        _, findings = model.build({"discovery": disc, "sweep": state(SweepData, sweep, t)})
    return {(f.device, f.port): f for f in findings if f.check == "receive_errors" and f.status}


def test_errors_at_one_end_only_name_the_far_ends_transmitter() -> None:
    by = run([0, 500, 1000], [0, 0, 0])
    f = by[(LEAF, 2)]
    assert "the far end (spine01 port 1) receives clean (0)" in f.message, f.message
    assert "replace the module at spine01 port 1" in f.message
    assert (SPINE, 1) not in by


def test_errors_at_both_ends_name_the_cable() -> None:
    by = run([0, 500, 1000], [0, 400, 900])
    assert "receives errors too (900 in the same window): both ends err, so replace the cable" in by[(LEAF, 2)].message
    assert "the far end (leaf01 port 2) receives errors too" in by[(SPINE, 1)].message


def test_a_host_port_has_no_far_end_verdict_in_the_collector() -> None:
    clock = Clock(0.0)
    model = FabricModel(from_dict({}, check_paths=False), clock=clock)
    disc = state(DiscoveryData, discovery(), 0.0)
    for t, v in ((1.0, 0), (60.0, 2000)):
        clock.t = t
        sweep = SweepData(ports={(LEAF, 1): {"symbol_errors": 0, "receive_errors": v}},
                          bits={"receive_errors": 16}, switches={LEAF})
        _, findings = model.build({"discovery": disc, "sweep": state(SweepData, sweep, t)})
    (f,) = [f for f in findings if f.check == "receive_errors" and f.status]
    assert "far end" not in f.message           # its other end is the host's: Prometheus joins the two
