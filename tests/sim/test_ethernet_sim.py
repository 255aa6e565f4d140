"""The Ethernet collector (`fabricmon fabric run` with fabric.kind: ethernet) against a real
simulated leaf/spine fabric: Debian's snmpsim serving one switch per UDP endpoint, read with
net-snmp's snmpbulkwalk, asserted over real HTTP (/metrics and /api/v1/findings).

Planted in one fabric (3 spines, 3 leaves): leaf01 polarised onto spine01; leaf02 balanced, with a
PFC storm on its host port Ethernet0 (priority 3, the switch sending pause frames); leaf03's uplink
to spine03 trained at 100G among 400G; spine02 and spine03 number their LLDP ports otherwise than
their ifIndex (spine02 through ifDescr, with a management port on ifIndex 1 that the raw number
would hit; spine03 through BRIDGE-MIB); a configured switch that never answers; then spine01's
port to leaf02 taken down with the real snmpset. The collector must find exactly these. An idle
fabric is never flagged."""

from __future__ import annotations

import time
from pathlib import Path

import pytest

from helpers import api_findings, community_file, sample_value, scrape_samples, unavailable, wait_for_scrape

from fabricmon.sim.ethernet import SnmpSimFabric, free_udp_ports, leaf_spine, set_rate, tools_available

GBPS = 1e9 / 8
SWEEP = 2.0
NO_JOBS = {"slurm_jobs": {"enabled": False}}      # the SNMP path's own commands only (squeue is not SNMP)


def _require() -> None:
    ok, why = tools_available()
    if not ok:
        unavailable(why)



def _collector(tmp: Path, addresses: list[str], extra: dict | None = None, snmp: dict | None = None):
    from fabricmon.config import from_dict
    from fabricmon.host import LiveIO
    from fabricmon.pipeline.fabric import fabric_pipeline
    from fabricmon.serve.daemon import Daemon
    comm = community_file(tmp)
    cfg = from_dict({"server": {"address": "127.0.0.1", "collect": ["all"]}, "paths": {"state_dir": str(tmp / "state")},
                     "fabric": {"port": 0, "kind": "ethernet", "sweep_interval": SWEEP, "discovery_interval": 300,
                                "sources": NO_JOBS,
                                "timeouts": {"sweep": 8, "discovery": 20},
                                "thresholds": {"consecutive_sweeps": 2, "utilisation_floor": 0.1},
                                "pfc_storm": {"sweeps": 2},
                                "ethernet": {"switches": addresses,
                                             "snmp": {"community_file": str(comm), "timeout": 0.5, "retries": 0,
                                                      **(snmp or {})},
                                             **(extra or {})}}})
    (tmp / "state" / "fabric").mkdir(parents=True, exist_ok=True)
    io = LiveIO(cfg.sysfs, cfg.procfs)
    d = Daemon(cfg, io, port=0, pipeline=fabric_pipeline(cfg, io))
    d.start()
    return d


@pytest.fixture(scope="module")
def planted(tmp_path_factory):
    _require()
    tmp = tmp_path_factory.mktemp("ethfab")
    sw = leaf_spine(spines=3, leaves=3, hosts_per_leaf=2, uplink_rate=20 * GBPS * 8,
                    spine_styles=("sonic", "numbered", "bridge"))
    by = {s.name: s for s in sw}
    # leaf01 polarised: nearly all its uplink traffic through spine01
    for port, rate in (("Ethernet8", 300e9 / 8), ("Ethernet12", 5e9 / 8), ("Ethernet16", 5e9 / 8)):
        set_rate(sw, "leaf01", port, rate)
    # leaf03's uplink to spine03 trained at 100G (both ends), carrying its share of a 100G link
    by["leaf03"].port("Ethernet16").speed_mbps = 100000
    by["spine03"].port("Ethernet8").speed_mbps = 100000
    set_rate(sw, "leaf03", "Ethernet16", 80e9 / 8, 80e9 / 8)
    # PFC storm: leaf02 sends pause frames to its host node03 on priority 3
    by["leaf02"].port("Ethernet0").pause[(3, "tx")] = 5000.0
    silent = f"127.0.0.1:{free_udp_ports(1)[0]}"
    fab = SnmpSimFabric(sw, tmp / "sim").start()
    d = _collector(tmp, [*fab.addresses(), silent])
    try:
        yield fab, d, by, silent
    finally:
        d.stop()
        fab.stop()


def _chassis(by, name: str) -> str:
    return by[name].chassis


