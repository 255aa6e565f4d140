"""Fabric collector faults with fake tools (scripts replaying the recorded fat tree's outputs):
a switch that does not answer costs only that switch for that sweep; a hung pass is killed
with its process group at the timeout and counted, and the daemon keeps serving; `Query SA
failed` with exit status 0 is an error."""

from __future__ import annotations

import json
import sys
import textwrap
import time
from pathlib import Path

import psutil

from fabricmon.config import from_dict
from fabricmon.host import LiveIO
from fabricmon.pipeline.fabric import fabric_pipeline
from fabricmon.serve.daemon import Daemon
from helpers import FIXTURES, sample_value, scrape_samples

BUNDLE = FIXTURES / "fabric" / "fat-tree"
LEAF02 = "0000000000200003"


def recorded() -> dict[str, dict]:
    cmds = json.loads((BUNDLE / "bundle.json").read_text())["commands"]
    return {("counters" if "--counters" in c["argv"] else c["argv"][0]): c for c in cmds}


def tool(tmp: Path, name: str, body: str) -> list[str]:
    path = tmp / f"{name}.py"
    path.write_text(textwrap.dedent(body))
    return [sys.executable, str(path)]


def config(tmp: Path, sweep_cmd: list[str], timeout: float = 5.0) -> object:
    rec = recorded()
    (tmp / "out.json").write_text(json.dumps(rec))
    disc = tool(tmp, "ibnetdiscover", f"""
        import json, sys
        print(json.load(open({str(tmp / 'out.json')!r}))["ibnetdiscover"]["stdout"], end="")
        open(sys.argv[-1], "w").write("cache")
    """)
    return from_dict({"server": {"address": "127.0.0.1"}, "paths": {"state_dir": str(tmp)},
                      "fabric": {"port": 0, "cache_dir": str(tmp), "sweep_interval": 0.5,
                                 "sources": {"discovery": {"command": disc},
                                             "sweep": {"command": sweep_cmd, "timeout": timeout}}}})


def test_a_switch_that_does_not_answer_costs_only_that_switch(tmp_path) -> None:
    sweep = tool(tmp_path, "ibqueryerrors", f"""
        import json, sys
        rec = json.load(open({str(tmp_path / 'out.json')!r}))
        c = rec["counters"] if "--counters" in sys.argv else rec["ibqueryerrors"]
        keep, skip = [], False
        for line in c["stdout"].splitlines():
            if line.startswith(("Data Counters for", "Errors for")):
                skip = "0x200003" in line
            if not skip:
                keep.append(line)
        print("\\n".join(keep))
        print("ibwarn: [1] mad_rpc: _do_madrpc failed; dport (Lid 6)", file=sys.stderr)
        print("ibwarn: [1] print_data_cnts: IB_GSI_PORT_COUNTERS query failed on leaf02, Lid 6 port 1", file=sys.stderr)
        sys.exit(c["returncode"])
    """)
    cfg = config(tmp_path, sweep)
    pipe = fabric_pipeline(cfg, LiveIO())
    try:
        snap = pipe.collect()
    finally:
        pipe.close()
    fab = snap.fabric
    assert not fab.ports[(LEAF02, 1)].counters                       # that switch, that sweep
    assert fab.ports[("0000000000200002", 3)].counters["symbol_errors"] == 7    # the others are all there
    assert sum(1 for p in fab.ports.values() if p.counters) == 40
    assert fab.sweep_errors["read"] == 1 and snap.sources["sweep"].up
    assert any("leaf02" in e for e in snap.sources["sweep"].active_errors)


def test_sa_failed_with_exit_zero_is_an_error(tmp_path) -> None:
    sweep = tool(tmp_path, "ibqueryerrors", """
        import sys
        print("Query SA failed: Connection timed out; sa call path_query failed", file=sys.stderr)
    """)
    pipe = fabric_pipeline(config(tmp_path, sweep), LiveIO())
    try:
        snap = pipe.collect()
    finally:
        pipe.close()
    assert snap.fabric.sweep_errors["parse"] == 2 and not snap.sources["sweep"].up
    assert all(p.up for p in snap.fabric.ports.values() if p.link is not None)    # topology still reported


def test_hung_sweep_is_killed_counted_and_the_daemon_keeps_serving(tmp_path) -> None:
    sweep = tool(tmp_path, "ibqueryerrors", f"""
        import os, subprocess, sys, time
        child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(600)"])
        open({str(tmp_path / 'pids')!r}, "a").write(f"{{os.getpid()}} {{child.pid}}\\n")
        time.sleep(600)
    """)
    cfg = config(tmp_path, sweep, timeout=3.0)      # well above the scrape bound below
    io = LiveIO()
    d = Daemon(cfg, io, port=0, pipeline=fabric_pipeline(cfg, io))
    d.start()
    try:
        end = time.monotonic() + 20
        while True:
            s = scrape_samples(d.port)
            if (sample_value(s, "fabricmon_fabric_sweep_errors_total", kind="timeout") or 0) >= 2:
                break
            assert time.monotonic() < end, "no sweep timeout counted"
            time.sleep(0.2)
        assert sample_value(s, "fabricmon_fabric_switches") == 6         # discovery still reported
        assert sample_value(s, "fabricmon_source_up", source="discovery") == 1
        # the next sweep hangs now: a scrape that waited for it would take most of its 3 s timeout
        t = time.monotonic()
        scrape_samples(d.port)
        assert time.monotonic() - t < 1.0
    finally:
        d.stop()
    time.sleep(0.3)
    for line in (tmp_path / "pids").read_text().split("\n"):
        for pid in map(int, line.split()):
            assert not psutil.pid_exists(pid) or psutil.Process(pid).status() == psutil.STATUS_ZOMBIE
