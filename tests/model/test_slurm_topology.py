"""Slurm's topology from the fabric (model.slurm_topology, docs/slurm-topology.md): the tree of a
generated fat tree and of a three-tier SHARP fabric (Aggregation Nodes never nodes), the rail
selector (a storage rail never merges into a compute leaf), host list compression against the
parser Slurm's lists go through, and topology.yaml checked field by field against topology.yaml(5)."""

from __future__ import annotations

import random
from dataclasses import replace

import pytest
import yaml
from fabric_snap import add_cable, ibnetdiscover_text

from fabricmon.model.fabric import Topology, build_topology
from fabricmon.model.slurm_topology import (
    Drift, Rail, SlurmTree, TopologyLine, build_tree, compress_hostlist, drift, drifted_nodes, parse_rail, slurm_name,
    switch_names, topology_conf, topology_yaml, topology_yaml_data,
)
from fabricmon.parsers.errors import ParseError
from fabricmon.parsers.ibnetdiscover import parse_ibnetdiscover
from fabricmon.parsers.slurm import expand_hostlist, parse_topology, parse_topology_conf, parse_topology_yaml
from fabricmon.sim.fabric import fat_tree_netfile, three_tier_netfile


def topology(netfile: str) -> Topology:
    return build_topology(parse_ibnetdiscover(ibnetdiscover_text(netfile)))


def storage_rail(netfile: str, hosts: int, spines: int = 2, spine_port: int = 9) -> str:
    """Every host's second HCA (`nodeNN mlx5_1`) on one storage switch `stor01`, cabled to each
    spine: the fabric of topograph #488, where that switch is taken for a compute leaf."""
    net = netfile.rstrip("\n") + '\n\nSwitch\t16 "stor01"\n'
    for i in range(hosts):
        net = add_cable(net, "stor01", i + 1, f"node{i + 1:02d} mlx5_1", 1, host=True)
    for s in range(spines):
        net = add_cable(net, "stor01", hosts + 1 + s, f"spine{s + 1:02d}", spine_port)
    return net


def test_fat_tree_conf() -> None:
    tree = build_tree(topology(fat_tree_netfile(spines=2, leaves=4, hosts_per_leaf=4, uplinks_per_spine=2)))
    assert topology_conf(tree) == (
        "SwitchName=leaf01 Nodes=node[01-04]\n"
        "SwitchName=leaf02 Nodes=node[05-08]\n"
        "SwitchName=leaf03 Nodes=node[09-12]\n"
        "SwitchName=leaf04 Nodes=node[13-16]\n"
        "SwitchName=spine01 Switches=leaf[01-04]\n"
        "SwitchName=spine02 Switches=leaf[01-04]\n")
    assert tree.notes == []
    assert topology_conf(tree, "made here\nrail: all").startswith("# made here\n# rail: all\nSwitchName=leaf01 ")


def test_three_tier_sharp_aggregation_nodes_are_never_nodes() -> None:
    topo = topology(three_tier_netfile(pods=2, leaves_per_pod=2, spines_per_pod=2, cores_per_spine=1,
                                       hosts_per_leaf=3, aggregation_nodes=True))
    assert len(topo.parts) == 2 * 2 + 2 * 2 + 2          # an Aggregation Node in every switch
    tree = build_tree(topo)
    assert list(tree.levels) == ["p1l1", "p1l2", "p2l1", "p2l2", "p1s1", "p1s2", "p2s1", "p2s2", "core01", "core02"]
    assert tree.nodes == {"p1l1": ["node001", "node002", "node003"], "p1l2": ["node004", "node005", "node006"],
                          "p2l1": ["node007", "node008", "node009"], "p2l2": ["node010", "node011", "node012"]}
    assert tree.switches == {"p1s1": ["p1l1", "p1l2"], "p1s2": ["p1l1", "p1l2"], "p2s1": ["p2l1", "p2l2"],
                             "p2s2": ["p2l1", "p2l2"], "core01": ["p1s1", "p2s1"], "core02": ["p1s2", "p2s2"]}
    conf = topology_conf(tree)
    assert "Aggregation" not in conf and "SwitchName=core01 Switches=p1s1,p2s1\n" in conf
    assert "SwitchName=p1l1 Nodes=node[001-003]\n" in conf and tree.notes == []


