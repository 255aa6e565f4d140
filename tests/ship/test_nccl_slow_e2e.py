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
from ship_helpers import http_get, load_generator, require_tool, start_prometheus, wait_until
from test_dashboards import _has_data
from test_fabric_dashboard import VARS, dashboard, row_panels
from test_paging_e2e import Webhook, grouping_alertmanager

pytestmark = pytest.mark.sim

build_dashboards = load_generator("grafana/build_dashboards.py")
build_rules = load_generator("prometheus/build_rules.py")
DUMP = 2.0                      # NCCL's dump interval (30 s at least), cut down
NODES = ("node01", "node03", "node05", "node07")   # leaf01, leaf02, leaf03, leaf04 (two hosts per leaf)
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

    disc = parse_ibnetdiscover(fab.run_tool(fab.hosts[0], "ibnetdiscover", check=True).stdout)
    cabled = {link.remote_name.split()[0]: (sw.name, port) for sw in disc.switches.values()
              for port, link in sw.links.items() if link.remote_name.split()[:1] and link.remote_name.split()[0] in NODES}
    guid = {sw.name: g for g, sw in disc.switches.items()}
    assert set(cabled) == set(NODES), cabled
    uuid = NVML[0]["uuid"].removeprefix("GPU-")
    jobs = [SimJob(crossing, (SimGpu("node01", uuid), SimGpu("node03", uuid))),
            SimJob(clean, (SimGpu("node05", uuid), SimGpu("node07", uuid)))]
    paths = SimPaths(cabled, line_gbs=25.0)
    dirs = {h: tmp_path / "nccl" / h for h in NODES}
    for d in dirs.values():
        d.mkdir(parents=True)
    writer = InspectorWriter({h: str(d) for h, d in dirs.items()}, jobs, paths, DUMP)
    writer.start()
    nodes = {h: node_daemon(fab, h, tmp_path, dirs[h]) for h in NODES}
    rules = tmp_path / "fabricmon.rules.yml"        # the shipped NCCL alert, its `for:` cut to 2 s
    doc = yaml.safe_load(build_rules.build())
    doc["groups"] = [g for g in doc["groups"] if g["name"] == "fabricmon.nccl.alerts"]
    for r in doc["groups"][0]["rules"]:
        r["for"] = "2s"
    rules.write_text(yaml.safe_dump(doc, sort_keys=False))
    webhook = Webhook()
    try:
        with fabric_collector(fab, tmp_path / "collector", COLLECTOR) as coll:
            am = grouping_alertmanager(processes, tmp_path, webhook.port)
            prom = start_prometheus(processes, tmp_path, [
                {"job_name": build_rules.JOB, "static_configs": [
                    {"targets": [f"127.0.0.1:{d.port}" for d in nodes.values()]}]},
                {"job_name": build_rules.FABRIC_JOB, "static_configs": [{"targets": [f"127.0.0.1:{coll.port}"]}]},
            ], rule_files=[rules], alertmanager_port=am)
            # every node's baseline learned (2 dumps), nothing slow: the paths joined to their cables
            wait_until(lambda: all("fabricmon_nccl_baseline_ratio{" in metrics(d) for d in nodes.values()), 60,
                       "every node's baseline learned")
            for h, d in nodes.items():
                [f] = slow_findings(d)
                assert f.status == 0 and (f.device, f.port) == ("ibsim0", 1), (h, f)
                [p] = d.snapshot.nccl.paths
                assert (p.switch, p.switch_port) == cabled[h], (h, p)
                assert p.gpu_index == 0 and p.device == "ibsim0" and p.line_rate_gbs == 25.0

            # 1. plant the erroring cable: node01's leaf port counts symbol errors, rising each sweep
            leaf, leaf_port = cabled["node01"]
            for v in (1000, 20000, 65000):
                fab.set_counter(leaf, leaf_port, "PortCounters.SymbolErrorCounter", v)
                time.sleep(COLLECTOR["sweep_interval"] + 0.5)

            def verdict():
                return next((f for f in coll.snapshot.findings if f.check == "symbol_errors" and f.status > 0
                             and f.device == guid[leaf] and f.port == leaf_port), None)
            fabric_verdict = wait_until(verdict, 30, "the collector's symbol_errors verdict on the cable")
            # ... and NCCL slows the job whose traffic crosses it
            with writer.lock:
                paths.erroring.add((leaf, leaf_port))
                planted = time.monotonic()

            def named():
                return next((f for f in slow_findings(nodes["node01"]) if f.status > 0), None)
            f = wait_until(named, 2 * DUMP + 3, "node01's slow finding")
            took = time.monotonic() - planted
            for part in (f"job {crossing}", "node01", "GPU 0", NVML[0]["uuid"], "ibsim0 port 1",
                         f'"{leaf}" port {leaf_port}', "50% of its baseline"):
                assert part in f.message, (part, f.message)
            assert took <= 2 * DUMP + 2, took      # within two dump intervals (and one poll)
            wait_until(lambda: any(x.status > 0 for x in slow_findings(nodes["node03"])), 2 * DUMP + 3,
                       "node03 (the same job's other rank) slow")
            time.sleep(2 * DUMP)
            for h in ("node05", "node07"):          # the job on clean paths raises nothing
                assert [x.status for x in slow_findings(nodes[h])] == [0], h

            # 2. the alert fires for the slowed job only, naming the cable, with the verdict on it
            page = wait_until(lambda: webhook.find("firing", alertname="FabricmonNcclSlowOnFlaggedPath"), 60,
                              "FabricmonNcclSlowOnFlaggedPath at the webhook")
            time.sleep(3)
            fired = [a for n in webhook.notifications for a in n["alerts"]
                     if a["labels"]["alertname"] == "FabricmonNcclSlowOnFlaggedPath"]
            assert {a["labels"]["job_id"] for a in fired} == {crossing}
            lab = page["labels"]
            assert (lab["switch_guid"], lab["switch_port_fabric"], lab["device"], lab["port"]) == (
                guid[leaf], str(leaf_port), "ibsim0", "1")
            # node01's rank pages (its cable carries the verdict); node03's rank of the same job is slow too,
            # but its own cable and leaf are clean: the page names the one cable to repair
            assert {a["labels"]["instance"] for a in fired} == {f"127.0.0.1:{nodes['node01'].port}"}
            assert lab["gpu"] == "0" and lab["uuid"] == NVML[0]["uuid"] and lab["switch"] == leaf
            desc = page["annotations"]["description"]
            assert f"Slurm job {crossing} runs slow" in desc and "symbol_errors on the cable's switch port" in desc, desc

            # 3. the dashboard row's panels return data from this Prometheus (the verdict table's leaf query,
            # for imbalanced leaves, evaluates empty here: no leaf is polarised in this test)
            row = row_panels(dashboard(), build_dashboards.NCCL_ROW)
            assert [pn["title"] for pn in row] == ["Slow NCCL paths and their cables", "Bus bandwidth / job baseline",
                                                   "Bus bandwidth / line rate", "Fabric verdicts on slow jobs' paths"]
            pending = {pn["title"]: [substitute(t["expr"]) for t in pn["targets"]] for pn in row}
            deadline = time.monotonic() + 30
            while pending and time.monotonic() < deadline:
                for title, exprs in list(pending.items()):
                    if any(_has_data(prom.query(e)) for e in exprs):
                        del pending[title]
                if pending:
                    time.sleep(1)
            assert not pending, f"panels without data: {sorted(pending)}"
            verdicts = prom.query(substitute(row[3]["targets"][0]["expr"]))
            assert {(r["metric"]["switch_guid"], r["metric"]["port"], r["metric"]["check"]) for r in verdicts} == {
                (guid[leaf], str(leaf_port), "symbol_errors")}
            print(f"fabric verdict: {fabric_verdict.line()}; node01 named after {took:.1f} s")
    finally:
        webhook.close()
        writer.stop()
        for d in nodes.values():
            d.stop()
