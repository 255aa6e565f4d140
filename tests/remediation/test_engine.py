"""The Remediator's rounds on model snapshots, its host a recording HostIO (what it would run, as argv): only the
lease's holder acts; the argv it runs; a step read back; an action decided in `act` and not yet carried out is
dropped when the mode turns off, while what is out of service still returns; the section the next build
carries. (On the real tools and fabric: test_isolate_sim.py, test_cap_sim.py, test_drain_slurm.py.)"""

from __future__ import annotations

from dataclasses import replace

from fabric_snap import fabric_snapshot

from fabricmon.config import from_dict
from fabricmon.host.runner import CommandResult
from fabricmon.host.umad import UmadUnavailable
from fabricmon.remediation.engine import Remediator
from fabricmon.remediation.lease import SingleHolder
from fabricmon.remediation.record import Record
from fabricmon.sim.fabric import fat_tree_netfile

AFTER = """Initial Switch PortInfo:
# Port info: Lid 4 port 3
LinkState:.......................Active
PhysLinkState:...................LinkUp
Disable may be irreversible

After PortInfo set:
# Port info: Lid 4 port 3
LinkState:.......................Active
PhysLinkState:...................{phys}
"""


QUERY = """Switch PortInfo:
# Port info: Lid 4 port 3
LinkState:.......................{state}
PhysLinkState:...................{phys}
"""


class RecordingIO:
    """Every command as argv; ibportstate answers as the real one does (exit 255 after the Set: the peer query),
    each port keeping the state it was set to."""

    def __init__(self):
        self.argv: list[list[str]] = []
        self.phys: dict[tuple[str, str], str] = {}

    def run(self, argv, timeout, env=None):
        self.argv.append(list(argv))
        key = (argv[1], argv[2])
        if argv[-1] == "query":
            phys = self.phys.get(key, "LinkUp")
            return CommandResult(tuple(argv), 255, QUERY.format(state="Active" if phys == "LinkUp" else "Down",
                                                                phys=phys), "ibwarn: mad_rpc failed", 0.01)
        self.phys[key] = {"disable": "Disabled", "enable": "Polling"}[argv[-1]]
        return CommandResult(tuple(argv), 255, AFTER.format(phys=self.phys[key]), "ibwarn: mad_rpc failed", 0.01)

    def mad_open(self, settings):
        raise UmadUnavailable(19, "no umad port here")

    def mad_run(self, requests, deadline, times=None):
        raise AssertionError("no engine")


class NotHeld:
    def hold(self):
        return False, "another collector holds it"

    def release(self):
        pass


def setup(mode="act", lease=None):
    snap = fabric_snapshot(fat_tree_netfile(spines=2, leaves=2, hosts_per_leaf=2, uplinks_per_spine=1), sweeps=2,
                           errors={("leaf01", 3): 100_000})
    cfg = from_dict({"remediation": {"isolate_port": {"mode": mode}}}, check_paths=False)
    io = RecordingIO()
    rem = Remediator(cfg, io, "infiniband", lease=lease or SingleHolder(), record=Record(None), clock=lambda: snap.time)
    return snap, cfg, io, rem


def test_only_the_holder_acts() -> None:
    snap, _, io, rem = setup(lease=NotHeld())
    sec = rem.round(snap)
    assert not sec.held and sec.lease == "another collector holds it" and sec.actions == () and io.argv == []


class EndsMidRound:
    """A lease held when the round starts and ending before its first step (an etcd lease whose keep-alives
    stopped: its holder holds only while a step fits in what is left of it)."""

    def __init__(self):
        self.asked = 0

    def hold(self):
        self.asked += 1
        return (True, "holds it") if self.asked == 1 else (False, "stopped acting: its lease may end in 2.0 s")

    def release(self):
        pass


def test_a_step_is_taken_only_on_a_lease_that_still_holds() -> None:
    lease = EndsMidRound()
    snap, _, io, rem = setup(lease=lease)
    sec = rem.round(snap)
    assert io.argv == [] and lease.asked == 2           # decided at the round's start, not carried out
    assert [a.state for a in sec.actions] == ["todo"]
    assert not sec.held and sec.lease == "stopped acting: its lease may end in 2.0 s"
    rem.lease = SingleHolder()
    sec = rem.round(snap)                               # held again at the next round: carried out then
    assert [a.state for a in sec.actions] == ["done"] and io.argv[0][-1] == "disable"


def test_the_argv_it_runs_and_the_step_read_back() -> None:
    snap, _, io, rem = setup()
    sec = rem.round(snap)
    [a] = sec.actions
    lid = snap.fabric.switches[a.guid].lid
    assert io.argv == [["ibportstate", str(lid), "3", "disable"], ["ibportstate", str(lid), "3", "query"]]
    assert a.state == "done" and "ibportstate's PortInfo after the Set: PortPhysicalState Disabled" in a.note
    assert sec.counts == {("isolate_port", "act", "done"): 1}
    assert rem.section() is sec and sec.isolated()[(a.guid, 3)] is a


def test_turned_off_it_drops_what_it_had_not_done_and_still_returns_what_is_out() -> None:
    snap, cfg, io, rem = setup()
    sec = rem.round(snap)
    [done] = sec.actions
    pending = replace(done, id="p9", port=4, target=f"{done.guid}:4", state="todo", effective=None, clean_since=None)
    rem.record.actions[pending.id] = pending
    rem.record.actions[done.id] = replace(done, window=10.0)
    rem.cfg = from_dict({"remediation": {"isolate_port": {"mode": "off"}}}, check_paths=False).remediation
    rem.clock = lambda: snap.time + 11
    rem.verify_every = 1e9                                  # this round: no read-back of what is in effect
    io.argv.clear()
    sec = rem.round(snap)
    by = {a.id: a for a in sec.actions}
    assert by["p9"].state == "released" and "remediation.isolate_port.mode is now off" in by["p9"].note
    assert by[done.id].state == "returned"                  # its clean window ran out: re-enabled
    assert io.argv == [["ibportstate", str(done.lid), "3", "enable"]]


def test_a_collector_without_the_lease_exports_its_modes_and_that_it_does_not_hold_it_nothing_else() -> None:
    """An HA pair's series are deduplicated in the store (docs/scale.md): the holder's remediation state must be the
    only one there, so the other collector, which decides nothing, says nothing of it (no zeros)."""
    import re
    from fabricmon.exporter.render import render
    from fabricmon.model.remediation import Breaker, RemediationSection
    from fabricmon.model.snapshot import BuildStats, Snapshot

    def names(held: bool) -> set[str]:
        rem = RemediationSection("fabric", {"isolate_port": "act", "drain_node": "off"}, held=held,
                                 counts={("isolate_port", "act", "done"): 1},
                                 breakers={"isolate_port": Breaker(10, 3, 0, False, "max(10, ...)")})
        text = render(Snapshot(time=1.0, findings=[], sources={}, builds=BuildStats(), remediation=rem)).decode()
        return set(re.findall(r"^(fabricmon_remediation_\w+)", text, re.M))
    holder, other = names(True), names(False)
    assert other == {"fabricmon_remediation_mode", "fabricmon_remediation_lease_held"}
    assert holder > other | {"fabricmon_remediation_actions_total", "fabricmon_remediation_isolated_ports",
                             "fabricmon_remediation_breaker_cap", "fabricmon_remediation_failing"}
