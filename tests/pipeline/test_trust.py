"""Trust by construction (issue 46): no verdict without fresh data, node and fabric alike.

- over every node bundle, with each source disabled in turn and with each failing in turn: no status
  exists for a check that needs that source's records, `fabricmon_health_status` is not 0 while an
  enabled source fails, and `source_up` is 0 for the source that failed;
- the fabric: a switch never swept has no status and the collector is UNKNOWN; every sweep failing
  after a good one: the sweep's checks keep their verdicts only while the last good sweep is fresh
  (its staleness bound), then have none, and the collector is not OK;
- the states the issue names on the node: the port inventory before its first answer, a GPU whose path
  to the NICs could not be read;
- `collect()` waits once for all sources: N hung sources with deadline D return within D + 1 s;
- a build that raises is published at once as an UNKNOWN snapshot (health and readiness say so);
- a snapshot is never changed after it is published (rendering it, its verdict, its pages and later
  builds leave it as it was).
"""

from __future__ import annotations

import copy
import threading
import time
from pathlib import Path

import pytest

from fabricmon.config import load
from fabricmon.exporter.render import render
from fabricmon.host.bundle import ReplayIO
from fabricmon.model.finding import OK
from fabricmon.model.health import UNKNOWN, health_status, not_ready, unjudged
from fabricmon.model.snapshot import SourceState, fresh_states
from fabricmon.pages import Pages
from fabricmon.pipeline.fabric import fabric_pipeline
from fabricmon.pipeline.scheduler import Pipeline
from fabricmon.pipeline.source import SourceOutput
from fabricmon.report import status_of, verdict
from helpers import FIXTURES
from test_check_runner import same

NODE_BUNDLES = sorted(p for p in (FIXTURES / "bundles").iterdir() if (p / "bundle.json").is_file())
FAT_TREE = FIXTURES / "fabric" / "fat-tree"
T0 = 1_800_000_000.0


class Clock:
    def __init__(self, t: float = T0) -> None:
        self.t = t

    def __call__(self) -> float:
        return self.t


def node_pipeline(bundle: Path, disabled: str | None = None) -> Pipeline:
    cfg = load(str(bundle / "config.yml"), check_paths=False)
    if disabled is not None:
        sc = cfg.sources[disabled]
        cfg.sources[disabled] = type(sc)(**{**{f: getattr(sc, f) for f in sc.__dataclass_fields__}, "enabled": False})
    return Pipeline(cfg, ReplayIO(bundle))


def fail(pipe: Pipeline, name: str, message: str = "it broke") -> None:
    """Make a source's every run fail: no records, one error."""
    def broken(io: object, inputs: object) -> SourceOutput:
        out = SourceOutput()
        out.error("read", f"{name}: {message}")
        return out
    pipe.sources[name].collect = broken      # type: ignore[method-assign]


def needing(pipe: Pipeline, record: type | None) -> set[str]:
    """The check names whose needs name this record type."""
    if record is None:
        return set()
    return {r.name for c in pipe.model.checks.checks for r in c.reports if record.__name__ in r.needs}


def statuses(snap: object) -> set[str]:
    return {f.check for f in snap.findings}      # type: ignore[attr-defined]


# --- the node: each source disabled, each failing -----------------------------------------------------------

def _sources(bundle: Path) -> list[str]:
    pipe = node_pipeline(bundle)
    try:
        return [n for n in pipe.enabled() if pipe.states[n].active]
    finally:
        pipe.close()


@pytest.mark.parametrize("bundle", NODE_BUNDLES, ids=lambda p: p.name)
def test_each_source_disabled_in_turn_leaves_its_checks_without_status(bundle: Path) -> None:
    for name in _sources(bundle):
        pipe = node_pipeline(bundle, disabled=name)
        try:
            snap = pipe.collect()
            gone = needing(pipe, pipe.specs[name].records)
            assert not statuses(snap) & gone, (name, statuses(snap) & gone)
            assert name not in snap.sources or not snap.sources[name].up
        finally:
            pipe.close()


