"""A running fabric collector survives its simulator's restart (issue 53): ibsim stopped under a `fabricmon
fabric run` and started again on the same socket name. Meanwhile every sweep is reported failed (the sweep
source down, the collector not OK); once the simulator is back the same process (never restarted) sweeps
again with fresh data (a counter set only on the new simulator), through the MAD engine, within a bounded
time, and its log says once that the port was lost and once that it was reopened. The same for the
infiniband-diags tools' sweep (fabric.sweep_method: tools), whose tools are a new process each run.

Under umad2sim the process's one connection to ibsim is made when the first umad device is opened and
never again (umad2sim.c), so the engine's reopen re-attaches it (fabricmon/host/umad2sim.py); on hardware
a reopen is umad_close_port and umad_open_port (docs/mad-engine.md "When the umad port is lost")."""

from __future__ import annotations

import json
import subprocess
import sys
import time

import pytest

from fabricmon.sim.fabric import fat_tree_netfile
from helpers import free_port, sample_value, scrape_samples, stop_process, wait_until

pytestmark = pytest.mark.sim

NET = dict(spines=2, leaves=2, hosts_per_leaf=2, uplinks_per_spine=1)
LEAF01 = f"{0x200002:016x}"


def start_collector(fab, tmp_path, fabric: dict) -> tuple[subprocess.Popen, int]:
    """`fabricmon fabric run` under the simulator's preload (its own libibumad reaches ibsim), sweeping every
    second, its log in tmp_path/collector.log."""
    (tmp_path / "state").mkdir()
    cfg = tmp_path / "fabricmon.yml"
    cfg.write_text(json.dumps({"paths": {"state_dir": str(tmp_path / "state")},
                               "fabric": {"sweep_interval": 1.0, "discovery_interval": 300.0, **fabric}}))
    port = free_port()
    with open(tmp_path / "collector.log", "w") as log:
        proc = subprocess.Popen([sys.executable, "-m", "fabricmon", "fabric", "run", "--config", str(cfg), "--listen",
                                 f"127.0.0.1:{port}"], env=fab.env(fab.hosts[0]), stdout=log, stderr=subprocess.STDOUT,
                                start_new_session=True, cwd=tmp_path)
    return proc, port


def scrape_until(proc, port: int, pred, timeout: float, what: str) -> dict:
    def scrape() -> dict:
        assert proc.poll() is None, "the collector exited"
        return scrape_samples(port)
    return wait_until(scrape, timeout, what, until=pred, interval=0.3, ignore=(OSError,))


def symbol_errors(s: dict) -> float | None:
    return sample_value(s, "fabricmon_fabric_port_symbol_errors_total", switch_guid=LEAF01, port="3")


def restart_and_recover(fab, tmp_path, method: str) -> str:
    """The collector swept `method`, ibsim stopped (sweeps failed meanwhile) and started again with a counter
    the old one never had; returns the collector's log."""
    fab.start_sm()
    fab.set_counter("leaf01", 3, "PortCounters.SymbolErrorCounter", 7)
    proc, port = start_collector(fab, tmp_path, {"sweep_method": method})
    log = tmp_path / "collector.log"
    try:
        scrape_until(proc, port, lambda s: sample_value(s, "fabricmon_fabric_sweep_method", method=method) == 1
                     and sample_value(s, "fabricmon_source_up", source="sweep") == 1 and symbol_errors(s) == 7, 60,
                     f"a first sweep with the {method}")
        fab.stop()
        s = scrape_until(proc, port, lambda s: sample_value(s, "fabricmon_source_up", source="sweep") == 0, 60,
                         "the sweep failed while the simulator is gone")
        assert sample_value(s, "fabricmon_health_status") not in (None, 0)
        time.sleep(3)                                # failed sweeps and reopens against no simulator at all
        s = scrape_samples(port)
        assert sample_value(s, "fabricmon_source_up", source="sweep") == 0
        assert sample_value(s, "fabricmon_health_status") not in (None, 0)
        fab.start(sm=False)                          # the same socket name; its counters start at 0
        fab.start_sm()
        fab.set_counter("leaf01", 3, "PortCounters.SymbolErrorCounter", 11)
        t0 = time.monotonic()
        scrape_until(proc, port, lambda s: sample_value(s, "fabricmon_source_up", source="sweep") == 1
                     and sample_value(s, "fabricmon_fabric_sweep_method", method=method) == 1 and symbol_errors(s) == 11,
                     60, lambda: f"a fresh sweep with the {method} after the restart; log: {log.read_text()[-3000:]}")
        assert time.monotonic() - t0 < 45             # the reopen's backoff is capped at 30 s
        assert proc.poll() is None
    finally:
        stop_process(proc)
    return log.read_text()


def test_the_mad_engine_reopens_its_port_after_the_simulator_restarts(sim_fabric, tmp_path) -> None:
    text = restart_and_recover(sim_fabric(fat_tree_netfile(**NET)), tmp_path, "mad")
    assert text.count("MAD port lost") == 1, text[-3000:]
    assert text.count("MAD port reopened") == 1, text[-3000:]
    reopened = json.loads(next(ln for ln in text.splitlines() if "MAD port reopened" in ln))
    assert reopened["tries"] >= 1


def test_the_tools_sweep_survives_the_simulator_restarting(sim_fabric, tmp_path) -> None:
    text = restart_and_recover(sim_fabric(fat_tree_netfile(**NET)), tmp_path, "tools")
    assert "MAD port lost" not in text               # the tools are a new process each run: no port of its own
