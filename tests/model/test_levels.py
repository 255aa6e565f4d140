"""Levels from what a node is, then the graph (model.fabric.switch_levels, docs/topology.md):
generated fabrics (fabricmon.sim's generators, as ibnetdiscover prints them) with SHARP
Aggregation Nodes, three tiers, leaves whose hosts are down, a spine with a stray host and a
management leaf cabled to the cores; and host names where node descriptions are not set."""

from __future__ import annotations

import re

from fabric_snap import add_cable, drop_hosts, ibnetdiscover_text, island_fabric, management_leaf
from fabricmon.model.fabric import (
    DiscoveryData, Topology, build_topology, default_description, host_name, switch_levels,
)
from fabricmon.parsers.ibnetdiscover import parse_ibnetdiscover
from fabricmon.sim.fabric import DEFAULT_DESCRIPTION, fat_tree_netfile, three_tier_netfile


def discovered(netfile: str) -> DiscoveryData:
    return parse_ibnetdiscover(ibnetdiscover_text(netfile))


def levels_by_name(d: DiscoveryData, topo: Topology | None = None) -> dict[str, int]:
    topo = topo or build_topology(d)
    return {sw.name: topo.levels[g] for g, sw in d.switches.items()}


def tier(name: str) -> int:
    """The tier the generators' names say (never read by the rule): p1l1 leaf, p1s1 spine, core01."""
    return 3 if name.startswith("core") else 2 if re.fullmatch(r"p\d+s\d+|spine\d+", name) else 1


def test_three_tiers_with_aggregation_nodes_in_every_switch() -> None:
    """Every switch carries a SHARP Aggregation Node: none of them is a host nor a reason to be a
    leaf; leaves, spines and cores land on 1, 2 and 3."""
    net = three_tier_netfile(pods=3, leaves_per_pod=3, spines_per_pod=2, cores_per_spine=2, aggregation_nodes=True)
    d = discovered(net)
    topo = build_topology(d)
    got = levels_by_name(d, topo)
    assert got == {n: tier(n) for n in got} and len(got) == 19
    assert len(topo.parts) == 19 and set(topo.parts.values()) == set(d.switches)
    assert not set(topo.parts) & set(topo.hosts) and len(topo.hosts) == 18
    roles = {(g, p): i.role for (g, p), i in topo.ports.items()}
    for ca, sw in topo.parts.items():
        (port,) = topo.aggregation_nodes(sw)
        assert roles[(sw, port)] == "internal" and d.switches[sw].links[port].remote_guid == ca
    assert "host" not in {roles[k] for k in roles if topo.levels[k[0]] > 1}


def test_the_aggregation_node_is_told_by_nodeinfo_or_by_its_description() -> None:
    """SystemImageGUID equal to the switch's, or device 0xcf09; without NodeInfo lines (an older
    ibnetdiscover), the Aggregation Node's description."""
    net = fat_tree_netfile(spines=2, leaves=2, hosts_per_leaf=2, aggregation_nodes=True)
    for strip in ("", "devid=", "sysimgguid=", "both"):
        text = "\n".join(ln for ln in ibnetdiscover_text(net).split("\n")
                         if not (strip and (ln.startswith(strip) or strip == "both" and "=" in ln[:12])))
        d = parse_ibnetdiscover(text)
        topo = build_topology(d)
        assert len(topo.parts) == 4 and levels_by_name(d, topo) == {"spine01": 2, "spine02": 2, "leaf01": 1,
                                                                    "leaf02": 1}, strip


def test_a_leaf_whose_hosts_are_down_stays_a_leaf() -> None:
    """From the graph's shape (its spines are its siblings' spines), and from what it was."""
    for net in (fat_tree_netfile(spines=2, leaves=4, hosts_per_leaf=2, aggregation_nodes=True),
                three_tier_netfile(pods=2, leaves_per_pod=3, spines_per_pod=2, cores_per_spine=2)):
        first = "leaf02" if "leaf02" in net else "p1l2"
        d = discovered(drop_hosts(net, first))
        got = levels_by_name(d)
        assert got == {n: tier(n) for n in got}, got
    # a whole pod's hosts down: only what it was keeps its leaves on level 1
    net = three_tier_netfile(pods=2, leaves_per_pod=2, spines_per_pod=2)
    before = build_topology(discovered(net))
    down = drop_hosts(drop_hosts(net, "p2l1"), "p2l2")
    d = discovered(down)
    assert levels_by_name(d)["p2l1"] != 1            # what the shape alone cannot know (docs/topology.md)
    got = levels_by_name(d, build_topology(d, previous=before.levels))
    assert got == {n: tier(n) for n in got}