def test_planted_faults_and_nothing_else(planted) -> None:
    fab, d, by, silent = planted
    s = wait_for_scrape(d.port, lambda s: sample_value(s, "fabricmon_ecmp_imbalanced", switch_guid=_chassis(by, "leaf01"),
                                                       switch="leaf01", direction="up") == 1, 60)
    leaf01, leaf02, leaf03 = (_chassis(by, f"leaf0{i}") for i in (1, 2, 3))
    spine03 = _chassis(by, "spine03")
    # the graph: every leaf has three uplinks, joined on spines whose LLDP port numbers are not ifIndex
    for leaf, spine_port in (("leaf01", "Ethernet0"), ("leaf02", "Ethernet4"), ("leaf03", "Ethernet8")):
        for port, spine in (("Ethernet8", "spine01"), ("Ethernet12", "spine02"), ("Ethernet16", "spine03")):
            assert sample_value(s, "fabricmon_fabric_link_info", switch_guid=_chassis(by, leaf), port=port, role="up",
                                remote_guid=_chassis(by, spine), remote_port=spine_port, remote_name=spine) == 1, \
                (leaf, port, spine)
    # spine02's management port is no fabric port (fabric.ethernet.exclude_ports): no series at all
    assert not [k for k in s if ("switch_guid", _chassis(by, "spine02")) in k[1] and ("port", "mgmt0") in k[1]]
    assert sample_value(s, "fabricmon_fabric_switch_info", switch_guid=leaf01, switch="leaf01", level="1") == 1
    assert sample_value(s, "fabricmon_fabric_switch_info", switch_guid=spine03, switch="spine03", level="2") == 1
    # ECMP: leaf01 flagged, leaf02 balanced, leaf03's slow uplink kept out of its group
    assert sample_value(s, "fabricmon_ecmp_imbalanced", switch_guid=leaf02, switch="leaf02", direction="up") == 0
    assert sample_value(s, "fabricmon_ecmp_imbalanced", switch_guid=leaf03, switch="leaf03", direction="up") == 0
    assert sample_value(s, "fabricmon_fabric_port_degraded", switch_guid=leaf03, port="Ethernet16", reason="speed") == 1
    # fabricmon_check_status names a switch port as every fabric series does (its ifName, not its ifIndex)
    checked = {dict(k[1])["port"] for k in s if k[0] == "fabricmon_check_status" and dict(k[1])["device"] == leaf03}
    assert "Ethernet16" in checked and not any(p.isdigit() for p in checked), checked
    assert sample_value(s, "fabricmon_fabric_port_rate_bytes_per_second", switch_guid=leaf03, port="Ethernet16") == 100e9 / 8
    rate = sample_value(s, "fabricmon_fabric_port_transmit_rate_bytes_per_second", switch_guid=leaf01, port="Ethernet8")
    # (snmpsim computes a counter when it handles the walk, the collector times the answer it receives: on
    # a loaded machine the two drift apart by up to a few tenths of a 2 s sweep; 1.11x measured once at a
    # load of 7 on 2 cores); a unit slip (bits, per sweep) is 8x or 2x
    assert rate == pytest.approx(300e9 / 8, rel=0.2)
    assert sample_value(s, "fabricmon_fabric_port_transmit_bytes_total", switch_guid=leaf01, port="Ethernet8") > 0
    # the PFC storm, by priority and direction
    s = wait_for_scrape(d.port, lambda s: sample_value(s, "fabricmon_fabric_check_status", check="pfc_storm",
                                                       switch_guid=leaf02, switch="leaf02") == 1, 30)
    assert sample_value(s, "fabricmon_fabric_port_pause_frames_total", switch_guid=leaf02, port="Ethernet0",
                        priority="3", direction="tx") > 0
    assert sample_value(s, "fabricmon_fabric_port_pause_frames_total", switch_guid=leaf02, port="Ethernet0",
                        priority="3", direction="rx") == 0
    # the switch that never answers: unresponsive after 5 of its last 7 sweeps, counted, costs only itself
    s = wait_for_scrape(d.port, lambda s: sample_value(s, "fabricmon_fabric_switch_unresponsive", switch_guid=silent,
                                                       switch=silent) == 1, 10 * SWEEP + 10)
    assert sample_value(s, "fabricmon_fabric_switch_unresponsive", switch_guid=leaf01, switch="leaf01") == 0
    assert sample_value(s, "fabricmon_fabric_check_status", check="unresponsive", switch_guid=silent, switch=silent) == 1
    assert sample_value(s, "fabricmon_source_errors_total", source="sweep", kind="timeout") >= 1
    duration = sample_value(s, "fabricmon_fabric_sweep_duration_seconds")
    assert duration is not None and duration < SWEEP + 1.5
    found = [f for f in api_findings(d.port) if f["status"] > 0]
    by_check: dict[str, list[dict]] = {}
    for f in found:
        by_check.setdefault(f["check"], []).append(f)
    assert sorted(by_check) == ["degraded_link", "ecmp", "pfc_storm", "source", "unresponsive"], found
    # the sources say why they are failing: the silent switch, and nothing else
    assert all(silent in f["message"] and "no answer" in f["message"] for f in by_check["source"]), by_check["source"]
    (ecmp,) = by_check["ecmp"]
    assert ecmp["message"].startswith('leaf01 uplinks: port Ethernet8 to "spine01"[Ethernet0] carries')
    links = sorted(f["message"] for f in by_check["degraded_link"])
    assert len(links) == 2 and all("runs at 100G, below the 400G of its link class (speed)" in m for m in links)
    assert links[0].startswith('leaf03 port Ethernet16 (up to "spine03"[Ethernet8])')
    assert links[1].startswith('spine03 port Ethernet8 (down to "leaf03"[Ethernet16])')
    (pfc,) = by_check["pfc_storm"]
    assert pfc["message"].startswith("PFC storm at leaf02 host port Ethernet0 priority 3 direction tx: ")
    assert 'leaf02 sends pause frames to "node03"[eth0]' in pfc["message"]
    (unr,) = by_check["unresponsive"]
    assert unr["device"] == silent and unr["message"].startswith(f"{silent} ({silent}) did not answer in ")
    assert "100% of its queries unanswered: counters, state; never read completely" in unr["message"]


