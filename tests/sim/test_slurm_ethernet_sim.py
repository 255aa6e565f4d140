"""Jobs on Ethernet: the Ethernet collector names the jobs behind its findings as the InfiniBand one
does, against Debian's snmpsim (a 2-spine, 3-leaf RoCE fabric) and a real Slurm beside it (slurmd
names = the hosts the leaves see as LLDP neighbours), asserted over real HTTP: a polarised leaf's
ECMP finding names the job spanning two leaves and not the one confined to it, and the job's
switches are its leaves and the spines between them (the same leaf/uplink/spine attribution)."""

from __future__ import annotations

from pathlib import Path

import pytest

from helpers import api_findings, community_file, sample_value, scrape_samples, unavailable, wait_for_scrape

from fabricmon.sim.ethernet import SnmpSimFabric, leaf_spine, set_rate, tools_available

GBPS = 1e9 / 8
SWEEP = 1.5
HOSTS = [f"node{i:02d}" for i in range(1, 7)]      # leaf01: node01-02, leaf02: 03-04, leaf03: 05-06



def _collector(tmp: Path, addresses: list[str]):
    from fabricmon.config import from_dict
    from fabricmon.host import LiveIO
    from fabricmon.pipeline.fabric import fabric_pipeline
    from fabricmon.serve.daemon import Daemon
    comm = community_file(tmp)
    cfg = from_dict({"server": {"address": "127.0.0.1"}, "paths": {"state_dir": str(tmp / "state")},
                     "fabric": {"port": 0, "kind": "ethernet", "sweep_interval": SWEEP, "discovery_interval": 300,
                                "timeouts": {"sweep": 8, "discovery": 20},
                                "thresholds": {"consecutive_sweeps": 2, "utilisation_floor": 0.1},
                                # slurm_jobs runs once per sweep (fabric.sweep_interval is its interval too)
                                "sources": {"slurm_jobs": {"enabled": True}},
                                "ethernet": {"switches": addresses,
                                             "snmp": {"community_file": str(comm), "timeout": 0.5, "retries": 0}}}})
    assert cfg.fabric.sources["slurm_jobs"].enabled is True          # accepted with kind: ethernet
    (tmp / "state" / "fabric").mkdir(parents=True, exist_ok=True)
    io = LiveIO(cfg.sysfs, cfg.procfs)
    d = Daemon(cfg, io, port=0, pipeline=fabric_pipeline(cfg, io))
    d.start()
    return d


@pytest.fixture
def cluster(sim_slurm, monkeypatch, tmp_path):
    ok, why = tools_available()
    if not ok:
        unavailable(why)
    sw = leaf_spine(spines=2, leaves=3, hosts_per_leaf=2, uplink_rate=20 * GBPS * 8)
    # leaf01 polarised: nearly all its uplink traffic through spine01 (Ethernet8), little through spine02
    set_rate(sw, "leaf01", "Ethernet8", 300e9 / 8)
    set_rate(sw, "leaf01", "Ethernet12", 5e9 / 8)
    slurm = sim_slurm(HOSTS)
    monkeypatch.setenv("SLURM_CONF", str(slurm.conf))
    fab = SnmpSimFabric(sw, tmp_path / "snmpsim").start()
    try:
        yield {s.name: s.chassis for s in sw}, fab, slurm
    finally:
        fab.stop()


def test_a_polarised_ethernet_leaf_names_the_multi_leaf_job_behind_it(cluster, tmp_path) -> None:
    chassis, fab, slurm = cluster
    spanning = slurm.submit("allreduce", ["node01", "node03"])       # leaf01 + leaf02
    confined = slurm.submit("one-leaf", ["node02"])                  # leaf01 only
    elsewhere = slurm.submit("other-leaf", ["node05"])               # leaf03 only
    for j in (spanning, confined, elsewhere):
        slurm.wait_running(j)
    d = _collector(tmp_path, fab.addresses())
    try:
        leaf01 = chassis["leaf01"]
        wait_for_scrape(d.port, lambda s: sample_value(s, "fabricmon_ecmp_imbalanced", switch_guid=leaf01,
                                                       switch="leaf01", direction="up") == 1, 60)
        s = wait_for_scrape(d.port, lambda s: sample_value(s, "fabricmon_slurm_jobs") == 3, 30)
        (ecmp,) = [f for f in api_findings(d.port) if f["check"] == "ecmp" and f["status"] > 0]
        assert ecmp["device"] == leaf01
        # the job whose traffic leaves leaf01 through its uplinks, not the one that stays below it
        assert ecmp["jobs"] == [{"id": spanning, "user": "root", "name": "allreduce"}], ecmp

        def switches_of(job: str) -> set[str]:
            return {dict(k[1])["switch_guid"] for k in s if k[0] == "fabricmon_fabric_job_switch_info"
                    and dict(k[1])["job_id"] == job}
        assert switches_of(spanning) == {chassis[n] for n in ("leaf01", "leaf02", "spine01", "spine02")}
        assert switches_of(confined) == {leaf01}
        assert switches_of(elsewhere) == {chassis["leaf03"]}
        assert sample_value(s, "fabricmon_fabric_job_hosts_unmapped") == 0
        assert sample_value(s, "fabricmon_slurm_job_info", job_id=spanning, user="root", job_name="allreduce") == 1
        assert sample_value(s, "fabricmon_fabric_finding_job_info", switch_guid=leaf01, port="",
                            job_id=spanning) == 1
        assert sample_value(s, "fabricmon_source_up", source="slurm_jobs") == 1
    finally:
        d.stop()