def test_a_spine_with_a_stray_host_stays_a_spine() -> None:
    for net, spine in ((fat_tree_netfile(spines=3, leaves=4, hosts_per_leaf=3), "spine02"),
                       (three_tier_netfile(pods=2, leaves_per_pod=3, spines_per_pod=2, cores_per_spine=2), "p1s2")):
        d = discovered(add_cable(net, spine, 60, "stray01 mlx5_0", 1, host=True))
        topo = build_topology(d)
        got = levels_by_name(d, topo)
        assert got == {n: tier(n) for n in got}, got
        g = next(g for g, sw in d.switches.items() if sw.name == spine)
        assert topo.ports[(g, 60)].role == "host" and "stray01" in topo.hosts.values()


def test_a_management_leaf_cabled_to_the_cores_does_not_pull_them_down() -> None:
    net = three_tier_netfile(pods=2, leaves_per_pod=3, spines_per_pod=2, cores_per_spine=2)
    net = management_leaf(net, ("core01", "core03"))
    d = discovered(net)
    topo = build_topology(d)
    got = levels_by_name(d, topo)
    assert got == {n: tier(n) for n in got}, got
    mgmt = next(g for g, sw in d.switches.items() if sw.name == "mgmt")
    assert [topo.ports[(mgmt, p)].role for p in (1, 2, 3, 4)] == ["host", "host", "up", "up"]


def test_a_management_island_sits_on_its_own_levels() -> None:
    """The host-less management leaf is a leaf (its only neighbour, the management spine, is one level
    above it), not a fifth level above a spine pulled to the fourth by the cores: three levels."""
    d = discovered(island_fabric())
    topo = build_topology(d)
    got = levels_by_name(d, topo)
    assert got == {n: 2 if n == "mgmt-spine" else 1 if n.startswith("mgmt") else tier(n) for n in got}, got
    assert max(topo.levels.values()) == 3
    assert switch_levels(d, previous=topo.levels) == topo.levels           # stable
    spine = next(g for g, sw in d.switches.items() if sw.name == "mgmt-spine")
    assert sorted(topo.ports[(spine, p)].role for p in (1, 2, 3, 4, 21, 22)) == ["down", "down"] + ["up"] * 4


def test_a_real_top_level_is_not_taken_for_an_island() -> None:
    """Cores cabled to one spine per pod are tops with two neighbours, on the tree's top level: they stay
    cores (rule 5 takes only a switch with one neighbour, or one two levels above the top)."""
    for net in (three_tier_netfile(pods=2, leaves_per_pod=2, spines_per_pod=2, cores_per_spine=1),
                three_tier_netfile(pods=3, leaves_per_pod=3, spines_per_pod=2, cores_per_spine=2)):
        d = discovered(net)
        assert levels_by_name(d) == {sw.name: tier(sw.name) for sw in d.switches.values()}


def test_levels_are_stable_across_sweeps() -> None:
    net = three_tier_netfile(pods=2, leaves_per_pod=2, spines_per_pod=2, cores_per_spine=1, aggregation_nodes=True)
    d = discovered(net)
    first = switch_levels(d)
    assert switch_levels(d, previous=first) == first


def test_hosts_are_named_by_the_name_map_else_the_description_else_their_guid() -> None:
    net = fat_tree_netfile(spines=1, leaves=2, hosts_per_leaf=3, unnamed=3)
    d = discovered(net)
    unnamed = sorted(g for g, desc in d.cas.items() if desc == DEFAULT_DESCRIPTION)
    assert len(unnamed) == 3
    d.node_names = {unnamed[0]: "gpu-a01 mlx5_0"}
    topo = build_topology(d)
    assert topo.hosts[unnamed[0]] == "gpu-a01"
    assert topo.unnamed == unnamed[1:] and [topo.hosts[g] for g in unnamed[1:]] == [f"0x{g}" for g in unnamed[1:]]
    assert sorted(h for g, h in topo.hosts.items() if g not in unnamed) == ["node04", "node05", "node06"]
    for desc in ("MT4129 ConnectX7   Mellanox Technologies", "MT25408 ConnectX Mellanox Technologies",
                 "localhost", "ubuntu", "localhost HCA-1", ""):
        assert default_description(desc) and host_name("00000000000000aa", desc, {}) == "0x00000000000000aa"
    for desc in ("node01 mlx5_0", "a08-p1-dgx-04-c01 mlx5_5", "MTS-node1 mlx5_0"):
        assert not default_description(desc)