@pytest.mark.parametrize("bundle", NODE_BUNDLES, ids=lambda p: p.name)
def test_each_source_failing_in_turn_is_down_not_ok_and_judges_nothing(bundle: Path) -> None:
    for name in _sources(bundle):
        pipe = node_pipeline(bundle)
        try:
            fail(pipe, name)
            snap = pipe.collect()
            gone = needing(pipe, pipe.specs[name].records)
            assert not statuses(snap) & gone, (name, statuses(snap) & gone)
            assert snap.sources[name].up is False, name
            assert health_status(snap) != OK, name
            assert any(f.check == "source" and f.device == name for f in verdict_findings_of(snap)), name
            # `check` reads the same verdict: its exit code is the snapshot's health
            assert status_of(verdict(snap)) == health_status(snap)
            text = render(snap).decode()
            assert f'fabricmon_source_up{{source="{name}"}} 0.0' in text, name
            assert f"\nfabricmon_health_status {float(health_status(snap))}\n" in text
        finally:
            pipe.close()


FABRIC_BUNDLES = [FAT_TREE, FIXTURES / "fabric" / "ethernet"]


def fabric_needs(record: type | None) -> str | None:
    """The name a fabric check's needs use for a source's records (checks.fabric_inputs)."""
    from fabricmon.model.design import DesignData
    from fabricmon.model.fabric import DiscoveryData, LftData, SmData, SweepData
    from fabricmon.model.optics import SwitchOpticsData
    from fabricmon.model.slurm_topology import SchedulerTopologyData
    names = {DiscoveryData: "topology", LftData: "forwarding_tables", SmData: "subnet_manager",
             SweepData: "SweepData", DesignData: "design", SchedulerTopologyData: "scheduler_topology",
             SwitchOpticsData: "transceiver_readings"}
    if record is not None and record.__name__ == "ClusterJobsData":
        return "running_jobs"
    return names.get(record) if record is not None else None


def fabric_checks_needing(pipe: Pipeline, need: str | None) -> set[str]:
    checks = pipe.model.checks
    return {r.name for rn in (checks.ports, checks.poll, checks.jobs) for c in rn.checks for r in c.reports
            if need is not None and need in r.needs}


@pytest.mark.parametrize("bundle", FABRIC_BUNDLES, ids=lambda p: p.name)
def test_each_fabric_source_disabled_or_failing_in_turn_leaves_its_checks_without_status(bundle: Path) -> None:
    cfg = load(str(bundle / "config.yml"), check_paths=False)
    probe = fabric_pipeline(cfg, ReplayIO(bundle))
    names = [n for n in probe.enabled() if probe.states[n].active]
    probe.close()
    for name in names:
        for how in ("disabled", "failing"):
            cfg = load(str(bundle / "config.yml"), check_paths=False)
            if how == "disabled":
                sc = cfg.fabric.sources[name]
                cfg.fabric.sources[name] = type(sc)(**{**{f: getattr(sc, f) for f in sc.__dataclass_fields__},
                                                      "enabled": False})
            pipe = fabric_pipeline(cfg, ReplayIO(bundle), clock=Clock())
            try:
                if how == "failing":
                    fail(pipe, name)
                snap = pipe.collect()
                gone = fabric_checks_needing(pipe, fabric_needs(pipe.specs[name].records))
                got = {f.check for f in snap.findings}
                if snap.fabric is not None:
                    got |= {c for c, _ in snap.fabric.check_status}
                assert not got & gone, (name, how, got & gone)
                if how == "failing":
                    assert snap.sources[name].up is False and health_status(snap) != OK, name
            finally:
                pipe.close()


def verdict_findings_of(snap: object) -> list:
    from fabricmon.model.health import verdict_findings
    return verdict_findings(snap)      # type: ignore[arg-type]


def test_the_inventory_before_its_first_answer_is_unknown_not_ok() -> None:
    bundle = NODE_BUNDLES[0]
    pipe = node_pipeline(bundle)
    try:
        sections, findings = pipe.model.build(pipe.states, (False, False))    # no source has answered yet
        assert sections["unknown"] and "not been read yet" in sections["unknown"]
        assert not [f for f in findings if f.check == "expected_inventory"]
    finally:
        pipe.close()


