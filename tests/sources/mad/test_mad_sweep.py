"""The sweep source's MAD path on a reader that answers in Python: a shard asks only for its own
switches, counters and link states land in SweepData as the tools path fills it, and what went
unanswered is counted, never a port down. The same path on ibsim: tests/sim/test_mad_sweep_sim.py."""

from __future__ import annotations

import time

import pytest

from fabricmon.config import from_dict
from fabricmon.model.fabric import Link, PortInfo, SwitchNode, SweepData, Topology, in_shard
from fabricmon.pipeline.source import Inputs, SourceOutput
from fabricmon.sources.infiniband.mad import SwitchResult
from fabricmon.sources.infiniband.sweep import ERROR_COUNTERS, SweepSource

GUIDS = [f"{0x200000 + i:016x}" for i in range(16)]


def topology() -> Topology:
    topo = Topology()
    for i, g in enumerate(GUIDS):
        topo.switches[g] = SwitchNode(g, f"sw{i:02d}", 4, 10 + i)
        for p in (1, 2):                    # ports 1-2 cabled, 3-4 not
            link = Link(p, GUIDS[(i + 1) % len(GUIDS)], p, "Switch", "peer", 4, "HDR", remote_lid=10 + (i + 1) % len(GUIDS))
            topo.ports[(g, p)] = PortInfo(g, p, "uplink", link, True)
        for p in (3, 4):
            topo.ports[(g, p)] = PortInfo(g, p, "unconnected", None, False)
    return topo


class FakeReader:
    def __init__(self, silent: set[str] = frozenset(), read_at: dict[str, float] | None = None) -> None:
        self.targets = []
        self.silent = silent
        self.read_at = read_at or {}

    def read(self, targets, deadline, error_names):
        self.targets = list(targets)
        out = {}
        for t in targets:
            r = out[t.guid] = SwitchResult()
            r.queries = t.nports + 1 + len(t.state_ports)
            if t.guid in self.silent:       # nothing answered
                r.unanswered, r.failed = r.queries, {"counters", "port state"}
                continue
            r.errors_ok = True
            asked = t.counter_ports if t.counter_ports is not None else range(1, t.nports + 1)
            r.ports = {p: {"transmit_bytes": 100 * p, **dict.fromkeys(error_names, 0)} for p in asked}
            r.link_up = {p: p != 2 for p in t.state_ports}           # port 2 reads down
            r.read_at = self.read_at.get(t.guid)
        return out


def sweep(shard: str, reader: FakeReader) -> tuple[SweepData, SourceOutput]:
    cfg = from_dict({"fabric": {"shard": shard}})
    src = SweepSource(cfg.fabric.sources["sweep"])
    topo = topology()
    mine = {g for g in topo.switches if in_shard(g, *cfg.fabric.shard)}
    data, out = SweepData(), SourceOutput()
    src._sweep_mad(reader, Inputs(deadline=time.monotonic() + 10), out, topo, mine, data)
    return data, out


def test_a_shard_asks_only_for_its_own_switches_and_the_shards_cover_the_fabric_once() -> None:
    seen = []
    for i in range(4):
        reader = FakeReader()
        data, _ = sweep(f"{i}/4", reader)
        asked = [t.guid for t in reader.targets]
        assert asked == sorted(g for g in GUIDS if in_shard(g, i, 4))
        assert data.switches == set(asked)
        seen += asked
    assert sorted(seen) == GUIDS


def test_counters_and_link_state_land_as_the_tools_path_fills_them() -> None:
    reader = FakeReader()
    data, out = sweep("0/1", reader)
    assert all(t.state_ports == (1, 2) for t in reader.targets)      # the cabled ports' PortInfo
    g = GUIDS[3]
    assert data.ports[(g, 2)]["transmit_bytes"] == 200 and (g, 4) not in data.ports     # 4: never cabled
    assert all(data.ports[(g, 1)][c] == 0 for c in ERROR_COUNTERS)
    assert data.link_up[(g, 1)] is True and data.link_up[(g, 2)] is False
    assert (g, 3) not in data.link_up                                 # not cabled: not read
    assert data.state_method == "smp" and not data.missing and not out.errors


def test_each_switch_is_timed_at_its_own_read_not_at_the_sweeps_end() -> None:
    """read_ago: how long before the sweep's end a switch's traffic counters answered (the engine's times,
    FabricReader's SwitchResult.read_at), so the rates take it at its read; a switch the reader did not time
    (a replayed bundle) is taken at the end."""
    now = time.monotonic()
    early, late = GUIDS[1], GUIDS[2]
    data, _ = sweep("0/1", FakeReader(read_at={early: now - 0.8, late: now - 0.05}))
    assert 0.8 <= data.read_ago[early] < 0.8 + 5 and 0.05 <= data.read_ago[late] < 0.05 + 5
    assert data.read_ago[early] - data.read_ago[late] == pytest.approx(0.75, abs=0.002)
    assert set(data.read_ago) == {early, late}          # the others: not timed, taken at the sweep's end


