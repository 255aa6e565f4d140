"""`fabricmon check` as an operator's HealthCheckProgram (issue 12): a dead adapter fails, a missing
tool does not, "could not check" is UNKNOWN (3), the daemon answers in milliseconds, and bad
command-line values are one line, never a traceback."""

from __future__ import annotations

import json
import os
import shutil
import stat
import subprocess
import sys
import time
import urllib.error
import urllib.request
from pathlib import Path

import pytest
import yaml

from fabricmon import cli, healthcheck
from fabricmon.sim import sysfs_tree
from helpers import REPO, fabricmon_command, free_port, h100_copy, sample_value, scrape_samples, wait_until

H100_IB = [f"mlx5_{i}" for i in (0, 1, 4, 5, 6, 7, 8, 9)]


def exe() -> list[str]:
    return fabricmon_command()


def no_tools_env(tmp_path: Path) -> dict[str, str]:
    """An environment whose PATH has no infiniband-diags (nor anything else)."""
    empty = tmp_path / "empty-bin"
    empty.mkdir(exist_ok=True)
    return {**os.environ, "PATH": str(empty)}


def fabricmon(*args: str, env: dict | None = None, timeout: float = 60) -> subprocess.CompletedProcess:
    return subprocess.run([*exe(), *args], capture_output=True, text=True, timeout=timeout, env=env)


def write_config(tmp_path: Path, sysfs: Path, name: str = "fabricmon.yml", **extra) -> str:
    """The default config, except where this host's files are: the sysfs tree, a state dir, and
    tool dirs (the /usr/sbin, /sbin lookup) pointing at an empty directory."""
    empty = tmp_path / "empty-sbin"
    empty.mkdir(exist_ok=True)
    doc = {"paths": {"sysfs": str(sysfs), "state_dir": str(tmp_path / "state"), "tool_dirs": [str(empty)]}, **extra}
    f = tmp_path / name
    f.write_text(yaml.safe_dump(doc))
    return str(f)


@pytest.fixture
def h100(tmp_path: Path) -> Path:
    """A writable copy of the recorded H100 node (8 NDR HCAs and a RoCE bond)."""
    return h100_copy(tmp_path)


COUNT8 = [{"device": "mlx5_*", "width": "4X", "speed": "NDR", "count": 8}]


# --- done when: a dead adapter fails -----------------------------------------------------------

def test_h100_with_one_hca_removed_is_critical_and_names_the_missing_port(tmp_path: Path, h100: Path) -> None:
    cfg = write_config(tmp_path, h100, expected_links=COUNT8)
    env = no_tools_env(tmp_path)
    state = str(tmp_path / "state" / "check.json")
    healthy = fabricmon("check", "--state", state, "--config", cfg, env=env)
    assert healthy.returncode == 0, healthy.stdout + healthy.stderr
    assert healthy.stdout.splitlines() == ["FABRICMON OK - 0 critical, 0 warning on 9 port(s)"]
    shutil.rmtree(h100 / "class" / "infiniband" / "mlx5_4")          # the adapter dies
    res = fabricmon("check", "--state", state, "--config", cfg, env=env)
    assert res.returncode == 2, res.stdout + res.stderr
    lines = res.stdout.splitlines()
    assert lines[0] == "FABRICMON CRITICAL - 1 critical, 0 warning on 8 port(s)"
    assert lines[1].startswith("CRITICAL expected_inventory: expected_links[0] (mlx5_*, InfiniBand, count 8): "
                               "7 of 8 port(s) found, 1 missing; missing (seen earlier): mlx5_4 port 1; seen: "
                               "mlx5_0 port 1, mlx5_1 port 1, mlx5_5 port 1"), lines[1]
    # without any history (first run, --no-state): still CRITICAL, with what was seen
    fresh = fabricmon("check", "--no-state", "--config", cfg, env=env)
    assert fresh.returncode == 2 and "7 of 8 port(s) found, 1 missing; seen: mlx5_0 port 1" in fresh.stdout
    # a glob that names the adapters names the missing one without history
    named = write_config(tmp_path, h100, "named.yml",
                         expected_links=[{"device": "mlx5_[014-9]", "speed": "NDR", "count": 8}])
    res = fabricmon("check", "--no-state", "--config", named, env=env)
    assert res.returncode == 2 and "not seen: mlx5_4;" in res.stdout


