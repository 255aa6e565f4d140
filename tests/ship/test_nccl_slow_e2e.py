"""From a slow collective to the cable, end to end (issue 38 item 2): a simulated fat tree (ibsim, opensm, the
real infiniband-diags), a real Slurm running jobs across several leaves, the fabric collector, node daemons on
four of the hosts reading NCCL Inspector files (written by fabricmon.sim.nccl_inspector exactly as NCCL writes
them, their bus bandwidth following the simulated paths, the 30 s cadence cut to DUMP s), and the real
Prometheus with the shipped rules and the real Alertmanager.

The node daemons run in this process: their ports, peers and links are the simulated host's (sysfs files
in the shape the kernel writes, iblinkinfo on ibsim), and only their GPU side is replayed from a recorded
bundle's NVML answers (tests/fixtures/bundles/dgx-h100), as nothing on this machine has a GPU.

A planted erroring cable (symbol errors on the leaf port of node01's cable) slows the job whose path crosses
it and only that job: within two dump intervals its node daemon names job, node, GPU, NIC, HCA port and
switch port; the collector's verdict on that switch port is there; FabricmonNcclSlowOnFlaggedPath fires in
Prometheus and reaches Alertmanager for that job only; the job on clean paths raises nothing; and every
panel of the dashboard row "Slow jobs and the links on their paths" returns data from that Prometheus."""

from __future__ import annotations

import json
import re
import shutil
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

import pytest
import yaml

from fabricmon.config import from_dict
from fabricmon.host import LiveIO
from fabricmon.parsers.ibnetdiscover import parse_ibnetdiscover
from fabricmon.serve.daemon import Daemon
from fabricmon.sim import sysfs_tree
from fabricmon.sim.fabric import fat_tree_netfile
from fabricmon.sim.nccl_inspector import InspectorWriter, SimGpu, SimJob, SimPaths
from helpers import BUNDLES, fabric_collector
from ship_helpers import Pager, http_get, load_generator, require_tool, start_prometheus, wait_until
from test_dashboards import _has_data
from test_fabric_dashboard import VARS, dashboard, row_panels
from test_paging_e2e import grouping_alertmanager

pytestmark = pytest.mark.sim

build_dashboards = load_generator("grafana/build_dashboards.py")
build_rules = load_generator("prometheus/build_rules.py")
DUMP = 2.0                      # NCCL's dump interval (30 s at least), cut down
COLLECTOR = {"sweep_interval": 2.0, "discovery_interval": 4.0, "routing_interval": 10.0, "sm_interval": 5.0,
             "concurrency": 1}
NVML = json.loads((BUNDLES / "dgx-h100" / "bundle.json").read_text())["nvml"][:1]     # one recorded GPU


class RecordedGpuIO(LiveIO):
    """The simulated host's LiveIO; NVML's answers replayed from a recorded bundle (no GPU here)."""

    def __init__(self, sysfs: str, env: dict[str, str], gpus: list[dict]):
        super().__init__(sysfs, "/proc", env=env)
        self.gpus = gpus

    def nvml_gpus(self) -> list[dict]:
        return [dict(g) for g in self.gpus]


def host_sysfs(root: Path, node_guid: str, bus_id: str) -> str:
    """The host's sysfs: its ibsim0 (node GUID from ibsim, 4X HDR) behind the same PCIe switch as the
    recorded GPU, as the kernel lays them out (sim.sysfs_tree's files, moved under the device's name)."""
    sysfs_tree.build(root, hcas=1)
    ib = root / "class" / "infiniband"
    (ib / "mlx5_0").rename(ib / "ibsim0")
    g = node_guid.removeprefix("0x").rjust(16, "0")
    (ib / "ibsim0" / "node_guid").write_text(":".join(g[i:i + 4] for i in range(0, 16, 4)))
    (ib / "ibsim0" / "ports" / "1" / "rate").write_text("200 Gb/sec (4X HDR)")
    switch = root / "devices" / "pci0000:00" / "0000:00:01.0" / "0000:01:00.0"
    bus = bus_id.lower()[-12:]
    gpu, nic = switch / "0000:02:00.0" / bus, switch / "0000:02:01.0" / "0000:04:00.0"
    for d in (gpu, nic):
        d.mkdir(parents=True)
        (d / "numa_node").write_text("0\n")
    (ib / "ibsim0" / "device").symlink_to(nic)
    (root / "bus" / "pci" / "devices").mkdir(parents=True)
    (root / "bus" / "pci" / "devices" / bus).symlink_to(gpu)
    (root / "module" / "nvidia").mkdir(parents=True)
    return str(root)


