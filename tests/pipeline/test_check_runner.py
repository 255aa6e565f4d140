"""The one check shape and the one runner (checks.shape, pipeline.checks), node and fabric alike:

- the runner runs exactly the checks one of whose names has its inputs present, and reports exactly
  those names as ran; a status is exported for those and none for the others (absent, never OK);
- no check changes its inputs: every registered check is run, in real builds of the replayed fixture
  bundles (the node's and both fabric kinds'), on inputs compared before and after with a deep copy;
- every check module is registered with a runner, every name it declares is reported by a registered
  check, and the models call no check function by hand.
"""

from __future__ import annotations

import copy
import importlib
import re
from collections.abc import Iterator
from dataclasses import fields, is_dataclass
from pathlib import Path
from typing import Any

import pytest

import fabricmon.checks as checks_pkg
from fabricmon.checks.shape import Outcome, Report, report
from fabricmon.config import load
from fabricmon.host.bundle import ReplayIO
from fabricmon.model.finding import OK, Finding
from fabricmon.pipeline.checks import CheckRunner
from fabricmon.pipeline.fabric import fabric_pipeline
from fabricmon.pipeline.scheduler import Pipeline
from helpers import FIXTURES, REPO

NODE_BUNDLES = sorted(p for p in (FIXTURES / "bundles").iterdir() if (p / "bundle.json").is_file())
FABRIC_BUNDLES = [FIXTURES / "fabric" / "fat-tree", FIXTURES / "fabric" / "ethernet"]
# checks/ modules that hold no check: the shape, the inputs, the composed settings, message helpers
# link_errors: the counter rules, run by degraded_link (the node) and fabric_link_errors (the fabric)
NOT_CHECKS = {"__init__", "shape", "fabric_inputs", "node_inputs", "settings", "port_text", "blame", "link_errors"}


def same(a: Any, b: Any, path: str = "inputs") -> Iterator[str]:
    """Where `a` and its deep copy `b` differ (structurally: dataclasses and objects by their fields)."""
    if a is b:
        return
    if isinstance(a, dict):
        if not isinstance(b, dict) or set(a) != set(b):
            yield f"{path}: keys {sorted(map(str, set(a) ^ set(b if isinstance(b, dict) else {})))[:5]}"
            return
        for k in a:
            yield from same(a[k], b[k], f"{path}[{k!r}]")
    elif isinstance(a, (list, tuple)):
        if type(a) is not type(b) or len(a) != len(b):
            yield f"{path}: length {len(a)} != {len(b)}"
            return
        for i, (x, y) in enumerate(zip(a, b)):
            yield from same(x, y, f"{path}[{i}]")
    elif isinstance(a, (set, frozenset, str, bytes, int, float, bool, type(None))) or callable(a) or isinstance(a, type):
        if a != b and not (callable(a) and not isinstance(a, type)):
            yield f"{path}: {a!r:.60} != {b!r:.60}"
    elif is_dataclass(a):
        for f in fields(a):
            yield from same(getattr(a, f.name), getattr(b, f.name), f"{path}.{f.name}")
    elif hasattr(a, "__dict__") or hasattr(a, "__slots__"):
        names = list(vars(a)) if hasattr(a, "__dict__") else [n for c in type(a).__mro__ for n in getattr(c, "__slots__", ())]
        for n in names:
            if hasattr(a, n):
                yield from same(getattr(a, n), getattr(b, n), f"{path}.{n}")
    elif a != b:
        yield f"{path}: {a!r:.60} != {b!r:.60}"


class Guarded:
    """A registered check, run as the runner runs it, on inputs compared before and after the run."""

    def __init__(self, check: Any, seen: dict[str, list[str]]):
        self.check, self.seen = check, seen
        self.reports, self.settings, self.state = check.reports, check.settings, check.state

    def run(self, inputs: Any) -> Outcome:
        before = copy.deepcopy(inputs)
        out = self.check.run(inputs)
        self.seen.setdefault(type(self.check).__name__, []).extend(same(inputs, before))
        return out


