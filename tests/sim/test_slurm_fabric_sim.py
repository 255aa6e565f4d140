"""The fabric collector names the jobs behind its findings, against a real Slurm beside the ibsim
fat tree (slurmd names = ibsim host names), asserted over real HTTP: a polarised leaf names the
job spanning two leaves and not the one confined to it; a host-facing port names the job on
that host; an ended job disappears; slurmctld stopped mid-run costs only the job names."""

from __future__ import annotations

import time

import json
import urllib.request

import pytest
from helpers import fabric_collector, sample_value, scrape_samples, wait_for_scrape

from fabricmon.sim.fabric import fat_tree_netfile

HOSTS = [f"node{i:02d}" for i in range(1, 9)]      # leaf01: node01-02, leaf02: 03-04, leaf03: 05-06, leaf04: 07-08
# leaf uplinks: ports 3, 4 to spine01; 5, 6 to spine02. leaf03 polarised onto spine01.
TRAFFIC = {
    "leaf01": {3: 0.5, 4: 0.5, 5: 0.5, 6: 0.5},
    "leaf03": {3: 0.8, 4: 0.8, 5: 0.0, 6: 0.0},
}
# slurm_jobs runs once per sweep (fabric.sweep_interval is its interval too)
FABRIC = {"sweep_interval": 1.5, "discovery_interval": 3.0, "thresholds": {"consecutive_sweeps": 2}}


def findings(port: int) -> list[dict]:
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/api/v1/findings", timeout=5) as r:
        return json.loads(r.read())["findings"]


def job_ids(f: dict) -> set[str]:
    return {j["id"] for j in f["jobs"]}


@pytest.fixture
def cluster(sim_fabric, sim_slurm, monkeypatch):
    fab = sim_fabric(fat_tree_netfile(spines=2, leaves=4, hosts_per_leaf=2, uplinks_per_spine=2,
                                      degraded={"node02 mlx5_0[1]": "1x"}))
    slurm = sim_slurm(HOSTS)
    monkeypatch.setenv("SLURM_CONF", str(slurm.conf))
    return fab, slurm


def test_fabric_findings_name_only_the_jobs_they_hurt(cluster, tmp_path):
    fab, slurm = cluster
    spanning = slurm.submit("llm-pretrain", ["node05", "node07"])     # leaf03 + leaf04
    confined = slurm.submit("one-leaf", ["node06"])                   # leaf03 only
    on_bad_host = slurm.submit("on-node02", ["node02"])               # behind leaf01's 1X host port
    for j in (spanning, confined, on_bad_host):
        slurm.wait_running(j)
    with fabric_collector(fab, tmp_path, FABRIC, TRAFFIC) as d:
        guid = {sw.name: g for g, sw in wait_for_scrape(
            d.port, lambda s: sample_value(s, "fabricmon_fabric_switches") == 6, 30) and d.snapshot.fabric.switches.items()}

        def polar(port):
            return next((f for f in findings(port) if f["check"] == "ecmp" and f["status"] > 0
                         and f["device"] == guid["leaf03"]), None)
        wait_for_scrape(d.port, lambda s: sample_value(s, "fabricmon_ecmp_imbalanced", switch_guid=guid["leaf03"],
                                                       switch="leaf03", direction="up") == 1, 40)
        f = polar(d.port)
        assert f["jobs"] == [{"id": spanning, "user": "root", "name": "llm-pretrain"}]     # not the one-leaf job
        host_port = next(f for f in findings(d.port) if f["check"] == "degraded_link" and f["device"] == guid["leaf01"]
                         and f["port"] == 2)
        assert job_ids(host_port) == {on_bad_host}
        s = scrape_samples(d.port)

        def switches_of(job):
            return {dict(k[1])["switch_guid"] for k in s if k[0] == "fabricmon_fabric_job_switch_info"
                    and dict(k[1])["job_id"] == job}
        assert switches_of(spanning) == {guid[n] for n in ("leaf03", "leaf04", "spine01", "spine02")}
        assert switches_of(confined) == {guid["leaf03"]}
        assert switches_of(on_bad_host) == {guid["leaf01"]}
        assert sample_value(s, "fabricmon_slurm_job_info", job_id=spanning, user="root", job_name="llm-pretrain") == 1
        assert sample_value(s, "fabricmon_fabric_job_hosts_unmapped") == 0

        # the map: a switch's details list the jobs behind it; a job id in the URL shows its footprint
        page = urllib.request.urlopen(f"http://127.0.0.1:{d.port}/?job={spanning}", timeout=5).read().decode()
        assert f'data-footprint="{spanning}"' in page
        assert f'data-job-switch="{guid["leaf04"]}"' in page and f'data-job-switch="{guid["leaf01"]}"' not in page
        # ... and what its placement costs: two leaves where one would do (docs/slurm-topology.md#placement)
        assert (f'data-placement="{spanning}" data-leaves="2" data-leaves-needed="1" data-spines="1" '
                'data-spines-needed="0"') in page
        assert sample_value(s, "fabricmon_slurm_job_leaves", job_id=confined) == 1

        # the job ends: it is named no more
        slurm.cancel(spanning)
        wait_for_scrape(d.port, lambda s: not [k for k in s if k[0] == "fabricmon_slurm_job_info"
                                              and dict(k[1])["job_id"] == spanning], 20)
        f = polar(d.port)
        assert f is None or spanning not in job_ids(f)

        # slurmctld stopped mid-run: the findings lose their job names, nothing else
        slurm.stop_controller()
        s = wait_for_scrape(d.port, lambda s: sample_value(s, "fabricmon_source_up", source="slurm_jobs") == 0, 30)
        for src in ("discovery", "sweep"):
            assert sample_value(s, "fabricmon_source_up", source=src) == 1

        def host_port() -> dict:
            return next(f for f in findings(d.port) if f["check"] == "degraded_link" and f["device"] == guid["leaf01"]
                        and f["port"] == 2)
        # the last job list is used while fresh (its staleness bound), then no more: the names go
        deadline = time.monotonic() + 60
        while host_port()["jobs"] and time.monotonic() < deadline:
            time.sleep(0.5)
        assert host_port()["status"] == 2 and host_port()["jobs"] == []
        s = wait_for_scrape(d.port, lambda s: not [k for k in s if k[0] == "fabricmon_fabric_job_switch_info"], 30)
        assert sample_value(s, "fabricmon_fabric_switches") == 6