def node_daemon(fab, host: str, tmp_path: Path, dump_dir: Path) -> Daemon:
    ca = f"{host} mlx5_0"                           # the simulated CA's node description
    guid = re.search(r"Node GUID: (0x[0-9a-f]+)", fab.run_tool(ca, "ibstat", check=True).stdout).group(1)
    work = tmp_path / host
    (work / "state").mkdir(parents=True)
    sysfs = host_sysfs(work / "sys", guid, NVML[0]["bus_id"])
    cfg = from_dict({
        "paths": {"sysfs": sysfs, "state_dir": str(work / "state")},
        "server": {"address": "127.0.0.1"},
        # what this test reads: the host's port (sysfs, iblinkinfo on ibsim), its GPU, NCCL's files; the sources
        # that would read this machine's own NICs and kernel log are off
        "sources": {"sysfs": {"interval": 2.0}, "iblinkinfo": {"interval": 5.0}, "gpu": {"enabled": True},
                    **{n: {"enabled": False} for n in ("ibstat", "perfquery", "hw_counters", "ethtool", "netdev",
                                                       "gpudirect", "slurm", "optics", "kernel_log")},
                    "nccl_inspector": {"enabled": True, "dir": str(dump_dir), "interval": 1.0, "expire": 60.0}},
        "checks": {"nccl_slow_collective": {"learn_seconds": 2 * DUMP, "min_samples": 2}},
    }, check_paths=False)
    d = Daemon(cfg, RecordedGpuIO(sysfs, fab.env(ca), NVML), port=0, journal=False)
    d.start()
    return d


def slow_findings(d: Daemon) -> list:
    snap = d.snapshot
    return [f for f in snap.findings if f.check == "nccl_slow_collective"] if snap is not None else []


def substitute(expr: str) -> str:
    """The dashboard's variables set to all (label_replace's $1 stays)."""
    for name, value in VARS.items():
        expr = re.sub(rf"\$(?:{name}\b|\{{{name}(?::[a-z]+)?\}})", value, expr)
    assert not re.search(r"\$[a-z_{]", expr), f"unsubstituted variable in {expr}"
    return expr


def metrics(d) -> str:
    return http_get(f"http://127.0.0.1:{d.port}/metrics").decode()


@dataclass
class Cluster:
    nodes: dict[str, Daemon]            # the node daemons, by host
    coll: Daemon                        # the fabric collector
    prom: object                        # ship_helpers.Prometheus
    webhook: Pager
    writer: InspectorWriter
    paths: SimPaths
    cabled: dict[str, tuple[str, int]]  # host -> (leaf, leaf port)
    guid: dict[str, str]                # switch name -> GUID

    def slow(self, host: str) -> list:
        return [f for f in slow_findings(self.nodes[host]) if f.status > 0]

    def pages(self) -> list[dict]:
        return [a for n in self.webhook.notifications for a in n["alerts"]
                if a["labels"]["alertname"] == "FabricmonNcclSlowOnFlaggedPath" and a["status"] == "firing"]