def test_a_storage_rail_never_merges_into_a_compute_leaf() -> None:
    topo = topology(storage_rail(fat_tree_netfile(spines=2, leaves=4, hosts_per_leaf=2, uplinks_per_spine=2), 8))
    merged = build_tree(topo)                               # no selector: stor01 holds every node
    assert merged.nodes["stor01"] == [f"node{i:02d}" for i in range(1, 9)]
    tree = build_tree(topo, parse_rail(["hca=mlx5_0"]))
    assert "stor01" not in tree.levels
    assert tree.nodes == {f"leaf{i:02d}": [f"node{2 * i - 1:02d}", f"node{2 * i:02d}"] for i in range(1, 5)}
    assert tree.switches == {"spine01": ["leaf01", "leaf02", "leaf03", "leaf04"],
                             "spine02": ["leaf01", "leaf02", "leaf03", "leaf04"]}
    # the storage rail alone, chosen by its HCA
    stor = build_tree(topo, parse_rail(["hca=mlx5_1"]))
    assert list(stor.nodes) == ["stor01"] and stor.switches == {"spine01": ["stor01"], "spine02": ["stor01"]}
    # by switch name: the leaves only (no spine matches)
    only = build_tree(topo, parse_rail(["switch=leaf0[12]"]))
    assert list(only.levels) == ["leaf01", "leaf02"] and only.switches == {}
    # by CA GUID: one host's mlx5_0
    guid = next(g for g, d in topo.cas.items() if d == "node03 mlx5_0")
    one = build_tree(topo, parse_rail([f"guid=0x{guid}"]))
    assert one.nodes == {"leaf02": ["node03"]} and set(one.levels) == {"leaf02", "spine01", "spine02"}


def test_left_out_with_a_note() -> None:
    net = fat_tree_netfile(spines=2, leaves=2, hosts_per_leaf=2, unnamed=1)
    net = add_cable(net, "spine01", 8, "login01 mlx5_0", 1, host=True)      # a stray host on a spine
    topo = topology(net)
    tree = build_tree(topo)
    assert sorted(set().union(*tree.nodes.values())) == ["node02", "node03", "node04"]
    assert len(tree.notes) == 2
    assert any("has no host name" in n and "left out" in n for n in tree.notes)
    assert any(n.startswith("login01 is cabled to spine01 (level 2)") for n in tree.notes)
    assert "# note: login01 is cabled to spine01" in topology_conf(tree)


def test_two_halves_with_no_common_switch_are_noted() -> None:
    net = fat_tree_netfile(spines=1, leaves=2, hosts_per_leaf=1) + "\n" + fat_tree_netfile(
        spines=1, leaves=2, hosts_per_leaf=1, host_prefix="gpu").replace('"spine01"', '"spine02"').replace(
        '"leaf01"', '"leaf03"').replace('"leaf02"', '"leaf04"')
    tree = build_tree(topology(net))
    assert len(tree.notes) == 1 and "no switch reaches every node" in tree.notes[0]


def test_switch_names_are_safe_and_unique() -> None:
    assert slurm_name("MF0;ib-leaf01:MQM8700/U1") == "MF0_ib-leaf01_MQM8700_U1"
    assert slurm_name("Quantum Mellanox Technologies") == "Quantum_Mellanox_Technologies"
    topo = topology(fat_tree_netfile(spines=2, leaves=2, hosts_per_leaf=1))
    g2 = next(g for g, sw in topo.switches.items() if sw.name == "spine02")
    topo.switches[g2] = replace(topo.switches[g2], name="spine01")     # two switches, one name
    names = switch_names(topo, topo.switches)
    spines = sorted(n for n in names.values() if n.startswith("spine01"))
    assert len(spines) == 2 and all(n.startswith("spine01_") for n in spines) and len(set(names.values())) == 4