def guard(runner: CheckRunner[Any, Any], seen: dict[str, list[str]], present: list[set[str]]) -> None:
    runner.checks = tuple(Guarded(c, seen) for c in runner.checks)
    run = runner.run

    def recording(inputs: Any, have: set[str], out: Any) -> Any:
        present.append(set(have))
        return run(inputs, have, out)
    runner.run = recording      # type: ignore[method-assign]


def node_snapshot(bundle: Path, seen: dict[str, list[str]], present: list[set[str]]) -> Any:
    cfg = load(str(bundle / "config.yml"), check_paths=False)
    pipe = Pipeline(cfg, ReplayIO(bundle))
    try:
        guard(pipe.model.checks, seen, present)
        return pipe.collect(), pipe.model.checks
    finally:
        pipe.close()


def fabric_snapshot(bundle: Path, seen: dict[str, list[str]], present: list[set[str]]) -> Any:
    cfg = load(str(bundle / "config.yml"), check_paths=False)
    t = [1_800_000_000.0]
    pipe = fabric_pipeline(cfg, ReplayIO(bundle), clock=lambda: t[0])
    try:
        for runner in (pipe.model.checks.ports, pipe.model.checks.poll, pipe.model.checks.jobs):
            guard(runner, seen, present)
        pipe.collect()
        t[0] += 60.0
        return pipe.collect(["sweep"]), pipe.model.checks
    finally:
        pipe.close()


# --- the runner ------------------------------------------------------------------------------------

class Toy:
    """A check that counts its runs and reports two names: one needs "a", the other one of two counters."""

    def __init__(self) -> None:
        self.reports = (report("first", "a"), report("second", any_of=("counter:x", "counter:y")))
        self.settings = None
        self.state = {"runs": 0}

    def run(self, inputs: object) -> Outcome:
        self.state["runs"] += 1
        return Outcome([Finding("first", "d", None, OK, "x"), Finding("second", "d", None, OK, "y")], ("d",), 1)


def test_the_runner_runs_only_the_checks_whose_inputs_are_present_and_reports_exactly_those() -> None:
    toy, other = Toy(), Toy()
    other.reports = (report("third", "b"),)
    def compose(out: dict[str, int], derived: object) -> None:
        assert isinstance(derived, int)
        out["written"] = out.get("written", 0) + derived
    runner: CheckRunner[object, dict[str, int]] = CheckRunner([toy, other], compose)
    out: dict[str, int] = {}
    ran = runner.run(None, {"c"}, out)            # nothing either needs: none runs, no status
    assert not ran.names and not ran.findings and toy.state["runs"] == other.state["runs"] == 0 and not out
    ran = runner.run(None, {"a"}, out)            # "first" only: the finding of "second" is no status
    assert list(ran.names) == ["first"] and [f.check for f in ran.findings] == ["first"]
    assert toy.state["runs"] == 1 and other.state["runs"] == 0 and out == {"written": 1}
    ran = runner.run(None, {"a", "counter:y", "b"}, out)     # one of its counters is enough
    assert list(ran.names) == ["first", "second", "third"] and ran.names["first"] == ("d",)
    assert [f.check for f in ran.findings] == ["first", "second", "first", "second"]
    assert Report("n", frozenset({"a"}), frozenset({"counter:x"})).runs({"a", "counter:x"})
    assert not Report("n", frozenset({"a"}), frozenset({"counter:x"})).runs({"a"})


@pytest.mark.parametrize("bundle", NODE_BUNDLES, ids=lambda p: p.name)
def test_node_runs_and_reports_exactly_the_checks_whose_inputs_are_present(bundle: Path) -> None:
    seen: dict[str, list[str]] = {}
    present: list[set[str]] = []
    snap, runner = node_snapshot(bundle, seen, present)
    have = present[-1]
    ran = {r.name for c in runner.checks for r in c.reports if r.runs(have)}
    not_ran = set(runner.names()) - ran
    statuses = {f.check for f in snap.findings}
    assert statuses <= ran, statuses - ran
    assert not statuses & not_ran
    assert "expected_inventory" in statuses and "degraded_link" in statuses
    # a check that needs a record runs exactly when a source yielded it (these bundles hold no NCCL dumps)
    for name, record in {"optics_thresholds": "OpticsData", "nccl_slow_collective": "NcclData",
                         "nccl_ras_peer": "RasData", "kernel_log": "KernelLogData"}.items():
        assert (name in ran) == (record in have), name
    assert "nccl_slow_collective" not in ran and "nccl_slow_collective" not in statuses