@contextmanager
def cluster(fab, processes, tmp_path: Path, jobs: dict[str, list[str]], traffic: dict | None = None,
            fabric: dict | None = None) -> Iterator[Cluster]:
    """Node daemons on every host of `jobs` (job ID -> its hosts, one GPU each), the generator writing their
    Inspector files, the collector, Prometheus (the shipped NCCL alert, `for:` cut to 2 s) and Alertmanager;
    yielded once every node learned its baseline, nothing slow, each path joined to its cable."""
    hosts = sorted({h for hs in jobs.values() for h in hs})
    disc = parse_ibnetdiscover(fab.run_tool(fab.hosts[0], "ibnetdiscover", check=True).stdout)
    cabled = {link.remote_name.split()[0]: (sw.name, port) for sw in disc.switches.values()
              for port, link in sw.links.items() if link.remote_name.split()[:1] and link.remote_name.split()[0] in hosts}
    assert set(cabled) == set(hosts), cabled
    uuid = NVML[0]["uuid"].removeprefix("GPU-")
    paths = SimPaths(cabled, line_gbs=25.0)
    dirs = {h: tmp_path / "nccl" / h for h in hosts}
    for d in dirs.values():
        d.mkdir(parents=True)
    writer = InspectorWriter({h: str(d) for h, d in dirs.items()},
                             [SimJob(j, tuple(SimGpu(h, uuid) for h in hs)) for j, hs in jobs.items()], paths, DUMP)
    writer.start()
    nodes: dict[str, Daemon] = {}
    rules = tmp_path / "fabricmon.rules.yml"
    doc = yaml.safe_load(build_rules.build())
    doc["groups"] = [g for g in doc["groups"] if g["name"] == "fabricmon.nccl.alerts"]
    for r in doc["groups"][0]["rules"]:
        r["for"] = "2s"
    rules.write_text(yaml.safe_dump(doc, sort_keys=False))
    webhook = Pager()
    try:
        nodes.update({h: node_daemon(fab, h, tmp_path, dirs[h]) for h in hosts})
        with fabric_collector(fab, tmp_path / "collector", {**COLLECTOR, **(fabric or {})}, traffic) as coll:
            am = grouping_alertmanager(processes, tmp_path, webhook.port)
            prom = start_prometheus(processes, tmp_path, [
                {"job_name": build_rules.JOB, "static_configs": [
                    {"targets": [f"127.0.0.1:{d.port}" for d in nodes.values()]}]},
                {"job_name": build_rules.FABRIC_JOB, "static_configs": [{"targets": [f"127.0.0.1:{coll.port}"]}]},
            ], rule_files=[rules], alertmanager_port=am)
            wait_until(lambda: all("fabricmon_nccl_baseline_ratio{" in metrics(d) for d in nodes.values()), 60,
                       "every node's baseline learned")
            for h, d in nodes.items():
                [f] = slow_findings(d)
                assert f.status == 0 and (f.device, f.port) == ("ibsim0", 1), (h, f)
                [p] = d.snapshot.nccl.paths
                assert (p.switch, p.switch_port) == cabled[h], (h, p)
                assert p.gpu_index == 0 and p.device == "ibsim0" and p.line_rate_gbs == 25.0
            yield Cluster(nodes, coll, prom, webhook, writer, paths, cabled,
                          {sw.name: g for g, sw in disc.switches.items()})
    finally:
        webhook.close()
        writer.stop()
        for d in nodes.values():
            d.stop()


def slows(c: Cluster, host: str, job: str, fault: str) -> float:
    """Waits for `host`'s finding once the generator slowed the jobs crossing the fault; checks it names
    job, node, GPU, NIC, HCA port and switch port; returns how long after the slowdown it came."""
    planted = time.monotonic()
    f = wait_until(lambda: next(iter(c.slow(host)), None), 2 * DUMP + 3, f"{host}'s slow finding ({fault})")
    took = time.monotonic() - planted
    leaf, leaf_port = c.cabled[host]
    for part in (f"job {job}", host, "GPU 0", NVML[0]["uuid"], "ibsim0 port 1", f'"{leaf}" port {leaf_port}',
                 "50% of its baseline"):
        assert part in f.message, (part, f.message)
    assert took <= 2 * DUMP + 1.5, took     # within two dump intervals (and a poll)
    return took