def test_an_empty_tree_with_an_expectation_is_critical(tmp_path: Path) -> None:
    empty = tmp_path / "sys"
    empty.mkdir()
    res = fabricmon("check", "--no-state", "--config",
                    write_config(tmp_path, empty, expected_links=[{"device": "mlx5_*", "width": "4X", "speed": "NDR"}]),
                    env=no_tools_env(tmp_path))
    assert res.returncode == 2, res.stdout + res.stderr
    lines = res.stdout.splitlines()
    assert lines[0] == "FABRICMON CRITICAL - 1 critical, 0 warning on 0 port(s); no InfiniBand or RoCE port found"
    assert "no matching port found; no InfiniBand or RoCE port at all" in lines[1]


def test_an_empty_tree_without_expectation_is_unknown_and_says_why(tmp_path: Path) -> None:
    """Nothing found, nothing expected, nothing learned: nothing to check is UNKNOWN (3), not OK."""
    empty = tmp_path / "sys"
    empty.mkdir()
    res = fabricmon("check", "--no-state", "-v", "--config", write_config(tmp_path, empty), env=no_tools_env(tmp_path))
    assert res.returncode == 3, res.stdout + res.stderr
    lines = res.stdout.splitlines()
    assert lines[0] == (f"FABRICMON UNKNOWN - nothing to check: no InfiniBand or RoCE device found ({empty}/class/"
                        "infiniband) and none seen on this node before; is the RDMA driver loaded? (lsmod | grep "
                        "ib_core, dmesg, lspci -d 15b3:)")
    # nothing expected, nothing found: nothing judged, no OK of it
    assert not [ln for ln in lines if "expected_inventory" in ln]


# --- done when: a missing tool does not drain the node -----------------------------------------

def test_h100_with_the_default_config_and_no_infiniband_diags_is_ok(tmp_path: Path, h100: Path) -> None:
    res = fabricmon("check", "--no-state", "--config", write_config(tmp_path, h100), env=no_tools_env(tmp_path))
    assert res.returncode == 0, res.stdout + res.stderr
    assert res.stdout.splitlines() == ["FABRICMON OK - 0 critical, 0 warning on 9 port(s)"]
    once = fabricmon("once", "--config", write_config(tmp_path, h100), env=no_tools_env(tmp_path))
    for tool in ("ibstat", "perfquery", "iblinkinfo", "mlnx_qos", "ethtool"):
        assert f'fabricmon_source_active{{source="{tool}"}} 0.0' in once.stdout
        assert f'fabricmon_source_errors_total{{kind="not_found",source="{tool}"}} 0.0' in once.stdout
    assert 'fabricmon_source_active{source="sysfs"} 1.0' in once.stdout


def test_tools_in_sbin_are_found_off_path(tmp_path: Path) -> None:
    """ibstat in a tool dir (as /usr/sbin for a user whose PATH lacks it) is used, with no error."""
    sysfs = tmp_path / "sys"
    sysfs.mkdir()
    sbin = tmp_path / "sbin"
    sbin.mkdir()
    tool = sbin / "ibstat"
    tool.write_text(f"#!{sys.executable}\nprint(\"CA 'mlx5_0'\\n\\tCA type: MT4129\\n\\tNumber of ports: 1\\n"
                    "\\tPort 1:\\n\\t\\tState: Active\\n\\t\\tPhysical state: LinkUp\\n\\t\\tRate: 400\\n"
                    "\\t\\tLink layer: InfiniBand\")\n")
    tool.chmod(0o755)
    cfg = tmp_path / "c.yml"
    cfg.write_text(yaml.safe_dump({"paths": {"sysfs": str(sysfs), "tool_dirs": [str(sbin)]}}))
    res = fabricmon("check", "--no-state", "-v", "--config", str(cfg), env=no_tools_env(tmp_path))
    assert res.returncode == 0, res.stdout + res.stderr
    assert res.stdout.startswith("FABRICMON OK - 0 critical, 0 warning on 1 port(s)")


