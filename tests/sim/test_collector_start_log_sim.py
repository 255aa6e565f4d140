"""The fabric collector's log at start (issue 53, item 4): `no switch could be read reason='the sweep has
not run'` was a warning at every start, between the first discovery and the first sweep, corrected
milliseconds later. Nothing is said until the first sweep has had its chance (ended, read or not); a
first sweep that really reads nothing is still said, once.

`fabricmon fabric run` as its own process on ibsim (the real ibnetdiscover and sweep), its JSON log read
when it has stopped."""

from __future__ import annotations

import json
import subprocess
import sys
import urllib.request
from pathlib import Path

from fabricmon.sim.fabric import fat_tree_netfile
from helpers import free_port, wait_until

SAID = "no switch could be read"


def run_collector(fab, tmp_path: Path, fabric: dict, until) -> list[dict]:
    """`fabricmon fabric run` under the simulator's preload until `until(the /api/v1/findings document)`,
    then stopped (SIGTERM); its log lines (JSON)."""
    cfg = tmp_path / "fabricmon.yml"
    cfg.write_text(json.dumps({"paths": {"state_dir": str(tmp_path / "state")}, "logging": {"format": "json"},
                               "fabric": {"cache_dir": str(tmp_path / "cache"), "discovery_interval": 60,
                                          "sweep_interval": 1, **fabric}}))
    port = free_port()
    log = tmp_path / "collector.log"
    with open(log, "w") as err:
        proc = subprocess.Popen([sys.executable, "-m", "fabricmon", "fabric", "run", "--config", str(cfg),
                                 "--listen", f"127.0.0.1:{port}"], env=fab.env(fab.hosts[0]),
                                stdout=subprocess.DEVNULL, stderr=err)
    try:
        def findings() -> dict:
            assert proc.poll() is None, log.read_text()
            with urllib.request.urlopen(f"http://127.0.0.1:{port}/api/v1/findings", timeout=5) as r:
                return json.loads(r.read())
        wait_until(findings, 90, "the collector's sweeps", until=until, interval=0.2, ignore=(OSError,))
    finally:
        proc.terminate()
        try:
            proc.wait(60)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(10)
            raise
    return [json.loads(ln) for ln in log.read_text().splitlines() if ln.startswith("{")]


def sweeps(doc: dict) -> int:
    return int(doc["sources"]["sweep"]["runs"])


def test_no_false_alarm_before_the_first_sweep(sim_fabric, tmp_path: Path) -> None:
    fab = sim_fabric(fat_tree_netfile(spines=1, leaves=2, hosts_per_leaf=1, uplinks_per_spine=1))
    lines = run_collector(fab, tmp_path, {}, lambda doc: sweeps(doc) >= 2 and not doc["sources"]["sweep"]["errors"])
    events = [ln["event"] for ln in lines]
    assert "fabricmon started" in events, events
    said = [ln for ln in lines if ln["event"] == SAID]
    assert said == [], said                     # the first sweep read every switch: nothing to say
    assert not [ln for ln in lines if ln["event"] == "switches read again"]


def test_a_first_sweep_that_reads_nothing_is_still_said_once(sim_fabric, tmp_path: Path) -> None:
    """The discovery reads the fabric, the sweep's tool fails (a broken ibqueryerrors): the warning
    comes once the sweep has run, with its reason, and once only however often it fails again."""
    fab = sim_fabric(fat_tree_netfile(spines=1, leaves=2, hosts_per_leaf=1, uplinks_per_spine=1))
    fab.start_sm()          # a master SM answers: the sweep's failure is the one reason, all along
    broken = tmp_path / "ibqueryerrors"
    broken.write_text("#!/bin/sh\necho 'ibqueryerrors: broken on purpose' >&2\nexit 1\n")
    broken.chmod(0o755)
    lines = run_collector(fab, tmp_path, {"sweep_method": "tools", "sources": {"sweep": {"command": [str(broken)]}}},
                          lambda doc: sweeps(doc) >= 3)
    said = [ln for ln in lines if ln["event"] == SAID]
    assert len(said) == 1, said
    assert said[0]["reason"] != "the sweep has not run" and said[0]["retrying"] is True, said
    started = next(i for i, ln in enumerate(lines) if ln["event"] == "source error" and ln["source"] == "sweep")
    assert lines.index(said[0]) > started, lines          # said after the sweep ran, not before