def test_a_gpu_whose_path_is_unreadable_is_not_judged_and_the_node_is_unknown() -> None:
    """The dgx-h100 bundle with the GPUs' PCI paths unreadable: no affinity finding for them (never an OK
    "not checked"), and the node's verdict is UNKNOWN, naming them."""
    import dataclasses

    from fabricmon.model.gpu import GpuData
    bundle = FIXTURES / "bundles" / "dgx-h100"
    pipe = node_pipeline(bundle)
    try:
        snap = pipe.collect()
        st = snap.sources["gpu"]
        assert isinstance(st.data, GpuData) and st.data.gpus
        blind = GpuData(gpus=[dataclasses.replace(g, pci_path=None, pci_chain=None) for g in st.data.gpus],
                        nvml_available=True)
        pipe.states["gpu"].data = blind
        # the same paths unreadable to the pcie source: it reads no GPU's link either
        from fabricmon.model.pcie import PcieData
        pcie = pipe.states["pcie"].data
        pipe.states["pcie"].data = PcieData({a: d for a, d in pcie.devices.items() if d.kind != "gpu"})
        snap = pipe.rebuild()
        assert not [f for f in snap.findings if f.check == "gpu_nic_affinity"]
        assert health_status(snap) == UNKNOWN and "GPU0" in unjudged(snap)
    finally:
        pipe.close()


# --- freshness ----------------------------------------------------------------------------------------------

def test_records_are_fresh_within_their_bound_and_gone_after() -> None:
    st = SourceState("sweep", True, 15.0, 30.0, records=dict, up=False, ran=True, data={}, data_time=T0)
    assert st.stale_bound == 60.0
    assert fresh_states({"sweep": st}, T0 + 59.0)["sweep"].data == {}           # one failed run is ridden out
    late = fresh_states({"sweep": st}, T0 + 61.0)["sweep"]
    assert late.data is None and not late.up and any("no fresh records for 61 s" in e for e in late.active_errors)
    assert st.data == {}                # the pipeline's own state is not changed: a build reads copies
    custom = SourceState("x", True, 15.0, 5.0, data=1, data_time=T0, stale_after=5.0)
    assert fresh_states({"x": custom}, T0 + 6.0)["x"].data is None


def fabric(clock: Clock) -> Pipeline:
    cfg = load(str(FAT_TREE / "config.yml"), check_paths=False)
    return fabric_pipeline(cfg, ReplayIO(FAT_TREE), clock=clock)


def switch_statuses(snap: object, check: str) -> set[str]:
    return {g for c, g in snap.fabric.check_status if c == check and g}      # type: ignore[attr-defined]


def test_a_switch_never_swept_has_no_status_and_the_collector_is_unknown() -> None:
    clock = Clock()
    pipe = fabric(clock)
    try:
        fail(pipe, "sweep", "MAD engine: No such device; no switch read this sweep")
        snap = pipe.collect()
        assert snap.fabric is not None and snap.fabric.switches
        assert not {g for _, g in snap.fabric.check_status if g}        # no switch judged by anything
        assert health_status(snap) == UNKNOWN and snap.sources["sweep"].up is False
        assert not_ready(snap)                                           # and /readyz says so
    finally:
        pipe.close()


def test_every_sweep_failing_after_a_good_one_takes_the_verdicts_away_once_stale() -> None:
    clock = Clock()
    pipe = fabric(clock)
    try:
        pipe.collect()
        clock.t += 15.0
        good = pipe.collect(["sweep"])           # two good sweeps: every counter has two samples
        sweep_checks = {"degraded_link", "unresponsive", "uplinks", "symbol_errors", "counter_saturation"}
        every = set(good.fabric.switches)
        for c in sweep_checks:
            assert switch_statuses(good, c) == every, c
        assert health_status(good) != UNKNOWN
        fail(pipe, "sweep", "MAD engine: No such device; no switch read this sweep")
        clock.t += 15.0
        ridden = pipe.collect(["sweep"])         # one failed sweep: the last good one is still fresh
        assert ridden.sources["sweep"].up is False and health_status(ridden) != OK
        assert switch_statuses(ridden, "degraded_link") == every
        clock.t += pipe.states["sweep"].stale_bound
        dead = pipe.collect(["sweep"])           # every sweep since failed: nothing the sweep read is judged
        for c in sweep_checks | {"ecmp", "routing"}:
            assert not switch_statuses(dead, c), c
        assert dead.sources["sweep"].up is False and health_status(dead) == UNKNOWN
        text = render(dead).decode()
        assert 'fabricmon_source_up{source="sweep"} 0.0' in text and "\nfabricmon_health_status 3.0\n" in text
        assert 'fabricmon_fabric_check_status{check="degraded_link"' not in text
    finally:
        pipe.close()


