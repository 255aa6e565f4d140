"""Draining a node, end to end against a real slurmctld and slurmds (fabricmon.sim.slurm): node daemons
(`fabricmon run`, each as its own process, `slurm.node_name` set) read a fatal driver line written into this
machine's real kernel ring buffer (/dev/kmsg, as root; each node's devices on a PCI domain drawn at random, so
another node's lines and other tests' are never theirs) and drain their node with the real scontrol:
- the first node is drained with a reason naming the device and the event;
- a second node's drain would cross the 5% cap of the partition (4 nodes: at most one drained by fabricmon):
  refused and reported (the log, the breaker finding and metrics), the node left in service;
- a node an admin drained beforehand keeps its reason (never stolen, overwritten, nor resumed);
- `fabricmon actions undo` resumes the node fabricmon drained, at once, with the real scontrol;
- a scontrol that hangs is killed at its timeout, the drain reported failed and retried, the daemon serving."""

from __future__ import annotations

import json
import re
import shutil
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import pytest
import yaml
from helpers import REPO, require_writable_kmsg, scrape_until
from simkit import free_port
from sources.test_kernel_log import tree, write_kmsg

NODES = ["node01", "node02", "node03", "node04"]
ADMIN_REASON = "bad DIMM B2: ticket 4711"


def fatal_line(pci: str) -> str:
    return f"mlx5_core {pci}: wait_func:964:(pid 112): ENABLE_HCA(0x104) timeout. Will cause a leak of a command resource"


class NodeDaemon:
    """`fabricmon run` for one Slurm node on a synthetic sysfs tree, its JSON log in a file."""

    def __init__(self, tmp_path: Path, name: str, slurm, scontrol: str | None = None, timeout: float = 10.0):
        self.dir = tmp_path / name
        self.dir.mkdir()
        self.name = name
        self.sysfs, self.pcis, _ = tree(self.dir, 1)
        self.port = free_port()
        self.cfg = self.dir / "fabricmon.yml"
        self.cfg.write_text(yaml.safe_dump({
            "paths": {"sysfs": str(self.sysfs), "state_dir": str(self.dir / "state")},
            "logging": {"format": "json"},
            "sources": {"sysfs": {"interval": 0.2}, "kernel_log": {"interval": 0.2}},
            "slurm": {"node_name": name},
            "remediation": {"drain_node": {"mode": "act", "scontrol": scontrol or shutil.which("scontrol"),
                                           "sinfo": shutil.which("sinfo"), "timeout": timeout},
                            "retry_first": 1.0, "retry_max": 2.0},
        }))
        self.log = self.dir / "daemon.log"
        self.env = slurm.env()
        self.proc = subprocess.Popen([sys.executable, "-m", "fabricmon", "run", "--config", str(self.cfg), "--listen",
                                      f"127.0.0.1:{self.port}"], stdout=subprocess.DEVNULL, stderr=open(self.log, "w"),
                                     env=self.env, cwd=self.dir, start_new_session=True)

    def wait(self, pred, timeout: float, what: str):
        end = time.monotonic() + timeout
        while True:
            assert self.proc.poll() is None, self.log.read_text()[-3000:]
            try:
                got = pred()
            except OSError:
                got = None
            if got:
                return got
            assert time.monotonic() < end, f"{self.name}: {what}: not within {timeout} s:\n{self.log.read_text()[-3000:]}"
            time.sleep(0.2)

    def verdict(self) -> dict:
        with urllib.request.urlopen(f"http://127.0.0.1:{self.port}/api/v1/findings", timeout=5) as r:
            return json.loads(r.read())

    def up(self) -> None:
        self.wait(lambda: self.verdict()["inventory_known"], 30, "the daemon serves")

    def lines(self, event: str) -> list[dict]:
        out = []
        for ln in self.log.read_text().splitlines():
            if ln.startswith("{"):
                d = json.loads(ln)
                if d.get("event") == event:
                    out.append(d)
        return out

    def actions(self) -> list[dict]:
        r = subprocess.run([sys.executable, "-m", "fabricmon", "actions", "--json", "--all", "--scope", "node",
                            "--config", str(self.cfg)], capture_output=True, text=True, timeout=30, cwd=REPO)
        assert r.returncode == 0, r.stderr
        return json.loads(r.stdout)["node"]["actions"]

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(15)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()


def reasons(slurm) -> dict[str, str]:
    out = slurm.run(["sinfo", "-R", "-N", "-h", "-o", "%N|%E"]).stdout
    return dict(ln.split("|", 1) for ln in out.splitlines() if "|" in ln)


@pytest.fixture
def cluster(sim_slurm):
    require_writable_kmsg()
    return sim_slurm(NODES)


