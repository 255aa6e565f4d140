"""What placement costs each running job (docs/slurm-topology.md#placement), against the real Slurm
beside an ibsim fat tree with a storage rail: the collector's own `fabricmon topology slurm` for the
compute rail is Slurm's topology.conf (TopologyPlugin=topology/tree); a 2-node job placed by Slurm's
topology plugin lands on one leaf, a job given one node on each of three other leaves is scattered.
`fabric once` with the job source and the rail exports each job's leaves and spines against what
would do, and raises the placement WARNING for the scattered job only (and none at the default
margin, which its one extra leaf does not pass)."""

from __future__ import annotations

from helpers import exposition_samples, fabric_once, fabricmon_on_fabric, sample_value
from model.test_slurm_topology import storage_rail

from fabricmon.parsers.slurm import SQUEUE_FORMAT, parse_squeue
from fabricmon.sim.fabric import fat_tree_netfile

HOSTS = [f"node{i:02d}" for i in range(1, 9)]      # leaf01: node01-02, leaf02: 03-04, leaf03: 05-06, leaf04: 07-08
LEAF_OF = {h: f"leaf{(i // 2) + 1:02d}" for i, h in enumerate(HOSTS)}


def test_compact_and_scattered_jobs_placed_by_the_real_slurm(sim_fabric, sim_slurm, tmp_path, monkeypatch) -> None:
    fab = sim_fabric(storage_rail(fat_tree_netfile(spines=2, leaves=4, hosts_per_leaf=2, uplinks_per_spine=2),
                                  hosts=8, spine_port=10))
    conf = fabricmon_on_fabric(fab, tmp_path, "conf", {}, "topology", "slurm", "--rail", "hca=mlx5_0").stdout
    slurm = sim_slurm(HOSTS, topology_conf=conf)
    monkeypatch.setenv("SLURM_CONF", str(slurm.conf))

    # Slurm places a 2-node job by its topology: both nodes under one leaf
    compact = slurm.run(["sbatch", "--parsable", "-J", "compact", "-N", "2", "-o", "/dev/null", "--wrap",
                         "srun sleep 600"]).stdout.strip().split(";")[0]
    slurm.wait_running(compact)
    (job,) = parse_squeue(slurm.run(["squeue", "--noheader", "-j", compact, f"--format={SQUEUE_FORMAT}"]).stdout)[0]
    assert len({LEAF_OF[h] for h in job.nodes}) == 1, job.nodes
    # one node on each of the three other leaves: scattered (two leaves would hold three nodes)
    free = [h for h in HOSTS if LEAF_OF[h] != LEAF_OF[job.nodes[0]]]
    spread = [free[0], free[2], free[4]]
    scattered = slurm.submit("scattered", spread)
    slurm.wait_running(scattered)
    leaves = sorted(LEAF_OF[h] for h in spread)

    fabric = {"sources": {"slurm_topology": {"path": str(slurm.dir / "topology.conf"), "rail": ["hca=mlx5_0"]}}}
    once = fabric_once(fab, tmp_path, "once", fabric, config={"checks": {"placement": {"margin": 0}}})
    s = exposition_samples(once.stdout)
    assert sample_value(s, "fabricmon_slurm_job_info", job_id=scattered, user="root", job_name="scattered") == 1
    want = {compact: (1, 1, 0, 0), scattered: (3, 2, 1, 1)}     # leaves, needed, spines, needed
    for j, (lv, lvn, sp, spn) in want.items():
        assert sample_value(s, "fabricmon_slurm_job_leaves", job_id=j) == lv, j
        assert sample_value(s, "fabricmon_slurm_job_leaves_needed", job_id=j) == lvn, j
        assert sample_value(s, "fabricmon_slurm_job_spines", job_id=j) == sp, j
        assert sample_value(s, "fabricmon_slurm_job_spines_needed", job_id=j) == spn, j
    assert sample_value(s, "fabricmon_fabric_slurm_topology_drifted_nodes") == 0      # Slurm's file is the fabric's
    (warn,) = [ln for ln in once.stderr.splitlines() if " placement: " in ln]
    assert warn.startswith(f"WARNING placement: job {scattered} (root/scattered) spans 3 leaves where 2 would do "
                           f"(3 nodes on {', '.join(leaves)}): its collectives cross the spines"), warn
    assert warn.endswith(f"(sbatch --switches=2@<max wait>) [jobs: {scattered} (root/scattered)]"), warn
    assert sample_value(s, "fabricmon_check_status", check="placement", device=f"job:{scattered}", port="",
                        **{"class": "degraded"}) == 1
    assert not [k for k in s if k[0] == "fabricmon_check_status" and dict(k[1]).get("device") == f"job:{compact}"]

    # the default margin (1): one leaf more than needed is no finding; the metrics stay
    default = fabric_once(fab, tmp_path, "default", fabric)
    assert " placement: " not in default.stderr
    assert sample_value(exposition_samples(default.stdout), "fabricmon_slurm_job_leaves", job_id=scattered) == 3
