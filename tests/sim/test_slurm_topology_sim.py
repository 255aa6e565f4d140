"""`fabricmon topology slurm` on an ibsim fat tree with SHARP Aggregation Nodes and a storage rail
(every node's second HCA on one storage switch, as in topograph #488), read by the real
collector's discovery; the generated topology.conf for the compute rail (hca=mlx5_0) is given to a
real slurmctld (TopologyPlugin=topology/tree, slurmd names = ibsim host names), and `scontrol show
topology` lists every switch and node of the rail, each node under its own leaf, and nothing of
the storage rail."""

from __future__ import annotations

import re

from helpers import exposition_samples, fabric_once, fabricmon_on_fabric, sample_value

from fabricmon.parsers.slurm import expand_hostlist
from fabricmon.sim.fabric import fat_tree_netfile, three_tier_netfile
from model.test_slurm_topology import check_topology_yaml, storage_rail

HOSTS = [f"node{i:02d}" for i in range(1, 9)]      # leaf01: node01-02, leaf02: 03-04, leaf03: 05-06, leaf04: 07-08
LEAVES = {f"leaf{i:02d}": HOSTS[2 * i - 2:2 * i] for i in range(1, 5)}


def scontrol_topology(text: str) -> dict[str, dict[str, str]]:
    """`scontrol show topology` lines (`SwitchName=leaf01 Level=0 LinkSpeed=1 Nodes=node[01-02]`)
    -> switch -> its fields."""
    out = {}
    for line in text.splitlines():
        fields = dict(re.findall(r"(\w+)=(\S+)", line))
        if "SwitchName" in fields:
            out[fields["SwitchName"]] = fields
    return out


def test_generated_topology_conf_is_what_slurmctld_shows(sim_fabric, sim_slurm, tmp_path) -> None:
    net = storage_rail(fat_tree_netfile(spines=2, leaves=4, hosts_per_leaf=2, uplinks_per_spine=2,
                                        aggregation_nodes=True), hosts=8, spine_port=10)
    fab = sim_fabric(net)
    r = fabricmon_on_fabric(fab, tmp_path, "conf", {}, "topology", "slurm", "--rail", "hca=mlx5_0")
    conf = r.stdout
    assert "stor01" not in conf and "Aggregation" not in conf, conf
    assert "SwitchName=leaf01 Nodes=node[01-02]\n" in conf and "SwitchName=spine02 Switches=leaf[01-04]\n" in conf

    slurm = sim_slurm(HOSTS, topology_conf=conf)
    shown = scontrol_topology(slurm.run(["scontrol", "show", "topology"]).stdout)
    assert set(shown) == {*LEAVES, "spine01", "spine02"}, shown
    for leaf, hosts in LEAVES.items():
        assert expand_hostlist(shown[leaf]["Nodes"]) == hosts
    for spine in ("spine01", "spine02"):
        assert expand_hostlist(shown[spine]["Switches"]) == list(LEAVES)
        assert expand_hostlist(shown[spine]["Nodes"]) == HOSTS       # Slurm's own view: every node below it

    # drift: the file Slurm runs with matches; one node planted under the wrong leaf is one finding
    ok = fabricmon_on_fabric(fab, tmp_path, "check", {}, "topology", "slurm", "--rail", "hca=mlx5_0", "--check",
                             str(slurm.dir / "topology.conf"))
    assert "matches the fabric (6 switches, 8 nodes of the rail)" in ok.stdout
    planted = tmp_path / "planted.conf"
    planted.write_text(conf.replace("Nodes=node[05-06]", "Nodes=node05").replace("Nodes=node[07-08]",
                                                                                 "Nodes=node[06-08]"))
    bad = fabricmon_on_fabric(fab, tmp_path, "drift", {}, "topology", "slurm", "--rail", "hca=mlx5_0", "--check",
                              str(planted), rc=1)
    drifts = [ln for ln in bad.stdout.splitlines() if ln.startswith("DRIFT")]
    assert drifts == ["DRIFT wrong_switch: node06 is listed under leaf04 (line 6) but cabled to leaf03: move it to "
                      "line 5 (`SwitchName=leaf03 Nodes=node05`)"], bad.stdout

    # the collector reads the configured file on its own: the drifted node is a metric and one finding
    once = fabric_once(fab, tmp_path, "once", {"sources": {"slurm_topology": {"path": str(planted),
                                                                               "rail": ["hca=mlx5_0"]}}})
    assert sample_value(exposition_samples(once.stdout), "fabricmon_fabric_slurm_topology_drifted_nodes") == 1
    assert sample_value(exposition_samples(once.stdout), "fabricmon_fabric_slurm_topology_drift", kind="wrong_switch") == 1
    (warn,) = [ln for ln in once.stderr.splitlines() if "slurm_topology" in ln]
    assert warn.startswith(f"WARNING slurm_topology: {planted} drifted from the fabric (1 of 8 nodes): node06 is "
                           "listed under leaf04 (line 6) but cabled to leaf03")
    clean = fabric_once(fab, tmp_path, "clean", {"sources": {"slurm_topology": {
        "path": str(slurm.dir / "topology.conf"), "rail": ["hca=mlx5_0"]}}})
    assert sample_value(exposition_samples(clean.stdout), "fabricmon_fabric_slurm_topology_drifted_nodes") == 0
    assert "slurm_topology" not in clean.stderr

    # the same discovery as topology.yaml (no Slurm here reads it: checked against topology.yaml(5))
    y = fabricmon_on_fabric(fab, tmp_path, "yaml", {}, "topology", "slurm", "--rail", "hca=mlx5_0", "--format",
                            "yaml").stdout
    (t,) = check_topology_yaml(y)
    assert {s["switch"] for s in t["tree"]["switches"]} == set(shown)
    # without a rail selector the storage switch is a leaf holding every node: the merge the selector prevents
    every = fabricmon_on_fabric(fab, tmp_path, "all", {}, "topology", "slurm").stdout
    assert "SwitchName=stor01 Nodes=node[01-08]\n" in every


def test_three_tiers_with_sharp_in_slurmctld(sim_fabric, sim_slurm, tmp_path) -> None:
    """A SuperPOD-like three-tier fabric, an Aggregation Node in every switch: Slurm takes the cores
    as level 2 above every node, the spines as level 1 above their pod."""
    fab = sim_fabric(three_tier_netfile(pods=2, leaves_per_pod=2, spines_per_pod=2, hosts_per_leaf=2,
                                        aggregation_nodes=True))
    conf = fabricmon_on_fabric(fab, tmp_path, "conf", {}, "topology", "slurm").stdout
    hosts = [f"node{i:03d}" for i in range(1, 9)]
    slurm = sim_slurm(hosts, topology_conf=conf)
    shown = scontrol_topology(slurm.run(["scontrol", "show", "topology"]).stdout)
    assert set(shown) == {"p1l1", "p1l2", "p2l1", "p2l2", "p1s1", "p1s2", "p2s1", "p2s2", "core01", "core02"}, conf
    assert {n: shown[n]["Level"] for n in shown} == {n: "2" if n.startswith("core") else "1" if "s" in n[2:] else "0"
                                                     for n in shown}
    for core in ("core01", "core02"):
        assert expand_hostlist(shown[core]["Nodes"]) == hosts
    assert expand_hostlist(shown["p2s1"]["Nodes"]) == hosts[4:]
    assert expand_hostlist(shown["p1l2"]["Nodes"]) == ["node003", "node004"]
