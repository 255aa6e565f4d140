"""What placement costs each running job (model.placement, checks.fabric_placement,
docs/slurm-topology.md#placement): the leaves and spines a job spans against the fewest its node
count needs, on generated fabrics (compact and scattered jobs, uneven leaves, hosts on no known
leaf, one node, two pods, a storage rail), the finding and its margin, and the fabric model's
placement of the running jobs with its metrics."""

from __future__ import annotations

from fabric_snap import _state, ibnetdiscover_text
from helpers import exposition_samples, sample_value
from model.test_slurm_topology import storage_rail, topology

from fabricmon.checks import WARNING
from fabricmon.checks.fabric_placement import PlacementCheckConfig, evaluate
from fabricmon.config import from_dict
from fabricmon.exporter.render import render
from fabricmon.model.fabric import DiscoveryData
from fabricmon.model.jobs import JobRef
from fabricmon.model.placement import Placement, RailIndex, place, place_all
from fabricmon.model.snapshot import BuildStats, Snapshot
from fabricmon.pages import fabric_map
from fabricmon.model.slurm_topology import SchedulerTopologyData, SlurmTree, build_tree, parse_rail
from fabricmon.parsers.ibnetdiscover import parse_ibnetdiscover
from fabricmon.parsers.slurm import ClusterJobsData, SlurmJob
from fabricmon.pipeline.fabric import FabricModel
from fabricmon.sim.fabric import fat_tree_netfile, three_tier_netfile

FAT = fat_tree_netfile(spines=2, leaves=4, hosts_per_leaf=4, uplinks_per_spine=2)   # leaf0N: node[4N-3..4N]


def nodes(*ids: int, width: int = 2) -> list[str]:
    return [f"node{i:0{width}d}" for i in ids]


def index(tree: SlurmTree) -> RailIndex:
    return RailIndex.build(tree.nodes, tree.switches, tree.hcas)


def spans(p: Placement) -> tuple[int, int, int, int]:
    return len(p.leaves), p.leaves_needed, p.spines, p.spines_needed


def test_compact_and_scattered_on_a_fat_tree() -> None:
    got = place_all(index(build_tree(topology(FAT))), {
        "1": nodes(1, 2, 3, 4),                  # one leaf, full
        "2": nodes(1, 5, 9, 13),                 # one node on each leaf
        "3": nodes(1, 2, 3, 4, 5, 6),            # needs two leaves, has two
        "4": nodes(2, 3, 6, 7, 10, 11),          # six nodes on three leaves
    })
    assert spans(got["1"]) == (1, 1, 0, 0) and got["1"].leaves == ("leaf01",) and got["1"].excess == 0
    assert spans(got["2"]) == (4, 1, 1, 0) and got["2"].leaves == ("leaf01", "leaf02", "leaf03", "leaf04")
    assert got["2"].excess == 3 and got["2"].would_do == ("leaf01",)
    assert spans(got["3"]) == (2, 2, 1, 1)       # every spine is above every leaf: one spine joins any two
    assert spans(got["4"]) == (3, 2, 1, 1) and got["4"].excess == 1


def test_uneven_leaves_pack_into_the_largest_first() -> None:
    tree = SlurmTree(switches={"spine1": ["big", "mid"], "spine2": ["small1", "small2"]},
                     nodes={"big": nodes(*range(1, 9)), "mid": nodes(*range(9, 13)), "small1": nodes(13, 14),
                            "small2": nodes(15, 16)},
                     levels={"big": 1, "mid": 1, "small1": 1, "small2": 1, "spine1": 2, "spine2": 2})
    ix = index(tree)
    # ten nodes: the 8-host leaf and the 4-host one would do, under one spine
    ten = place(ix, "10", nodes(1, 2, 3, 4, 5, 6, 9, 13, 14, 15))
    assert spans(ten) == (4, 2, 2, 1) and ten.would_do == ("big", "mid")
    # three nodes on two 2-host leaves: one leaf (the 8-host one) would do
    three = place(ix, "3", nodes(13, 14, 15))
    assert spans(three) == (2, 1, 1, 0) and three.leaves == ("small1", "small2")
    # more nodes than one spine's leaves hold: two spines needed
    assert spans(place(ix, "13", nodes(*range(1, 14)))) == (3, 3, 2, 2)
    # a leaf no switch lists (an island) counts as its own spine
    island = SlurmTree(switches={"s": ["a"]}, nodes={"a": nodes(1), "b": nodes(2)}, levels={"a": 1, "b": 1, "s": 2})
    assert spans(place(index(island), "x", nodes(1, 2))) == (2, 2, 2, 2)


