"""Fabric collector faults with fake tools (scripts replaying the recorded fat tree's outputs):
a switch that does not answer costs only that switch for that sweep; a hung pass is killed
with its process group at the timeout and counted, and the daemon keeps serving; `Query SA
failed` with exit status 0 is an error; link state from the SM's records, and the SMP fallback under loss
(only what the pass missed is read, unanswered ports keep their state and are counted)."""

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
from helpers import FIXTURES, sample_value, scrape_samples, wait_for_scrape, wait_until

BUNDLE = FIXTURES / "fabric" / "fat-tree"
LEAF02 = "0000000000200003"


def recorded() -> dict[str, dict]:
    cmds = json.loads((BUNDLE / "bundle.json").read_text())["commands"]
    return {("counters" if "--counters" in c["argv"] else c["argv"][0]): c for c in cmds}


def tool(tmp: Path, name: str, body: str) -> list[str]:
    path = tmp / f"{name}.py"
    path.write_text(textwrap.dedent(body))
    return [sys.executable, str(path)]


def config(tmp: Path, sweep_cmd: list[str], timeout: float = 5.0, writes_cache: bool = True) -> object:
    """`writes_cache` False: the fake ibnetdiscover prints the fabric and leaves no cache file behind."""
    rec = recorded()
    (tmp / "out.json").write_text(json.dumps(rec))
    disc = tool(tmp, "ibnetdiscover", f"""
        import json, sys
        print(json.load(open({str(tmp / 'out.json')!r}))["ibnetdiscover"]["stdout"], end="")
        if {writes_cache!r}:
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
    assert snap.sources["sweep"].errors_total["read"] == 1 and snap.sources["sweep"].up
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
    assert snap.sources["sweep"].errors_total["parse"] == 2 and not snap.sources["sweep"].up
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
        s = wait_for_scrape(d.port, lambda s: (sample_value(s, "fabricmon_source_errors_total", source="sweep",
                                                            kind="timeout") or 0) >= 2, 20)
        assert sample_value(s, "fabricmon_fabric_switches") == 6         # discovery still reported
        assert sample_value(s, "fabricmon_source_up", source="discovery") == 1
        # the next sweep hangs now: a scrape that waited for it would take most of its 3 s timeout
        t = time.monotonic()
        scrape_samples(d.port)
        assert time.monotonic() - t < 1.0
    finally:
        d.stop()

    def ended(pid: int) -> bool:
        try:
            return psutil.Process(pid).status() == psutil.STATUS_ZOMBIE
        except psutil.NoSuchProcess:
            return True
    # the hung sweep and its child were killed: wait until both are gone (or zombies)
    pids = [int(pid) for line in (tmp_path / "pids").read_text().split("\n") for pid in line.split()]
    wait_until(lambda: all(ended(pid) for pid in pids), 5, lambda: f"still running: {[p for p in pids if not ended(p)]}")


def state_tools(tmp: Path, sa_body: str, disc_stderr: str = "", drop: tuple[str, ...] = (), smp_body: str = "") -> list[str]:
    """The sweep with fake link-state tools beside it (the sweep looks for saquery, ibnetdiscover and
    smpquery in its own tool's directory): saquery prints `sa_body`; ibnetdiscover prints the recorded
    topology less the lines containing any of `drop`, with `disc_stderr`; smpquery runs `smp_body`."""
    rec = recorded()
    (tmp / "out.json").write_text(json.dumps(rec))
    bindir = tmp / "bin"
    bindir.mkdir()

    def script(name: str, body: str) -> None:
        p = bindir / name
        p.write_text(f"#!{sys.executable}\n" + textwrap.dedent(body))
        p.chmod(0o755)
    script("ibqueryerrors", f"""
        import json, sys
        rec = json.load(open({str(tmp / 'out.json')!r}))
        c = rec["counters"] if "--counters" in sys.argv else rec["ibqueryerrors"]
        print(c["stdout"], end=""); sys.exit(c["returncode"])
    """)
    script("saquery", sa_body)
    script("ibnetdiscover", f"""
        import json, sys
        text = json.load(open({str(tmp / 'out.json')!r}))["ibnetdiscover"]["stdout"]
        if "--cache" in sys.argv:
            open(sys.argv[sys.argv.index("--cache") + 1], "w").write("cache")
            print(text, end="")
        else:
            print("".join(ln for ln in text.splitlines(True) if not any(d in ln for d in {drop!r})), end="")
            print({disc_stderr!r}, file=sys.stderr, end="")
    """)
    script("smpquery", smp_body or "import sys; sys.exit(255)\n")
    return [str(bindir / "ibqueryerrors")]


def collect(cfg) -> object:
    pipe = fabric_pipeline(cfg, LiveIO())
    try:
        return pipe.collect()
    finally:
        pipe.close()


SPINE01, LEAF01 = "0000000000200000", "0000000000200002"
PIR = "\tRID\n\t\tEndPortLid..............{lid}\n\t\tPortNum.................{port}\n\tPortInfo dump:\n" \
      "\t\tLinkState:.......................{state}\n\t\tPhysLinkState:...................{phys}\n"


def test_link_state_from_the_sm_records_when_they_cover_every_port(tmp_path) -> None:
    from fabricmon.parsers.ibnetdiscover import parse_ibnetdiscover
    topo = parse_ibnetdiscover(recorded()["ibnetdiscover"]["stdout"])
    recs = "".join(PIR.format(lid=sw.lid, port=p, state="Down" if (g, p) == (SPINE01, 1) else "Active",
                              phys="Polling" if (g, p) == (SPINE01, 1) else "LinkUp")
                   for g, sw in topo.switches.items() for p in sw.links)
    (tmp_path / "pir.txt").write_text(recs)
    sweep = state_tools(tmp_path, f"print(open({str(tmp_path / 'pir.txt')!r}).read())\n")
    snap = collect(config(tmp_path, sweep))
    fab = snap.fabric
    assert fab.link_state_method == "sa"
    down = {k for k, p in fab.ports.items() if p.link is not None and not p.up}
    assert down == {(SPINE01, 1), (LEAF01, 3)}          # the SM's record, and its peer through it


def test_link_state_fallback_under_loss_reads_only_what_the_pass_missed(tmp_path) -> None:
    """The SA answers 2 records (as ibsim's); the uncached ibnetdiscover pass lost queries and does not
    show spine01[1] <-> leaf01[3] nor leaf02's port 1: smpquery says spine01[1] is Down, leaf01[3] and
    leaf02[1] do not answer (retried, then counted). The cable is down at both ends (its peer's
    PortInfo); leaf02[1], unread, keeps its last state: up."""
    two = PIR.format(lid=1, port=1, state="Active", phys="LinkUp") * 2
    smp = """
        import sys
        lid, port = sys.argv[-2], sys.argv[-1]
        if (lid, port) == ("2", "1"):
            print("# Port info: Lid 2 port 1\\nLinkState:.......................Down\\nPhysLinkState:...................Polling")
        else:
            print("ibwarn: [1] mad_rpc: _do_madrpc failed; dport (Lid %s)" % lid, file=sys.stderr); sys.exit(255)
    """
    sweep = state_tools(tmp_path, f"print({two!r})\n",
                        drop=('"S-0000000000200002"[3]', '"S-0000000000200000"[1]', '"H-0000000000100004"[1]'),
                        disc_stderr="umad (DR path slid 0; dlid 0; 0,1,3 Attr 0x15:0) bad status 110; Connection timed out\n",
                        smp_body=smp)
    snap = collect(config(tmp_path, sweep))
    fab = snap.fabric
    assert fab.link_state_method == "smp"
    down = {k for k, p in fab.ports.items() if p.link is not None and not p.up}
    assert down == {(SPINE01, 1), (LEAF01, 3)}
    assert fab.ports[(LEAF02, 1)].up and fab.ports[(LEAF02, 1)].link is not None
    assert snap.sources["sweep"].errors_total["unanswered"] == 2          # leaf01 and leaf02, once each
    errs = snap.sources["sweep"].active_errors
    assert any(e.startswith("switch leaf02 (0x0000000000200003): 1 of ") and "(port state)" in e for e in errs), errs


def replayed_sweep(tmp: Path, error_pass_delay: float = 0.0) -> list[str]:
    """A fake ibqueryerrors answering both passes as recorded; the error pass after `error_pass_delay` s."""
    return tool(tmp, "ibqueryerrors", f"""
        import json, sys, time
        rec = json.load(open({str(tmp / 'out.json')!r}))
        c = rec["counters"] if "--counters" in sys.argv else rec["ibqueryerrors"]
        if "--counters" not in sys.argv:
            time.sleep({error_pass_delay!r})
        print(c["stdout"], end="")
        sys.exit(c["returncode"])
    """)


def test_the_tools_sweep_takes_each_switch_at_its_counters_pass_not_at_the_sweeps_end(tmp_path) -> None:
    """Issue 51: rates over the tools path time each switch at the end of the process that read its traffic
    counters (`ibqueryerrors --counters`), not at the sweep's end: an error pass that takes a second longer
    after it (a loaded host, a slow switch) is no traffic. Here the error pass sleeps 1 s after the counters
    pass ended, and every switch read is taken about that long before the sweep's end."""
    cfg = config(tmp_path, replayed_sweep(tmp_path, error_pass_delay=1.0))
    pipe = fabric_pipeline(cfg, LiveIO())
    try:
        pipe.collect()
        data = pipe.states["sweep"].data
    finally:
        pipe.close()
    assert data.method == "tools" and len(data.switches) == 6
    assert set(data.read_ago) == data.switches
    assert all(0.9 <= ago < 10 for ago in data.read_ago.values()), data.read_ago


def test_a_cache_another_process_moved_away_leaves_the_sweep_the_last_one(tmp_path) -> None:
    """Two collectors of an HA pair on one host share the state directory, and one's rename can take the
    other's `topology.cache.new` (`cannot move ... into place: No such file or directory`, seen on a loaded
    machine): the discovery is still read, the error is counted, and the sweep goes on with the last
    complete cache on disk instead of having none until the next complete discovery."""
    from fabricmon.sources.infiniband.discovery import CACHE_NAME
    # its discovery writes no cache: the other collector's rename took it
    cfg = config(tmp_path, replayed_sweep(tmp_path), writes_cache=False)
    (tmp_path / CACHE_NAME).write_text("cache")     # the last complete run's
    pipe = fabric_pipeline(cfg, LiveIO())
    try:
        snap = pipe.collect()
    finally:
        pipe.close()
    assert any("into place" in e for e in snap.sources["discovery"].active_errors)
    assert snap.sources["sweep"].up and sum(1 for p in snap.fabric.ports.values() if p.counters) == 48
