"""The events source (sources/infiniband/events.py) on a host interface that answers in Python as ibsim and
opensm answered (tests/fixtures/sa/): the master SM found from the collector's own port, one subscription per
trap, renewed when the master changes or restarts; a report of trap 128 re-reads that switch's ports at once;
a run with nothing new returns the last record (the pipeline rebuilds nothing); what is refused, unanswered or
not possible is mode sweep with the reason; closing unsubscribes. The same against the real opensm on ibsim:
tests/sim/test_events_sim.py."""

from __future__ import annotations

import errno
import json
import struct
import threading
import time
from pathlib import Path

from fabricmon.config import from_dict
from fabricmon.host.sa import SaReport
from fabricmon.host.umad import UmadUnavailable
from fabricmon.model.fabric import Link, PortInfo, SwitchNode, Topology
from fabricmon.model.fabric_events import FabricEventsData
from fabricmon.pipeline.source import Inputs
from fabricmon.sources.infiniband.events import EventsSource
from fabricmon.sources.infiniband.mad import codec, notice

FIX = json.loads((Path(__file__).parents[1] / "fixtures" / "sa" / "opensm-ibsim.json").read_text())
LEAF, SPINE = "0000000000200002", "0000000000200000"


def port_info(port: int, up: bool) -> bytes:
    """A switch port's PortInfo GetResp as ibsim answers a 4X HDR port (the fields decode_port_link reads)."""
    m = bytearray(256)
    struct.pack_into(">BBBBHHQHHI", m, 0, 1, 1, 1, 0x81, 0, 0, 0, 0x15, 0, port)
    d = 64
    m[d + 29], m[d + 30], m[d + 31] = 3, 3, 2                 # 1X|4X enabled and supported, 4X active
    m[d + 32] = (7 << 4) | (4 if up else 1)                   # speeds supported, PortState Active / Down
    m[d + 33] = (5 if up else 2) << 4                         # LinkUp / Polling
    m[d + 35] = (1 << 4) | 7
    m[d + 62], m[d + 63] = (4 << 4) | 7, 7                    # HDR active, FDR-HDR supported and enabled
    return bytes(m)


def topology() -> Topology:
    topo = Topology()
    topo.switches[SPINE] = SwitchNode(SPINE, "spine01", 4, 2)
    topo.switches[LEAF] = SwitchNode(LEAF, "leaf01", 4, 6)
    up = Link(3, SPINE, 1, "Switch", "spine01", 4, "HDR", remote_lid=2)
    host = Link(1, "0000000000100004", 1, "Ca", "node02 mlx5_0", 4, "HDR", remote_lid=4)
    topo.switches[LEAF].links = {3: up, 1: host}
    topo.switches[SPINE].links = {1: Link(1, LEAF, 3, "Switch", "leaf01", 4, "HDR", remote_lid=6)}
    for g, sw in topo.switches.items():
        for p in range(1, sw.nports + 1):
            lk = sw.links.get(p)
            topo.ports[(g, p)] = PortInfo(g, p, "up" if lk else "unconnected", lk, lk is not None)
    return topo


class FabricIO:
    """mad_* and sa_* as the fabric answers: the local port (LID 4, SM LID 1), the SM's SMInfo (its GUID
    and activity count settable), every switch port's PortInfo (`down`: the ports reading down), the
    subscriptions (`refuse`: their status), and the reports queued."""

    def __init__(self) -> None:
        self.sm_guid, self.activity, self.sm_answers, self.refuse = "0000000000100001", 100, True, 0
        self.down: set[tuple[str, int]] = set()
        self.mads: list = []
        self.sets: list[tuple[int, int, bool]] = []      # (LID, trap, subscribe)
        self.reports: list[SaReport] = []
        self.closed = False
        self.lids = {2: SPINE, 6: LEAF}

    def mad_open(self, settings) -> None:
        pass

    def mad_run(self, requests, deadline, times=None):
        out = []
        for r in requests:
            self.mads.append(r)
            attr = struct.unpack_from(">H", r.mad, 16)[0]
            if r.mad[1] == 0x81:
                out.append(bytes.fromhex(FIX["local_port_info"]))
            elif attr == 0x0020:
                if not self.sm_answers:
                    out.append(None)
                    continue
                m = bytearray(bytes.fromhex(FIX["sm_info"]))
                struct.pack_into(">QQI", m, 64, int(self.sm_guid, 16), 1, self.activity)
                out.append(bytes(m))
            else:
                port = struct.unpack_from(">I", r.mad, 20)[0]
                out.append(port_info(port, (self.lids[r.lid], port) not in self.down))
        return out

    def sa_open(self) -> None:
        pass

    def sa_run(self, requests, timeout):
        out = []
        for lid, mad in requests:
            trap, sub = struct.unpack_from(">H", mad, 56 + 26)[0], bool(mad[56 + 23])
            self.sets.append((lid, trap, sub))
            a = bytearray(bytes.fromhex(FIX["subscribe_128_accepted"]))
            struct.pack_into(">H", a, 56 + 26, trap)
            if self.refuse:
                struct.pack_into(">H", a, 4, self.refuse)
                a[56 + 23] = 0
            out.append(bytes(a))
        return out

    def sa_reports(self, timeout):
        out, self.reports = self.reports, []
        return out

    def sa_close(self) -> None:
        self.closed = True

    def report(self, lid: int, guid: str) -> None:
        self.reports.append(SaReport(time.monotonic(), 1, bytes(notice.encode_report(notice.trap128_notice(lid, guid), 7))))


