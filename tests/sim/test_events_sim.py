"""The events source against the real opensm on ibsim (docs/latency.md, "What ibsim and opensm do with it"): the
collector, a `fabricmon fabric run` under umad2sim on a host that is not the SM's, subscribes; opensm accepts
(mode events); a pulled inter-switch cable makes both switches trap and opensm forward the trap, which ibsim
drops on its way to the collector (ibsim hands unsolicited MADs only to SM clients: its log says so), so the
sweep sees a change no report announced, and the mode turns to sweep with that reason while the port reads down
within a sweep; with the SM stopped the mode says so, and a restarted SM is subscribed to again."""

from __future__ import annotations

import json
import subprocess
import sys
import time

import pytest

from fabricmon.sim.fabric import fat_tree_netfile
from helpers import free_port, sample_value, scrape_samples, stop_process, wait_until

pytestmark = pytest.mark.sim

LEAF01, SPINE01 = f"{0x200002:016x}", f"{0x200000:016x}"


def down(s: dict, g: str, port: str) -> float | None:
    return sample_value(s, "fabricmon_fabric_port_degraded", switch_guid=g, port=port, reason="down")


def test_opensm_accepts_the_subscription_and_ibsim_drops_its_reports_so_the_sweep_takes_over(sim_fabric, tmp_path):
    fab = sim_fabric(fat_tree_netfile(spines=2, leaves=2, hosts_per_leaf=2, uplinks_per_spine=1))
    fab.start_sm()
    (tmp_path / "state").mkdir()
    cfg = tmp_path / "fabricmon.yml"
    cfg.write_text(json.dumps({"paths": {"state_dir": str(tmp_path / "state")},
                               "fabric": {"sweep_interval": 2.0, "cache_dir": str(tmp_path),
                                          "sources": {"events": {"wait": 1.0}}}}))
    port = free_port()
    log = tmp_path / "collector.log"
    with open(log, "w") as out:
        proc = subprocess.Popen([sys.executable, "-m", "fabricmon", "fabric", "run", "--config", str(cfg), "--listen",
                                 f"127.0.0.1:{port}"], env=fab.env(fab.hosts[1]), stdout=out, stderr=subprocess.STDOUT,
                                start_new_session=True, cwd=tmp_path)
    try:
        def mode(want: str):
            def probe():
                s = scrape_samples(port)
                return s if sample_value(s, "fabricmon_fabric_link_state_mode", mode=want) == 1 else None
            return probe
        s = wait_until(mode("events"), 60, "the subscription accepted", ignore=(OSError,))
        assert sample_value(s, "fabricmon_fabric_sm_reports_total", trap="128") == 0
        assert sample_value(s, "fabricmon_fabric_sm_subscription_timestamp_seconds") > 0
        assert down(s, LEAF01, "3") == 0
        subscribed = json.loads(next(ln for ln in log.read_text().splitlines() if "subscribed to the subnet" in ln))
        assert subscribed["traps"] == [64, 65, 128, 129, 130, 131] and subscribed["sm_lid"] == 1

        # pull an inter-switch cable: ibsim's switches trap, opensm forwards, ibsim drops the report
        t0 = time.monotonic()
        fab.unlink("leaf01", 3)
        wait_until(lambda: scrape_samples(port), 30, "the pulled cable down at both ends",
                   until=lambda s: down(s, LEAF01, "3") == 1 and down(s, SPINE01, "1") == 1)
        assert time.monotonic() - t0 < 10                        # within a sweep or two (2 s), not a discovery
        s = wait_until(mode("sweep"), 10, "the mode demoted to sweep")
        assert sample_value(s, "fabricmon_fabric_sm_reports_total", trap="128") == 0     # none ever arrived
        assert "process_packet: no one to handle pkt: class 0x3, attr 0x2" in fab.log.read_text()
        wait_until(lambda: "a port changed and the subnet manager reported nothing" in log.read_text(), 10,
                   "the demotion logged")

        # the SM stops: the mode says why; it comes back: subscribed to again
        fab.stop_sm()
        wait_until(lambda: "does not answer SMInfo" in log.read_text(), 30, "the SM gone, said")
        fab.start_sm()
        wait_until(lambda: log.read_text().count("subscribed to the subnet manager's reports") >= 2, 60,
                   "the restarted SM subscribed to again")
    finally:
        stop_process(proc)