@pytest.mark.parametrize("names, expected", [
    (["node01", "node02", "node03", "node05"], "node[01-03,05]"),
    (["node1", "node2", "node10", "node11"], "node[1-2],node[10-11]"),
    (["n009", "n010", "n011"], "n[009-011]"),
    (["login", "node7"], "node7,login"),
    (["p1l1", "p1l2", "p2l1"], "p1l[1-2],p2l1"),
    ([], ""),
])
def test_hostlist_compression(names: list[str], expected: str) -> None:
    assert compress_hostlist(names) == expected
    assert sorted(expand_hostlist(expected)) == sorted(names) if names else True


def test_hostlist_round_trip_through_the_parser() -> None:
    rnd = random.Random(37)
    for _ in range(200):
        names = {f"{rnd.choice(['node', 'gpu-a', 'x1y'])}{rnd.randrange(0, 130):0{rnd.choice([1, 2, 3, 4])}d}"
                 for _ in range(rnd.randrange(1, 40))}
        text = compress_hostlist(names)
        got = expand_hostlist(text)
        assert sorted(got) == sorted(names) and len(got) == len(names), text


def test_rail_specs() -> None:
    assert parse_rail([]) == Rail()
    r = parse_rail(["hca=mlx5_[01]", "switch=ib-*", "guid=0xABC,0000000000000def"])
    assert r.hca == "mlx5_[01]" and r.switch == "ib-*"
    assert r.ca_guids == frozenset({"0000000000000abc", "0000000000000def"})
    assert r.takes_ca("0000000000000abc", "node01 mlx5_1") and not r.takes_ca("0000000000000abc", "node01 mlx5_2")
    assert not r.takes_ca("0000000000000abc", "mlx5_0")      # the first word is the host, never the HCA
    for bad in (["hca"], ["port=1"], ["hca=a", "hca=b"], ["guid=0xzz"], ["switch="]):
        with pytest.raises(ValueError, match="--rail"):
            parse_rail(bad)


# --- topology.yaml, field by field against topology.yaml(5) (Slurm 25.05+) -------------------

TOPOLOGY_KEYS = {"topology", "cluster_default", "tree", "block", "flat"}