def page_for(c: Cluster, host: str, job: str) -> dict:
    page = wait_until(lambda: next(iter(c.pages()), None), 60, "FabricmonNcclSlowOnFlaggedPath at the webhook")
    time.sleep(3)                           # what is tested: no other page comes (any other would have by now)
    assert {(a["labels"]["job_id"], a["labels"]["instance"]) for a in c.pages()} == {
        (job, f"127.0.0.1:{c.nodes[host].port}")}
    lab = page["labels"]
    leaf, leaf_port = c.cabled[host]
    assert (lab["switch"], lab["switch_guid"], lab["switch_port_fabric"], lab["device"], lab["port"], lab["gpu"],
            lab["uuid"]) == (leaf, c.guid[leaf], str(leaf_port), "ibsim0", "1", "0", NVML[0]["uuid"])
    assert f"Slurm job {job} runs slow" in page["annotations"]["description"]
    return page


def test_an_erroring_cable_slows_and_pages_only_the_job_that_crosses_it(sim_fabric, sim_slurm, processes, tmp_path,
                                                                      monkeypatch):
    for tool in ("prometheus", "prometheus-alertmanager"):
        require_tool(tool, tool)
    fab = sim_fabric(fat_tree_netfile(spines=2, leaves=4, hosts_per_leaf=2, uplinks_per_spine=2))
    fab.start_sm()
    slurm = sim_slurm([f"node{i:02d}" for i in range(1, 9)])
    monkeypatch.setenv("SLURM_CONF", str(slurm.conf))
    crossing = slurm.submit("llm-pretrain", ["node01", "node03"])      # leaf01 + leaf02: over node01's cable
    clean = slurm.submit("llm-finetune", ["node05", "node07"])         # leaf03 + leaf04
    for j in (crossing, clean):
        slurm.wait_running(j)
    with cluster(fab, processes, tmp_path, {crossing: ["node01", "node03"], clean: ["node05", "node07"]}) as c:
        # plant the erroring cable: node01's leaf port counts symbol errors, rising each sweep
        leaf, leaf_port = c.cabled["node01"]
        for v in (1000, 20000, 65000):
            fab.set_counter(leaf, leaf_port, "PortCounters.SymbolErrorCounter", v)
            time.sleep(COLLECTOR["sweep_interval"] + 0.5)      # what is tested: the counter moves between sweeps
        verdict = wait_until(lambda: next((f for f in c.coll.snapshot.findings if f.check == "symbol_errors"
                                           and f.status > 0 and f.device == c.guid[leaf] and f.port == leaf_port),
                                          None), 30, "the collector's symbol_errors verdict on the cable")
        assert crossing in {j.job_id for j in verdict.jobs}      # the collector names the job too (real Slurm)
        with c.writer.lock:                 # ... and NCCL slows the job whose traffic crosses it
            c.paths.erroring.add((leaf, leaf_port))
        took = slows(c, "node01", crossing, "erroring cable")
        wait_until(lambda: c.slow("node03"), 2 * DUMP + 3, "node03 (the same job's other rank) slow")
        time.sleep(2 * DUMP)                # what is tested: two dumps more, and the clean paths still raise nothing
        assert not c.slow("node05") and not c.slow("node07")       # the job on clean paths raises nothing

        # the alert fires for the slowed job only, naming the cable with the verdict on it: node01's rank
        # (node03's rank of the same job is slow too, but its own cable and leaf are clean)
        page = page_for(c, "node01", crossing)
        assert "symbol_errors on the cable's switch port" in page["annotations"]["description"]
        # the collector's map, on each job (item 4): the crossing job's view lists the cable; the other's nothing
        view = http_get(f"http://127.0.0.1:{c.coll.port}/?job={crossing}").decode()
        assert f'data-job-flagged-link="{c.guid[leaf]}:{leaf_port}"' in view and "symbol_errors CRITICAL" in view
        assert 'data-job-flagged="0"' in http_get(f"http://127.0.0.1:{c.coll.port}/?job={clean}").decode()

        # the dashboard row's panels return data from this Prometheus (the verdict table's leaf query,
        # for imbalanced leaves, evaluates empty here: no leaf is polarised in this test)
        row = row_panels(dashboard(), build_dashboards.NCCL_ROW)
        assert [pn["title"] for pn in row] == ["Slow NCCL paths and their cables", "Bus bandwidth / job baseline",
                                               "Bus bandwidth / line rate", "Fabric verdicts on slow jobs' paths"]
        pending = {pn["title"]: [substitute(t["expr"]) for t in pn["targets"]] for pn in row}

        def without_data() -> dict:
            for title, exprs in list(pending.items()):
                if any(_has_data(c.prom.query(e)) for e in exprs):
                    del pending[title]
            return pending
        wait_until(without_data, 30, lambda: f"panels without data: {sorted(pending)}", until=lambda p: not p,
                   interval=1)
        verdicts = c.prom.query(substitute(row[3]["targets"][0]["expr"]))
        assert {(r["metric"]["switch_guid"], r["metric"]["port"], r["metric"]["check"]) for r in verdicts} == {
            (c.guid[leaf], str(leaf_port), "symbol_errors")}
        print(f"fabric verdict: {verdict.line()}; node01 named {took:.1f} s after the slowdown")


