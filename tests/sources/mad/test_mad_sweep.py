"""The sweep source's MAD path on a reader that answers in Python: a shard asks only for its own
switches, counters and link states land in SweepData as the tools path fills it, and what went
unanswered is counted, never a port down. The same path on ibsim: tests/sim/test_mad_sweep_sim.py."""

from __future__ import annotations

import time

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
            link = Link(p, GUIDS[(i + 1) % len(GUIDS)], p, "Switch", "peer", 4, "HDR")
            topo.ports[(g, p)] = PortInfo(g, p, "uplink", link, True)
        for p in (3, 4):
            topo.ports[(g, p)] = PortInfo(g, p, "unconnected", None, False)
    return topo


class FakeReader:
    def __init__(self, silent: set[str] = frozenset()) -> None:
        self.targets = []
        self.silent = silent

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
            r.ports = {p: {"transmit_bytes": 100 * p, **dict.fromkeys(error_names, 0)} for p in range(1, t.nports + 1)}
            r.link_up = {p: p != 2 for p in t.state_ports}           # port 2 reads down
        return out


def sweep(shard: str, reader: FakeReader) -> tuple[SweepData, SourceOutput]:
    cfg = from_dict({"fabric": {"shard": shard}})
    src = SweepSource(cfg, cfg.fabric.sources["sweep"])
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
    assert data.ports[(g, 4)]["transmit_bytes"] == 400
    assert all(data.ports[(g, 1)][c] == 0 for c in ERROR_COUNTERS)
    assert data.link_up[(g, 1)] is True and data.link_up[(g, 2)] is False
    assert (g, 3) not in data.link_up                                 # not cabled: not read
    assert data.state_method == "smp" and not data.missing and not out.errors


def test_a_silent_switch_is_missing_and_unanswered_never_down() -> None:
    silent = GUIDS[5]
    data, out = sweep("0/1", FakeReader(silent={silent}))
    assert silent in data.missing and silent not in data.switches
    assert not any(k[0] == silent for k in data.link_up)              # its ports keep their last state
    assert data.unanswered[silent] == data.queries[silent] and data.failed[silent] == {"counters", "port state"}
    assert any("sw05" in e for _, e in out.errors)
    assert len(data.switches) == len(GUIDS) - 1


def test_a_umad_device_error_costs_this_sweep_and_raises_nothing(monkeypatch) -> None:
    from fabricmon.sources.infiniband import mad
    closed = []
    monkeypatch.setattr(mad, "close_reader", lambda: closed.append(True))

    class Broken(FakeReader):
        def read(self, targets, deadline, error_names):
            raise OSError(5, "Input/output error")
    data, out = sweep("0/1", Broken())
    assert data.missing == set(GUIDS) and not data.ports and not data.link_up
    assert closed and any("MAD engine: Input/output error" in e for _, e in out.errors)
