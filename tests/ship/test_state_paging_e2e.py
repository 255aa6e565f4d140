"""A pulled host cable pages within 20 s (issue 51), end to end with what ships, nothing shortened: a simulated
fat tree (ibsim + a running opensm, the real infiniband-diags), `fabricmon run` on one of its hosts at its default
intervals (its port state poll every second), the real Prometheus with the reference config's two node jobs as
shipped (fabricmon every 15 s, fabricmon-state every 3 s with collect[]=state) and the shipped rules as they are
(FabricmonPortDown's for: 10s in the fabricmon.state.alerts group, evaluated every 2 s), the real Alertmanager with
the shipped example's routes and waits (its critical route's group_wait 2 s), its receivers pointed at the test's
webhook (ship_helpers.Pager).

The cable is pulled in ibsim (`Unlink`, timed from just before the command). ibsim has no kernel: a host's
/sys/class/infiniband is not kept by it (umad2sim writes a copy when a tool starts and never again), so a thread
plays ib_core's part for the one port: it asks the simulated port its state (`ibstat` on that host, every
0.25 s) and writes `state` and `phys_state` in the kernel's format when they change, as the kernel does when the
link drops. What it writes is what ibsim says, and its own delay counts against the 20 s. Everything else reads
ibsim: the node's ibstat (inventory), iblinkinfo (the leaf the page names), perfquery.

The page must reach the pager within 20 s of the pull and name the port and its leaf; each stage's time is printed
(docs/latency.md has the numbers)."""

from __future__ import annotations

import threading
import time
from pathlib import Path

import pytest
import yaml

from fabricmon.deploy import RULES
from fabricmon.model.ibspec import PHYS_STATES, PORT_STATES, phys_state_id, state_id
from fabricmon.parsers.ibstat import parse_ibstat
from fabricmon.sim.fabric import fat_tree_netfile
from helpers import free_port
from ship_helpers import (FABRICMON, ROOT, Pager, http_get, require_tool, shipped_alertmanager, start_prometheus,
                          wait_until)

pytestmark = pytest.mark.sim

PROMETHEUS_YML = ROOT / "fabricmon" / "deploy" / "prometheus" / "prometheus.yml"
HOST, LEAF = "node01 mlx5_0", "leaf01"          # fat_tree_netfile: leaf01 carries node01 on its port 1
DEVICE = "ibsim0"                              # the simulated CA's name under umad2sim
PAGE_WITHIN = 20.0


class KernelPortState:
    """ib_core's part for one simulated port: its state files kept as the simulated port's (ibstat on the host)."""

    def __init__(self, fab, host: str, port_dir: Path, every: float = 0.25):
        self.fab, self.host, self.dir, self.every = fab, host, port_dir, every
        self.written: list[tuple[float, str, str]] = []       # (when, state, phys_state) as written
        self.stopping = threading.Event()
        port_dir.mkdir(parents=True)
        self.follow()                                         # the files exist before the daemon starts
        self.thread = threading.Thread(target=self.run, daemon=True)
        self.thread.start()

    def follow(self) -> None:
        res = self.fab.run_tool(self.host, "ibstat", timeout=10)
        if res.returncode != 0:
            return                                            # a refused client (ibsim's 10): the next round
        port = next(p for ca in parse_ibstat(res.stdout).cas if ca.name == DEVICE for p in ca.ports if p.port == 1)
        sid, pid = state_id(port.state or ""), phys_state_id(port.physical_state or "")
        if sid is None or pid is None:
            return
        state, phys = f"{sid}: {PORT_STATES[sid]}", f"{pid}: {PHYS_STATES[pid]}"
        if not self.written or self.written[-1][1:] != (state, phys):
            (self.dir / "phys_state").write_text(phys)
            (self.dir / "state").write_text(state)
            self.written.append((time.monotonic(), state, phys))

    def run(self) -> None:
        while not self.stopping.wait(self.every):
            self.follow()

    def stop(self) -> None:
        self.stopping.set()
        self.thread.join(timeout=15)


@pytest.fixture
def pager():
    p = Pager()
    yield p
    p.close()