# --- done when: could not check is UNKNOWN -------------------------------------------------------

def test_unknown_for_a_missing_bundle_and_a_bad_command_line(tmp_path: Path) -> None:
    res = fabricmon("check", "--replay", str(tmp_path / "no-such-bundle"))
    assert res.returncode == 3
    assert res.stdout.startswith("FABRICMON UNKNOWN - ") and "not a fabricmon bundle" in res.stdout
    res = fabricmon("check", "--no-such-flag")
    assert res.returncode == 3 and res.stdout.startswith("FABRICMON UNKNOWN - bad command line")
    res = fabricmon("once", "--replay", str(tmp_path / "no-such-bundle"))
    assert res.returncode == 2 and "not a fabricmon bundle" in res.stderr


def test_unknown_for_an_internal_error(tmp_path: Path, monkeypatch, capsys) -> None:
    def boom(*a, **k):
        raise RuntimeError("kaboom")
    monkeypatch.setattr(healthcheck, "local_verdict", boom)
    sysfs = tmp_path / "sys"
    sysfs.mkdir()
    assert cli.main(["check", "--no-state", "--config", write_config(tmp_path, sysfs)]) == 3
    out = capsys.readouterr()
    assert out.out.splitlines() == ["FABRICMON UNKNOWN - internal error: RuntimeError('kaboom')"]
    import structlog
    structlog.reset_defaults()


# --- bad command-line values: one line, exit 2 ------------------------------------------------

@pytest.mark.parametrize("listen", ["127.0.0.1", ":abc", "127.0.0.1:99999", "::1:9879", "[::1:9879"])
def test_bad_listen_is_one_line_and_exit_2(tmp_path: Path, listen: str) -> None:
    sysfs = tmp_path / "sys"
    sysfs.mkdir()
    res = fabricmon("run", "--listen", listen, "--config", write_config(tmp_path, sysfs), timeout=20)
    assert res.returncode == 2
    assert res.stderr.count("\n") == 1 and res.stderr.startswith(f"fabricmon: bad --listen {listen!r}"), res.stderr


@pytest.mark.parametrize("command", [("run",), ("fabric", "run")])
def test_an_address_not_assigned_yet_is_a_restartable_failure(tmp_path: Path, command: tuple) -> None:
    """A management address a later boot stage brings up ("Cannot assign requested address",
    EADDRNOTAVAIL; 192.0.2.1 is TEST-NET-1, on no interface here): exit 75 like a busy port, never 2."""
    sysfs = tmp_path / "sys"
    sysfs.mkdir()
    extra = {"fabric": {"cache_dir": str(tmp_path / "cache")}} if command[0] == "fabric" else {}
    res = fabricmon(*command, "--listen", "192.0.2.1:9879", "--config", write_config(tmp_path, sysfs, **extra),
                    timeout=30)
    assert res.returncode == 75, (res.returncode, res.stderr)
    assert res.stderr.count("\n") == 1, res.stderr
    assert res.stderr.startswith("fabricmon: cannot listen on 192.0.2.1:9879: Cannot assign requested address: "
                                 "the address is not assigned to an interface (yet)"), res.stderr
    assert "not a config error" in res.stderr and "retr" in res.stderr, res.stderr


