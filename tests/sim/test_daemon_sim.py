"""End to end against a real simulated fabric: the real infiniband-diags tools under ibsim,
the real daemon, assertions on a real HTTP /metrics scrape and on `fabricmon check`."""

from __future__ import annotations

import subprocess
import sys
import time
import urllib.request

import pytest
import yaml
from prometheus_client.parser import text_string_to_metric_families

from fabricmon.config import from_dict
from fabricmon.serve.daemon import Daemon
from fabricmon.host import LiveIO
from fabricmon.sim.fabric import fat_tree_netfile
from helpers import all_sources_ran, promtool, wait_until

INTERVAL = 1.0
HEALTHY, DEGRADED, FLAPPER = "node01 mlx5_0", "node02 mlx5_0", "node03 mlx5_0"


def _cfg(tmp_path) -> dict:
    (tmp_path / "sys").mkdir(exist_ok=True)
    return {
        "server": {"address": "127.0.0.1", "port": 0},
        "paths": {"sysfs": str(tmp_path / "sys"), "state_dir": str(tmp_path / "state")},
        "sources": {name: {"interval": INTERVAL} for name in ("sysfs", "ibstat", "perfquery", "iblinkinfo")},
        "expected_links": [{"device": "*", "width": "4X", "speed": "HDR"}],
    }


def scrape(port: int) -> dict[tuple[str, tuple], float]:
    body = urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5).read().decode()
    out = {}
    for fam in text_string_to_metric_families(body):
        for s in fam.samples:
            out[(s.name, tuple(sorted(s.labels.items())))] = s.value
    return out


def value(samples, name, **labels) -> float | None:
    return samples.get((name, tuple(sorted((k, str(v)) for k, v in labels.items()))))


def one_poll_bound(s: dict) -> float:
    """How long a change may take to show: the poll in flight when it happened (up to one run),
    the wait for the next poll (up to INTERVAL), that poll's own run, publishing and our own
    scrape loop (0.5 s). The IB tools' runs are timed by the daemon itself (source_duration), so
    the bound stretches with a loaded machine's slower runs and with nothing else."""
    run = max(value(s, "fabricmon_source_duration_seconds", source=n) for n in ("ibstat", "perfquery", "iblinkinfo"))
    return INTERVAL + 2 * run + 0.5


def wait_for(port: int, pred, timeout: float) -> tuple[float, dict]:
    start = time.monotonic()
    s = wait_until(lambda: scrape(port), timeout, "a scrape that meets the condition", until=pred)
    return time.monotonic() - start, s


@pytest.fixture
def fabric(sim_fabric):
    return sim_fabric(fat_tree_netfile(spines=1, leaves=2, hosts_per_leaf=2,
                                       degraded={f"{DEGRADED}[1]": "1x"}))


@pytest.fixture
def daemon_for(fabric, tmp_path):
    daemons = []

    def start(host: str) -> Daemon:
        cfg = from_dict(_cfg(tmp_path))
        d = Daemon(cfg, LiveIO(cfg.sysfs, cfg.procfs, env=fabric.env(host)))
        d.start()
        daemons.append(d)
        wait_for(d.port, lambda s: all_sources_ran(s), 20)
        return d

    yield start
    for d in daemons:
        d.stop()


def run_check(fabric, host, tmp_path, *extra) -> subprocess.CompletedProcess:
    cfg_path = tmp_path / "check.yml"
    cfg_path.write_text(yaml.safe_dump(_cfg(tmp_path)))
    return subprocess.run([sys.executable, "-m", "fabricmon", "check", "--config", str(cfg_path), *extra],
                          env=fabric.env(host), capture_output=True, text=True, timeout=60)


def test_healthy_host_reports_everything(fabric, daemon_for, tmp_path):
    d = daemon_for(HEALTHY)
    s = scrape(d.port)
    lv = {"device": "ibsim0", "port": "1"}
    assert value(s, "fabricmon_ib_port_up", **lv) == 1
    assert value(s, "fabricmon_ib_port_link_width_lanes", **lv) == 4
    assert value(s, "fabricmon_ib_port_rate_bytes_per_second", **lv) == 2.5e+10
    assert value(s, "fabricmon_ib_port_expected_rate_bytes_per_second", **lv) == 2.5e+10
    for reason in ("down", "width", "speed"):
        assert value(s, "fabricmon_ib_port_degraded", reason=reason, **lv) == 0
    for src in ("ibstat", "perfquery", "iblinkinfo", "sysfs"):
        assert value(s, "fabricmon_source_up", source=src) == 1
    # traffic counters come from perfquery -x, converted from 4-octet words to bytes
    assert value(s, "fabricmon_ib_port_transmit_bytes_total", **lv) % 4 == 0
    info = [k for k in s if k[0] == "fabricmon_ib_port_info"]
    assert dict(info[0][1])["port_guid"].startswith("0x")
    assert run_check(fabric, HEALTHY, tmp_path, "--no-state").returncode == 0


def test_1x_link_is_degraded_and_check_exits_2(fabric, daemon_for, tmp_path):
    d = daemon_for(DEGRADED)
    s = scrape(d.port)
    lv = {"device": "ibsim0", "port": "1"}
    assert value(s, "fabricmon_ib_port_link_width_lanes", **lv) == 1
    assert value(s, "fabricmon_ib_port_degraded", reason="width", **lv) == 1
    assert value(s, "fabricmon_ib_port_rate_bytes_per_second", **lv) == 6.25e+09
    assert value(s, "fabricmon_check_status", check="degraded_link", **lv, **{"class": "fatal"}) == 2
    res = run_check(fabric, DEGRADED, tmp_path, "--no-state")
    assert res.returncode == 2, res.stdout + res.stderr
    assert "CRITICAL degraded_link: ibsim0 port 1 runs at 1X HDR" in res.stdout
    assert "reseat or replace the cable" in res.stdout


