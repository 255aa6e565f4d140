"""Tests for fabricmon.sim: the generator offline, the harness against the real tools."""

from __future__ import annotations

import os
import re
import time

import pytest

from fabricmon.sim.fabric import (
    DEMO_PARAMS,
    UMAD2SIM,
    SimCommandError,
    SimFabric,
    demo_netfile_path,
    fat_tree_netfile,
    tools_available,
)

N01 = "node01 mlx5_0"
N02 = "node02 mlx5_0"


def small_fabric_text() -> str:
    """1 spine, 2 leaves, 2 hosts per leaf; node02's cable degraded to 1x."""
    return fat_tree_netfile(spines=1, leaves=2, hosts_per_leaf=2, degraded={f"{N02}[1]": "1x"})


def run(fab: SimFabric, host: str, *argv: str) -> str:
    proc = fab.run_tool(host, *argv)
    assert proc.returncode == 0, f"{argv} on {host} failed ({proc.returncode}): {proc.stdout}{proc.stderr}"
    return proc.stdout


def counter(text: str, name: str) -> int:
    m = re.search(rf"^{name}:\.+(\d+)$", text, re.M)
    assert m, f"{name} not in:\n{text}"
    return int(m.group(1))


def assert_gone(pid: int) -> None:
    with pytest.raises(ProcessLookupError):
        os.kill(pid, 0)


# --------------------------------------------------------------------------
# generator (no tools needed)
# --------------------------------------------------------------------------


def test_demo_netfile_is_committed_output_of_generator():
    text = fat_tree_netfile(spines=2, leaves=4, hosts_per_leaf=8, uplinks_per_spine=2)
    assert text == demo_netfile_path().read_text()
    assert text == fat_tree_netfile(**DEMO_PARAMS)


def test_fat_tree_shape():
    text = fat_tree_netfile(spines=2, leaves=4, hosts_per_leaf=8, uplinks_per_spine=2)
    headers = re.findall(r'^(Switch|Hca)\t(\d+) "([^"]+)"$', text, re.M)
    switches = [n for t, _, n in headers if t == "Switch"]
    hosts = [n for t, _, n in headers if t == "Hca"]
    assert switches == ["spine01", "spine02", "leaf01", "leaf02", "leaf03", "leaf04"]
    assert hosts == [f"node{i:02d} mlx5_0" for i in range(1, 33)]
    links = re.findall(r'^\[\d+\]\t"[^"]+"\[\d+\]\t# "[^"]+" lid 0 (\w+)$', text, re.M)
    # every cable is written on both ends: 32 host cables + 2*4*2 uplinks
    assert len(links) == 2 * (32 + 16)
    assert set(links) == {"4xHDR"}
    # leaf01 carries node01..node08, leaf02 node09..
    leaf02 = re.search(r'^Switch\t16 "leaf02"\n((?:\[.*\n)+)', text, re.M).group(1).splitlines()
    assert leaf02[0] == '[1]\t"node09 mlx5_0"[1]\t# "node09 mlx5_0" lid 0 4xHDR'
    assert leaf02[8:] == [
        '[9]\t"spine01"[3]\t# "spine01" lid 0 4xHDR',
        '[10]\t"spine01"[4]\t# "spine01" lid 0 4xHDR',
        '[11]\t"spine02"[3]\t# "spine02" lid 0 4xHDR',
        '[12]\t"spine02"[4]\t# "spine02" lid 0 4xHDR',
    ]
    assert re.search(r'^Hca\t1 "node09 mlx5_0"\n\[1\]\t"leaf02"\[1\]\t', text, re.M)


def test_fat_tree_degraded_multiport_and_options():
    text = fat_tree_netfile(
        spines=1, leaves=1, hosts_per_leaf=2, host_ports=10, speed="edr", host_prefix="gpu",
        degraded={"gpu01 mlx5_0[3]": "1x", "gpu02 mlx5_0[10]": "4xHDR"},
    )
    assert re.search(r'^Hca\t10 "gpu01 mlx5_0"$', text, re.M)
    assert text.count('"gpu01 mlx5_0"[3]\t# "gpu01 mlx5_0" lid 0 1xEDR') == 1  # leaf side
    assert re.search(r'^Hca\t10 "gpu01 mlx5_0"\n(?:.*\n){2}\[3\]\t"leaf01"\[3\]\t# "leaf01" lid 0 1xEDR$', text, re.M)
    body = "\n".join(line for line in text.splitlines() if not line.startswith("#"))
    assert body.count("1xEDR") == 2 and body.count("4xHDR") == 2
    assert "# degraded: gpu01 mlx5_0[3] 1xEDR, gpu02 mlx5_0[10] 4xHDR" in text
    assert re.search(r'^Switch\t24 "leaf01"$', text, re.M)  # 20 host ports + 1 uplink, rounded up to 24
    with pytest.raises(ValueError):
        fat_tree_netfile(degraded={"node99 mlx5_0[1]": "1x"})
    with pytest.raises(ValueError):
        fat_tree_netfile(degraded={"node01 mlx5_0[2]": "1x"})
    with pytest.raises(ValueError):
        fat_tree_netfile(degraded={"node01 mlx5_0[1]": "3x"})
    with pytest.raises(ValueError):
        fat_tree_netfile(speed="NDR")
    with pytest.raises(ValueError):
        fat_tree_netfile(leaves=0)