def test_an_address_that_is_not_an_address_is_exit_2(tmp_path: Path) -> None:
    """A listen name that cannot be an address at all stays a config error (2): restarting cannot cure it."""
    sysfs = tmp_path / "sys"
    sysfs.mkdir()
    res = fabricmon("run", "--listen", "300.1.1.1:9879", "--config", write_config(tmp_path, sysfs), timeout=20)
    assert res.returncode == 2, (res.returncode, res.stderr)
    assert res.stderr.startswith("fabricmon: cannot listen on 300.1.1.1:9879: ") and res.stderr.count("\n") == 1


def test_the_units_restart_on_75_and_wait_for_the_network() -> None:
    """Exit 75 is restarted whatever Restart= says, exit 2 is not; the units start once the network is
    online (a management address configured by then), not merely once networking started."""
    for unit in sorted((REPO / "fabricmon" / "deploy" / "systemd").glob("*.service")):
        lines = unit.read_text().splitlines()
        assert "RestartForceExitStatus=75" in lines and "RestartPreventExitStatus=2" in lines, unit.name
        assert "Wants=network-online.target" in lines and "After=network-online.target" in lines, unit.name
        assert "After=network.target" not in lines, unit.name
    cli = " ".join((REPO / "docs" / "cli.md").read_text().split())
    assert "Cannot assign requested address" in cli and "network-online.target" in cli


@pytest.mark.parametrize("command", [("run",), ("fabric", "run")])
def test_a_port_in_use_is_a_restartable_failure_not_a_config_error(tmp_path: Path, command: tuple) -> None:
    """A port another process holds (a previous instance still stopping, a clash): exit 75
    (EX_TEMPFAIL), which the units' RestartPreventExitStatus=2 does not stop systemd from retrying."""
    import socket
    sysfs = tmp_path / "sys"
    sysfs.mkdir()
    with socket.socket() as busy:
        busy.bind(("127.0.0.1", 0))
        busy.listen()
        where = f"127.0.0.1:{busy.getsockname()[1]}"
        extra = {"fabric": {"cache_dir": str(tmp_path / "cache")}} if command[0] == "fabric" else {}
        res = fabricmon(*command, "--listen", where, "--config", write_config(tmp_path, sysfs, **extra), timeout=30)
    assert res.returncode == 75, (res.returncode, res.stderr)
    assert res.stderr.count("\n") == 1, res.stderr
    assert res.stderr.startswith(f"fabricmon: cannot listen on {where}: ") and "in use" in res.stderr, res.stderr
    assert "not a config error" in res.stderr and "retr" in res.stderr, res.stderr
    # what moves it (issue 53, item 7): the option and the config keys
    key = "fabric.port" if command[0] == "fabric" else "server.port"
    assert f"; another address or port: --listen ADDR:PORT, or server.address and {key} in the config (" \
        in res.stderr, res.stderr
    units = sorted((REPO / "fabricmon" / "deploy" / "systemd").glob("*.service"))
    assert units
    for unit in units:
        text = unit.read_text()
        assert "RestartPreventExitStatus=2\n" in text and "Restart=on-failure" in text
        assert "75" in text and "in use" in text, unit.name           # the unit says why 75 is retried
    assert "exit 75" in (REPO / "docs" / "cli.md").read_text()
    runbook = (REPO / "docs" / "runbooks.md").read_text().split("### FabricmonDown\n", 1)[1].split("\n### ", 1)[0]
    assert "Exit 75" in runbook and "Address already in use" in runbook


def test_once_output_refuses_a_directory_that_does_not_exist(tmp_path: Path) -> None:
    sysfs = tmp_path / "sys"
    sysfs.mkdir()
    target = tmp_path / "nonexistent" / "fm.prom"
    res = fabricmon("once", "--config", write_config(tmp_path, sysfs), "--output", str(target))
    assert res.returncode == 2
    assert res.stderr == f"fabricmon: bad --output '{target}': directory {target.parent} does not exist\n"
    assert not target.parent.exists()


# --- check --daemon --------------------------------------------------------------------------

