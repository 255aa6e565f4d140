"""ethtool for real: a veth pair in a throw-away network namespace, with the ethtool source run
live (LiveIO) through its configurable command `ip netns exec <ns> ethtool`.

Needs root, iproute2 and ethtool (Debian: `apt-get install ethtool iproute2`). Skips with the
reason otherwise, except in CI ($CI set), where it fails instead.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import uuid

import pytest

from fabricmon.pipeline.scheduler import Pipeline
from fabricmon.config import from_dict
from fabricmon.host import LiveIO
from fabricmon.sources.ethtool import EthtoolSource
from fabricmon.model.roce import RoceTarget
from helpers import roce_inputs, run_inputs

from helpers import by_check, unavailable


def _ip(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run(["ip", *args], capture_output=True, text=True, timeout=20)


@pytest.fixture
def netns():
    if os.geteuid() != 0:
        unavailable("needs root to create a network namespace")
    for tool in ("ip", "ethtool"):
        if shutil.which(tool) is None:
            unavailable(f"{tool} is not installed (apt-get install ethtool iproute2)")
    name = f"fmtest-{uuid.uuid4().hex[:8]}"
    res = _ip("netns", "add", name)
    if res.returncode != 0:
        unavailable(f"cannot create a network namespace: {res.stderr.strip()}")
    try:
        for args in (("link", "add", "veth0", "type", "veth", "peer", "name", "veth1"),
                     ("link", "set", "veth0", "mtu", "9000"), ("link", "set", "veth0", "up"),
                     ("link", "set", "veth1", "up"), ("link", "set", "lo", "up")):
            res = _ip("-n", name, *args)
            if res.returncode != 0:
                unavailable(f"ip -n {name} {' '.join(args)}: {res.stderr.strip()}")
        yield name
    finally:
        _ip("netns", "del", name)


def _config(ns: str, **extra):
    return from_dict({"sources": {"ethtool": {"command": ["ip", "netns", "exec", ns, "ethtool"], "enabled": True,
                                              "timeout": 20}}, **extra}, check_paths=False)


def test_ethtool_source_live_in_a_netns(netns):
    src = EthtoolSource(_config(netns).sources["ethtool"])
    targets = [RoceTarget("veth", 1, "veth0"), RoceTarget("lo", 1, "lo"), RoceTarget("none", 1, "nosuch0")]
    out = src.collect(LiveIO(), roce_inputs(targets))
    veth = out.data.netdevs["veth0"]
    assert veth.count >= 1 and veth.stats is not None          # veth has statistics (peer_ifindex, xdp ...)
    assert veth.stats.is_empty()                                # ... but none of the curated RoCE ones
    assert out.data.netdevs["lo"].stats is None                 # "no stats available": a fact, not an error
    assert "nosuch0" not in out.data.netdevs
    assert [k for k, _ in out.errors] == ["exit_code"]
    assert "nosuch0" in out.errors[0][1] and "No such device" in out.errors[0][1]


def test_ethtool_in_a_missing_netns_is_an_error(netns):
    out = EthtoolSource(_config(netns + "-gone").sources["ethtool"]).collect(LiveIO(), roce_inputs([RoceTarget("veth", 1, "veth0")]))
    assert [k for k, _ in out.errors] == ["exit_code"] and out.data is None


def test_collector_runs_ethtool_live_for_a_roce_port(netns, tmp_path):
    """A RoCE device (fake sysfs) whose netdev is the veth: the whole pipeline runs ethtool live."""
    dev = tmp_path / "class" / "infiniband" / "rxe0"
    port = dev / "ports" / "1"
    port.mkdir(parents=True)
    (dev / "device" / "net" / "veth0").mkdir(parents=True)
    for name, value in (("state", "4: ACTIVE"), ("phys_state", "5: LinkUp"), ("rate", "10 Gb/sec (1X QDR)"),
                        ("link_layer", "Ethernet")):
        (port / name).write_text(value + "\n")
    cfg = _config(netns, paths={"sysfs": str(tmp_path), "procfs": str(tmp_path)},
                  **{"roce": {"mtu": 4096}})
    cfg = from_dict({**cfg.raw, "sources": {**cfg.raw["sources"], "ibstat": {"enabled": False},
                                            "iblinkinfo": {"enabled": False}, "perfquery": {"enabled": False},
                                            "gpu": {"enabled": False}}})
    col = Pipeline(cfg, LiveIO(cfg.sysfs, cfg.procfs))
    try:
        snap = col.collect()
    finally:
        col.close()
    assert snap.sources["ethtool"].up and not snap.sources["ethtool"].active_errors
    view = snap.roce.views[0]
    assert (view.target.device, view.target.netdev) == ("rxe0", "veth0")
    assert view.stats is not None and view.stats.count >= 1
    # veth has no per-priority pause counters, and mlnx_qos is not installed: neither check judges anything (no
    # status, never an OK "not checked")
    assert "rxe0" not in by_check(snap.findings, "roce_pause_rate")
    assert "rxe0" not in by_check(snap.findings, "roce_pfc")