def test_tools_available_shape():
    ok, why = tools_available()
    assert isinstance(ok, bool) and isinstance(why, str)
    assert ok or why.startswith("missing:")
    assert UMAD2SIM.endswith("libumad2sim.so")


def test_sockname_validation(tmp_path):
    with pytest.raises(ValueError):
        SimFabric("", tmp_path, sockname="x" * 65)
    with pytest.raises(ValueError):
        SimFabric("", tmp_path, sockname="has space")
    a, b = SimFabric("", tmp_path), SimFabric("", tmp_path)
    assert a.sockname != b.sockname and a.sockname.startswith(f"fm{os.getpid()}_")


def test_env_and_console_validation(tmp_path):
    fab = SimFabric(small_fabric_text(), tmp_path)
    env = fab.env(N01)
    assert env["SIM_HOST"] == N01 and env["LD_PRELOAD"] == UMAD2SIM and env["IBSIM_SOCKNAME"] == fab.sockname
    assert "/usr/sbin" in env["PATH"].split(os.pathsep)
    with pytest.raises(ValueError):
        fab.env("node99 mlx5_0")
    assert fab.hosts == [f"node{i:02d} mlx5_0" for i in range(1, 5)] and fab.sm_host == N01
    with pytest.raises(ValueError):
        fab.console("a\nb")
    with pytest.raises(ValueError):
        fab.console("x" * 127)
    with pytest.raises(RuntimeError):
        fab.console("Attached")  # not started
    fab.stop()  # stop before start is a no-op
    assert fab.pid is None


# --------------------------------------------------------------------------
# against the real simulator
# --------------------------------------------------------------------------


@pytest.mark.sim
def test_small_fabric_end_to_end(sim_fabric):
    fab = sim_fabric(small_fabric_text())
    pid = fab.pid
    assert fab.running and pid

    out = run(fab, N01, "ibstat")
    assert "CA 'ibsim0'" in out and "State: Active" in out and "Physical state: LinkUp" in out

    # PortInfo is right about width/speed; ibstat's Rate is the simulator's HDR artefact.
    healthy = run(fab, N01, "iblinkinfo", "-D", "0")
    degraded = run(fab, N02, "iblinkinfo", "-D", "0")
    assert re.search(r"==\(\s*4X\s+53\.125 Gbps Active/\s+LinkUp\)==>.*\"leaf01\"", healthy)
    assert re.search(r"==\(\s*1X\s+53\.125 Gbps Active/\s+LinkUp\)==>.*\"leaf01\"", degraded)
    assert "Rate: 104" in out
    assert "Rate: 26" in run(fab, N02, "ibstat")

    # counters set on the console show up in perfquery
    assert fab.set_counter(N02, 1, "PortCounters.SymbolErrorCounter", 77) == 77
    assert fab.set_counter(N02, 1, "PortCounters.SymbolErrorCounter", 70000) == 65535  # 16-bit, saturates
    assert fab.set_counter(N02, 1, "PortCountersExtended.PortXmitData", 123456789012) == 123456789012
    assert counter(run(fab, N02, "perfquery"), "SymbolErrorCounter") == 65535
    assert counter(run(fab, N02, "perfquery", "-x"), "PortXmitData") == 123456789012
    assert counter(run(fab, N01, "perfquery"), "SymbolErrorCounter") == 0

    # cable pull and re-plug
    fab.unlink(N02, 1)
    out = run(fab, N02, "ibstat")
    assert "State: Down" in out and "Physical state: Polling" in out
    fab.relink(N02, 1)
    out = run(fab, N02, "ibstat")
    assert "State: Active" in out and "Physical state: LinkUp" in out

    fab.stop()
    assert not fab.running and fab.pid == pid
    assert_gone(pid)
    fab.stop()  # idempotent


@pytest.mark.sim
def test_console_errors(sim_fabric):
    fab = sim_fabric(small_fabric_text())
    assert fab.console("Attached").endswith("sim> ")
    with pytest.raises(SimCommandError, match="cannot be found"):
        fab.set_counter(N01, 1, "PortCounters.Bogus", 1)
    with pytest.raises(SimCommandError, match="not found"):
        fab.unlink("node99 mlx5_0", 1)
    with pytest.raises(TimeoutError):
        fab.console("Attached", expect="no such text", timeout=0.3)
    fab.console("Attached")  # still in step with the prompt afterwards


