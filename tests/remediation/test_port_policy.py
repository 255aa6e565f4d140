"""The port decisions (remediation/policy.py) on fabric snapshots the real FabricModel built (tests/fabric_snap):
the circuit breaker on a generated fabric of exactly 4,000 cabled switch ports (40 links failing at once: 20
isolated, the breaker finding, the rest reported and left), the graph (a leaf's last active uplink, whatever
it does), the exclusion list, dry run and off, a host port that waits for its node, and the way back."""

from __future__ import annotations

import time
from dataclasses import replace

import pytest
from fabric_snap import fabric_snapshot

from fabricmon.config import from_dict
from fabricmon.model.remediation import ACT, DONE, DRAIN, DRY_RUN, ISOLATE, RETURNED, RETURNING, TODO, WAITING
from fabricmon.remediation import policy
from fabricmon.remediation.policy import cabled, port_round
from fabricmon.sim.fabric import fat_tree_netfile

# 50 leaves x (60 hosts + 10 uplinks) + 10 spines x 50 downlinks = 4,000 cabled switch ports
BIG = dict(spines=10, leaves=50, hosts_per_leaf=60, uplinks_per_spine=1)
UPLINK = 61                         # a leaf's first uplink (to spine01) in fat_tree_netfile's layout


def cfg(**iso):
    return from_dict({"remediation": {"isolate_port": {"mode": "act", **iso}, "drain_node": {"mode": "act"}}},
                     check_paths=False)


class Ids:
    def __init__(self):
        self.n = 0

    def __call__(self, kind: str) -> str:
        self.n += 1
        return f"{'p' if kind == ISOLATE else 'n'}{self.n}"


def decide(snap, c, actions=None, now=None, jobs=None, **kw):
    return port_round(snap.fabric, snap.findings, jobs if jobs is not None else {}, actions or {}, c.remediation,
                      c.checks, now if now is not None else snap.time, Ids(), **kw)


@pytest.fixture(scope="module")
def big():
    t0 = time.monotonic()
    errors = {(f"leaf{i:02d}", UPLINK): 100_000 for i in range(1, 41)}      # 40 links over their BER budget
    snap = fabric_snapshot(fat_tree_netfile(**BIG), sweeps=2, errors=errors)
    return snap, time.monotonic() - t0


def test_40_links_failing_on_4000_ports_isolate_exactly_20_and_trip_the_breaker(big) -> None:
    snap, built = big
    assert len(cabled(snap.fabric)) == 4000
    bad = [f for f in snap.findings if f.check == "symbol_errors" and f.status == 2]
    assert len({policy.link_key(policy.link_ends(snap.fabric, (f.device, f.port))) for f in bad}) == 40
    t0 = time.monotonic()
    rnd = decide(snap, cfg())
    took = time.monotonic() - t0
    acts = [a for a in rnd.actions.values() if a.kind == ISOLATE]
    assert len(acts) == 20 == max(10, int(0.005 * 4000))
    assert all(a.state == TODO and a.mode == ACT for a in acts)
    b = rnd.breakers[ISOLATE]
    assert (b.cap, b.used, b.refused, b.tripped) == (20, 20, 20, True)
    left = [r for r in rnd.refusals if r.why.startswith("the circuit breaker")]
    assert len(left) == 20 and all("20 links out of service, the cap is max(10, 0.005 x 4000" in r.why for r in left)
    found = policy.findings_of(rnd.breakers, rnd.actions.values(), "", rnd.refusals)
    assert len(found) == 1 and found[0].check == "remediation" and found[0].klass == "watch"
    assert "isolate_port circuit breaker tripped: 20 more condemned, 20 already out" in found[0].message
    # the next round, with the 20 in effect: none more, the same 20 refused again (logged once: the engine)
    again = decide(snap, cfg(), {a.id: replace(a, state=DONE, effective=snap.time, clean_since=snap.time)
                                 for a in acts})
    assert sum(a.kind == ISOLATE for a in again.actions.values()) == 20
    assert again.breakers[ISOLATE].refused == 20
    print(f"\n4,000-port model: built in {built:.1f} s, one decision round {took * 1000:.0f} ms")


def test_links_down_by_others_count_against_the_cap(big) -> None:
    snap, _ = big
    sec = snap.fabric
    # 15 host cables down (pulled, failed, disabled by hand): 5 of the 40 fit under the cap of 20
    down = [k for k, p in sorted(sec.ports.items()) if p.role == "host"][:15]
    for k in down:
        sec.ports[k] = replace(sec.ports[k], up=False)
    try:
        rnd = decide(snap, cfg())
        assert sum(a.kind == ISOLATE for a in rnd.actions.values()) == 5
        assert rnd.breakers[ISOLATE].used == 20
    finally:
        for k in down:
            sec.ports[k] = replace(sec.ports[k], up=True)


SMALL = dict(spines=2, leaves=2, hosts_per_leaf=2, uplinks_per_spine=1)     # each leaf: 2 uplinks (ports 3, 4)


def test_a_leafs_last_active_uplink_is_never_isolated_whatever_it_does() -> None:
    snap = fabric_snapshot(fat_tree_netfile(**SMALL), sweeps=2, errors={("leaf01", 3): 100_000, ("leaf01", 4): 90_000},
                           drop=None)
    rnd = decide(snap, cfg())
    acts = [a for a in rnd.actions.values() if a.kind == ISOLATE]
    assert [(a.switch, a.port) for a in acts] == [("leaf01", 3)]           # the worst one
    why = {r.target.rsplit(":", 1)[1]: r.why for r in rnd.refusals}
    assert why == {"4": "it is the last active uplink of leaf leaf01: isolating it cuts the leaf off the fabric"}
    # with port 3 out already (down), port 4 is the last uplink: refused on every round
    sec = snap.fabric
    g = acts[0].guid
    sec.ports[(g, 3)] = replace(sec.ports[(g, 3)], up=False)
    for _ in range(3):
        r2 = decide(snap, cfg())
        assert not [a for a in r2.actions.values() if a.kind == ISOLATE and a.port == 4]
        assert any("last active uplink of leaf leaf01" in r.why for r in r2.refusals)


