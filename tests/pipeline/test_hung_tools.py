"""Sources never wait for each other: with every umad tool hung, sysfs data is served at once,
`check` is bounded, timeouts are counted, and SIGTERM leaves no tool behind.

Every tool (ibstat, perfquery, iblinkinfo) is a script that forks a hanging child and hangs.
The daemon runs as a real subprocess on a copy of our two-HCA sysfs tree.
"""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import psutil
import pytest
import yaml

from helpers import FIXTURES, REPO, free_port, sample_value, scrape_samples, wait_until

TREE = FIXTURES / "sysfs" / "two_hca"
TOOLS = ("ibstat", "perfquery", "iblinkinfo")

HANG = """#!{python}
import os, time
os.fork()            # a child that hangs too, in the same process group
time.sleep(600)
"""


@pytest.fixture
def setup(tmp_path: Path):
    sysfs = tmp_path / "sys"
    shutil.copytree(TREE, sysfs)
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    for tool in TOOLS:
        script = bin_dir / tool
        script.write_text(HANG.format(python=sys.executable))
        script.chmod(0o755)
    yield tmp_path, sysfs, bin_dir
    for p in _ours(tmp_path):        # never leave anything behind, even when a test fails
        p.kill()


def _ours(tmp_path: Path) -> list[psutil.Process]:
    out = []
    for p in psutil.process_iter(["cmdline"]):
        try:
            if any(str(tmp_path / "bin") in part for part in p.info["cmdline"] or []):
                out.append(p)
        except psutil.Error:
            continue
    return out


def _config(tmp_path: Path, sysfs: Path, bin_dir: Path, port: int | None, **timing) -> Path:
    sources = {"sysfs": {"interval": timing.get("sysfs_interval", 15)}}
    for tool in TOOLS:
        sources[tool] = {"enabled": True, "command": [str(bin_dir / tool)]}
        if "timeout" in timing:
            sources[tool]["timeout"] = timing["timeout"]
        if "interval" in timing:
            sources[tool]["interval"] = timing["interval"]
    for name in ("mlnx_qos", "ethtool", "gpu"):
        sources[name] = {"enabled": False}
    doc = {"paths": {"sysfs": str(sysfs), "procfs": str(tmp_path), "state_dir": str(tmp_path / "state")},
           "sources": sources}
    if port is not None:
        doc["server"] = {"address": "127.0.0.1", "port": port}
    path = tmp_path / "fabricmon.yml"
    path.write_text(yaml.safe_dump(doc))
    return path


def test_hung_tools_cost_only_their_own_data(setup):
    tmp_path, sysfs, bin_dir = setup
    port = free_port()
    cfg = _config(tmp_path, sysfs, bin_dir, port, timeout=3, interval=2, sysfs_interval=1)
    t0 = time.monotonic()
    proc = subprocess.Popen([sys.executable, "-m", "fabricmon", "run", "--config", str(cfg)],
                            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    try:
        # sysfs port metrics within 5 s of start, whatever the tools do
        s = _wait(port, lambda s: sample_value(s, "fabricmon_ib_port_up", device="mlx5_0", port="1") == 1, t0 + 5)
        first = time.monotonic() - t0
        assert first < 5, f"first sysfs data after {first:.1f}s"
        # a port that goes down in sysfs shows within 3.5 s
        (sysfs / "class/infiniband/mlx5_0/ports/1/state").write_text("1: DOWN\n")
        t_down = time.monotonic()
        _wait(port, lambda s: sample_value(s, "fabricmon_ib_port_up", device="mlx5_0", port="1") == 0,
              t_down + 3.5)
        assert time.monotonic() - t_down <= 3.5
        # every hung tool is counted as a timeout, once per query, and its source is down
        s = _wait(port, lambda s: all((sample_value(s, "fabricmon_source_errors_total", source=t, kind="timeout")
                                       or 0) >= 1 for t in TOOLS), time.monotonic() + 10)
        for tool in TOOLS:
            assert sample_value(s, "fabricmon_source_up", source=tool) == 0
        assert sample_value(s, "fabricmon_source_up", source="sysfs") == 1
        assert _ours(tmp_path), "the hung tools should be running now"
    finally:
        t_term = time.monotonic()
        proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(timeout=15)
        except subprocess.TimeoutExpired:
            proc.kill()
            raise
    assert time.monotonic() - t_term <= 15
    assert proc.returncode == 0, proc.stderr.read().decode()[-2000:]
    # the daemon killed them as it stopped: wait until the kernel has ended them
    wait_until(lambda: not _ours(tmp_path), 5, "every tool ended with the daemon (one outlived it)")


def _wait(port: int, pred, deadline: float) -> dict:
    return wait_until(lambda: scrape_samples(port), deadline - time.monotonic(), "a scrape that meets the condition",
                      until=pred, ignore=(OSError,))


def test_check_is_bounded_with_every_tool_hung(setup):
    tmp_path, sysfs, bin_dir = setup
    port2 = sysfs / "class/infiniband/mlx5_0/ports/2"       # the fixture's down port: bring it up
    (port2 / "state").write_text("4: ACTIVE\n")
    (port2 / "phys_state").write_text("5: LinkUp\n")
    cfg = _config(tmp_path, sysfs, bin_dir, None)          # default timeouts (10 s)
    t0 = time.monotonic()
    res = subprocess.run([sys.executable, "-m", "fabricmon", "check", "--no-state", "--config", str(cfg)],
                         capture_output=True, text=True, timeout=60)
    took = time.monotonic() - t0
    assert took <= 18, f"check took {took:.1f}s"
    assert res.returncode == 1, res.stdout + res.stderr
    assert res.stdout.startswith("FABRICMON WARNING")
    for tool in TOOLS:
        assert f"WARNING source: source {tool}: " in res.stdout and "timed out" in res.stdout, res.stdout
    # check killed them before it exited: wait until the kernel has ended them
    wait_until(lambda: not _ours(tmp_path), 5, "every tool ended with check (it left one behind)")
    assert os.path.exists(cfg)