def test_hosts_on_no_known_leaf_are_counted_never_guessed() -> None:
    ix = index(build_tree(topology(FAT)))
    p = place(ix, "7", ["node01", "gpu-x9", "node02", "node01"])
    assert p.nodes == 2 and p.unplaced == ("gpu-x9",) and spans(p) == (1, 1, 0, 0)
    none = place(ix, "8", ["gpu-x9", "gpu-y1"])
    assert none.nodes == 0 and none.leaves == () and none.unplaced == ("gpu-x9", "gpu-y1")
    assert not evaluate([none], {}, PlacementCheckConfig(margin=0))
    # a job's host named by its FQDN is its short name's leaf
    assert place(ix, "9", ["node05.example.com"]).leaves == ("leaf02",)


def test_a_job_on_one_node() -> None:
    p = place(index(build_tree(topology(FAT))), "1", ["node16"])
    assert spans(p) == (1, 1, 0, 0) and p.leaves == ("leaf04",) and p.would_do == ("leaf01",)


def test_pods_a_job_across_pods_crosses_two_spines_where_one_would_do() -> None:
    tree = build_tree(topology(three_tier_netfile(pods=2, leaves_per_pod=2, spines_per_pod=2, hosts_per_leaf=2)))
    got = place_all(index(tree), {"in-pod": nodes(1, 2, 3, width=3), "across": nodes(1, 2, 5, width=3),
                           "big": nodes(*range(1, 7), width=3)})
    assert spans(got["in-pod"]) == (2, 2, 1, 1)
    assert spans(got["across"]) == (2, 2, 2, 1) and got["across"].leaves == ("p1l1", "p2l1")
    assert spans(got["big"]) == (3, 3, 2, 2)     # 6 nodes: a pod holds 4


def test_the_rail_a_storage_switch_is_no_leaf_once_selected() -> None:
    net = storage_rail(fat_tree_netfile(spines=2, leaves=4, hosts_per_leaf=2, uplinks_per_spine=2), hosts=8)
    topo = topology(net)
    compute = index(build_tree(topo, parse_rail(["hca=mlx5_0"])))
    assert spans(place(compute, "c", nodes(1, 2))) == (1, 1, 0, 0)
    assert spans(place(compute, "s", nodes(1, 3, 5, 7))) == (4, 2, 1, 1)
    # without a selector each host is on its leaf and on stor01 (two rails): a compact job is not
    # blamed for the storage leaf, a scattered one spans the same excess
    every = index(build_tree(topo))
    c, s = place(every, "c", nodes(1, 2)), place(every, "s", nodes(1, 3, 5, 7))
    assert c.leaves == ("leaf01", "stor01") and c.excess == 0
    assert s.excess == 2 and len(s.leaves) == 5


def test_a_hosts_hcas_on_one_leaf_count_that_leaf_once() -> None:
    """The real 400-switch director: each host's eight HCAs on one leaf, two hosts a leaf. Eight rails
    sharing leaves need the leaves one rail needs, not eight times them."""
    hcas = frozenset(f"ibp{i}s0f0" for i in range(8))
    tree = SlurmTree(switches={"lc1": ["l1", "l2", "l3"]},
                     nodes={"l1": ["h1", "h2"], "l2": ["h3", "h4"], "l3": ["h5", "h6"]},
                     hcas={lf: {h: hcas for h in hs} for lf, hs in {"l1": ["h1", "h2"], "l2": ["h3", "h4"],
                                                                    "l3": ["h5", "h6"]}.items()},
                     levels={"l1": 1, "l2": 1, "l3": 1, "lc1": 2})
    ix = index(tree)
    assert spans(place(ix, "a", ["h1", "h2"])) == (1, 1, 0, 0)
    assert spans(place(ix, "b", ["h1", "h3", "h5"])) == (3, 2, 1, 1)


def test_the_finding_names_the_job_its_user_and_leaves_beyond_the_margin() -> None:
    got = place_all(index(build_tree(topology(FAT))), {"4711": nodes(1, 5, 9, 13), "12": nodes(2, 3, 6, 7, 10, 11),
                                                "3": nodes(1, 2)})
    refs = {"4711": JobRef("4711", "alice", "llm-pretrain")}
    (f,) = evaluate(got.values(), refs, PlacementCheckConfig())             # default margin 1: 4711 only
    assert (f.check, f.device, f.port, f.status) == ("placement", "job:4711", None, WARNING)
    assert f.message.startswith("job 4711 (alice/llm-pretrain) spans 4 leaves where 1 would do (4 nodes on leaf01, "
                                "leaf02, leaf03, leaf04; 1 spine where 0 would do)")
    assert "sbatch --switches=1@" in f.message and f.jobs == (refs["4711"],)
    assert [f.device for f in evaluate(got.values(), refs, PlacementCheckConfig(margin=0))] == ["job:12", "job:4711"]
    assert not evaluate(got.values(), refs, PlacementCheckConfig(margin=3))
    assert not evaluate(got.values(), refs, PlacementCheckConfig(margin=None))