def exposes_down(port: int) -> bool:
    body = http_get(f"http://127.0.0.1:{port}/metrics?collect[]=state").decode()
    return f'fabricmon_ib_port_up{{device="{DEVICE}",port="1"}} 0.0' in body


def test_a_pulled_host_cable_pages_within_20_s_with_the_shipped_settings(sim_fabric, processes, pager,
                                                                        tmp_path) -> None:
    for tool in ("prometheus", "prometheus-alertmanager"):
        require_tool(tool, tool)
    fab = sim_fabric(fat_tree_netfile(spines=1, leaves=2, hosts_per_leaf=2))
    fab.start_sm()
    sysfs = tmp_path / "node" / "sys"
    kernel = KernelPortState(fab, HOST, sysfs / "class" / "infiniband" / DEVICE / "ports" / "1")
    try:
        assert kernel.written and kernel.written[-1][1:] == ("4: ACTIVE", "5: LinkUp"), kernel.written
        (tmp_path / "node" / "state").mkdir()
        cfg = tmp_path / "node" / "fabricmon.yml"
        cfg.write_text(yaml.safe_dump({"paths": {"sysfs": str(sysfs), "state_dir": str(tmp_path / "node" / "state")},
                                       "expected_links": [{"device": "*", "width": "4X", "speed": "HDR"}]}))
        port = free_port()
        node = processes.start("fabricmon", [*FABRICMON, "run", "--config", str(cfg), "--listen",
                                             f"127.0.0.1:{port}", "--log-level", "warning"],
                               env=fab.env(HOST), cwd=ROOT)
        wait_until(lambda: node.poll() is None and f'peer="{LEAF}"'.encode() in http_get(
            f"http://127.0.0.1:{port}/metrics?collect[]=state"), 60, "the node daemon up, its leaf learned")

        am = shipped_alertmanager(processes, tmp_path, pager.port)          # routes and waits as shipped
        # the reference scrape config's node jobs as shipped, on this daemon
        jobs = [j for j in yaml.safe_load(PROMETHEUS_YML.read_text())["scrape_configs"]
                if j["job_name"] in ("fabricmon", "fabricmon-state")]
        assert {j["job_name"]: j["scrape_interval"] for j in jobs} == {"fabricmon": "15s", "fabricmon-state": "3s"}
        for j in jobs:
            j["static_configs"] = [{"targets": [f"127.0.0.1:{port}"]}]
        prom = start_prometheus(processes, tmp_path, jobs, rule_files=[RULES], alertmanager_port=am, interval="15s")
        wait_until(lambda: len(prom.query('fabricmon_ib_port_up{job=~"fabricmon|fabricmon-state"} == 1')) == 2,
                   60, "both jobs scraped, the port up")

        t0 = time.monotonic()
        fab.unlink(HOST, 1)                                                  # the cable pulled
        wait_until(lambda: exposes_down(port), PAGE_WITHIN, "the port down in the node's exposition", interval=0.05)
        seen = time.monotonic()
        got = wait_until(lambda: pager.first("FabricmonPortDown"), 45, "FabricmonPortDown at the pager")
        at, alert, receiver = got
        stored = next((w for w in kernel.written if w[1] == "1: DOWN"), None)
        fired = prom.query('ALERTS{alertname="FabricmonPortDown",alertstate="firing"}')
        print(f"\npulled cable -> state files {stored[0] - t0:.2f} s, exposition {seen - t0:.2f} s, "
              f"page {at - t0:.2f} s (job {alert['labels']['job']}, receiver {receiver}); "
              f"alert active since {alert['startsAt']}")
        assert alert["labels"]["device"] == DEVICE and alert["labels"]["port"] == "1"
        assert alert["labels"]["switch"] == LEAF and alert["labels"]["severity"] == "critical"
        assert receiver == "fabricmon-pager"
        assert fired, "the alert fired in Prometheus"
        assert stored is not None and stored[2] == "2: Polling", kernel.written      # ibsim's view of the pull
        assert at - t0 < PAGE_WITHIN, f"paged {at - t0:.1f} s after the pull"
    finally:
        kernel.stop()