@pytest.mark.parametrize("bundle", FABRIC_BUNDLES, ids=lambda p: p.name)
def test_fabric_runs_and_reports_exactly_the_checks_whose_inputs_are_present(bundle: Path) -> None:
    seen: dict[str, list[str]] = {}
    present: list[set[str]] = []
    snap, checks = fabric_snapshot(bundle, seen, present)
    fab = snap.fabric
    have = set().union(*present)
    runners = (checks.ports, checks.poll, checks.jobs)
    ran = {r.name for rn in runners for c in rn.checks for r in c.reports if r.runs(have)}
    every = {n for rn in runners for n in rn.names()}
    per_switch = {c for c, g in fab.check_status if g}
    assert per_switch <= ran and {f.check for f in snap.findings} <= ran
    assert not {c for c, _ in fab.check_status} & (every - ran)
    # every check that ran and judges switches has a status on every switch it judged, OK included: the sweep's
    # checks on every switch the sweep read (all of them here), routing on every switch with uplinks, ECMP on
    # every switch with an uplink group whose rates two sweeps gave
    for name in per_switch:
        on = {g for c, g in fab.check_status if c == name}
        assert on <= set(fab.switches), name
        if name in {"degraded_link", "unresponsive", "uplinks", "receive_errors", "transmit_discards"}:
            assert on == set(fab.switches), name
        elif name == "routing":
            assert on == {g for g, lv in fab.levels.items() if lv < max(fab.levels.values())}
    if fab.kind == "ethernet":      # the ifTable's two counters, wrapping: no other counter check, no saturation
        assert not {"symbol_errors", "link_flap", "counter_saturation", "routing", "sm"} & per_switch
        assert {"receive_errors", "transmit_discards", "degraded_link", "ecmp", "uplinks"} <= per_switch
    else:
        assert {"symbol_errors", "counter_saturation", "routing"} <= per_switch and "pfc_storm" not in per_switch


# --- checks never change their inputs ----------------------------------------------------------------

@pytest.mark.parametrize("bundle", [*NODE_BUNDLES, *FABRIC_BUNDLES], ids=lambda p: p.name)
def test_no_check_changes_its_inputs(bundle: Path) -> None:
    seen: dict[str, list[str]] = {}
    (fabric_snapshot if "fabric" in bundle.parts else node_snapshot)(bundle, seen, [])
    assert seen, "no check ran"
    changed = {name: diffs[:3] for name, diffs in seen.items() if diffs}
    assert not changed, changed