def test_dry_run_decides_the_same_and_touches_nothing_and_off_decides_nothing() -> None:
    snap = fabric_snapshot(fat_tree_netfile(**SMALL), sweeps=2, errors={("leaf01", 3): 100_000})
    dry = decide(snap, cfg(mode="dry_run"))
    [a] = [a for a in dry.actions.values() if a.kind == ISOLATE]
    assert (a.mode, a.state, a.effective) == (DRY_RUN, DONE, snap.time)
    assert [e.result for e in dry.events if e.kind == ISOLATE] == ["dry_run"]
    off = decide(snap, cfg(mode="off"))
    assert not off.actions and not off.events and ISOLATE not in off.breakers


def test_the_exclusion_list_and_its_expiry() -> None:
    snap = fabric_snapshot(fat_tree_netfile(**SMALL), sweeps=2, errors={("leaf01", 3): 100_000})
    c = from_dict({"remediation": {"isolate_port": {"mode": "act"}, "exclude": [
        {"port": "leaf01:3", "until": snap.time + 60, "reason": "optics swap booked"}]}}, check_paths=False)
    rnd = decide(snap, c)
    assert not rnd.actions
    assert "on the exclusion list (leaf01:3: optics swap booked, until " in rnd.refusals[0].why
    assert [a.port for a in decide(snap, c, now=snap.time + 61).actions.values()] == [3]     # expired


def test_a_host_port_waits_for_its_node_to_be_idle_and_the_node_is_drained_first() -> None:
    snap = fabric_snapshot(fat_tree_netfile(**SMALL), sweeps=2, errors={("leaf01", 2): 100_000})
    view = policy.SlurmView({"node02": policy.SlurmNode("", state="allocated")}, {"node02": ("all",),
                            **{f"n{i}": ("all",) for i in range(30)}})
    rnd = decide(snap, cfg(), jobs={"41": ("node02",)}, slurm=view)
    iso = next(a for a in rnd.actions.values() if a.kind == ISOLATE)
    drain = next(a for a in rnd.actions.values() if a.kind == DRAIN)
    assert (iso.state, iso.node, iso.waits) == (WAITING, "node02", "node02 to be idle (jobs 41)")
    assert (drain.state, drain.node, drain.parent) == (TODO, "node02", iso.id)
    assert drain.reason.startswith("fabricmon: CRITICAL symbol_errors: leaf01 (0x") and "port 2" in drain.reason
    # the job ended: the port is isolated
    later = decide(snap, cfg(), actions=rnd.actions, jobs={})
    assert later.actions[iso.id].state == TODO


def test_the_clean_window_restarts_on_new_errors_and_ends_in_a_return() -> None:
    snap = fabric_snapshot(fat_tree_netfile(**SMALL), sweeps=2, errors={("leaf01", 3): 100_000})
    c = cfg(clean_window=100)
    [a] = [a for a in decide(snap, c).actions.values() if a.kind == ISOLATE]
    t = snap.time
    a = replace(a, state=DONE, effective=t, clean_since=t)
    # the first sweep after it: its counters taken as the baseline
    r1 = decide(snap, c, {a.id: a}, now=t + 10, sweep_time=t + 10)
    b = r1.actions[a.id]
    assert dict(b.baseline) and b.clean_since == t
    # errors while isolated (ibsim's far end keeps counting): the window restarts
    sec = snap.fabric
    k = (a.guid, a.port)
    fp = sec.ports[k]
    sec.ports[k] = replace(fp, counters={**fp.counters, "symbol_errors": fp.counters["symbol_errors"] + 5})
    r2 = decide(snap, c, {a.id: b}, now=t + 20, sweep_time=t + 20)
    assert r2.actions[a.id].clean_since == t + 20 and "not clean: symbol_errors +5" in r2.actions[a.id].note
    # clean for the window: returned
    r3 = decide(snap, c, r2.actions, now=t + 121, sweep_time=t + 121)
    assert r3.actions[a.id].state == RETURNING
    # returned (closed with its counters): its old errors do not condemn it again; a new error does
    closed = {a.id: replace(r3.actions[a.id], state=RETURNED, closed=t + 122,
                            baseline=tuple(sorted(policy.counters_now(sec, [k, policy.parse_key(b.peer)],
                                                                      ("symbol_errors",)).items())))}
    assert not [x for x in decide(snap, c, closed, now=t + 130).actions.values() if x.open]
    fp = sec.ports[k]
    sec.ports[k] = replace(fp, counters={**fp.counters, "symbol_errors": fp.counters["symbol_errors"] + 1})
    again = [x for x in decide(snap, c, closed, now=t + 140).actions.values() if x.open]
    assert len(again) == 1 and again[0].returns == 1 and again[0].window == 200          # doubled


def test_a_sharded_collector_never_isolates() -> None:
    snap = fabric_snapshot(fat_tree_netfile(**SMALL), sweeps=2, errors={("leaf01", 3): 100_000})
    rnd = decide(snap, cfg(), shard=(1, 4))
    assert not rnd.actions and "shard 1/4" in rnd.refusals[0].why



