"""Levels, roles and hosts on a generated three-tier fabric in ibsim, read by the real collector
(ibnetdiscover, the sweep, dump_fts under umad2sim), with every case real fabrics carry planted
at once (fabricmon.sim.fabric.three_tier_netfile, plant): a SHARP Aggregation Node in every
switch but the management leaf, two hosts with the firmware's node description, a leaf whose hosts are all down, a spine
with a stray host cabled to it, a management leaf cabled to two cores. Healthy otherwise: the
only finding is the one about the unnamed hosts."""

from __future__ import annotations

import time

from fabric_snap import add_cable, drop_hosts, island_fabric, management_leaf
from fabricmon.config import from_dict
from fabricmon.host import LiveIO
from fabricmon.pipeline.fabric import fabric_pipeline
from fabricmon.sim.fabric import three_tier_netfile


def two_sweeps(fab, tmp_path):
    """(the snapshot after two sweeps, the topology) of the real collector's pipeline on `fab` (the subnet
    manager source off: ibsim's `opensm --once` leaves no master)."""
    (tmp_path / "state" / "fabric").mkdir(parents=True)
    cfg = from_dict({"paths": {"state_dir": str(tmp_path / "state")},
                     "fabric": {"cache_dir": str(tmp_path / "state" / "fabric"), "sources": {"sm": {"enabled": False}}}})
    pipe = fabric_pipeline(cfg, LiveIO(cfg.sysfs, cfg.procfs, env=fab.env(fab.hosts[0])))
    try:
        pipe.collect()
        time.sleep(0.5)             # what is tested: a second sweep, later (the intake drops a sample no later)
        snap = pipe.collect()
        return snap, pipe.model.inventory(snap.sources)
    finally:
        pipe.close()


def test_a_three_tier_fabric_with_every_case_planted(sim_fabric, tmp_path) -> None:
    net = three_tier_netfile(pods=3, leaves_per_pod=3, spines_per_pod=2, cores_per_spine=2, hosts_per_leaf=2,
                             aggregation_nodes=True, unnamed=2)
    net = drop_hosts(net, "p2l3")                                   # its hosts are down
    net = add_cable(net, "p3s1", 7, "stray01 mlx5_0", 1, host=True)  # a host cabled to a spine
    net = management_leaf(net, ("core01", "core03"))
    snap, topo = two_sweeps(sim_fabric(net), tmp_path)
    sec = snap.fabric
    names = {g: sw.name for g, sw in sec.switches.items()}
    got = {names[g]: lvl for g, lvl in sec.levels.items()}
    assert got == {n: 3 if n.startswith("core") else 2 if "s" in n[1:] else 1 for n in got}, got
    assert len(got) == 20 and got["mgmt"] == got["p2l3"] == 1 and got["p3s1"] == 2
    mgmt = next(g for g, n in names.items() if n == "mgmt")            # added after plant: no SHARP
    assert len(sec.aggregation_nodes) == 19 and set(topo.parts.values()) == set(sec.switches) - {mgmt}
    roles = {(names[g], p): fp.role for (g, p), fp in sec.ports.items() if fp.link is not None}
    assert [roles[("mgmt", p)] for p in (1, 2, 3, 4)] == ["host", "host", "up", "up"]
    assert roles[("p3s1", 7)] == "host" and sum(1 for r in roles.values() if r == "internal") == 19
    hosts = sorted(topo.hosts.values())
    assert len(hosts) == 19 and "stray01" in hosts and {"ufm01", "ufm02"} <= set(hosts)
    assert sum(1 for h in hosts if h.startswith("0x")) == 2 and len(set(hosts)) == 19     # never merged
    # nothing expected of the management leaf; the pods' leaves all have their 2 uplinks
    assert sec.uplinks[mgmt] == (2, None)
    findings = [f for f in snap.findings if f.status]
    assert [f.check for f in findings] == ["node_description"], [f.line() for f in findings]
    assert findings[0].message.startswith("2 of 19 hosts have no node description (0x")
    assert all(s == 0 for (c, _), s in sec.check_status.items() if c != "node_description")


def test_a_management_island_beside_the_compute_fabric(sim_fabric, tmp_path) -> None:
    """Issue 52 items 1 and 2 on ibsim (fabric_snap.island_fabric: Selene's management fabric as the issue
    describes it, scaled down; Selene's capture itself was not available): the real collector puts every
    switch on one of 3 levels (the host-less management leaf a leaf, its spine a spine), holds the
    management leaves to each other (2 uplinks), not to the pods' leaves (8), and finds nothing, the
    routing of the management spine to its host-less leaf included."""
    snap, _ = two_sweeps(sim_fabric(island_fabric()), tmp_path)
    sec = snap.fabric
    names = {g: sw.name for g, sw in sec.switches.items()}
    got = {names[g]: lvl for g, lvl in sec.levels.items()}
    assert got == {n: 3 if n.startswith("core") else 2 if n == "mgmt-spine" or "s" in n[1:] and n[0] == "p" else 1
                   for n in got}, got
    uplinks = {names[g]: v for g, v in sec.uplinks.items()}
    assert uplinks["mgmt-leaf1"] == uplinks["mgmt-leaf2"] == (2, 2) and uplinks["p1l1"] == (8, 8)
    assert [f.line() for f in snap.findings if f.status] == []
    mgmt_spine = next(g for g, n in names.items() if n == "mgmt-spine")
    assert sec.check_status.get(("routing", mgmt_spine)) == 0, "the routing of the management spine was judged OK"