def test_a_spine_port_down_shows_in_the_next_sweep(planted) -> None:
    fab, d, by, _ = planted
    spine01 = _chassis(by, "spine01")
    wait_for_scrape(d.port, lambda s: sample_value(s, "fabricmon_fabric_port_up", switch_guid=spine01,
                                                   port="Ethernet4") == 1, 60)
    t0 = time.monotonic()
    fab.set_oper_status("spine01", "Ethernet4", 2)
    try:
        s = wait_for_scrape(d.port, lambda s: sample_value(s, "fabricmon_fabric_port_up", switch_guid=spine01,
                                                           port="Ethernet4") == 0, 3 * SWEEP + 10)
        took = time.monotonic() - t0
        assert took < 2 * SWEEP + 5, took          # the next sweep, not the next discovery (300 s)
        assert sample_value(s, "fabricmon_fabric_port_degraded", switch_guid=spine01, port="Ethernet4",
                            reason="down") == 1
        down = [f for f in api_findings(d.port) if f["check"] == "degraded_link" and f["device"] == spine01]
        assert len(down) == 1 and down[0]["status"] == 2
        assert down[0]["message"].startswith('spine01 port Ethernet4 (down to "leaf02"[Ethernet8]): link is down '
                                             '(was up at an earlier sweep)')
    finally:
        fab.set_oper_status("spine01", "Ethernet4", 1)
    wait_for_scrape(d.port, lambda s: sample_value(s, "fabricmon_fabric_port_up", switch_guid=spine01,
                                                   port="Ethernet4") == 1, 3 * SWEEP + 10)


def test_an_idle_fabric_is_never_flagged(tmp_path) -> None:
    _require()
    sw = leaf_spine(spines=2, leaves=2, hosts_per_leaf=1, uplink_rate=0.0)
    with SnmpSimFabric(sw, tmp_path / "sim") as fab:
        # no silent switch here: 2 s and a retry, so a loaded snmpsim's late answer is not a source
        # finding on the idle fabric this test is about (the optics walk timed out once at load 7)
        d = _collector(tmp_path, fab.addresses(), snmp={"timeout": 2.0, "retries": 1})
        try:
            leaf = sw[2].chassis
            s = wait_for_scrape(d.port, lambda s: (sample_value(s, "fabricmon_ecmp_utilisation_ratio", switch_guid=leaf,
                                                                switch="leaf01", direction="up") is not None), 30)
            # three more sweeps of the idle fabric (the imbalance rule judges two in a row)
            runs = sample_value(s, "fabricmon_source_runs_total", source="sweep")
            wait_for_scrape(d.port, lambda s: sample_value(s, "fabricmon_source_runs_total", source="sweep") >= runs + 3,
                            3 * SWEEP + 20)
            s = scrape_samples(d.port)
            assert sample_value(s, "fabricmon_ecmp_imbalanced", switch_guid=leaf, switch="leaf01", direction="up") == 0
            assert [f for f in api_findings(d.port) if f["status"] > 0] == []
        finally:
            d.stop()


