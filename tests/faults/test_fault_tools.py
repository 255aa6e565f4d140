"""Tools that hang, fork hanging children, are missing, fail, or print garbage."""

from __future__ import annotations

import os
import random

import psutil
import pytest

from fault_harness import GOOD_IBSTAT, val, write_tool
from helpers import wait_until


def procs_running(marker: str) -> list[psutil.Process]:
    out = []
    for p in psutil.process_iter(["cmdline"]):
        try:
            if any(marker in part for part in (p.info["cmdline"] or [])):
                out.append(p)
        except psutil.Error:
            pass
    return out


@pytest.mark.parametrize("body", [
    "exec sleep {S}\n",                                   # hangs forever
    "sleep {S} &\nsleep {S}\n",                          # forks a child that hangs
    "setsid sleep {S} &\nsleep {S}\n",                   # a child that left the process group
    "sleep {S} >/dev/null 2>&1 &\necho CA garbage\nexit 0\n",   # exits, leaves a daemonised child
], ids=["hang", "child-hangs", "setsid-child", "leaves-child"])
def test_hung_tools_are_killed_without_orphans(harness, body):
    marker = str(harness.tools / "ibstat")
    secs = f"{random.randint(5000, 9999)}.{os.getpid()}"        # identifies this test's children
    tool = write_tool(harness.tools / "ibstat", body.replace("{S}", secs))
    harness.start(ibstat={"command": [str(tool)], "timeout": 0.5, "interval": 0.3})
    s = harness.wait(lambda s: (val(s, "fabricmon_source_errors_total", source="ibstat", kind="timeout") or 0)
                     + (val(s, "fabricmon_source_errors_total", source="ibstat", kind="parse") or 0) >= 2, 15)
    assert val(s, "fabricmon_source_up", source="ibstat") == 0
    harness.assert_sysfs_keeps_reporting()
    harness.daemon.stop()
    harness.daemon = None
    # `sleep 1000` children are identified through their parent script's path or by being
    # descendants of it; after the timeout none may survive (the kill is sent: wait until they are gone).
    def left() -> list[psutil.Process]:
        return [p for p in psutil.process_iter(["cmdline", "create_time"]) if p.info["cmdline"] == ["sleep", secs]]
    wait_until(lambda: not procs_running(marker), 5, lambda: f"tools left: {[p.pid for p in procs_running(marker)]}")
    wait_until(lambda: not left(), 5, lambda: f"orphans left: {[p.pid for p in left()]}")


def test_missing_tool(harness):
    """Explicitly enabled: a missing tool is an error (and a WARNING in check)."""
    harness.start(ibstat={"enabled": True, "command": ["fabricmon-no-such-tool"], "interval": 0.2})
    s = harness.wait(lambda s: (val(s, "fabricmon_source_errors_total", source="ibstat", kind="not_found") or 0) >= 1, 10)
    assert val(s, "fabricmon_source_up", source="ibstat") == 0
    assert val(s, "fabricmon_source_active", source="ibstat") == 0
    harness.assert_sysfs_keeps_reporting()


def test_missing_tool_with_auto_is_quietly_off(harness):
    harness.start(ibstat={"enabled": "auto", "command": ["fabricmon-no-such-tool"], "interval": 0.2})
    harness.assert_sysfs_keeps_reporting()
    s = harness.scrape()
    assert val(s, "fabricmon_source_active", source="ibstat") == 0
    assert val(s, "fabricmon_source_enabled", source="ibstat") == 1
    assert val(s, "fabricmon_source_up", source="ibstat") is None
    assert val(s, "fabricmon_source_errors_total", source="ibstat", kind="not_found") == 0


def test_partial_output_then_ibpanic_keeps_the_adapters(harness):
    out = harness.tools / "ibstat.out"
    out.write_text(GOOD_IBSTAT.replace("mlx5_0", "mlx5_9"))
    tool = write_tool(harness.tools / "ibstat", f"""\
        cat {out}
        echo "ibpanic: [1234] main: stat of IB device 'mlx5_8' failed: No such file or directory" >&2
        exit 255
        """)
    harness.start(ibstat={"command": [str(tool)], "interval": 0.2})
    s = harness.wait(lambda s: (val(s, "fabricmon_source_errors_total", source="ibstat", kind="exit_code") or 0) >= 1, 10)
    # mlx5_9 exists only in ibstat's partial output: it is reported
    assert val(s, "fabricmon_ib_port_up", device="mlx5_9", port=1) == 1
    assert val(s, "fabricmon_source_up", source="ibstat") == 1
    harness.assert_sysfs_keeps_reporting()