def source(**opts) -> EventsSource:
    cfg = from_dict({"fabric": {"sources": {"events": {"wait": 0.1, "batch": 0.0, **opts}}}})
    return EventsSource(cfg.fabric.sources["events"])


def run(src: EventsSource, io: FabricIO, continuous: bool = True, topo: Topology | None = None) -> FabricEventsData:
    out = src.collect(io, Inputs(deadline=time.monotonic() + 10, inventory=topo or TOPO, cancel=threading.Event(),
                                 continuous=continuous))
    assert isinstance(out.data, FabricEventsData)
    return out.data


TOPO = topology()


def test_it_subscribes_with_the_master_and_re_reads_a_reported_switch_at_once() -> None:
    io, src = FabricIO(), source()
    first = run(src, io)
    assert first.mode == "events" and first.reason == "" and first.sm_lid == 1 and first.sm_guid == "0000000000100001"
    assert sorted(t for _, t, _ in io.sets) == sorted(notice.TRAPS) and {lid for lid, _, _ in io.sets} == {1}
    assert first.traps == notice.TRAPS and first.subscribed_at is not None
    assert run(src, io) is first                                 # nothing new: the same record, no rebuild
    io.down.add((LEAF, 3))
    io.report(6, LEAF)
    got = run(src, io)
    assert got is not first and got.reports == {128: 1} and got.rereads == 1 and got.reported == {LEAF: 1}
    assert got.reads[(LEAF, 3)].up is False and got.reads[(LEAF, 1)].up is True and (SPINE, 1) not in got.reads
    assert [r.seq for r in sorted(got.reads.values(), key=lambda r: r.seq)] == [1, 2, 3, 4]    # every port, in order
    asked = [r for r in io.mads if r.lid == 6]
    assert [struct.unpack_from(">I", r.mad, 20)[0] for r in asked] == [1, 2, 3, 4]
    assert got.latency is not None and got.latency < 5
    assert (got.reads[(LEAF, 1)].width, got.reads[(LEAF, 1)].speed) == (4, "HDR")
    assert len(io.sets) == len(notice.TRAPS)                     # not subscribed again


def test_a_report_naming_no_switch_of_the_topology_is_counted_and_re_reads_nothing() -> None:
    io, src = FabricIO(), source()
    run(src, io)
    io.report(77, "00000000002000ff")
    got = run(src, io)
    assert got.reports == {128: 1} and got.unmatched == 1 and got.rereads == 0 and not got.reads


def test_a_new_or_restarted_master_is_subscribed_to_again() -> None:
    io, src = FabricIO(), source()
    run(src, io)
    n = len(io.sets)
    io.activity = 5                                          # the activity count went back: a restart
    run(src, io)
    assert len(io.sets) == 2 * n
    io.sm_guid, io.activity = "0000000000100003", 6          # another master
    got = run(src, io)
    assert len(io.sets) == 3 * n and got.sm_guid == "0000000000100003"
    io.activity = 50                                         # counting on: the same subscription
    run(src, io)
    assert len(io.sets) == 3 * n


def test_what_keeps_it_from_events_is_mode_sweep_with_the_reason() -> None:
    io, src = FabricIO(), source()
    io.refuse = 0x0200
    got = run(src, io)
    assert got.mode == "sweep" and "refused the subscription" in got.reason and "0x0200 (request invalid)" in got.reason
    io2, src2 = FabricIO(), source()
    io2.sm_answers = False
    assert "does not answer SMInfo" in run(src2, io2).reason
    once = run(source(), FabricIO(), continuous=False)
    assert once.mode == "sweep" and "single collection" in once.reason

    class NoPort(FabricIO):
        def sa_open(self) -> None:
            raise UmadUnavailable(errno.ENODEV, "a replayed bundle has no subnet manager to subscribe to")
    none = run(source(), NoPort())
    assert none.mode == "sweep" and "a replayed bundle has no subnet manager" in none.reason
    tools = from_dict({"fabric": {"sweep_method": "tools", "sources": {"events": {"wait": 0.1}}}})
    got = EventsSource(tools.fabric.sources["events"]).collect(
        FabricIO(), Inputs(deadline=time.monotonic() + 10, inventory=TOPO, continuous=True)).data
    assert got.mode == "sweep" and "sweep_method is tools" in got.reason


def test_closing_unsubscribes_what_the_sm_accepted() -> None:
    io, src = FabricIO(), source()
    run(src, io)
    src.close()
    assert [t for _, t, sub in io.sets if not sub] == list(notice.TRAPS) and io.closed