def test_the_design_drift_and_switch_optics_checks_do_not_change_their_inputs(tmp_path: Path) -> None:
    """The fabric checks the replayed bundles do not reach: the design, the scheduler's topology and the
    switches' optics, each on a model build (the planted inputs of their own tests)."""
    from fabric_snap import _state, ibnetdiscover_text
    from model.test_design import changed, fat_tree, live
    from model.test_slurm_topology import fat_tree_and_conf, storage_rail

    from fabricmon.config import from_dict
    from fabricmon.model import design as dm
    from fabricmon.model.design import DesignData
    from fabricmon.model.fabric import DiscoveryData
    from fabricmon.model.optics import LaneDiag, ModuleDiag, SwitchOpticsData
    from fabricmon.model.slurm_topology import SchedulerTopologyData, parse_rail
    from fabricmon.parsers.design import parse_design
    from fabricmon.parsers.entity_sensor import SwitchOptics
    from fabricmon.parsers.ibnetdiscover import parse_ibnetdiscover
    from fabricmon.parsers.slurm import parse_topology_conf
    from fabricmon.pipeline.fabric import FabricModel
    from fabricmon.sim.fabric import fat_tree_netfile
    seen: dict[str, list[str]] = {}
    design = parse_design(dm.design_csv(live(fat_tree())))
    disc = parse_ibnetdiscover(ibnetdiscover_text(changed(fat_tree(), spine_guid=False)))
    leaf = next(g for g, sw in disc.switches.items() if sw.links)
    port = next(iter(disc.switches[leaf].links))
    mod = ModuleDiag(module_class="switch", lanes={n: LaneDiag(n, 0.5, 1.0, 7.0) for n in (1, 2, 3, 4)})
    _, conf, _ = fat_tree_and_conf()
    net = storage_rail(fat_tree_netfile(spines=2, leaves=4, hosts_per_leaf=2, uplinks_per_spine=2), 8)
    cases = [
        {"discovery": _state(DiscoveryData, disc, 1.0),
         "design": _state(DesignData, DesignData("/etc/fabricmon/design.csv", design), 1.0),
         "optics": _state(SwitchOpticsData, SwitchOpticsData(switches={leaf: SwitchOptics(
             ports={port: mod}, port_names={port: "p"}, oper_up={port: True})}), 1.0)},
        {"discovery": _state(DiscoveryData, parse_ibnetdiscover(ibnetdiscover_text(net)), 1.0),
         "slurm_topology": _state(SchedulerTopologyData, SchedulerTopologyData(
             "/etc/slurm/topology.conf", tuple(parse_topology_conf(conf.replace("Nodes=node[05-06]", "Nodes=node05"))),
             parse_rail(["hca=mlx5_0"])), 1.0)},
    ]
    for states in cases:
        model = FabricModel(from_dict({"paths": {"state_dir": str(tmp_path)}}, check_paths=False),
                            clock=lambda: 1_800_000_000.0)
        guard(model.checks.ports, seen, [])
        _, findings = model.build(states)
        assert {"design", "slurm_topology"} & {f.check for f in findings}
    assert {"DesignCheck", "SchedulerTopology", "Optics"} <= set(seen)
    changed_ = {name: diffs[:3] for name, diffs in seen.items() if diffs}
    assert not changed_, changed_


def test_a_check_that_changes_its_inputs_is_caught() -> None:
    """The comparison the test above relies on sees a change to a port in the section being built."""
    from fabricmon.model.fabric import FabricPort, FabricSection
    sec = FabricSection(ports={("a", 1): FabricPort("a", 1, "up", None, up=True)})
    before = copy.deepcopy(sec)
    sec.ports[("a", 1)].degraded = {"down": True}
    assert list(same(sec, before)) == ["inputs.ports[('a', 1)].degraded: keys ['down']"]


# --- every check registered, none hand-wired -------------------------------------------------------

def registered() -> list[Any]:
    from fabricmon.config import from_dict
    from fabricmon.pipeline.fabric import FabricModel
    from fabricmon.pipeline.node import NodeModel
    cfg = from_dict({}, check_paths=False)
    node, fabric = NodeModel(cfg), FabricModel(cfg)
    return [*node.checks.checks, *fabric.checks.ports.checks, *fabric.checks.poll.checks, *fabric.checks.jobs.checks]


def test_every_check_module_is_registered_with_the_runner_and_none_is_hand_wired() -> None:
    checks = registered()
    modules = {type(c).__module__ for c in checks}
    names = {r.name for c in checks for r in c.reports}
    for p in sorted(Path(checks_pkg.__file__).parent.glob("*.py")):
        if p.stem in NOT_CHECKS:
            continue
        m = importlib.import_module(f"fabricmon.checks.{p.stem}")
        assert m.__name__ in modules, f"{m.__name__} has no check registered with a runner"
        declared = {getattr(m, "CHECK", None), *getattr(m, "CHECKS", ())} - {None}
        assert declared and declared <= names, (m.__name__, declared - names)
    # the models and the fabric checks' module call no check function themselves: the runner runs them
    for p in sorted((REPO / "fabricmon" / "pipeline").glob("*.py")):
        src = p.read_text()
        called = re.findall(r"\b(\w+)\.(evaluate|evaluate_port|judge|evaluate_learned|waiting)\(", src)
        assert not called, (p.name, called)
