"""The node daemon's slurm source against a real Slurm beside the ibsim fabric (slurmd names =
ibsim host names), asserted over real HTTP: a node finding names the job on that node, an ended
job disappears, slurmctld down costs only the job names, and no poll asks slurmctld."""

from __future__ import annotations

import json
import subprocess
import sys
import urllib.request

import pytest
import yaml
from helpers import all_sources_ran, sample_value, scrape_samples, wait_for_scrape, wait_until

from fabricmon.config import from_dict
from fabricmon.host import LiveIO, RecordingIO
from fabricmon.serve.daemon import Daemon
from fabricmon.sim.fabric import fat_tree_netfile

DEGRADED = "node02"
HOSTS = ["node01", "node02", "node03", "node04"]


def _cfg(tmp_path, node: str, **slurm) -> dict:
    (tmp_path / "sys").mkdir(exist_ok=True)
    return {
        "server": {"address": "127.0.0.1", "port": 0},
        "paths": {"sysfs": str(tmp_path / "sys"), "state_dir": str(tmp_path / "state")},
        "sources": {**{n: {"interval": 1.0} for n in ("sysfs", "ibstat", "perfquery", "iblinkinfo")},
                    "slurm": {"interval": 0.5}},
        "expected_links": [{"device": "*", "width": "4X", "speed": "HDR"}],
        "slurm": {"node_name": node, "lookup_retry": 1, **slurm},
    }


def findings(port: int) -> list[dict]:
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/api/v1/findings", timeout=5) as r:
        return json.loads(r.read())["findings"]


def degraded_jobs(port: int) -> list[dict] | None:
    f = [f for f in findings(port) if f["check"] == "degraded_link" and f["status"] == 2]
    return f[0]["jobs"] if f else None


@pytest.fixture
def cluster(sim_fabric, sim_slurm, monkeypatch):
    fab = sim_fabric(fat_tree_netfile(spines=1, leaves=2, hosts_per_leaf=2, degraded={f"{DEGRADED} mlx5_0[1]": "1x"}))
    slurm = sim_slurm(HOSTS)
    monkeypatch.setenv("SLURM_CONF", str(slurm.conf))      # as Slurm's own tools read it
    return fab, slurm


@pytest.fixture
def daemon(cluster, tmp_path):
    fab, _ = cluster
    made = []

    def start(node: str, io=None, **slurm) -> Daemon:
        cfg = from_dict(_cfg(tmp_path, node, **slurm))
        d = Daemon(cfg, io or LiveIO(cfg.sysfs, cfg.procfs, env=fab.env(f"{node} mlx5_0")))
        d.start()
        made.append(d)
        wait_for_scrape(d.port, all_sources_ran, 30)
        return d

    yield start
    for d in made:
        d.stop()


def test_node_finding_names_its_job_and_forgets_it_when_it_ends(cluster, daemon, tmp_path):
    fab, slurm = cluster
    spanning = slurm.submit("allreduce-2leaf", ["node02", "node03"])
    elsewhere = slurm.submit("elsewhere", ["node01"])
    slurm.wait_running(spanning)
    slurm.wait_running(elsewhere)
    rec = RecordingIO(LiveIO(str(tmp_path / "sys"), "/proc", env=fab.env("node02 mlx5_0")), tmp_path / "bundle")
    d = daemon(DEGRADED, io=rec)
    want = [{"id": spanning, "user": "root", "name": "allreduce-2leaf"}]
    assert wait_until(lambda: degraded_jobs(d.port) == want, 15, "the degraded link names the job on node02")
    s = scrape_samples(d.port)
    assert sample_value(s, "fabricmon_slurm_job_info", job_id=spanning, user="root", job_name="allreduce-2leaf") == 1
    assert not [k for k in s if k[0] == "fabricmon_slurm_job_info" and dict(k[1])["job_id"] == elsewhere]
    assert sample_value(s, "fabricmon_slurm_jobs") == 1
    page = urllib.request.urlopen(f"http://127.0.0.1:{d.port}/", timeout=5).read().decode()
    assert f'data-job="{spanning}"' in page and "allreduce-2leaf" in page
    res = subprocess.run([sys.executable, "-m", "fabricmon", "check", "--daemon", f"http://127.0.0.1:{d.port}"],
                         capture_output=True, text=True, timeout=60)
    assert res.returncode == 2, res.stdout + res.stderr
    assert f"[jobs: {spanning} (root/allreduce-2leaf)]" in res.stdout
    # polls go on; the job was looked up once, never per poll
    runs = scrape_samples(d.port)
    polls0 = sample_value(runs, "fabricmon_source_runs_total", source="slurm")
    wait_until(lambda: sample_value(scrape_samples(d.port), "fabricmon_source_runs_total", source="slurm") >= polls0 + 4,
               15, "four more polls")
    lookups = [c["argv"] for c in rec.commands if c["argv"][0] == "squeue"]
    assert len(lookups) == 1 and lookups[0][-1] == f"--jobs={spanning}", lookups

    slurm.cancel(spanning)
    assert wait_until(lambda: degraded_jobs(d.port) == [], 15, "the ended job disappears")
    s = scrape_samples(d.port)
    assert not [k for k in s if k[0] == "fabricmon_slurm_job_info"]
    assert sample_value(s, "fabricmon_slurm_jobs") == 0

    # the recorded bundle replays the job source (the job named while it ran)
    d.stop()
    rec.save()
    out = subprocess.run([sys.executable, "-m", "fabricmon", "once", "--replay", str(tmp_path / "bundle")],
                         capture_output=True, text=True, timeout=60, env={**fab.env("node02 mlx5_0"), "SLURM_CONF": str(slurm.conf)})
    assert out.returncode == 0, out.stderr
    assert "fabricmon_source_up{source=\"slurm\"} 1" in out.stdout


def test_slurmctld_down_costs_only_the_job_names(cluster, daemon):
    fab, slurm = cluster
    job = slurm.submit("ckpt-every-hour", ["node02"])
    slurm.wait_running(job)
    slurm.stop_controller()
    d = daemon(DEGRADED)
    # the job is still named by id (from the local slurmd), without user and name
    assert wait_until(lambda: degraded_jobs(d.port) == [{"id": job, "user": "", "name": ""}], 20,
                      "job by id while slurmctld is down")
    s = scrape_samples(d.port)
    assert sample_value(s, "fabricmon_slurm_job_lookup_failures_total") >= 1
    for src in ("sysfs", "ibstat", "perfquery", "iblinkinfo", "slurm"):
        assert sample_value(s, "fabricmon_source_up", source=src) == 1, src
    assert sample_value(s, "fabricmon_source_errors_total", source="slurm", kind="timeout") == 0
    assert sample_value(s, "fabricmon_check_status", check="degraded_link", device="ibsim0", port="1",
                        **{"class": "fatal"}) == 2
    assert not [f for f in findings(d.port) if f["check"] == "source"]
    # slurmctld back: the name follows (lookup_retry 1 s)
    slurm.start_controller()
    assert wait_until(lambda: degraded_jobs(d.port) == [{"id": job, "user": "root", "name": "ckpt-every-hour"}], 30,
                      "the name once slurmctld answers")


def test_config_node_name_and_yaml_roundtrip(tmp_path):
    cfg = from_dict(yaml.safe_load(yaml.safe_dump(_cfg(tmp_path, "gpu-a01"))))
    assert cfg.slurm.node_name == "gpu-a01" and cfg.sources["slurm"].enabled == "auto"