class RunningDaemon:
    """`fabricmon run` as a subprocess on a sysfs tree; stderr (JSON log lines) to a file."""

    def __init__(self, tmp_path: Path, sysfs: Path, sources: dict | None = None, **extra):
        self.port = free_port()
        self.log = tmp_path / "daemon.log"
        cfg = write_config(tmp_path, sysfs, "daemon.yml", logging={"format": "json"},
                           sources={"sysfs": {"interval": 0.2}, **(sources or {})}, **extra)
        self.proc = subprocess.Popen([*exe(), "run", "--config", cfg, "--listen", f"127.0.0.1:{self.port}"],
                                     stdout=subprocess.DEVNULL, stderr=open(self.log, "w"),
                                     env=no_tools_env(tmp_path))
        self.url = f"http://127.0.0.1:{self.port}"

        def up() -> bool:
            assert self.proc.poll() is None, self.lines()
            with urllib.request.urlopen(self.url + "/api/v1/findings", timeout=1) as r:
                return json.loads(r.read())["inventory_known"]
        wait_until(up, 20, "the daemon up", ignore=(OSError,))

    def lines(self) -> list[dict]:
        return [json.loads(ln) for ln in self.log.read_text().splitlines() if ln.startswith("{")]

    def polls(self, n: int) -> None:
        """Waits until n more polls of the sysfs source are in what the daemon serves."""
        def runs() -> float:
            return sample_value(scrape_samples(self.port), "fabricmon_source_runs_total", source="sysfs") or 0
        start = runs()
        wait_until(runs, 20, f"{n} more polls", until=lambda r: r >= start + n)

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()


@pytest.fixture
def node(tmp_path: Path):
    sysfs = sysfs_tree.build(tmp_path / "sys", 2)
    d = RunningDaemon(tmp_path, sysfs, expected_links=[{"device": "mlx5_*", "width": "4X", "speed": "NDR", "count": 2}])
    yield sysfs, d
    d.stop()


def wait_for(pred, timeout: float = 10.0):
    return wait_until(pred, timeout)


def http_status(url: str) -> tuple[int, str]:
    try:
        with urllib.request.urlopen(url, timeout=5) as r:
            return r.status, r.read().decode()
    except urllib.error.HTTPError as e:
        return e.code, e.read().decode()


def test_healthz_is_liveness_and_readyz_readiness(tmp_path: Path, node) -> None:
    """/healthz: the daemon polls (liveness only); /readyz: it has a view to serve (its ports read)."""
    sysfs, d = node
    assert http_status(d.url + "/healthz")[0] == 200
    assert http_status(d.url + "/readyz") == (200, "ready\n")
    from fabricmon.model.snapshot import BuildStats, Snapshot
    from fabricmon.serve.daemon import not_ready
    early = Snapshot(time=0.0, findings=[], sources={}, builds=BuildStats(), inventory_known=False)
    assert not_ready(early) == "the port inventory has not been read yet"
    empty = Snapshot(time=0.0, findings=[], sources={}, builds=BuildStats(), unknown="nothing to check: no port")
    # a node without ports is not ready, as a collector that read no switch is not (one rule: model.health)
    assert not_ready(empty) == "nothing to check: no port"


