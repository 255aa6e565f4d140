"""The fabric model's event build (pipeline/fabric.py): the SM's reports' re-reads (model.fabric_events) applied
to the last full build without one. The reported port and the far end of its inter-switch link turn down within
that build, degraded_link says so, the exposition's reason="down" changes; every other port is the last build's
own object (what a build costs is what changed); a sweep that started after a read supersedes it, a read made
while a sweep ran wins over what that sweep read; a sweep that sees a change no report announced demotes the mode
to sweep, with the reason, until a report comes."""

from __future__ import annotations

from fabric_snap import _state, ibnetdiscover_text

from fabricmon.model import ibspec
from fabricmon.config import from_dict
from fabricmon.exporter.render import Renderer
from fabricmon.model.compact import PortCounters
from fabricmon.model.fabric import DiscoveryData, SweepData
from fabricmon.model.fabric_events import EventRead, FabricEventsData
from fabricmon.model.snapshot import BuildStats, Snapshot
from fabricmon.parsers.ibnetdiscover import parse_ibnetdiscover
from fabricmon.pipeline.fabric import FabricModel
from fabricmon.sim.fabric import fat_tree_netfile

NAMES = [c.name for c in ibspec.COUNTERS]


class Fabric:
    def __init__(self) -> None:
        self.disc = parse_ibnetdiscover(ibnetdiscover_text(fat_tree_netfile(spines=2, leaves=4, hosts_per_leaf=2)))
        self.clock = [1.9e9]
        self.model = FabricModel(from_dict({}, check_paths=False), clock=lambda: self.clock[0])
        self.states = {"discovery": _state(DiscoveryData, self.disc, self.clock[0])}
        self.by_name = {sw.name: g for g, sw in self.disc.switches.items()}
        self.events = FabricEventsData(mode="events", sm_lid=1, sm_guid="0000000000100001", traps=(128,))
        self.renderer = Renderer()
        self.i = 0

    def sweep(self, down: set[tuple[str, int]] = frozenset(), duration: float = 1.0):
        self.i += 1
        sw = SweepData(bits={n: 64 for n in NAMES}, duration=duration)
        for g, node in self.disc.switches.items():
            for port in range(1, node.nports + 1):
                sw.ports[(g, port)] = PortCounters.pack({n: 100 * self.i + port if "bytes" in n else 0 for n in NAMES})
                if port in node.links:
                    sw.link_up[(g, port)] = (g, port) not in down
            sw.switches.add(g)
        self.clock[0] += 15.0
        self.states["sweep"] = _state(SweepData, sw, self.clock[0])
        return self.build()

    def report(self, reads: dict[tuple[str, int], bool], dt: float = 1.0):
        """The events source's next record: these ports re-read (the reported switches)."""
        ev = self.events
        seq = ev.seq
        new = dict(ev.reads)
        reported = dict(ev.reported)
        rereads = ev.rereads
        for key, up in reads.items():
            seq += 1
            new[key] = EventRead(seq, up, 4, "HDR")
        for g in {k[0] for k in reads}:
            rereads += 1
            reported[g] = rereads
        self.events = FabricEventsData(mode="events", sm_lid=1, sm_guid=ev.sm_guid, traps=ev.traps,
                                       reports={128: ev.reports.get(128, 0) + 1}, reads=new, seq=seq, reported=reported,
                                       rereads=rereads, latency=0.002)
        self.clock[0] += dt
        self.states["events"] = _state(FabricEventsData, self.events, self.clock[0])
        return self.build()

    def build(self):
        sections, findings = self.model.build(self.states)
        return sections["fabric"], findings

    def text(self, sec, findings) -> str:
        snap = Snapshot(time=self.clock[0], findings=findings, sources=self.states, builds=BuildStats(), fabric=sec)
        return self.renderer.render(snap).decode()


def down(text: str, g: str, port: int) -> str:
    line = f'fabricmon_fabric_port_degraded{{port="{port}",reason="down",switch_guid="{g}"}} '
    return next(ln for ln in text.splitlines() if ln.startswith(line)).split()[-1]