def test_a_silent_switch_is_missing_and_unanswered_never_down() -> None:
    silent = GUIDS[5]
    data, out = sweep("0/1", FakeReader(silent={silent}))
    assert silent in data.missing and silent not in data.switches
    assert not any(k[0] == silent for k in data.link_up)              # its ports keep their last state
    assert data.unanswered[silent] == data.queries[silent] and data.failed[silent] == {"counters", "port state"}
    assert any("sw05" in e for _, e in out.errors)
    assert len(data.switches) == len(GUIDS) - 1


def test_a_umad_device_error_costs_this_sweep_and_raises_nothing() -> None:
    class Broken(FakeReader):
        def read(self, targets, deadline, error_names):
            raise OSError(5, "Input/output error")
    data, out = sweep("0/1", Broken())
    assert data.missing == set(GUIDS) and not data.ports and not data.link_up
    assert any("MAD engine: Input/output error" in e for _, e in out.errors)


def no_umad(monkeypatch) -> list[bool]:
    """The host's umad port refusing to open as it does where there is none (host.mad.MadHost.open
    raising); returns the list of its calls."""
    from fabricmon.host import mad
    calls: list[bool] = []

    def refuse(*a, **k):
        calls.append(True)
        raise mad.UmadUnavailable(95, "umad_open_port(default, 0) failed: Operation not supported")
    monkeypatch.setattr(mad.MadHost, "open", refuse)
    return calls


def fallback_source(method: str):
    cfg = from_dict({"fabric": {"sweep_method": method}})
    return SweepSource(cfg.fabric.sources["sweep"])


def test_auto_falls_back_to_the_tools_where_no_umad_port_opens_and_tries_again_later(monkeypatch) -> None:
    from fabricmon.host.io import LiveIO
    from fabricmon.sources.infiniband import sweep as sweep_mod
    calls = no_umad(monkeypatch)
    src, io = fallback_source("auto"), LiveIO()
    out = SourceOutput()
    assert src._mad_reader(io, out) is None and not out.errors       # auto: the tools, no error
    assert src._method == "tools" and len(calls) == 1
    assert src._mad_reader(io, out) is None and len(calls) == 1      # not tried again within MAD_RECHECK
    src._mad_failed_at -= sweep_mod.MAD_RECHECK + 1
    assert src._mad_reader(io, out) is None and len(calls) == 2      # tried again after it
    assert fallback_source("tools")._mad_reader(io, out) is None and len(calls) == 2    # tools: never tried


def test_sweep_method_mad_without_a_umad_port_says_why_and_never_runs_the_tools(monkeypatch) -> None:
    from fabricmon.host.io import LiveIO
    no_umad(monkeypatch)
    ran = []
    monkeypatch.setattr(LiveIO, "run", lambda self, argv, *a, **k: ran.append(argv))
    topo = topology()
    topo.cache_file = "/nonexistent/topology.cache"
    out = fallback_source("mad").collect(LiveIO(), Inputs(deadline=time.monotonic() + 10, inventory=topo))
    assert out.data is None and not ran
    assert [k for k, _ in out.errors] == ["read"] and "no umad port opens: " in out.errors[0][1]


def test_auto_with_its_port_lost_fails_the_sweep_and_never_runs_the_tools(monkeypatch) -> None:
    """A port that was open and is lost (host.mad.MadHost.open raising UmadLost until it is open again) is a
    failed sweep, no records, one error saying so, even with sweep_method auto: not the tools (a reset HCA
    fails them alike; a simulator the engine cannot reach would be read by another route)."""
    from fabricmon.host import mad
    from fabricmon.host.io import LiveIO

    def lost(*a, **k):
        raise mad.UmadLost(107, "the MAD port was lost (Transport endpoint is not connected); reopening, try 2 in 2 s")
    monkeypatch.setattr(mad.MadHost, "open", lost)
    ran = []
    monkeypatch.setattr(LiveIO, "run", lambda self, argv, *a, **k: ran.append(argv))
    topo = topology()
    topo.cache_file = "/nonexistent/topology.cache"
    src = fallback_source("auto")
    out = src.collect(LiveIO(), Inputs(deadline=time.monotonic() + 10, inventory=topo))
    assert out.data is None and not ran and src._mad_failed_at is None
    assert out.errors == [("read", "MAD engine: the MAD port was lost (Transport endpoint is not connected); "
                                   "reopening, try 2 in 2 s; no switch read this sweep")]


def test_a_bundle_recorded_with_the_tools_replays_the_tools(monkeypatch) -> None:
    from fabricmon.host.bundle import ReplayIO
    from helpers import REPO
    calls = no_umad(monkeypatch)
    out = SourceOutput()
    io = ReplayIO(REPO / "tests" / "fixtures" / "fabric" / "fat-tree")        # no "mad" in its manifest
    assert fallback_source("auto")._mad_reader(io, out) is None and not calls and not out.errors
    assert fallback_source("mad")._mad_reader(io, out) is None and not calls
    assert "no umad port opens: the bundle holds no MAD exchanges" in out.errors[0][1]


