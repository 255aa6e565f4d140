"""The InfiniBand sweep through the in-process MAD engine, end to end on ibsim: the collector process is
itself started under umad2sim (LD_PRELOAD and IBSIM_SOCKNAME, as fab.env gives them), so its own
libibumad reaches the simulator (docs/mad-engine.md "Under the simulator").

- the engine's exposition has the same series as the tools' (fabric.sweep_method tools) with the same
  error counters and link states; fabricmon_fabric_sweep_method says which ran;
- four shards report every switch exactly once, each through the engine;
- where the collector's own process opens no umad port (here: the test process, not preloaded, with the
  tools' fabric environment), `auto` sweeps with the tools and says so;
- the daemon under 30% MAD loss on a spine reads no port down and loses no switch name, and a cable
  pulled meanwhile reads down;
- an inter-switch link, read at one end only (mad.plan_targets), retrained narrower by a Set at its
  other end is judged degraded at both ends, as when both ends were read."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import time

import pytest

from fabricmon.config import from_dict
from fabricmon.model.fabric import build_topology
from fabricmon.parsers.ibnetdiscover import parse_ibnetdiscover
from fabricmon.exporter.render import render
from fabricmon.host import LiveIO
from fabricmon.pipeline.fabric import fabric_pipeline
from fabricmon.sim.fabric import fat_tree_netfile
from fabricmon.sources.infiniband.mad import plan_targets
from helpers import fabric_once, free_port, sample_value, scrape_samples, stop_process, wait_until

pytestmark = pytest.mark.sim

NET = dict(spines=2, leaves=4, hosts_per_leaf=2, uplinks_per_spine=2)
SWITCHES = {f"{0x200000 + i:016x}" for i in range(6)}


def once(fab, tmp_path, name: str, fabric: dict, *args: str) -> str:
    return fabric_once(fab, tmp_path, name, fabric, *args).stdout


def series(text: str) -> dict[tuple[str, str], str]:
    return {(m[1], m[2]): m[3] for m in re.finditer(r"^(fabricmon_fabric_\w+)(\{[^}]*\})? (\S+)$", text, re.M)}


MOVING = ("_bytes_total", "_packets_total", "duration", "timestamp", "_seconds")


def test_the_engine_exports_what_the_tools_export(sim_fabric, tmp_path) -> None:
    fab = sim_fabric(fat_tree_netfile(**NET))
    fab.run_sm()
    fab.set_counter("leaf01", 3, "PortCounters.SymbolErrorCounter", 7)
    fab.set_counter("spine02", 2, "PortCounters.LinkDownedCounter", 3)
    tools = series(once(fab, tmp_path, "tools", {"sweep_method": "tools"}))
    engine = series(once(fab, tmp_path, "mad", {"sweep_method": "auto"}))
    assert tools[("fabricmon_fabric_sweep_method", '{method="tools"}')] == "1.0"
    assert engine[("fabricmon_fabric_sweep_method", '{method="mad"}')] == "1.0"
    assert set(tools) == set(engine)
    same = {k for k in tools if not any(w in k[0] for w in MOVING)}
    differ = {k: (tools[k], engine[k]) for k in same if tools[k] != engine[k] and k[0] != "fabricmon_fabric_sweep_method"}
    assert not differ
    assert engine[("fabricmon_fabric_port_symbol_errors_total", '{port="3",switch_guid="0000000000200002"}')] == "7.0"
    assert engine[("fabricmon_fabric_port_link_downed_total", '{port="2",switch_guid="0000000000200001"}')] == "3.0"
    # the default set's port state: reason down on every cabled port (fabricmon_fabric_port_up is opt-in)
    ups = [k for k in engine if k[0] == "fabricmon_fabric_port_degraded" and 'reason="down"' in k[1]]
    assert ups and all(engine[k] == tools[k] for k in ups)


def test_a_capture_of_the_engine_sweep_replays_through_the_same_pipeline_to_the_same_exposition(sim_fabric, tmp_path) -> None:
    """`fabricmon fabric capture` on the live (simulated) fabric records the engine's MAD exchanges, one
    answer per request; `fabricmon fabric once --replay` of that bundle, in a process that reaches no
    fabric at all, sweeps through the engine's path from those answers and exports what the capture
    exported (every series, every value but durations and timestamps)."""
    fab = sim_fabric(fat_tree_netfile(**NET))
    fab.run_sm()
    fab.set_counter("leaf01", 3, "PortCounters.SymbolErrorCounter", 7)
    fab.set_counter("spine02", 2, "PortCounters.LinkDownedCounter", 3)
    (tmp_path / "state").mkdir()
    cfg = tmp_path / "fabricmon.yml"
    cfg.write_text(json.dumps({"paths": {"state_dir": str(tmp_path / "state")}, "fabric": {"cache_dir": str(tmp_path)}}))
    bundle = tmp_path / "bundle"
    r = subprocess.run([sys.executable, "-m", "fabricmon", "fabric", "capture", "--config", str(cfg), str(bundle)],
                       env=fab.env(fab.hosts[0]), capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stderr
    doc = json.loads((bundle / "bundle.json").read_text())
    ran = {c["argv"][0].rsplit("/", 1)[-1] for c in doc["commands"]}
    assert "ibnetdiscover" in ran and not ran & {"ibqueryerrors", "perfquery", "smpquery"}, ran
    # one answer per question: ClassPortInfo and the aggregate per switch, each port's counters, each cabled
    # port's PortInfo, the per-port error counters of the two switches with errors
    assert len(doc["mad"]) > 6 * 3 and all(a is not None for a in doc["mad"].values())
    captured = series((bundle / "metrics.prom").read_text())
    assert captured[("fabricmon_fabric_sweep_method", '{method="mad"}')] == "1.0"
    clean = {k: v for k, v in os.environ.items() if k not in ("LD_PRELOAD", "IBSIM_SOCKNAME", "SIM_HOST")}
    r = subprocess.run([sys.executable, "-m", "fabricmon", "fabric", "once", "--replay", str(bundle)],
                       env=clean, capture_output=True, text=True, timeout=120)
    assert f"\nfabricmon_health_status {float(r.returncode)}\n" in r.stdout, r.stderr   # exits with its health
    every = re.compile(r"^(fabricmon_\w+)(\{[^}]*\})? (\S+)$", re.M)
    captured = {(m[1], m[2]): m[3] for m in every.finditer((bundle / "metrics.prom").read_text())}
    replayed = {(m[1], m[2]): m[3] for m in every.finditer(r.stdout)}
    assert set(replayed) == set(captured), set(replayed) ^ set(captured)
    moving = ("duration", "timestamp", "_seconds", "fabricmon_build_info", "fabricmon_process_")
    differ = {k: (captured[k], replayed[k]) for k in captured
              if captured[k] != replayed[k] and not any(w in k[0] for w in moving)}
    assert not differ, differ
    assert replayed[("fabricmon_fabric_port_symbol_errors_total", '{port="3",switch_guid="0000000000200002"}')] == "7.0"
    assert replayed[("fabricmon_fabric_port_link_downed_total", '{port="2",switch_guid="0000000000200001"}')] == "3.0"


def test_four_shards_report_every_switch_exactly_once(sim_fabric, tmp_path) -> None:
    fab = sim_fabric(fat_tree_netfile(**NET))
    fab.run_sm()
    seen: list[str] = []
    for i in range(4):
        text = once(fab, tmp_path, f"shard{i}", {}, "--shard", f"{i}/4")
        swept = set(re.findall(r'^fabricmon_fabric_port_receive_bytes_total\{port="\d+",switch_guid="(\w+)"\}', text, re.M))
        assert not swept or 'fabricmon_fabric_sweep_method{method="mad"} 1.0' in text
        seen += sorted(swept)
    assert sorted(seen) == sorted(SWITCHES)          # all of them, none twice


def test_auto_sweeps_with_the_tools_where_no_umad_port_opens(sim_fabric, tmp_path, monkeypatch) -> None:
    fab = sim_fabric(fat_tree_netfile(**NET))
    fab.run_sm()
    env = fab.env(fab.hosts[0])
    # this process is not preloaded: its own libibumad finds no umad port (a host without one), while
    # the tools run under umad2sim; the process's environment names the same fabric, so the engine
    # is tried (not skipped for another fabric's environment) and fails for real
    for k in ("LD_PRELOAD", "IBSIM_SOCKNAME", "SIM_HOST"):
        monkeypatch.setenv(k, env[k])
    cfg = from_dict({"paths": {"state_dir": str(tmp_path)}, "fabric": {"cache_dir": str(tmp_path)}})
    pipe = fabric_pipeline(cfg, LiveIO(env=env))
    try:
        snap = pipe.collect()
    finally:
        pipe.close()
    assert snap.fabric.sweep_method == "tools"
    assert set(snap.fabric.switches) == SWITCHES and snap.sources["sweep"].up
    assert all(p.counters for p in snap.fabric.ports.values() if p.link is not None)
    text = render(snap).decode()
    assert 'fabricmon_fabric_sweep_method{method="tools"} 1.0' in text
    assert 'fabricmon_fabric_sweep_method{method="mad"} 0.0' in text


def scrape_until(proc, port: int, pred, timeout: float) -> dict:
    def scrape() -> dict:
        assert proc.poll() is None, proc.stderr.read()
        return scrape_samples(port)
    return wait_until(scrape, timeout, "a scrape that meets the condition", until=pred, interval=0.3, ignore=(OSError,))


def cabled_up(s: dict) -> dict[tuple[str, str], float]:
    """Every cabled port's state, 1 up, from the default set's fabricmon_fabric_port_degraded{reason="down"}."""
    return {(dict(lbl)["switch_guid"], dict(lbl)["port"]): 1.0 - v for (n, lbl), v in s.items()
            if n == "fabricmon_fabric_port_degraded" and dict(lbl)["reason"] == "down"}


def names(s: dict) -> dict[str, str]:
    return {dict(lbl)["switch_guid"]: dict(lbl)["switch"] for (n, lbl) in s if n == "fabricmon_fabric_switch_info"}


def start_collector(fab, tmp_path, discovery_interval: float) -> tuple[subprocess.Popen, int]:
    """`fabricmon fabric run` on the simulated fabric, sweeping every second; its process and port."""
    (tmp_path / "state").mkdir()
    cfg = tmp_path / "fabricmon.yml"
    cfg.write_text(json.dumps({"paths": {"state_dir": str(tmp_path / "state")},
                               "fabric": {"sweep_interval": 1.0, "discovery_interval": discovery_interval}}))
    port = free_port()
    proc = subprocess.Popen([sys.executable, "-m", "fabricmon", "fabric", "run", "--config", str(cfg), "--listen",
                             f"127.0.0.1:{port}"], env=fab.env(fab.hosts[0]), stdout=subprocess.DEVNULL,
                            stderr=subprocess.PIPE, text=True, start_new_session=True)
    return proc, port


def test_30_percent_mad_loss_reads_no_port_down_and_loses_no_name(sim_fabric, tmp_path) -> None:
    fab = sim_fabric(fat_tree_netfile(**NET))
    fab.start_sm()
    proc, port = start_collector(fab, tmp_path, discovery_interval=2.0)
    try:
        s = scrape_until(proc, port, lambda s: len(cabled_up(s)) == 40 and all(cabled_up(s).values())
                         and len(names(s)) == 6 and sample_value(s, "fabricmon_fabric_sweep_method", method="mad") == 1, 60)
        before = names(s)
        for p in range(1, 9):
            fab.console(f'Error "spine01"[{p}] 30')
        end = time.monotonic() + 6
        while time.monotonic() < end:                # several sweeps and discoveries under loss
            s = scrape_samples(port)
            down = [k for k, v in cabled_up(s).items() if v != 1]
            assert not down, f"30% loss: ports read down: {down}"
            assert names(s) == before
            assert sample_value(s, "fabricmon_fabric_sweep_method", method="mad") == 1
            time.sleep(0.4)                          # the pace of the 6 s watched under loss: what is tested
        leaf01, spine01 = f"{0x200002:016x}", f"{0x200000:016x}"
        fab.unlink("leaf01", 3)                      # leaf01[3] <-> spine01[1], under the loss
        s = scrape_until(proc, port, lambda s: cabled_up(s).get((leaf01, "3")) == 0
                         and cabled_up(s).get((spine01, "1")) == 0, 60)
        assert sorted(k for k, v in cabled_up(s).items() if v != 1) == sorted([(leaf01, "3"), (spine01, "1")])
        assert names(s) == before
    finally:
        stop_process(proc)


def degraded(s: dict, reason: str) -> set[tuple[str, str]]:
    return {(dict(lbl)["switch_guid"], dict(lbl)["port"]) for (n, lbl), v in s.items()
            if n == "fabricmon_fabric_port_degraded" and dict(lbl)["reason"] == reason and v == 1}


def test_an_inter_switch_link_narrowed_at_its_unread_end_is_degraded_at_both_ends(sim_fabric, tmp_path) -> None:
    fab = sim_fabric(fat_tree_netfile(**NET))
    fab.start_sm()
    disc = parse_ibnetdiscover(fab.run_tool(fab.hosts[0], "ibnetdiscover", check=True).stdout)
    targets, _ = plan_targets(build_topology(disc), set(disc.switches))
    # a link the sweep reads at its spine end: narrowed by a Set at the leaf end, which is not read
    read_at, g, _lid, q = next((t, g, lid, q) for t in targets for p, g, lid, q in t.mirrors
                               if disc.switches[t.guid].name.startswith("spine"))
    p = next(p for p, g2, _l, q2 in read_at.mirrors if (g2, q2) == (g, q))
    proc, port = start_collector(fab, tmp_path, discovery_interval=30.0)
    try:
        scrape_until(proc, port, lambda s: len(cabled_up(s)) == 40 and all(cabled_up(s).values())
                     and sample_value(s, "fabricmon_fabric_sweep_method", method="mad") == 1, 60)
        fab.run_tool(fab.hosts[0], "ibportstate", str(disc.switches[g].lid), str(q), "width", "1", check=True)
        ends = {(read_at.guid, str(p)), (g, str(q))}
        s = scrape_until(proc, port, lambda s: ends <= degraded(s, "width"), 30)
        assert degraded(s, "width") == ends and not degraded(s, "speed") and all(cabled_up(s).values())
    finally:
        stop_process(proc)


def test_the_mad_engine_gone_mid_run_takes_every_sweep_verdict_away(sim_fabric, tmp_path) -> None:
    """Issue 46: the simulator (the MAD engine's umad device) gone under a running collector. Its last good
    sweep is judged while fresh; once the sweep's records are past their staleness bound no switch has a
    sweep check status (never an old OK), the sweep is down and the collector is not OK."""
    fab = sim_fabric(fat_tree_netfile(**NET))
    fab.start_sm()
    proc, port = start_collector(fab, tmp_path, discovery_interval=300.0)
    sweep_checks = ("degraded_link", "unresponsive", "uplinks", "symbol_errors")

    def judged(s: dict, check: str) -> set[str]:
        return {dict(lbl)["switch_guid"] for (n, lbl), v in s.items()
                if n == "fabricmon_fabric_check_status" and dict(lbl)["check"] == check}
    try:
        scrape_until(proc, port, lambda s: all(judged(s, c) == SWITCHES for c in sweep_checks)
                     and sample_value(s, "fabricmon_fabric_sweep_method", method="mad") == 1
                     and sample_value(s, "fabricmon_health_status") == 0, 60)
        fab.stop()                                   # the engine's umad device is gone
        s = scrape_until(proc, port, lambda s: not any(judged(s, c) for c in sweep_checks), 90)
        assert sample_value(s, "fabricmon_source_up", source="sweep") == 0
        assert sample_value(s, "fabricmon_health_status") not in (None, 0)
    finally:
        stop_process(proc)