def check_topology_yaml(text: str) -> list[dict]:
    """What topology.yaml(5) says: a list of topologies; `topology` (a unique name) the first
    attribute; `cluster_default` a boolean; exactly one of `block`, `flat`, `tree`. A tree holds
    `switches`, each with `switch` (its name) and `children` (switch names) and/or `nodes` (host
    lists); a block topology `block_sizes` (each a power of two times the one before) and
    `blocks`, each with `block` (a unique name) and `nodes`."""
    data = yaml.safe_load(text)
    assert isinstance(data, list) and data
    assert len({t["topology"] for t in data}) == len(data)
    for t in data:
        assert list(t)[0] == "topology" and isinstance(t["topology"], str) and t["topology"]
        assert set(t) <= TOPOLOGY_KEYS and isinstance(t.get("cluster_default", False), bool)
        kinds = [k for k in ("block", "flat", "tree") if k in t]
        assert len(kinds) == 1, kinds
        if "tree" in t:
            assert set(t["tree"]) == {"switches"}
            names = [s["switch"] for s in t["tree"]["switches"]]
            assert len(set(names)) == len(names)
            for s in t["tree"]["switches"]:
                assert set(s) - {"switch"} and set(s) <= {"switch", "children", "nodes"}
                for key in ("children", "nodes"):
                    if key in s:
                        assert isinstance(s[key], str) and expand_hostlist(s[key])
                if "children" in s:
                    assert set(expand_hostlist(s["children"])) <= set(names)
        if "block" in t:
            assert set(t["block"]) <= {"block_sizes", "blocks"} and t["block"]["blocks"]
            sizes = t["block"].get("block_sizes", [])
            assert all(isinstance(n, int) and n > 0 for n in sizes)
            assert all(b % a == 0 and (b // a) & (b // a - 1) == 0 and b > a for a, b in zip(sizes, sizes[1:]))
            blocks = [b["block"] for b in t["block"]["blocks"]]
            assert len(set(blocks)) == len(blocks)
            for b in t["block"]["blocks"]:
                assert set(b) == {"block", "nodes"} and expand_hostlist(b["nodes"])
    return data


def test_topology_yaml_tree() -> None:
    tree = build_tree(topology(three_tier_netfile(pods=2, hosts_per_leaf=2, aggregation_nodes=True)))
    data = check_topology_yaml(topology_yaml(tree, name="ib-compute", header="fabricmon"))
    assert data == topology_yaml_data(tree, "ib-compute")
    (t,) = data
    assert t["topology"] == "ib-compute" and t["cluster_default"] is True
    sw = {s["switch"]: s for s in t["tree"]["switches"]}
    assert sw["p1l1"] == {"switch": "p1l1", "nodes": "node[001-002]"}
    assert sw["core01"] == {"switch": "core01", "children": "p1s1,p2s1"}
    assert sw["p2s2"] == {"switch": "p2s2", "children": "p2l[1-2]"}
    assert set(sw) == set(tree.levels)


def test_topology_yaml_block() -> None:
    tree = build_tree(topology(fat_tree_netfile(spines=2, leaves=4, hosts_per_leaf=4)))
    (t,) = check_topology_yaml(topology_yaml(tree, block=True))
    assert t["block"] == {"block_sizes": [4], "blocks": [
        {"block": f"leaf{i:02d}", "nodes": f"node[{4 * i - 3:02d}-{4 * i:02d}]"} for i in range(1, 5)]}
    (t,) = check_topology_yaml(topology_yaml(tree, block=True, block_sizes=[4, 16]))
    assert t["block"]["block_sizes"] == [4, 16]


def test_topology_yaml_names_stay_strings() -> None:
    """A switch or host named like a number or a boolean stays a string (every string quoted)."""
    tree = SlurmTree(switches={"yes": ["1"]}, nodes={"1": ["007", "null"]}, levels={"1": 1, "yes": 2})
    (t,) = check_topology_yaml(topology_yaml(tree))
    assert t["tree"]["switches"] == [{"switch": "1", "nodes": "007,null"}, {"switch": "yes", "children": "1"}]


# --- drift: a configured topology.conf against the rail ----------------------------------------

def fat_tree_and_conf() -> tuple[SlurmTree, str, list[str]]:
    topo = topology(storage_rail(fat_tree_netfile(spines=2, leaves=4, hosts_per_leaf=2, uplinks_per_spine=2), 8))
    tree = build_tree(topo, parse_rail(["hca=mlx5_0"]))
    return tree, topology_conf(tree), list(switch_names(topo, topo.switches).values())


def test_the_generated_conf_has_no_drift() -> None:
    tree, conf, every = fat_tree_and_conf()
    assert drift(tree, parse_topology_conf(conf), every) == []


def test_a_node_under_the_wrong_leaf_is_one_finding() -> None:
    tree, conf, every = fat_tree_and_conf()
    planted = conf.replace("Nodes=node[05-06]", "Nodes=node05").replace("Nodes=node[07-08]", "Nodes=node[06-08]")
    (d,) = drift(tree, parse_topology_conf(planted), every)
    assert d == Drift("wrong_switch", "node06", 4, "node06 is listed under leaf04 (line 4) but cabled to leaf03: "
                      "move it to line 3 (`SwitchName=leaf03 Nodes=node05`)")
    assert drifted_nodes([d]) == 1


def test_every_kind_of_drift() -> None:
    tree, _, every = fat_tree_and_conf()
    conf = ("# hand-kept\n"
            "SwitchName=leaf01 Nodes=node[01-02],node99\n"         # node99: on no leaf of the rail
            "SwitchName=leaf02 Nodes=node03\n"                     # node04 missing
            "SwitchName=spine01 Switches=leaf[01-02] Nodes=node05\n"   # node05 under a spine
            "SwitchName=stor01 Nodes=node07\n"                     # the storage switch: exists, off the rail
            "SwitchName=spine07 Switches=leaf01\n")                # gone
    found = drift(tree, parse_topology_conf(conf), every)
    kinds = sorted((d.kind, d.name, d.line) for d in found)
    assert kinds == [("missing_node", "node04", 3), ("missing_node", "node06", 0), ("missing_node", "node08", 0),
                     ("unknown_node", "node99", 2), ("unknown_switch", "spine07", 6),
                     ("unknown_switch", "stor01", 5), ("wrong_switch", "node05", 4), ("wrong_switch", "node07", 5)]
    msg = {(d.kind, d.name): d.message for d in found}
    assert msg[("unknown_switch", "stor01")].endswith("is not a switch of this rail: remove the line, or rename it "
                                                      "to the fabric's switch")
    assert "does not exist in the fabric" in msg[("unknown_switch", "spine07")]
    assert msg[("missing_node", "node06")] == ("node06 (cabled to leaf03) is under no switch of the topology: add "
                                               "the line `SwitchName=leaf03 Nodes=node06`")
    assert msg[("wrong_switch", "node05")].endswith("move it to a new line `SwitchName=leaf03 Nodes=node05`")
    assert drifted_nodes(found) == 6


def test_topology_conf_parser() -> None:
    text = ("# comment\n\nswitchname=s1 \\\n   Switches=leaf[01-02] LinkSpeed=100 # trailing\n"
            "SwitchName=leaf01 Nodes=n[1-2],x\n")
    assert parse_topology_conf(text) == [
        TopologyLine(3, "s1", ("leaf01", "leaf02"), (), "switchname=s1     Switches=leaf[01-02] LinkSpeed=100"),
        TopologyLine(5, "leaf01", (), ("n1", "n2", "x"), "SwitchName=leaf01 Nodes=n[1-2],x")]
    for bad, words in (("Nodes=a\n", "line 1: no SwitchName="), ("SwitchName=a b\n", "line 1: 'b' is not"),
                       ("\nSwitchName=a Nodes=n[2-1]\n", "line 2:")):
        with pytest.raises(ParseError, match=words):
            parse_topology_conf(bad)


def test_topology_yaml_drift() -> None:
    """The configured topology.yaml's tree is compared as topology.conf is: line numbers are its
    `switch:` entries'; the cluster default tree is taken unless one is named."""
    tree, _, every = fat_tree_and_conf()
    text = topology_yaml(tree, name="ib")
    assert drift(tree, parse_topology_yaml(text), every) == []
    flat = '- topology: flat1\n  cluster_default: false\n  flat: true\n'
    planted = flat + text.replace('"node[05-06]"', '"node05"').replace('"node[07-08]"', '"node[06-08]"')
    lines = parse_topology_yaml(planted)
    assert [(ln.line, ln.switch) for ln in lines][:2] == [(8, "leaf01"), (10, "leaf02")]
    (d,) = drift(tree, lines, every)
    assert d.message == ("node06 is listed under leaf04 (line 14) but cabled to leaf03: move it to line 12 "
                         "(`switch: leaf03`)")
    assert parse_topology(planted, "/etc/slurm/topology.yaml") == lines
    two = text + text.replace('topology: "ib"', 'topology: "other"').replace("cluster_default: true",
                                                                            "cluster_default: false")
    assert parse_topology_yaml(two, "other")[0].line == 21 and parse_topology_yaml(two)[0].line == 5
    for bad, words in (("a: 1\n", "expected a list of topologies"), (flat, "no tree topology"),
                       ("- topology: t\n  tree:\n    switches:\n      - nodes: n1\n", "line 4: a switch entry needs"),
                       ("- [", "topology.yaml:")):
        with pytest.raises(ParseError, match=words):
            parse_topology_yaml(bad)


def test_topology_yaml_refuses_a_key_given_twice() -> None:
    """A key twice in one mapping (issue 53, as the config): the last one no longer wins without a word."""
    twice = "- topology: t\n  tree:\n    switches:\n      - switch: leaf01\n        nodes: n1\n        nodes: n2\n"
    with pytest.raises(ParseError) as exc:
        parse_topology_yaml(twice)
    assert str(exc.value) == "topology.yaml line 6: duplicate key 'nodes' (lines 5 and 6)"
    with pytest.raises(ParseError, match=r"line 3: duplicate key 'tree' \(lines 2 and 3\)"):
        parse_topology_yaml("- topology: t\n  tree: {switches: [{switch: a, nodes: n1}]}\n  tree: {}\n")
    # the same key in two switch entries is no duplicate
    ok = "- topology: t\n  tree:\n    switches:\n      - {switch: a, nodes: n1}\n      - {switch: b, nodes: n2}\n"
    assert [ln.nodes for ln in parse_topology_yaml(ok)] == [("n1",), ("n2",)]