def test_uplinks_are_expected_of_peers_sharing_an_upper_switch() -> None:
    """A management leaf on the cores is nobody's peer (nothing expected of it); a pod's leaf
    missing a cable is judged against its pod; a leaf with no uplink left against its level (4 and 8 tie there: the larger)."""
    from fabricmon.checks.fabric_uplinks import expected_uplinks
    levels = {"a1": 1, "a2": 1, "a3": 1, "b1": 1, "b2": 1, "m": 1, "x": 1}
    counts = {"a1": 4, "a2": 4, "a3": 3, "b1": 8, "b2": 8, "m": 2, "x": 0}
    pod_a, pod_b = frozenset({"sa1", "sa2"}), frozenset({"sb1", "sb2"})
    uppers = {"a1": pod_a, "a2": pod_a, "a3": pod_a, "b1": pod_b, "b2": pod_b, "m": frozenset({"core1"})}
    assert expected_uplinks(counts, levels, uppers) == {"a1": 4, "a2": 4, "a3": 4, "b1": 8, "b2": 8, "m": None, "x": 8}
    assert expected_uplinks(counts, levels) == dict.fromkeys(counts, 8)       # without uppers: the level's norm (ties: the larger)


def test_peers_are_the_leaves_of_one_uplink_group() -> None:
    """Issue 52 item 1: management leaves with two uplinks to two of a pod's twenty spines share a tenth
    of the pod leaves' upper switches: they are each other's peers, not the pod's, and nothing is held
    against them; a management leaf whose group is its own has no peers (None: no status); a pod leaf
    with 12 of its 20 spines still cabled shares more than half: it is judged against its pod."""
    from fabricmon.checks.fabric_uplinks import expected_uplinks
    pod = frozenset(f"s{i}" for i in range(20))
    leaves = {f"l{i}": 20 for i in range(10)} | {"short": 12, "m1": 2, "m2": 2, "alone": 3}
    uppers = {g: pod for g in leaves} | {"short": frozenset(f"s{i}" for i in range(12)),
                                        "m1": frozenset({"s0", "s1"}), "m2": frozenset({"s0", "s1"}),
                                        "alone": frozenset({"s5", "s6", "s7"})}
    got = expected_uplinks(leaves, dict.fromkeys(leaves, 1), uppers)
    assert got == {f"l{i}": 20 for i in range(10)} | {"short": 20, "m1": 2, "m2": 2, "alone": None}


def test_the_collector_keeps_a_pods_leaves_when_all_their_hosts_go_down() -> None:
    """FabricModel hands each discovery the last levels: a pod whose every host went down between
    two discoveries keeps its leaves on level 1 (and its uplink findings: none, nothing changed)."""
    from fabricmon.config import from_dict
    from fabricmon.model.snapshot import SourceState
    from fabricmon.pipeline.fabric import FabricModel

    def state(d: DiscoveryData, t: float) -> SourceState:
        return SourceState(name="discovery", enabled=True, interval=1, timeout=1, records=DiscoveryData, up=True,
                           ran=True, data=d, data_time=t)
    net = three_tier_netfile(pods=2, leaves_per_pod=2, spines_per_pod=2, aggregation_nodes=True)
    model = FabricModel(from_dict({}, check_paths=False))
    sec, _ = model.build({"discovery": state(discovered(net), 1.0)})
    first = {sw.name: lvl for g, sw in sec["fabric"].switches.items() for lvl in [sec["fabric"].levels[g]]}
    assert first == {n: tier(n) for n in first}
    down = discovered(drop_hosts(drop_hosts(net, "p2l1"), "p2l2"))
    sec, findings = model.build({"discovery": state(down, 2.0)})
    assert {sw.name: sec["fabric"].levels[g] for g, sw in sec["fabric"].switches.items()} == first
    assert not [f for f in findings if f.check == "uplinks" and f.status]


def test_a_leaf_pair_with_a_peer_link_and_one_spine_stays_two_leaves() -> None:
    """Two leaves cabled to each other (an MLAG-like peer link) and to one spine each: the one with
    fewer hosts is no spine with a stray host."""
    net = fat_tree_netfile(spines=1, leaves=2, hosts_per_leaf=3)
    net = drop_hosts(net, "leaf02")
    net = add_cable(net, "leaf02", 1, "node99 mlx5_0", 1, host=True)       # leaf02: one host left
    net = add_cable(net, "leaf01", 7, "leaf02", 7)
    d = discovered(net)
    assert levels_by_name(d) == {"spine01": 2, "leaf01": 1, "leaf02": 1}
