"""The node daemon sees a port change within a second (issue 51): `fabricmon run` at its default intervals (the
sysfs source every 15 s, the port state poll every second) on a synthetic tree; a port's state file flipped
to DOWN is in the exposition within 1.5 s, in the default set and in the `state` set a fast scrape job asks for
(`/metrics?collect[]=state`, docs/latency.md), and back up within 1.5 s too; the state set is small (the
port's state, its degraded reasons, the checks' status, its peer), and idle polls rebuild nothing."""

from __future__ import annotations

import json
import subprocess
import time
import urllib.request
from pathlib import Path

import yaml

from fabricmon.sim import sysfs_tree
from helpers import fabricmon_command, free_port, sample_value, scrape_samples, stop_process, wait_until


def scrape(port: int, query: str = "") -> str:
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics{query}", timeout=5) as r:
        return r.read().decode()


def test_a_flipped_port_state_is_served_within_a_second_and_a_half(tmp_path: Path) -> None:
    sysfs = sysfs_tree.build(tmp_path / "sys", 4)
    empty = tmp_path / "empty"
    empty.mkdir()
    cfg = tmp_path / "fabricmon.yml"
    cfg.write_text(yaml.safe_dump({"paths": {"sysfs": str(sysfs), "state_dir": str(tmp_path / "state"),
                                             "tool_dirs": [str(empty)]}, "logging": {"format": "json"}}))
    port = free_port()
    log = tmp_path / "daemon.log"
    proc = subprocess.Popen([*fabricmon_command(), "run", "--config", str(cfg), "--listen", f"127.0.0.1:{port}"],
                            stdout=subprocess.DEVNULL, stderr=open(log, "w"), env={"PATH": str(empty)},
                            start_new_session=True)
    try:
        def up() -> bool:
            assert proc.poll() is None, log.read_text()
            with urllib.request.urlopen(f"http://127.0.0.1:{port}/api/v1/findings", timeout=1) as r:
                return json.loads(r.read())["inventory_known"]
        wait_until(up, 30, "the daemon up", ignore=(OSError,))
        key = dict(device="mlx5_2", port="1")
        assert sample_value(scrape_samples(port), "fabricmon_ib_port_up", **key) == 1
        state = sysfs / "class/infiniband/mlx5_2/ports/1/state"
        def counts() -> tuple[float | None, float | None, float]:
            """(builds, port_state runs, every other source's runs)."""
            s = scrape_samples(port)
            others = sum(v for (name, labels), v in s.items() if name == "fabricmon_source_runs_total"
                         and ("source", "port_state") not in labels)
            return (sample_value(s, "fabricmon_snapshot_build_duration_seconds_count"),
                    sample_value(s, "fabricmon_source_runs_total", source="port_state"), others)
        builds, _, others0 = counts()
        time.sleep(3.0)          # three idle polls of the port state: what is tested is that they build nothing
        idle, runs, others = counts()
        assert runs is not None         # (a quiet poll builds nothing: the count served is the last build's)
        # a build in the window is another source's (a first run that ends late on a loaded machine), never theirs
        assert idle == builds or (idle is not None and builds is not None and idle - builds <= others - others0)
        took = []
        for text, want in (("1: DOWN", 0), ("4: ACTIVE", 1)):
            t0 = time.monotonic()
            state.write_text(text)
            wait_until(lambda: scrape_samples(port), 5, f"mlx5_2 port 1 up {want}",
                       until=lambda s: sample_value(s, "fabricmon_ib_port_up", **key) == want, interval=0.02)
            took.append(time.monotonic() - t0)
            fast = scrape(port, "?collect[]=state")
            assert f'fabricmon_ib_port_up{{device="mlx5_2",port="1"}} {float(want)}' in fast
            assert f'fabricmon_ib_port_degraded{{device="mlx5_2",port="1",reason="down"}} {float(1 - want)}' in fast
        assert max(took) < 1.5, took
        fast = scrape(port, "?collect[]=state")
        families = {ln.split()[2] for ln in fast.splitlines() if ln.startswith("# TYPE ")}
        core = {"fabricmon_ib_port_up", "fabricmon_ib_port_state_id", "fabricmon_ib_port_physical_state_id",
                "fabricmon_ib_port_degraded", "fabricmon_check_status"}
        assert core <= families <= core | {"fabricmon_ib_port_peer_info"}, families     # peer: where iblinkinfo runs
        assert len([ln for ln in fast.splitlines() if not ln.startswith("#")]) < 60      # 4 ports: a few dozen series
    finally:
        stop_process(proc)