# --- one wait, one deadline ---------------------------------------------------------------------------------

@pytest.mark.parametrize("n", [1, 5, 20])
def test_n_hung_sources_cost_the_deadline_once(n: int) -> None:
    """Sources that ignore their deadline (a bug, a hung library call): collect() waits for all of them at
    once and returns within the deadline plus 2 s (the build after it, on a loaded 2-core machine: 2.35 s
    once at a load of 6), whatever their number: waited for one after another, 5 would take 10 s."""
    bundle = NODE_BUNDLES[0]
    pipe = node_pipeline(bundle)
    release = threading.Event()
    try:
        names = list(pipe.specs)
        while len(names) < n:       # more hung sources than the node has: copies of one, under their own names
            name = f"hung{len(names)}"
            pipe.specs[name] = pipe.specs["sysfs"]
            pipe.sources[name] = copy.copy(pipe.sources["sysfs"])
            pipe.states[name] = SourceState(name, True, 15.0, 1.0, records=None)
            pipe.source_configs = {**pipe.source_configs, name: pipe.source_configs["sysfs"]}
            names.append(name)
        hung = names[:n]
        for name in hung:
            pipe.sources[name].collect = lambda io, inputs: (release.wait(60), SourceOutput())[1]  # type: ignore
        deadline_s = 2.0
        t0 = time.monotonic()
        snap = pipe.collect(hung, deadline=time.monotonic() + deadline_s)
        took = time.monotonic() - t0
        assert took <= deadline_s + 2.0, took
        for name in hung:
            assert any("did not finish by the deadline" in e for e in snap.sources[name].active_errors), name
    finally:
        release.set()
        pipe.close()


# --- a failed build is the snapshot -------------------------------------------------------------------------

def test_a_build_that_raises_is_published_at_once_as_unknown() -> None:
    pipe = node_pipeline(NODE_BUNDLES[0])
    try:
        pipe.collect()

        def broken(states: object, inventory_ran: object) -> object:
            raise ValueError("a bug")
        pipe.model.build = broken      # type: ignore[method-assign,assignment]
        snap = pipe.rebuild()
        assert snap.builds.failed and snap.builds.failures == 1
        assert health_status(snap) == UNKNOWN and "the snapshot build failed: ValueError('a bug')" in snap.unknown
        assert not_ready(snap)
        text = render(snap).decode()
        assert "\nfabricmon_snapshot_build_failures_total 1.0\n" in text and "\nfabricmon_health_status 3.0\n" in text
        assert 'fabricmon_source_up{source="sysfs"} 1.0' in text        # the sources' states are still there
    finally:
        pipe.close()


# --- a snapshot is a value ----------------------------------------------------------------------------------

@pytest.mark.parametrize("bundle", [NODE_BUNDLES[0], FAT_TREE], ids=lambda p: p.name)
def test_a_published_snapshot_is_never_changed(bundle: Path) -> None:
    clock = Clock()
    pipe = fabric(clock) if bundle == FAT_TREE else node_pipeline(bundle)
    try:
        snap = pipe.collect()
        before = copy.deepcopy(snap)
        with pytest.raises(AttributeError):
            snap.unknown = "x"         # type: ignore[misc]      (frozen)
        render(snap)
        verdict(snap)
        pages = Pages(snap)
        pages.get("page", {})
        clock.t += 15.0
        pipe.collect()                 # a later full build
        pipe.rebuild()                 # and one that reuses the last full build's section
        assert not list(same(snap, before, "snapshot"))
    finally:
        pipe.close()