def test_snmpv3_authpriv_works_and_a_wrong_pass_phrase_is_a_counted_error(tmp_path, monkeypatch) -> None:
    """snmpsimd in v3 mode (one process per switch, context "public"): the right credentials read
    the fabric in process; a wrong privacy pass phrase is an error for each switch (counted,
    reported unreachable), never a crash; no pass phrase in any argv the collector ran, nor in its
    errors. Without the `cryptography` package the collector falls back to net-snmp's tools."""
    _require()
    from fabricmon.host import usm
    from fabricmon.config import from_dict
    from fabricmon.host import LiveIO
    from fabricmon.host.bundle import RecordingIO
    from fabricmon.host.snmp import INPROCESS_PROGRAM
    from fabricmon.pipeline.fabric import fabric_pipeline
    auth, priv = "auth-Pass-1234", "priv-Pass-5678"
    sw = leaf_spine(spines=1, leaves=1, hosts_per_leaf=1, uplink_rate=1e9)
    with SnmpSimFabric(sw, v3=("fabmon", "SHA", auth, "AES", priv)) as fab:
        for name, p in (("auth", auth), ("priv", priv), ("wrong", "wrong-Pass-0000")):
            (tmp_path / name).write_text(p + "\n")
            (tmp_path / name).chmod(0o600)

        def run(priv_file: str):
            cfg = from_dict({"paths": {"state_dir": str(tmp_path / "state")},
                             "fabric": {"kind": "ethernet", "sources": NO_JOBS, "ethernet": {"switches": fab.addresses(), "snmp": {
                                 "version": "3", "user": "fabmon", "auth_protocol": "SHA",
                                 "auth_password_file": str(tmp_path / "auth"), "priv_protocol": "AES",
                                 "priv_password_file": str(tmp_path / priv_file), "context": "public",
                                 "timeout": 1, "retries": 0}}}})
            rec = RecordingIO(LiveIO(), tmp_path / f"rec-{priv_file}")
            pipe = fabric_pipeline(cfg, rec)
            try:
                return pipe.collect(), rec.commands
            finally:
                pipe.close()

        snap, commands = run("priv")
        assert commands and all(c["argv"][:3] == [INPROCESS_PROGRAM, "-v3", "-l"] for c in commands)  # in process
        assert {s.name for s in snap.fabric.switches.values()} == {"spine01", "leaf01"}
        assert not snap.sources["discovery"].data.unreachable and snap.sources["sweep"].up
        assert snap.fabric.levels[sw[0].chassis] == 2
        bad, bad_commands = run("wrong")
        assert set(bad.sources["discovery"].data.unreachable) == set(fab.addresses())
        assert bad.sources["discovery"].errors_total["timeout"] + bad.sources["discovery"].errors_total["exit_code"] == 2
        for cmd in commands + bad_commands:
            assert not any(secret in arg for arg in cmd["argv"] for secret in (auth, priv, "wrong-Pass"))
        texts = [f.message for f in bad.findings] + [e for s in bad.sources.values() for e in s.active_errors]
        assert texts and not any(secret in t for t in texts for secret in (auth, priv, "wrong-Pass"))
        monkeypatch.setattr(usm, "supported", lambda priv_protocol: (False, "no cryptography (the test says)"))
        tools, tool_commands = run("priv")
        assert tool_commands and all(c["argv"][0] == "snmpbulkwalk" for c in tool_commands)   # the fallback
        assert not tools.sources["discovery"].data.unreachable and tools.sources["sweep"].up
        assert not any(secret in arg for c in tool_commands for arg in c["argv"] for secret in (auth, priv))