def test_fatal_events_drain_one_node_the_breaker_refuses_the_next_and_an_admin_drain_is_kept(cluster, tmp_path) -> None:
    slurm = cluster
    slurm.run(["scontrol", "update", "nodename=node03", "state=drain", f"reason={ADMIN_REASON}"])
    daemons = {n: NodeDaemon(tmp_path, n, slurm) for n in ("node01", "node02", "node03")}
    try:
        for d in daemons.values():
            d.up()
        # node01: a fatal driver event -> drained, the reason naming the device and the event
        t0 = time.monotonic()
        write_kmsg([fatal_line(daemons["node01"].pcis[0])])
        d1 = daemons["node01"]
        got = d1.wait(lambda: reasons(slurm).get("node01"), 20, "node01 drained")
        took = time.monotonic() - t0
        assert got == ("fabricmon: CRITICAL kernel_log: mlx5_0 port 1: the adapter's firmware did not answer a driver "
                       "command (ENABLE_HCA(0x104))"), got
        assert got == d1.verdict()["drain_reason"]
        [a] = d1.wait(lambda: [a for a in d1.actions() if a["state"] == "done"], 10, "its action done")
        assert (a["kind"], a["node"], a["mode"], a["check"]) == ("drain_node", "node01", "act", "kernel_log")
        done = d1.lines("remediation drained")
        assert len(done) == 1 and done[0]["cap"] and done[0]["evidence"] == got
        scrape_until(d1.port, ("fabricmon_remediation_drained_nodes", {"mode": "act"}, 1),
                     ("fabricmon_remediation_actions_total", {"action": "drain_node", "mode": "act", "result": "done"}, 1))
        print(f"\nnode01 drained {took:.1f} s after the kernel line")
        # `check` says the mode (and the wrappers' drain line is still its first CRITICAL line)
        chk = subprocess.run([sys.executable, "-m", "fabricmon", "check", "--daemon", f"http://127.0.0.1:{d1.port}"],
                             capture_output=True, text=True, timeout=60, cwd=REPO)
        assert chk.returncode == 2, chk.stdout
        assert chk.stdout.splitlines()[-1] == ("remediation: isolate_port off, drain_node act; 1 open action(s) "
                                               "(fabricmon actions)"), chk.stdout

        # node02: the same event; a second drain crosses the cap (max(1, 5% of 4) = 1): refused and reported
        d2 = daemons["node02"]
        write_kmsg([fatal_line(d2.pcis[0])])
        ref = d2.wait(lambda: d2.lines("remediation refuse"), 20, "node02's drain refused")
        assert "the circuit breaker: 1 of partition all's 4 nodes drained by fabricmon, the cap is max(1, 0.05 x 4) = 1" \
            in ref[0]["why"], ref
        assert "node02" not in reasons(slurm) and d2.actions() == []
        f = d2.wait(lambda: [f for f in d2.verdict()["findings"] if f["check"] == "remediation"], 10, "breaker finding")
        assert "drain_node circuit breaker tripped" in f[0]["message"] and f[0]["class"] == "watch"
        scrape_until(d2.port, ("fabricmon_remediation_breaker_tripped", {"action": "drain_node"}, 1),
                     ("fabricmon_remediation_breaker_cap", {"action": "drain_node"}, 1),
                     ("fabricmon_remediation_actions_total", {"action": "drain_node", "mode": "act", "result": "refused"}, 1))

        # node03: drained by an admin beforehand: its reason kept, never taken over
        d3 = daemons["node03"]
        write_kmsg([fatal_line(d3.pcis[0])])
        ref = d3.wait(lambda: d3.lines("remediation refuse"), 20, "node03's drain refused")
        assert f"node03 is already drained by root at " in ref[0]["why"] and ADMIN_REASON in ref[0]["why"]
        assert "never stolen or overwritten" in ref[0]["why"]
        time.sleep(2)
        assert reasons(slurm)["node03"] == ADMIN_REASON and d3.actions() == []

        # undo: node01 resumed at once, with the real scontrol
        r = subprocess.run([sys.executable, "-m", "fabricmon", "actions", "undo", a["id"], "--config", str(d1.cfg)],
                           capture_output=True, text=True, timeout=60, cwd=REPO, env=slurm.env())
        assert r.returncode == 0 and "undone by an operator" in r.stdout, r.stdout + r.stderr
        assert "node01" not in reasons(slurm)
        assert d1.actions()[0]["state"] == "undone"
        time.sleep(2)
        assert "node01" not in reasons(slurm), "the same finding does not drain it again"
        assert reasons(slurm)["node03"] == ADMIN_REASON
    finally:
        for d in daemons.values():
            d.stop()
    # nothing fabricmon never drained was ever resumed by it
    assert reasons(slurm)["node03"] == ADMIN_REASON


def test_a_hung_scontrol_is_killed_reported_failed_and_retried_while_the_daemon_serves(cluster, tmp_path) -> None:
    slurm = cluster
    hang = tmp_path / "scontrol-hangs"
    hang.write_text("#!/bin/sh\nexec sleep 3600\n")
    hang.chmod(0o755)
    d = NodeDaemon(tmp_path, "node04", slurm, scontrol=str(hang), timeout=2.0)
    try:
        d.up()
        write_kmsg([fatal_line(d.pcis[0])])

        def tried_twice():
            acts = d.actions()
            return acts if acts and acts[0]["attempts"] >= 2 else None
        [a] = d.wait(tried_twice, 40, "the drain tried twice")
        assert a["state"] == "todo" and re.search(r"timed out after 2\.\ds \(process group killed\)", a["error"]), a
        scrape_until(d.port, ("fabricmon_remediation_failing", {"action": "drain_node"}, 1))     # serving meanwhile
        f = [f for f in d.verdict()["findings"] if f["check"] == "remediation"]
        assert f and "could not be put out of service" in f[0]["message"]
        assert "node04" not in reasons(slurm)
    finally:
        d.stop()
    left = subprocess.run(["pgrep", "-f", str(hang)], capture_output=True, text=True).stdout.split()
    assert not left, f"hung scontrols left behind: {left}"