def test_a_silent_switch_through_the_engine_is_unresponsive_as_through_the_tools_and_never_down() -> None:
    """The engine's unanswered queries feed the `unresponsive` check (5 of the last 7 sweeps by default)
    as the tools' do: WARNING at the fifth silent sweep, its ports keep their state."""
    from fabricmon.model.fabric import DiscoveryData
    from fabricmon.model.snapshot import SourceState
    from fabricmon.pipeline.fabric import FabricModel

    def state(records, data, t):
        return SourceState(name=records.__name__, enabled=True, interval=1, timeout=1, records=records, up=True,
                           ran=True, data=data, data_time=t)
    topo = topology()
    disc = DiscoveryData(switches={g: SwitchNode(g, sw.name, sw.nports, sw.lid,
                                                 {p: topo.ports[(g, p)].link for p in (1, 2)})
                                   for g, sw in topo.switches.items()})
    model = FabricModel(from_dict({}, check_paths=False))
    model.build({"discovery": state(DiscoveryData, disc, 0.0)})
    silent = GUIDS[5]
    for t in (1.0, 2.0, 3.0, 4.0, 5.0):
        data, _ = sweep("0/1", FakeReader(silent={silent}))
        secs, findings = model.build({"sweep": state(SweepData, data, t)})
        sec = secs["fabric"]
        unresp = [f for f in findings if f.check == "unresponsive"]
        assert [f.device for f in unresp] == ([silent] if t == 5.0 else []), t
        assert sec.ports[(silent, 1)].up                      # unreached is not down
    assert unresp[0].status == 1 and "sw05" in unresp[0].message
    assert sec.check_status[("unresponsive", silent)] == 1 and sec.check_status[("unresponsive", GUIDS[4])] == 0


def test_what_each_end_may_train_at_lands_by_node_and_port() -> None:
    from fabricmon.model.link_ability import from_masks
    hdr, edr = from_masks(0x03, 0x1F, 0x7, 0x7, 0x7, 0xF), from_masks(0x03, 0x1F, 0x7, 0x7, 0x3, 0xF)

    class Reader(FakeReader):
        def read(self, targets, deadline, error_names):
            out = super().read(targets, deadline, error_names)
            for t in targets:
                out[t.guid].link = {p: (4, "HDR", hdr) for p in t.state_ports}
                out[t.guid].peer_ability = {p: edr for p, _lid, _rport in t.peers}
            return out
    reader = Reader()
    data, _ = sweep("1/4", reader)
    mine = {t.guid for t in reader.targets}
    for t in reader.targets:
        # the far ends asked for are the links to switches of other shards (every link here is switch to switch)
        assert {p for p, _, _ in t.peers} == {p for p in (1, 2) if GUIDS[(GUIDS.index(t.guid) + 1) % 16] not in mine}
    g = reader.targets[0].guid
    assert data.link_rate[(g, 1)] == (4, "HDR") and data.abilities[(g, 1)] == hdr
    far = [(GUIDS[(GUIDS.index(t.guid) + 1) % 16], p) for t in reader.targets for p, _, _ in t.peers]
    assert far and all(data.abilities[k] == edr for k in far)


def test_a_port_never_cabled_has_no_counters_asked_until_a_discovery_shows_it_cabled() -> None:
    """The plan is made again from each new topology (a new discovery): a port never cabled (3 and 4 here)
    is not asked for counters, and is from the discovery that shows it cabled on; a port cabled before and
    down now (down_links) is still asked, as is its link state."""
    cfg = from_dict({})
    src = SweepSource(cfg.fabric.sources["sweep"])
    reader = FakeReader()

    def once(topo: Topology) -> SweepData:
        data = SweepData()
        src._sweep_mad(reader, Inputs(deadline=time.monotonic() + 10), SourceOutput(), topo, set(topo.switches), data)
        return data
    data = once(topology())
    assert all(t.counter_ports == (1, 2) for t in reader.targets)
    assert (GUIDS[0], 3) not in data.ports and (GUIDS[0], 1) in data.ports
    later = topology()                              # the next discovery: GUIDS[0] port 3 cabled
    link = Link(3, GUIDS[1], 3, "Switch", "peer", 4, "HDR", remote_lid=11)
    later.ports[(GUIDS[0], 3)] = PortInfo(GUIDS[0], 3, "uplink", link, True)
    later.ports[(GUIDS[0], 1)] = PortInfo(GUIDS[0], 1, "unconnected", None, False)     # port 1 went away ...
    later.down_links[(GUIDS[0], 1)] = topology().ports[(GUIDS[0], 1)].link           # ... cabled before
    data = once(later)
    t0 = next(t for t in reader.targets if t.guid == GUIDS[0])
    assert t0.counter_ports == (1, 2, 3) and set(t0.state_ports) == {1, 2, 3}
    assert (GUIDS[0], 3) in data.ports and (GUIDS[0], 1) in data.ports