@pytest.mark.parametrize("payload", ["\x00\x01garbage \xff\n" * 5, GOOD_IBSTAT[:40]], ids=["garbage", "truncated"])
def test_bad_output_is_a_parse_error(harness, payload):
    out = harness.tools / "ibstat.out"
    out.write_bytes(payload.encode("latin-1"))
    tool = write_tool(harness.tools / "ibstat", f"cat {out}\n")
    harness.start(ibstat={"command": [str(tool)], "interval": 0.2})
    # the tool exits 0: its output is the fault, so every error is a parse error and no other kind
    s = harness.wait(lambda s: (val(s, "fabricmon_source_errors_total", source="ibstat", kind="parse") or 0) >= 2, 10)
    # truncated output keeps the CA it names (partial data is data), garbage leaves nothing
    assert val(s, "fabricmon_source_up", source="ibstat") == (1 if payload == GOOD_IBSTAT[:40] else 0)
    others = {k: val(s, "fabricmon_source_errors_total", source="ibstat", kind=k)
              for k in ("exit_code", "timeout", "not_found")}
    assert not any(others.values()), others
    harness.assert_sysfs_keeps_reporting()


def test_no_output_and_exit_0_is_no_adapter_not_an_error(harness):
    """What rdma-core's ibstat prints on a host without an RDMA device: nothing, exit 0. That is an
    empty adapter list (as a missing /sys/class/infiniband), not bad output."""
    tool = write_tool(harness.tools / "ibstat", "exit 0\n")
    harness.start(ibstat={"command": [str(tool)], "interval": 0.2})
    s = harness.wait(lambda s: val(s, "fabricmon_source_up", source="ibstat") == 1, 10)
    assert sum(val(s, "fabricmon_source_errors_total", source="ibstat", kind=k) or 0
               for k in ("parse", "exit_code")) == 0
    harness.assert_sysfs_keeps_reporting()


@pytest.mark.parametrize("tool,body", [
    ("iblinkinfo", "echo 'ibwarn: [77] _do_madrpc: recv failed: Connection timed out' >&2\n"
                   "echo './libibnetdisc/query_smp.c:186; umad (DR path slid 0; dlid 0; 0 Attr 0x15:0) bad status 110; "
                   "Connection timed out' >&2\nexit 255\n"),
    ("iblinkinfo", "exec sleep 30\n"),
    ("perfquery", "echo 'ibwarn: [77] mad_rpc: _do_madrpc failed; dport (Lid 1)' >&2\n"
                  "echo 'perfquery: iberror: failed: perfquery' >&2\nexit 255\n"),
], ids=["iblinkinfo-mad-timeout", "iblinkinfo-hangs", "perfquery-mad-timeout"])
def test_a_mad_tool_that_timed_out_is_a_source_error_never_a_port_down(harness, tool, body):
    """Issue 22 on the node: a MAD that went unanswered (or a tool killed at its timeout) costs that
    source's data for the run, counted as its error; the port's state stays what sysfs says."""
    exe = write_tool(harness.tools / tool, body)
    harness.start(**{tool: {"enabled": True, "command": [str(exe)], "interval": 0.3, "timeout": 0.5}})
    s = harness.wait(lambda s: (val(s, "fabricmon_source_errors_total", source=tool, kind="exit_code") or 0)
                     + (val(s, "fabricmon_source_errors_total", source=tool, kind="timeout") or 0) >= 2, 15)
    for dev in ("mlx5_0", "mlx5_1"):
        assert val(s, "fabricmon_ib_port_up", device=dev, port=1) == 1
        assert val(s, "fabricmon_check_status", check="degraded_link", device=dev, port=1,
                   **{"class": "watch"}) == 0
    harness.assert_sysfs_keeps_reporting()