@pytest.mark.sim
def test_demo_fabric_all_hosts_active(sim_fabric):
    t0 = time.monotonic()
    fab = sim_fabric(demo_netfile_path().read_text())
    elapsed = time.monotonic() - t0
    out = run(fab, N01, "iblinkinfo")
    cas = re.findall(r"^CA: (.+):$", out, re.M)
    assert sorted(cas) == [f"node{i:02d} mlx5_0" for i in range(1, 33)]
    host_lines = re.findall(r"^\s+0x[0-9a-f]{16}\s+\d+\s+1\[\s*\] ==\(\s*4X\s+53\.125 Gbps Active/\s+LinkUp\)==>", out, re.M)
    assert len(host_lines) == 32
    assert len(re.findall(r"^Switch: ", out, re.M)) == 6
    uplinks = re.findall(r'Active/\s+LinkUp\)==>\s+\d+\s+\d+\[\s*\] "spine0\d"', out)
    assert len(uplinks) == 16
    assert elapsed < 15, f"demo fabric took {elapsed:.1f}s to start"


@pytest.mark.sim
def test_parallel_fabrics_are_isolated(sim_fabric):
    text = small_fabric_text()
    a, b = sim_fabric(text), sim_fabric(text)
    assert a.sockname != b.sockname and a.pid != b.pid
    a.set_counter(N01, 1, "PortCounters.LinkDownedCounter", 3)
    b.set_counter(N01, 1, "PortCounters.LinkDownedCounter", 9)
    assert counter(run(a, N01, "perfquery"), "LinkDownedCounter") == 3
    assert counter(run(b, N01, "perfquery"), "LinkDownedCounter") == 9
    # a taken sockname is refused instead of silently talking to the other fabric
    with pytest.raises(RuntimeError, match="already in use"):
        sim_fabric(text, sockname=a.sockname)


@pytest.mark.sim
def test_multiport_host_local_ports(sim_fabric):
    """Pins the umad2sim quirks for hosts with several ports.

    The local CA ``ibsim0`` exposes only port 1 (``-P 2`` fails everywhere);
    port N is reached with a directed-route SMP (``smpquery -D portinfo 0 N``)
    and, for counters, by that port's own LID (``perfquery <lid> N``).
    """
    fab = sim_fabric(fat_tree_netfile(spines=1, leaves=1, hosts_per_leaf=1, host_ports=10,
                                      degraded={f"{N01}[3]": "1x"}))
    assert "Number of ports: 1" in run(fab, N01, "ibstat")
    assert fab.run_tool(N01, "perfquery", "-C", "ibsim0", "-P", "3").returncode != 0

    info = run(fab, N01, "smpquery", "-D", "portinfo", "0", "3")
    assert re.search(r"^LinkWidthActive:\.+1X$", info, re.M)
    assert re.search(r"^LinkState:\.+Active$", info, re.M)
    lid = int(re.search(r"^Lid:\.+(\d+)$", info, re.M).group(1))
    assert lid > 0

    fab.set_counter(N01, 3, "PortCounters.SymbolErrorCounter", 33)
    out = run(fab, N01, "perfquery", str(lid), "3")
    assert "port 3" in out and counter(out, "SymbolErrorCounter") == 33
    assert counter(run(fab, N01, "perfquery"), "SymbolErrorCounter") == 0  # port 1

    # the full sweep shows all ten local ports
    full = run(fab, N01, "iblinkinfo")
    block = full.split(f"CA: {N01}:", 1)[1].split("Switch:", 1)[0]
    assert len(re.findall(r"Active/\s+LinkUp", block)) == 10

    fab.unlink(N01, 3)
    info = run(fab, N01, "smpquery", "-D", "portinfo", "0", "3")
    assert re.search(r"^LinkState:\.+Down$", info, re.M)


@pytest.mark.sim
def test_context_manager_and_bad_topology(sim_fabric, tmp_path):
    # sim_fabric is requested only for its skip-or-fail policy when tools are missing
    with SimFabric(small_fabric_text(), tmp_path / "ok") as fab:
        pid = fab.pid
        assert "State: Active" in run(fab, N01, "ibstat")
    assert_gone(pid)

    bad = 'Switch\t8 "sw1"\n[1]\t"nosuch"[1]\t# "nosuch" lid 0 4xHDR\n'
    fab = SimFabric(bad, tmp_path / "bad")
    with pytest.raises(RuntimeError, match="can't find remote node"):
        fab.start()
    assert not fab.running
