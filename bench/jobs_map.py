"""What naming the jobs behind fabric findings costs the fabric collector (pipeline.jobs), on
the real 400-switch HDR director fabric of ../shared/captures (2,328 CAs) or, without the
captures, a generated 300-switch fat tree: place N running jobs (random sizes of 1-64 hosts,
three in four spanning leaves) on the topology, compute every switch each job can cross and
the jobs of findings on 10 switches (leaves and spines), as one build does when the job list or
topology changed (slurm.max_job_switch_series at its default, 20,000, unless --cap), and a build
where only the findings changed (the job map is kept). Beside it, what placing the same jobs on
the rail costs (model.placement: the tree and its index once per topology, then every job's
leaves and spines against what would do), as a ratio of the job map's build in the same run.

    python bench/jobs_map.py [--jobs 200,2000] [--repeat 3] [--cap 20000]
"""

from __future__ import annotations

import argparse
import random
import statistics
import time
from pathlib import Path

from fabricmon.checks import WARNING, Finding
from fabricmon.model.fabric import FabricPort, FabricSection, build_topology
from fabricmon.parsers.ibnetdiscover import parse_ibnetdiscover
from fabricmon.parsers.slurm import ClusterJobsData, SlurmJob
from fabricmon.pipeline.jobs import FabricJobs, host_of
from fabricmon.model.placement import RailIndex, place_all
from fabricmon.model.slurm_topology import build_tree
from fabricmon.model.snapshot import SourceState

CAPTURE = Path(__file__).resolve().parents[1].parent / "shared" / "captures" / "ibnetdiscover" / "director-hdr-400sw.ibsim.net"


def topology():
    if CAPTURE.is_file():
        return "director-hdr-400sw (real capture)", build_topology(parse_ibnetdiscover(CAPTURE.read_text()), 1.0)
    from fabricmon.sim.fabric import fat_tree_netfile
    import sys
    sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests" / "pages"))
    from fabric_snap import ibnetdiscover_text
    text = ibnetdiscover_text(fat_tree_netfile(spines=20, leaves=280, hosts_per_leaf=8))
    return "generated fat tree", build_topology(parse_ibnetdiscover(text), 1.0)


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--jobs", default="200,2000")
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--cap", type=int, default=20000)
    a = ap.parse_args()
    name, topo = topology()
    by_leaf: dict[str, list[str]] = {}
    for g, sw in topo.switches.items():
        for lk in sw.links.values():
            if lk.remote_type != "Switch":
                by_leaf.setdefault(g, []).append(host_of(lk.remote_name))
    leaves = sorted(by_leaf)
    sec = FabricSection(switches=dict(topo.switches), levels=dict(topo.levels),
                        ports={k: FabricPort(k[0], k[1], p.role, p.link, p.up) for k, p in topo.ports.items()})
    pick = random.Random(3)
    findings = [Finding("ecmp", g, None, WARNING, "x")
                for g in pick.sample(leaves, 5) + pick.sample([g for g in topo.switches if topo.levels[g] >= 2], 5)]
    print(f"{name}: {len(topo.switches)} switches, {len(leaves)} leaves, {sum(map(len, by_leaf.values()))} hosts")
    rng = random.Random(7)
    for n in (int(x) for x in a.jobs.split(",")):
        jobs = []
        for i in range(n):
            spread = rng.random() < 0.75
            picks = rng.sample(leaves, rng.randint(2, 8)) if spread else [rng.choice(leaves)]
            hosts = sorted({h for lf in picks for h in rng.sample(by_leaf[lf], min(len(by_leaf[lf]), rng.randint(1, 8)))})
            jobs.append(SlurmJob(str(1000 + i), "u", "RUNNING", tuple(hosts), f"job{i}"))
        data = ClusterJobsData(jobs=jobs)
        times, again = [], []
        for r in range(a.repeat):
            st = {"slurm_jobs": SourceState("slurm_jobs", True, 15, 10, records=ClusterJobsData, up=True, ran=True,
                                            data=data, data_time=float(r + 2))}
            fj = FabricJobs(a.cap)
            t0 = time.perf_counter()
            sec_jobs, out = fj.apply(st, sec, topo, findings)
            t1 = time.perf_counter()
            fj.apply(st, sec, topo, findings)
            times.append(t1 - t0)
            again.append(time.perf_counter() - t1)
        pairs = sum(len(v) for v in sec_jobs.switches.values())
        t0 = time.perf_counter()
        tree = build_tree(topo)
        index = RailIndex.build(tree.nodes, tree.switches, tree.hcas)
        t1 = time.perf_counter()
        placed = [place_all(index, sec_jobs.hosts) for _ in range(a.repeat)]
        t2 = time.perf_counter()
        per = (t2 - t1) / a.repeat
        over = sum(1 for p in placed[0].values() if p.excess > 1)
        print(f"  {n} jobs placed on the rail: tree and index {(t1 - t0) * 1000:.0f} ms once per topology, "
              f"{per * 1000:.1f} ms to place all of them ({per / statistics.median(times):.2f}x the job map's "
              f"build; a build places only the jobs that are new or changed hosts); {over} jobs over the default margin")
        named = sum(len(f.jobs) for f in out)
        print(f"  {n} jobs: {statistics.median(times) * 1000:.0f} ms when the jobs changed, "
              f"{statistics.median(again) * 1000:.1f} ms when they did not (median of {a.repeat}); "
              f"{pairs} job-switch pairs exported, {sec_jobs.dropped_series} jobs over the cap; "
              f"{named} job names on {len(findings)} whole-switch findings")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
