"""The parts remediation keeps on the host, on real files and real processes: the action record (atomic, read
back whole after a restart, ids never reused, a broken entry costing only itself), the lease (an flock: of two
holders one acts; released when its holder exits, however it exits), `undo` requests, the Ethernet command run
through HostIO (argv, no shell, its placeholders), and config errors that name their key."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap

import pytest

from fabricmon.config import ConfigError, from_dict
from fabricmon.host import LiveIO
from fabricmon.model.remediation import Action
from fabricmon.remediation.actuators import EthernetPorts, Slurm
from fabricmon.remediation.lease import FileLease, SingleHolder, make_lease
from fabricmon.remediation.record import Record, daemon_running, read_answer, record_path, request_undo
from fabricmon.remediation.settings import LeaseSettings


def act(i: int, **kw) -> Action:
    base = dict(id=f"p{i}", kind="isolate_port", target=f"00000000002000{i:02d}:3", label=f"leaf{i} port 3",
                mode="act", state="done", reason="CRITICAL symbol_errors", check="symbol_errors", window=60.0,
                created=float(i), updated=float(i), effective=float(i), clean_since=float(i), guid=f"00000000002000{i:02d}",
                port=3, baseline=(("x:3:symbol_errors", 5000),))
    return Action(**{**base, **kw})


def test_the_record_survives_a_restart_whole_and_never_reuses_an_id(tmp_path) -> None:
    path = record_path(str(tmp_path), "fabric")
    r = Record(path)
    assert r.new_id("isolate_port") == "p1" and r.new_id("drain_node") == "n1"
    r.replace_all({"p1": act(1), "p2": act(2, state="returned", closed=9.0)})
    r.save()
    back = Record(path)
    assert back.actions == r.actions and back.actions["p1"].baseline == (("x:3:symbol_errors", 5000),)
    assert back.new_id("isolate_port") == "p3"              # after p2, never p1 again
    assert oct(os.stat(path).st_mode & 0o777) == "0o640"
    assert record_path(str(tmp_path / "missing"), "node") is None      # no state dir: in memory


def test_a_broken_entry_costs_only_itself(tmp_path) -> None:
    import dataclasses
    path = record_path(str(tmp_path), "node")
    good = json.loads(json.dumps(dataclasses.asdict(act(4))))        # as the file keeps it (lists for tuples)
    open(path, "w").write(json.dumps({"version": 1, "actions": [
        {"id": "p7", "kind": "isolate_port", "state": "nonsense"}, {"id": "p8", "bogus": 1}, good]}))
    r = Record(path)
    assert list(r.actions) == ["p4"] and r.actions["p4"] == act(4) and r.new_id("isolate_port") == "p5"
    open(path, "w").write("{not json")
    r = Record(path)
    assert r.actions == {} and "cannot read" in r.error


def test_the_file_lease_one_holder_and_released_when_it_exits_however(tmp_path) -> None:
    lease = str(tmp_path / "remediation.lease")
    a, b = FileLease(lease), FileLease(lease)
    assert a.hold()[0] and not b.hold()[0]
    assert f"pid {os.getpid()}" in b.hold()[1]
    a.release()
    assert b.hold()[0] and not a.hold()[0]
    b.release()
    # a holder in another process, killed: the kernel releases its flock
    code = textwrap.dedent(f"""
        import sys, time
        sys.path.insert(0, {str(os.getcwd())!r})
        from fabricmon.remediation.lease import FileLease
        assert FileLease({lease!r}).hold()[0]
        print("held", flush=True)
        time.sleep(60)
    """)
    p = subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.PIPE, text=True)
    try:
        assert p.stdout.readline().strip() == "held"
        c = FileLease(lease)
        held, why = c.hold()
        assert not held and f"pid {p.pid}" in why
        p.kill()
        p.wait(10)
        assert c.hold()[0]
    finally:
        if p.poll() is None:
            p.kill()
            p.wait()
    assert isinstance(make_lease(LeaseSettings(), str(tmp_path), "fabric"), SingleHolder)
    assert isinstance(make_lease(LeaseSettings("file"), str(tmp_path), "fabric"), FileLease)
    assert isinstance(make_lease(LeaseSettings("file"), str(tmp_path), "node"), SingleHolder)


def test_undo_requests_and_the_daemon_lock(tmp_path) -> None:
    path = record_path(str(tmp_path), "fabric")
    r = Record(path)
    assert not daemon_running(path)
    assert r.lock() and daemon_running(path)
    answer = request_undo(path, "p3")
    assert r.requests() == ["p3"]
    r.answer("p3", True, "p3 leaf01: undone")
    assert read_answer(answer) == (True, "p3 leaf01: undone") and r.requests() == []
    r.unlock()
    assert not daemon_running(path)


def test_the_ethernet_command_runs_as_argv_through_hostio(tmp_path) -> None:
    out = tmp_path / "argv.json"
    script = tmp_path / "switch-port"
    script.write_text(f"#!{sys.executable}\nimport json, sys\nopen({str(out)!r}, 'w').write(json.dumps(sys.argv[1:]))\n")
    script.chmod(0o755)
    cfg = from_dict({"remediation": {"isolate_port": {"mode": "act", "ethernet": [
        {"switch": "rleaf*", "disable": [str(script), "{switch}", "{address}", "interface {port}", "shutdown"],
         "enable": [str(script), "{switch}", "interface {port}", "no shutdown"]}]}}}, check_paths=False)
    ports = EthernetPorts(LiveIO(), cfg.remediation.isolate_port)
    a = act(1, switch="rleaf01", guid="44:38:39:00:00:11", address="10.0.0.11:161", port_name="Ethernet4; rm -rf /",
            port=4)
    got = ports.set(a, disable=True)
    assert got.ok, got
    assert json.loads(out.read_text()) == ["rleaf01", "10.0.0.11:161", "interface Ethernet4; rm -rf /", "shutdown"]
    assert ports.set(a, disable=False).ok and json.loads(out.read_text())[-1] == "no shutdown"
    other = ports.set(act(2, switch="spine01"), disable=True)
    assert not other.ok and "no isolate_port.ethernet command for switch spine01" in other.detail


def test_slurm_unreadable_is_said_and_an_unsafe_node_name_refused(tmp_path) -> None:
    cfg = from_dict({"remediation": {"drain_node": {"sinfo": str(tmp_path / "no-sinfo")}}}, check_paths=False)
    s = Slurm(LiveIO(), cfg.remediation.drain_node)
    assert "command not found" in s.view()
    assert not s.drain("node01; reboot", "fabricmon: x").ok


@pytest.mark.parametrize("doc, key", [
    ({"isolate_port": {"mode": "on"}}, "remediation.isolate_port.mode"),
    ({"drain_node": {"max_fraction": 1.5}}, "remediation.drain_node.max_fraction"),
    ({"exclude": [{"port": "leaf01:3", "node": "n1"}]}, "remediation.exclude[0]"),
    ({"exclude": [{"node": "n1", "until": "tomorrow"}]}, "remediation.exclude[0].until"),
    ({"isolate_port": {"ethernet": [{"switch": "x", "disable": "shutdown", "enable": ["y"]}]}},
     "remediation.isolate_port.ethernet[0].disable"),
    ({"drain_node": {"scontrol": "-x"}}, "remediation.drain_node.scontrol"),
    ({"lease": {"kind": "etcd"}}, "remediation.lease.kind"),
    ({"isolate_port": {"classes": ["fatal", "bad"]}}, "remediation.isolate_port.classes[1]"),
])
def test_a_config_error_names_the_key(doc, key) -> None:
    with pytest.raises(ConfigError) as e:
        from_dict({"remediation": doc}, check_paths=False)
    assert e.value.key == key, e.value


def test_yaml_off_is_off() -> None:
    import yaml
    cfg = from_dict(yaml.safe_load("remediation: {isolate_port: {mode: off}, drain_node: {mode: dry_run}}"),
                    check_paths=False)
    assert (cfg.remediation.isolate_port.mode, cfg.remediation.drain_node.mode) == ("off", "dry_run")