def test_a_reported_port_turns_down_without_a_full_build_and_only_it_and_its_far_end_change() -> None:
    f = Fabric()
    f.sweep()
    sec0, _ = f.sweep()
    text0 = f.text(sec0, [])
    leaf, spine = f.by_name["leaf01"], f.by_name["spine01"]
    lk = sec0.ports[(leaf, 3)].link
    assert lk is not None and lk.remote_guid == spine
    far = (spine, lk.remote_port)
    assert down(text0, leaf, 3) == "0.0"
    builds = f.model.event_builds
    cabled = f.disc.switches[leaf].links
    sec1, findings = f.report({(leaf, p): p in cabled and p != 3 for p in range(1, 9)})   # every port of the switch
    assert f.model.event_builds == builds + 1
    assert not sec1.ports[(leaf, 3)].up and not sec1.ports[far].up                # the reported port and its far end
    assert sec1.ports[(leaf, 3)].degraded["down"] and sec1.ports[far].degraded["down"]
    changed = {k for k in sec1.ports if sec1.ports[k] is not sec0.ports[k]}
    assert changed == {(leaf, 3), far}                         # every other port: the last build's own object
    flagged = {(x.device, x.port) for x in findings if x.check == "degraded_link"}
    assert {(leaf, 3), far} <= flagged
    assert sec1.check_status[("degraded_link", leaf)] == 2
    text1 = f.text(sec1, findings)
    assert down(text1, leaf, 3) == "1.0" and down(text1, *far) == "1.0"
    assert 'fabricmon_fabric_link_state_mode{mode="events"} 1.0' in text1
    assert 'fabricmon_fabric_sm_reports_total{trap="128"} 1.0' in text1
    # the next sweep reads it down too: the same verdict, and the mode stays (the change was reported)
    sec2, findings2 = f.sweep(down={(leaf, 3), far})
    assert not sec2.ports[(leaf, 3)].up and sec2.events.mode == "events"
    # it comes back: both switches report it (each traps for its own port), re-read up
    sec3, findings3 = f.report({(leaf, 3): True, far: True}, dt=1.0)
    assert sec3.ports[(leaf, 3)].up and sec3.ports[far].up
    assert not {(x.device, x.port) for x in findings3 if x.check == "degraded_link"} & {(leaf, 3), far}


def test_a_sweep_that_started_after_a_read_supersedes_it_and_one_running_during_it_does_not() -> None:
    f = Fabric()
    f.sweep()
    leaf = f.by_name["leaf02"]
    f.report({(leaf, 1): False})                                # a host port reported down ...
    sec, _ = f.sweep(down={(leaf, 1)}, duration=20.0)           # ... a sweep that started before the read still up?
    assert not sec.ports[(leaf, 1)].up                          # the sweep reads it down too
    f.report({(leaf, 1): True}, dt=0.5)                         # it comes back, reported
    # a sweep that ran while it came back (it read the port before the change, down) does not undo the report
    sec, _ = f.sweep(down={(leaf, 1)}, duration=15.2)
    assert sec.ports[(leaf, 1)].up
    # the next sweep, started after the read, is the truth
    sec, _ = f.sweep(down={(leaf, 1)}, duration=1.0)
    assert not sec.ports[(leaf, 1)].up


def test_a_change_the_sweep_saw_and_no_report_announced_demotes_the_mode_until_a_report_comes() -> None:
    f = Fabric()
    f.sweep()
    f.report({})                                               # subscribed, nothing reported yet
    sec, _ = f.sweep()
    assert sec.events.mode == "events"
    leaf = f.by_name["leaf03"]
    sec, _ = f.sweep(down={(leaf, 2)})                        # the sweep sees leaf03 port 2 down, nobody reported it
    assert sec.events.mode == "sweep"
    assert "accepted the subscription but reported nothing of leaf03" in sec.events.reason
    assert "port 2 going down" in sec.events.reason
    sec, _ = f.report({(leaf, 2): True})                      # a report after all: the SM forwards
    assert sec.events.mode == "events" and sec.events.reason == ""