def test_symbol_errors_show_within_one_poll_interval(fabric, daemon_for, tmp_path):
    d = daemon_for(HEALTHY)
    lv = {"device": "ibsim0", "port": "1"}
    assert run_check(fabric, HEALTHY, tmp_path).returncode == 0     # baseline saved in the state file
    # 4X HDR (200 Gb/s): the 1e-11 critical budget is 7,200 an hour (docs/optics.md#ber-budget)
    fabric.set_counter(HEALTHY, 1, "PortCounters.SymbolErrorCounter", 8000)
    took, s = wait_for(d.port, lambda s: value(s, "fabricmon_check_status", check="symbol_errors", **lv, **{"class": "fatal"}) == 2,
                       timeout=10)
    assert took <= one_poll_bound(s), f"took {took:.2f}s for a {INTERVAL}s poll interval (bound {one_poll_bound(s):.2f}s)"
    assert value(s, "fabricmon_ib_port_symbol_errors_total", **lv) == 8000
    res = run_check(fabric, HEALTHY, tmp_path)                      # the delta comes from the saved state
    assert res.returncode == 2, res.stdout + res.stderr
    assert "CRITICAL symbol_errors: ibsim0 port 1: symbol_errors rose by 8000" in res.stdout
    assert "(threshold 7200 per 1h, bit error ratio" in res.stdout and "over the 200 Gb/s link; budget 1e-11" in res.stdout


def test_link_down_shows_and_port_does_not_vanish(fabric, daemon_for, tmp_path):
    d = daemon_for(FLAPPER)
    lv = {"device": "ibsim0", "port": "1"}
    fabric.unlink(FLAPPER, 1)
    took, s = wait_for(d.port, lambda s: value(s, "fabricmon_ib_port_up", **lv) == 0, timeout=10)
    assert took <= one_poll_bound(s), f"took {took:.2f}s for a {INTERVAL}s poll interval (bound {one_poll_bound(s):.2f}s)"
    assert value(s, "fabricmon_ib_port_degraded", reason="down", **lv) == 1
    assert value(s, "fabricmon_ib_port_rate_bytes_per_second", **lv) == 0
    assert value(s, "fabricmon_ib_port_state_id", **lv) == 1
    res = run_check(fabric, FLAPPER, tmp_path, "--no-state")
    assert res.returncode == 2
    assert "CRITICAL degraded_link: ibsim0 port 1 is DOWN/Polling" in res.stdout
    fabric.relink(FLAPPER, 1)
    wait_for(d.port, lambda s: value(s, "fabricmon_ib_port_up", **lv) == 1, timeout=10)


def test_link_flap_counter_is_a_flap(fabric, daemon_for):
    d = daemon_for(HEALTHY)
    lv = {"device": "ibsim0", "port": "1"}
    fabric.set_counter(HEALTHY, 1, "PortCounters.LinkDownedCounter", 2)
    _, s = wait_for(d.port, lambda s: value(s, "fabricmon_check_status", check="link_flap", **lv, **{"class": "degraded"}) == 1, 10)
    assert value(s, "fabricmon_ib_port_link_downed_total", **lv) == 2


def test_healthz_and_scrape_not_blocked_by_hung_tool(fabric, tmp_path):
    """A tool that hangs costs only its source: the scrape answers at once."""
    hang = tmp_path / "hang.sh"
    hang.write_text("#!/bin/sh\nsleep 60\n")
    hang.chmod(0o755)
    raw = _cfg(tmp_path)
    raw["sources"]["iblinkinfo"] = {"interval": INTERVAL, "timeout": 3, "command": [str(hang)]}
    cfg = from_dict(raw)
    d = Daemon(cfg, LiveIO(cfg.sysfs, cfg.procfs, env=fabric.env(HEALTHY)))
    d.start()
    try:
        _, s = wait_for(d.port, lambda s: value(s, "fabricmon_source_up", source="iblinkinfo") == 0, 15)
        assert value(s, "fabricmon_source_errors_total", source="iblinkinfo", kind="timeout") >= 1
        assert value(s, "fabricmon_source_up", source="perfquery") == 1
        t0 = time.monotonic()
        scrape(d.port)
        assert time.monotonic() - t0 < 1.5       # half the hung tool's 3 s timeout
        assert urllib.request.urlopen(f"http://127.0.0.1:{d.port}/healthz", timeout=5).status == 200
    finally:
        d.stop()


def test_the_demo_configuration_passes_promtool_check_metrics(fabric, tmp_path):
    """The demo's config (fabricmon.sim.demo) on a simulated host, every real tool: its exposition
    passes `promtool check metrics`, the ecosystem's own lint."""
    from fabricmon.exporter import render
    from fabricmon.pipeline.scheduler import Pipeline
    from fabricmon.sim.demo import demo_config
    lint_tool = promtool()
    (tmp_path / "sys").mkdir()
    cfg = from_dict(demo_config(str(tmp_path / "sys"), 0))
    pipe = Pipeline(cfg, LiveIO(cfg.sysfs, cfg.procfs, env=fabric.env(HEALTHY)))
    try:
        snap = pipe.collect()
    finally:
        pipe.close()
    assert len(snap.ib.ports) == 1 and all(snap.sources[n].up for n in ("ibstat", "perfquery", "iblinkinfo"))
    text = render(snap).decode()
    lint = subprocess.run([lint_tool, "check", "metrics"], input=text, capture_output=True, text=True, timeout=60)
    assert lint.returncode == 0, lint.stdout + lint.stderr