def test_check_asks_the_daemon_and_answers_in_milliseconds(tmp_path: Path, node) -> None:
    sysfs, d = node
    t0 = time.monotonic()
    res = fabricmon("check", "--daemon", d.url)
    took = time.monotonic() - t0
    assert res.returncode == 0, res.stdout + res.stderr
    assert res.stdout.startswith(f"FABRICMON OK - 0 critical, 0 warning on 2 port(s) (from the daemon at {d.url}, ")
    t0 = time.monotonic()
    doc = healthcheck.fetch_verdict(d.url)
    # the answer is the daemon's cached verdict (stdout above says so): no poll, so well under a
    # second even on a loaded machine (its milliseconds are a benchmark's claim, not this test's)
    assert time.monotonic() - t0 < 1.0
    assert took < 5                                       # the whole process, interpreter start included
    assert doc["ports"] == 2 and doc["status"] == 0 and doc["daemon_healthy"] is True
    assert {"check", "device", "port", "status", "severity", "message"} <= set(doc["findings"][0])
    assert doc["sources"]["ibstat"] == {"enabled": True, "active": False, "up": False, "runs": 0, "errors": []}
    # a finding in the daemon shows in check --daemon, with the exit code
    (sysfs / "class/infiniband/mlx5_1/ports/1/state").write_text("1: DOWN")
    wait_for(lambda: healthcheck.fetch_verdict(d.url)["status"] == 2)
    res = fabricmon("check", "--daemon", d.url)
    assert res.returncode == 2 and "CRITICAL degraded_link: mlx5_1 port 1 is DOWN/LinkUp" in res.stdout


def test_check_falls_back_to_polling_when_the_daemon_does_not_answer(tmp_path: Path) -> None:
    sysfs = sysfs_tree.build(tmp_path / "sys", 1)
    url = f"http://127.0.0.1:{free_port()}"
    res = fabricmon("check", "--no-state", "--daemon", url, "--config", write_config(tmp_path, sysfs),
                    env=no_tools_env(tmp_path))
    assert res.returncode == 0, res.stdout + res.stderr
    assert res.stdout.splitlines()[0].startswith(
        f"FABRICMON OK - 0 critical, 0 warning on 1 port(s) (the daemon at {url} did not answer: ")
    assert res.stdout.splitlines()[0].endswith("; polled locally)")


def test_a_silent_daemon_costs_at_most_the_timeout(tmp_path: Path) -> None:
    import socket
    srv = socket.socket()
    srv.bind(("127.0.0.1", 0))
    srv.listen(1)                                         # accepts, never answers
    try:
        t0 = time.monotonic()
        with pytest.raises(healthcheck.DaemonUnavailable):
            healthcheck.fetch_verdict(f"http://127.0.0.1:{srv.getsockname()[1]}", timeout=0.5)
        assert time.monotonic() - t0 < 2
    finally:
        srv.close()


@pytest.mark.parametrize("field", ["daemon_healthy", "healthy"])     # this build, and an earlier daemon
def test_check_trusts_the_daemon_only_while_it_says_its_snapshot_is_fresh(field: str) -> None:
    """`daemon_healthy` is the daemon's liveness (its snapshot is fresh), apart from the node's status:
    a CRITICAL node with a live daemon is answered from the daemon; a stale daemon is not used."""
    import http.server
    import threading
    doc = {"api_version": 1, "snapshot_time": time.time() - 600, "status": 2, "ports": 1, "inventory_known": True,
           "findings": [{"check": "degraded_link", "device": "mlx5_0", "port": 1, "status": 2,
                         "severity": "CRITICAL", "message": "mlx5_0 port 1 is DOWN"}], "sources": {}}

    class Handler(http.server.BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            body = json.dumps(doc).encode()
            self.send_response(200)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, *args) -> None:
            pass

    srv = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    threading.Thread(target=srv.serve_forever, daemon=True).start()
    url = f"http://127.0.0.1:{srv.server_address[1]}"
    try:
        doc[field] = True
        assert healthcheck.fetch_verdict(url, timeout=5)["status"] == 2
        doc[field] = False
        with pytest.raises(healthcheck.DaemonUnavailable, match=r"last snapshot is 6\d\ds old"):
            healthcheck.fetch_verdict(url, timeout=5)
    finally:
        srv.shutdown()
        srv.server_close()


# --- done when: the journal --------------------------------------------------------------------