def test_a_polarised_leaf_slows_and_pages_only_the_job_that_leaves_it(sim_fabric, sim_slurm, processes, tmp_path,
                                                                     monkeypatch):
    """leaf02's traffic to the spines all on spine01 (its ECMP group imbalanced): the job spanning leaf02 and
    leaf03 slows; the job inside leaf02 (no uplink on its path) and the one on leaf01 and leaf03 do not."""
    for tool in ("prometheus", "prometheus-alertmanager"):
        require_tool(tool, tool)
    fab = sim_fabric(fat_tree_netfile(spines=2, leaves=3, hosts_per_leaf=3, uplinks_per_spine=2))
    fab.start_sm()
    slurm = sim_slurm([f"node{i:02d}" for i in range(1, 10)])
    monkeypatch.setenv("SLURM_CONF", str(slurm.conf))
    jobs = {slurm.submit("llm-pretrain", ["node04", "node07"]): ["node04", "node07"],     # leaf02 + leaf03
            slurm.submit("inside-leaf02", ["node05", "node06"]): ["node05", "node06"],    # leaf02 only
            slurm.submit("elsewhere", ["node01", "node08"]): ["node01", "node08"]}        # leaf01 + leaf03
    for j in jobs:
        slurm.wait_running(j)
    spanning = next(iter(jobs))
    disc = parse_ibnetdiscover(fab.run_tool(fab.hosts[0], "ibnetdiscover", check=True).stdout)
    leaf02 = next(sw for sw in disc.switches.values() if sw.name == "leaf02")
    up = sorted((link.remote_name, p) for p, link in leaf02.links.items() if link.remote_type == "Switch")
    traffic = {"leaf02": {p: (0.8 if name == "spine01" else 0.0) for name, p in up}}
    with cluster(fab, processes, tmp_path, jobs, traffic, {"thresholds": {"consecutive_sweeps": 2}}) as c:
        verdict = wait_until(lambda: next((f for f in c.coll.snapshot.findings if f.check == "ecmp"
                                           and f.status > 0 and f.device == c.guid["leaf02"]), None), 40,
                             "the collector's ECMP verdict on leaf02")
        with c.writer.lock:
            c.paths.polarised.add("leaf02")
        took = slows(c, "node04", spanning, "polarised leaf")
        time.sleep(2 * DUMP)                # what is tested: two dumps more, and the other jobs still raise nothing
        for h in ("node05", "node06", "node01", "node08"):
            assert not c.slow(h), h
        page = page_for(c, "node04", spanning)
        assert "the leaf's up ECMP group is imbalanced" in page["annotations"]["description"]
        print(f"fabric verdict: {verdict.line()}; node04 named {took:.1f} s after the slowdown")