def test_the_v2c_path_starts_no_process(tmp_path, monkeypatch) -> None:
    """SNMPv2c is read in this process (host.snmp): a discovery and two sweeps start no child
    process, and what `fabric capture` records are the in-process walks."""
    _require()
    import subprocess as sp

    from fabricmon.config import from_dict
    from fabricmon.host import LiveIO
    from fabricmon.host import runner
    from fabricmon.host.bundle import RecordingIO
    from fabricmon.host.snmp import INPROCESS_PROGRAM
    from fabricmon.pipeline.fabric import fabric_pipeline
    sw = leaf_spine(spines=2, leaves=2, hosts_per_leaf=2, uplink_rate=1e9)
    with SnmpSimFabric(sw) as fab:
        started: list = []
        real = sp.Popen

        def popen(*a, **kw):
            started.append(a[0] if a else kw.get("args"))
            return real(*a, **kw)

        monkeypatch.setattr(runner.subprocess, "Popen", popen)
        comm = community_file(tmp_path)
        cfg = from_dict({"paths": {"state_dir": str(tmp_path / "state")},
                         "fabric": {"kind": "ethernet", "sources": NO_JOBS, "ethernet": {"switches": fab.addresses(), "snmp": {
                             "community_file": str(comm), "timeout": 1, "retries": 1}}}})
        rec = RecordingIO(LiveIO(), tmp_path / "rec")
        pipe = fabric_pipeline(cfg, rec)
        try:
            snaps = [pipe.collect() for _ in range(2)]
            data = pipe.states["sweep"].data
        finally:
            pipe.close()
    assert started == []
    # each switch's traffic and pause frames timed at their own walks' answers (SweepData.read_ago, pause_read_ago)
    assert set(data.read_ago) == data.switches and len(data.switches) == 4
    assert set(data.pause_read_ago) == {g for g, _ in data.pause} and data.pause
    assert all(0 <= ago < 10 for ago in (*data.read_ago.values(), *data.pause_read_ago.values()))
    assert rec.commands and {c["argv"][0] for c in rec.commands} == {INPROCESS_PROGRAM}
    snap = snaps[-1]
    assert {s.name for s in snap.fabric.switches.values()} == {"spine01", "spine02", "leaf01", "leaf02"}
    assert not snap.sources["discovery"].data.unreachable and snap.sources["sweep"].up
    assert not any(snap.sources[n].active_errors for n in ("discovery", "sweep"))


# --- `fabric once` as an operator runs it (issue 53) ---------------------------------------------------


@pytest.fixture(scope="module")
def small_fabric(tmp_path_factory):
    _require()
    tmp = tmp_path_factory.mktemp("ethonce")
    with SnmpSimFabric(leaf_spine(spines=1, leaves=1, hosts_per_leaf=1, uplink_rate=1e9), tmp / "sim") as fab:
        yield fab


def _fabric_once(tmp: Path, switches: list[str], secret_mode: int):
    import subprocess
    import sys

    import yaml
    comm = community_file(tmp)
    comm.chmod(secret_mode)
    cfg = tmp / "fabricmon.yml"
    cfg.write_text(yaml.safe_dump({"paths": {"state_dir": str(tmp / "state")}, "fabric": {
        "kind": "ethernet", "sources": NO_JOBS,
        "ethernet": {"switches": switches, "snmp": {"community_file": str(comm), "timeout": 0.5, "retries": 0}}}}))
    (tmp / "state").mkdir(exist_ok=True)
    res = subprocess.run([sys.executable, "-m", "fabricmon", "fabric", "once", "--config", str(cfg)],
                         capture_output=True, text=True, timeout=120)
    return res, comm


def test_fabric_once_names_every_switch_that_does_not_answer(small_fabric, tmp_path) -> None:
    """Two configured switches that never answer: each source's finding names both (it named the first and
    `(+1 more)`), while the two switches that answer are read."""
    dead = [f"127.0.0.1:{p}" for p in free_udp_ports(2)]
    res, _ = _fabric_once(tmp_path, [*small_fabric.addresses(), *dead], 0o600)
    assert res.returncode == 1, res.stdout + res.stderr         # WARNING: the sources that lost a switch
    lines = [ln for ln in res.stderr.splitlines() if ln.startswith("WARNING source: ")]
    assert {ln.split(":")[1].strip().removeprefix("source ") for ln in lines} == {"discovery", "sweep", "optics",
                                                                                   "vitals"}, res.stderr
    for ln in lines:
        assert "2 switches " in ln and all(d in ln for d in dead) and "no answer (SNMP timeout" in ln, ln
        assert "more)" not in ln, ln
    assert 'fabricmon_fabric_switch_info{level="1",switch="leaf01"' in res.stdout
    assert "secret file" not in res.stderr                      # mode 0600: nothing to warn about


def test_fabric_once_warns_about_a_secret_file_others_can_read(small_fabric, tmp_path) -> None:
    """A 0644 community file: `fabric once` says so on stderr (as `fabric run` logs it at its first walk),
    before its findings; the switches are read all the same."""
    res, comm = _fabric_once(tmp_path, small_fabric.addresses(), 0o644)
    assert res.returncode == 0, res.stdout + res.stderr
    assert res.stderr.splitlines() == [f"fabricmon: warning: SNMP secret file is readable by group or others: "
                                       f"chmod 600 it: {comm} (mode 644)"]
    assert 'fabricmon_fabric_switch_info{level="1",switch="leaf01"' in res.stdout