def test_the_journal_logs_the_inventory_and_each_finding_appearing_and_clearing_once(tmp_path: Path, node) -> None:
    sysfs, d = node
    lines = d.lines()
    started = [ln for ln in lines if ln["event"] == "fabricmon started"]
    assert started and started[0]["listen"] == f"127.0.0.1:{d.port}"          # the real address
    found = [ln for ln in lines if ln["event"] == "port found"]
    assert [(ln["device"], ln["port"], ln["state"], ln["rate"], ln["counters_from"]) for ln in found] == [
        ("mlx5_0", 1, "ACTIVE/LinkUp", "4X NDR (400 Gb/s)", "sysfs"),
        ("mlx5_1", 1, "ACTIVE/LinkUp", "4X NDR (400 Gb/s)", "sysfs")]
    [src] = [ln for ln in lines if ln["event"] == "sources"]
    assert "sysfs" in src["active"] and "ibstat" in src["not_installed"]
    assert not [ln for ln in lines if ln["event"].startswith("finding")]      # healthy: nothing to say

    state = sysfs / "class/infiniband/mlx5_0/ports/1/state"
    state.write_text("1: DOWN")
    wait_for(lambda: [ln for ln in d.lines() if ln["event"] == "finding"])
    d.polls(5)                                             # five more polls: no repetition
    state.write_text("4: ACTIVE")
    wait_for(lambda: [ln for ln in d.lines() if ln["event"] == "finding cleared"])
    d.polls(3)
    events = [ln for ln in d.lines() if ln["event"].startswith("finding")]
    assert [(e["event"], e["check"], e["device"], e["port"], e["severity"]) for e in events] == [
        ("finding", "degraded_link", "mlx5_0", 1, "CRITICAL"),
        ("finding cleared", "degraded_link", "mlx5_0", 1, "OK")]
    assert events[0]["level"] == "error" and "mlx5_0 port 1 is DOWN/LinkUp" in events[0]["message"]
    assert events[1]["previous"] == "CRITICAL"

    # an adapter vanishing: the port and the inventory finding each leave one line
    shutil.rmtree(sysfs / "class/infiniband/mlx5_1")
    wait_for(lambda: [ln for ln in d.lines() if ln["event"] == "finding" and ln["check"] == "expected_inventory"])
    d.polls(3)                                             # three more polls: no repetition
    lines = d.lines()
    assert [(ln["device"], ln["port"]) for ln in lines if ln["event"] == "port vanished"] == [("mlx5_1", 1)]
    inv = [ln for ln in lines if ln["event"] == "finding" and ln["check"] == "expected_inventory"]
    assert len(inv) == 1 and "missing (seen earlier): mlx5_1 port 1" in inv[0]["message"]


def test_the_state_file_keeps_counters_and_the_ports_seen_and_reads_version_1(tmp_path: Path) -> None:
    from fabricmon.config import from_dict
    from fabricmon.host import LiveIO
    from fabricmon.model.history import CounterHistory
    from fabricmon.pipeline.scheduler import Pipeline
    sysfs = sysfs_tree.build(tmp_path / "sys", 1)
    cfg = from_dict({"paths": {"sysfs": str(sysfs), "tool_dirs": []}})
    pipe = Pipeline(cfg, LiveIO(cfg.sysfs, cfg.procfs, tool_dirs=[]))
    try:
        pipe.collect()
    finally:
        pipe.close()
    path = str(tmp_path / "state.json")
    healthcheck.write_state(path, pipe)
    doc = json.loads(Path(path).read_text())
    assert doc["version"] == 2 and list(doc["ports_seen"]) == ["mlx5_0|1"]
    assert stat.S_IMODE(os.stat(path).st_mode) == 0o600
    history, seen = healthcheck.read_state(path, 3600)
    assert list(seen) == [("mlx5_0", 1)] and history.to_dict() == pipe.history.to_dict()
    old = tmp_path / "v1.json"                        # what earlier versions wrote: the bare history
    old.write_text(pipe.history.to_json())
    history, seen = healthcheck.read_state(str(old), 3600)
    assert seen == {} and history.to_dict() == CounterHistory.from_json(pipe.history.to_json()).to_dict()