def test_the_fabric_model_places_the_running_jobs_and_exports_them() -> None:
    net = storage_rail(fat_tree_netfile(spines=2, leaves=4, hosts_per_leaf=2, uplinks_per_spine=2), 8)
    cfg = from_dict({"checks": {"placement": {"margin": 0}}}, check_paths=False)
    model = FabricModel(cfg, clock=lambda: 1_800_000_000.0)
    jobs = ClusterJobsData([SlurmJob("21", "bob", "RUNNING", tuple(nodes(1, 2)), "compact"),
                            SlurmJob("22", "eve", "RUNNING", tuple(nodes(3, 5, 7)), "scattered"),
                            SlurmJob("23", "eve", "PENDING", (), "waiting")])
    states = {"discovery": _state(DiscoveryData, parse_ibnetdiscover(ibnetdiscover_text(net)), 1.0),
              "slurm_jobs": _state(ClusterJobsData, jobs, 1.0),
              "slurm_topology": _state(SchedulerTopologyData, SchedulerTopologyData(
                  "/etc/slurm/topology.conf", (), parse_rail(["hca=mlx5_0"]), configured=False), 1.0)}
    for _ in range(2):          # the second build reuses the placements
        sec, findings = model.build(states)
        (f,) = [f for f in findings if f.check == "placement"]
        assert f.device == "job:22" and f.message.startswith("job 22 (eve/scattered) spans 3 leaves where 2 would do")
        assert f.jobs == (JobRef("22", "eve", "scattered"),)
        assert set(sec["jobs"].placement) == {"21", "22"}
    s = exposition_samples(render(Snapshot(time=2.0, findings=findings, sources={}, builds=BuildStats(),
                                           fabric=sec["fabric"], jobs=sec["jobs"])).decode())
    assert sample_value(s, "fabricmon_slurm_job_leaves", job_id="21") == 1
    assert sample_value(s, "fabricmon_slurm_job_leaves", job_id="22") == 3
    assert sample_value(s, "fabricmon_slurm_job_leaves_needed", job_id="22") == 2
    assert sample_value(s, "fabricmon_slurm_job_spines", job_id="22") == 1
    assert sample_value(s, "fabricmon_slurm_job_spines_needed", job_id="21") == 0
    # the map's job view: the span and what would do
    snap = Snapshot(time=2.0, findings=findings, sources={}, builds=BuildStats(), fabric=sec["fabric"],
                    jobs=sec["jobs"])
    html = fabric_map.live(snap, {"job": "22"})
    assert ('data-placement="22" data-leaves="3" data-leaves-needed="2" data-spines="1" data-spines-needed="1">'
            "Placement: 3 nodes span 3 leaf switches where 2 would do, and 1 spine where 1 would do: 1 more than "
            "needed (e.g. leaf01, leaf02).") in html
    assert "where 1 would do, and 0 spines where 0 would do: as few as its node count allows." in fabric_map.live(
        snap, {"job": "21"})
    # a job that changed hosts is placed again, the others are kept as they were
    before = sec["jobs"].placement["21"]
    states["slurm_jobs"] = _state(ClusterJobsData, ClusterJobsData(
        [jobs.jobs[0], SlurmJob("22", "eve", "RUNNING", tuple(nodes(3, 4)), "scattered")]), 2.0)
    sec, findings = model.build(states)
    assert sec["jobs"].placement["21"] is before and spans(sec["jobs"].placement["22"]) == (1, 1, 0, 0)
    assert not [f for f in findings if f.check == "placement"]
    states["slurm_jobs"] = _state(ClusterJobsData, jobs, 3.0)
    # no rail known (no slurm_topology source): every host CA, the storage switch a second rail
    del states["slurm_topology"]
    sec, findings = model.build(states)
    assert sec["jobs"].placement["22"].leaves == ("leaf02", "leaf03", "leaf04", "stor01")
    assert [f.device for f in findings if f.check == "placement"] == ["job:22"]
