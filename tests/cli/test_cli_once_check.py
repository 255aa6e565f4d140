"""`fabricmon once` and `fabricmon check` as an operator runs them (subprocesses), on our own
sysfs tree and on the real H100 tree from the shared captures."""

from __future__ import annotations

import os
import shutil
import stat
import subprocess
import sys
from pathlib import Path

import pytest
import yaml
from prometheus_client.parser import text_string_to_metric_families

from fabricmon.config import registered
from helpers import CAPTURES, FIXTURES, REPO, as_ordinary_user, fabricmon_command, skip_without_captures

FIXTURE = FIXTURES / "sysfs" / "two_hca"
H100 = CAPTURES / "sysfs" / "leptonai-gpud__sys-class-infiniband-h100.0"
IB = "class/infiniband"
NDR4 = [{"device": "mlx5_*", "width": "4X", "speed": "NDR"}]


def fabricmon(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([*fabricmon_command(), *args], capture_output=True, text=True, timeout=120)


def config(tmp_path: Path, sysfs: Path, name: str = "cfg.yml", sources: dict | None = None, **extra) -> str:
    srcs = {n: {"enabled": False} for n in registered("node") if n not in ("sysfs", "hw_counters")}
    srcs.update(sources or {})
    doc = {"paths": {"sysfs": str(sysfs), "state_dir": str(tmp_path / "state")}, "sources": srcs, **extra}
    f = tmp_path / name
    f.write_text(yaml.safe_dump(doc))
    return str(f)


def samples(text: str) -> dict[tuple[str, tuple], float]:
    out = {}
    for fam in text_string_to_metric_families(text):
        for s in fam.samples:
            out[(s.name, tuple(sorted(s.labels.items())))] = s.value
    return out


def port_values(s: dict, name: str) -> dict[tuple[str, str], float]:
    return {(dict(lbl)["device"], dict(lbl)["port"]): v for (n, lbl), v in s.items() if n == name}


@pytest.fixture
def tree(tmp_path: Path) -> Path:
    root = tmp_path / "sys"
    shutil.copytree(FIXTURE, root, symlinks=True)
    return root


def heal(tree: Path) -> None:
    """Bring mlx5_0 port 2 up at 4X NDR."""
    p = tree / IB / "mlx5_0/ports/2"
    (p / "state").write_text("4: ACTIVE\n")
    (p / "phys_state").write_text("5: LinkUp\n")
    (p / "rate").write_text("400 Gb/sec (4X NDR)\n")


# --- check exit codes ------------------------------------------------------------------------


def test_check_critical_on_a_down_port(tmp_path: Path, tree: Path) -> None:
    res = fabricmon("check", "--no-state", "--config", config(tmp_path, tree, expected_links=NDR4))
    assert res.returncode == 2, res.stdout + res.stderr
    lines = res.stdout.splitlines()
    assert lines[0] == "FABRICMON CRITICAL - 1 critical, 0 warning on 3 port(s)"
    assert lines[1].startswith("CRITICAL degraded_link: mlx5_0 port 2 is DOWN/Polling")
    assert len(lines) == 2                       # only the bad findings without -v


def test_check_warning_when_down_is_a_warning(tmp_path: Path, tree: Path) -> None:
    cfg = config(tmp_path, tree, expected_links=NDR4, checks={"down_severity": "warning"})
    res = fabricmon("check", "--no-state", "--config", cfg)
    assert res.returncode == 1, res.stdout + res.stderr
    assert res.stdout.startswith("FABRICMON WARNING - 0 critical, 1 warning on 3 port(s)")


def test_check_ok_on_a_healthy_tree(tmp_path: Path, tree: Path) -> None:
    heal(tree)
    res = fabricmon("check", "--no-state", "--config", config(tmp_path, tree, expected_links=NDR4))
    assert res.returncode == 0, res.stdout + res.stderr
    assert res.stdout.splitlines() == ["FABRICMON OK - 0 critical, 0 warning on 3 port(s)"]
    verbose = fabricmon("check", "--no-state", "-v", "--config", config(tmp_path, tree, expected_links=NDR4))
    assert verbose.returncode == 0
    assert "OK degraded_link: mlx5_0 port 1 up at 4X NDR" in verbose.stdout
    # every check it could judge on every port, OK included (a rate needs a second sample: on this first poll
    # the counter checks are OK only where their counters never counted)
    assert verbose.stdout.count("OK ") >= 3 * 6


def test_check_degraded_width_is_critical(tmp_path: Path, tree: Path) -> None:
    heal(tree)
    (tree / IB / "mlx5_0/ports/1/rate").write_text("100 Gb/sec (1X NDR)\n")
    res = fabricmon("check", "--no-state", "--config", config(tmp_path, tree, expected_links=NDR4))
    assert res.returncode == 2
    assert "CRITICAL degraded_link: mlx5_0 port 1 runs at 1X NDR (100 Gb/s; expected 4X NDR)" in res.stdout


def test_a_failing_enabled_source_is_a_warning(tmp_path: Path, tree: Path) -> None:
    heal(tree)
    cfg = config(tmp_path, tree, expected_links=NDR4,
                 sources={"ibstat": {"enabled": True, "command": ["/nonexistent/ibstat"]}})
    res = fabricmon("check", "--no-state", "--config", cfg)
    assert res.returncode == 1, res.stdout + res.stderr
    assert "WARNING source: source ibstat:" in res.stdout
    assert "command not found" in res.stdout


def test_check_with_a_bad_config_exits_3_unknown_naming_the_key(tmp_path: Path) -> None:
    f = tmp_path / "bad.yml"
    f.write_text("checks:\n  down_severty: warning\n")
    res = fabricmon("check", "--no-state", "--config", str(f))
    assert res.returncode == 3, res.stdout + res.stderr       # UNKNOWN: could not check, never CRITICAL
    assert res.stdout.splitlines() == ["FABRICMON UNKNOWN - config error at checks.down_severty: unknown key "
                                       "(did you mean 'down_severity'?)"]
    assert "checks.down_severty" in res.stderr and "did you mean 'down_severity'" in res.stderr
    assert "Traceback" not in res.stderr
    # run and once keep exit 2 for a config error
    for cmd in ("once", "run"):
        other = fabricmon(cmd, "--config", str(f))
        assert other.returncode == 2 and "checks.down_severty" in other.stderr, cmd


def test_check_state_file_carries_rates_between_runs(tmp_path: Path, tree: Path) -> None:
    heal(tree)
    cfg = config(tmp_path, tree, expected_links=NDR4)
    state = tmp_path / "state" / "check.json"
    first = fabricmon("check", "--state", str(state), "--config", cfg)
    assert first.returncode == 0, first.stdout + first.stderr
    assert state.is_file()
    (tree / IB / "mlx5_0/ports/1/counters/link_downed").write_text("1\n")       # a flap
    second = fabricmon("check", "--state", str(state), "--config", cfg)
    assert second.returncode == 1, second.stdout + second.stderr
    assert "WARNING link_flap: mlx5_0 port 1: link_downed rose by 1" in second.stdout
    # without the state, a single poll cannot see the flap
    assert fabricmon("check", "--no-state", "--config", cfg).returncode == 0


def test_unreadable_phys_state_costs_only_that_value(tmp_path: Path, tree: Path) -> None:
    heal(tree)
    f = tree / IB / "mlx5_0/ports/1/phys_state"
    f.unlink()
    f.mkdir()
    res = fabricmon("check", "--no-state", "--config", config(tmp_path, tree, expected_links=NDR4))
    assert "degraded_link" not in res.stdout, res.stdout
    assert res.returncode == 1                      # the read error itself is a WARNING


# --- once ---------------------------------------------------------------------------------------


def test_once_output_file_is_written_atomically_and_readable(tmp_path: Path, tree: Path) -> None:
    out = tmp_path / "textfile" / "fabricmon.prom"
    out.parent.mkdir()
    res = fabricmon("once", "--config", config(tmp_path, tree), "--output", str(out))
    assert res.returncode == 0, res.stderr
    assert res.stdout == ""
    assert stat.S_IMODE(out.stat().st_mode) == 0o644
    assert os.listdir(out.parent) == ["fabricmon.prom"]          # no temp file left
    s = samples(out.read_text())
    assert port_values(s, "fabricmon_ib_port_up") == {("mlx5_0", "1"): 1, ("mlx5_0", "2"): 0,
                                                       ("mlx5_1", "1"): 1}


def test_once_without_any_rdma_device(tmp_path: Path) -> None:
    empty = tmp_path / "sys"
    empty.mkdir()
    res = fabricmon("once", "--config", config(tmp_path, empty))
    assert res.returncode == 0, res.stderr
    s = samples(res.stdout)
    assert port_values(s, "fabricmon_ib_port_up") == {}
    assert s[("fabricmon_source_up", (("source", "sysfs"),))] == 1
    # nothing to check: `once` exports what `check` answers, UNKNOWN (3), never OK
    assert s[("fabricmon_health_status", ())] == 3
    check = fabricmon("check", "--config", config(tmp_path, empty))
    assert check.returncode == 3 and check.stdout.startswith("FABRICMON UNKNOWN - nothing to check: "), check.stdout
    # with something to expect there is something to check: the missing port is CRITICAL in both
    cfg = config(tmp_path, empty, "expect.yml", expected_links=NDR4)
    assert samples(fabricmon("once", "--config", cfg).stdout)[("fabricmon_health_status", ())] == 2
    assert fabricmon("check", "--config", cfg).returncode == 2
    doc = (REPO / "docs" / "metrics.md").read_text()
    [row] = [ln for ln in doc.splitlines() if ln.startswith("| `fabricmon_health_status` |")]
    assert "3 UNKNOWN" in row and "nothing to check" in row, row


# --- one health rule (issue 36.2) -------------------------------------------------------------

BAD_IBSTAT = {"ibstat": {"enabled": True, "command": ["/nonexistent/ibstat"]}}
HEALTH_STATES = {          # state -> (heal the tree?, empty sysfs?, config extras, the verdict)
    "ok": (True, False, {"expected_links": NDR4}, 0),
    "warning": (False, False, {"expected_links": NDR4, "checks": {"down_severity": "warning"}}, 1),
    "critical": (False, False, {"expected_links": NDR4}, 2),
    "failing source": (True, False, {"expected_links": NDR4, "sources": BAD_IBSTAT}, 1),
    "failing source and critical": (False, False, {"expected_links": NDR4, "sources": BAD_IBSTAT}, 2),
    "nothing to check": (False, True, {}, 3),
    "nothing to check and a failing source": (False, True, {"sources": BAD_IBSTAT}, 3),
}


@pytest.mark.parametrize("state", HEALTH_STATES)
def test_health_status_is_what_check_exits_with(tmp_path: Path, tree: Path, state: str) -> None:
    """fabricmon_health_status, `check`'s exit code and the JSON verdict's status are one rule
    (model.health): they agree in every state, a failing source included (the metric said OK there)."""
    healed, empty, extra, want = HEALTH_STATES[state]
    if healed:
        heal(tree)
    sysfs = tmp_path / "empty" if empty else tree
    sysfs.mkdir(exist_ok=True)
    cfg = config(tmp_path, sysfs, **extra)
    once = fabricmon("once", "--config", cfg)
    assert once.returncode == 0, once.stderr
    check = fabricmon("check", "--no-state", "--config", cfg)
    assert samples(once.stdout)[("fabricmon_health_status", ())] == check.returncode == want, \
        (state, check.stdout)


# --- the real H100 node ----------------------------------------------------------------------


@pytest.fixture
def h100(tmp_path: Path) -> Path:
    skip_without_captures(H100)
    sysfs = tmp_path / "sys"
    (sysfs / "class").mkdir(parents=True)
    (sysfs / "class" / "infiniband").symlink_to(H100)
    return sysfs


H100_EXPECT = [{"device": "mlx5_[0-9]", "width": "4X", "speed": "NDR"}]


def test_h100_once(tmp_path: Path, h100: Path) -> None:
    res = fabricmon("once", "--config", config(tmp_path, h100, expected_links=H100_EXPECT))
    assert res.returncode == 0, res.stderr
    s = samples(res.stdout)
    up = port_values(s, "fabricmon_ib_port_up")
    rate = port_values(s, "fabricmon_ib_port_rate_bytes_per_second")
    info = {(dict(l)["device"], dict(l)["port"]): dict(l) for (n, l), _ in s.items()
            if n == "fabricmon_ib_port_info"}
    ib = {k for k, v in info.items() if v["link_layer"] == "InfiniBand"}
    assert ib == {(f"mlx5_{i}", "1") for i in (0, 1, 4, 5, 6, 7, 8, 9)}
    assert all(up[k] == 1 and rate[k] == 50e9 for k in ib)
    assert info[("mlx5_bond_0", "1")]["link_layer"] == "Ethernet"
    assert up[("mlx5_bond_0", "1")] == 1 and rate[("mlx5_bond_0", "1")] == 25e9
    assert info[("mlx5_bond_0", "1")]["hca_type"] == "MT41692"
    expected = port_values(s, "fabricmon_ib_port_expected_rate_bytes_per_second")
    assert expected == {k: 50e9 for k in ib}                   # the bond is not judged as IB
    degraded = [(n, l) for (n, l), v in s.items() if n == "fabricmon_ib_port_degraded" and v != 0]
    assert degraded == []
    assert port_values(s, "fabricmon_ib_port_transmit_bytes_total")[("mlx5_0", "1")] == 230442669431839 * 4
    # excessive_buffer_overrun_errors reads 15 on this node: a saturated 4-bit counter
    sat = {(dict(l)["device"], dict(l)["counter"]) for (n, l), v in s.items()
           if n == "fabricmon_ib_port_saturated" and v == 1}
    want = set()
    for dev in H100.iterdir():
        for fname, name in (("excessive_buffer_overrun_errors", "excessive_buffer_overrun_errors"),
                            ("link_downed", "link_downed"), ("symbol_error", "symbol_errors")):
            raw = int((dev / "ports/1/counters" / fname).read_text())
            if raw >= {"excessive_buffer_overrun_errors": 15, "link_downed": 255, "symbol_errors": 65535}[name]:
                want.add((dev.name, name))
    assert sat == want
    assert ("mlx5_0", "excessive_buffer_overrun_errors") in sat
    assert s[("fabricmon_source_errors_total", (("kind", "read"), ("source", "sysfs")))] == 0
    assert s[("fabricmon_source_errors_total", (("kind", "parse"), ("source", "sysfs")))] == 0


def test_h100_check_has_no_false_finding(tmp_path: Path, h100: Path) -> None:
    res = fabricmon("check", "--no-state", "--config", config(tmp_path, h100, expected_links=H100_EXPECT))
    assert res.returncode == 0, res.stdout + res.stderr
    assert res.stdout.splitlines() == ["FABRICMON OK - 0 critical, 0 warning on 9 port(s)"]


def test_h100_check_catches_a_wrong_expectation(tmp_path: Path, h100: Path) -> None:
    """The same node against an XDR expectation: every IB port is flagged, the bond is not."""
    cfg = config(tmp_path, h100, expected_links=[{"device": "mlx5_*", "width": "4X", "speed": "XDR"}])
    res = fabricmon("check", "--no-state", "--config", cfg)
    assert res.returncode == 2
    bad = [ln for ln in res.stdout.splitlines()[1:]]
    assert len(bad) == 8 and all("too slow a speed" in ln for ln in bad)
    assert not any("mlx5_bond_0" in ln for ln in bad)


# --- the command sources, with fake tools replaying our fixtures --------------------------------


FAKE_TOOL = '''
import sys
from pathlib import Path
fx = Path(sys.argv[1])
tool, args = sys.argv[2], sys.argv[3:]
def out(rel, rc=0):
    text = (fx / rel).read_text()
    (sys.stdout if rc == 0 else sys.stderr).write(text)
    sys.exit(rc)
if tool == "ibstat":
    sys.stdout.write((fx / "ibstat/partial_ibpanic.txt").read_text().replace(
        "ibpanic:", "").rsplit("\\n", 2)[0] + "\\n")
    sys.stdout.write((fx / "ibstat/four_cas_mixed.txt").read_text().split("CA 'mlx5_1'")[0].replace(
        "mlx5_0", "mlx5_5"))
    sys.stderr.write("ibpanic: [1] main: stat of IB device 'mlx5_9' failed: No such file or directory\\n")
    sys.exit(255)
dev = args[args.index("-C") + 1]
if tool == "perfquery":
    if dev != "mlx5_5":
        out("perfquery/error_no_ca.txt", 255)
    out("perfquery/extended.txt" if "-x" in args else "perfquery/basic.txt")
if tool == "iblinkinfo":
    if dev == "mlx5_5":
        out("iblinkinfo/ca_ndr_1x_could_be_4x.txt")
    out("iblinkinfo/error_no_sm.txt", 255)
'''


def test_command_sources_end_to_end(tmp_path: Path) -> None:
    """No sysfs at all (as under the simulator): ibstat gives the ports even though it exits 255
    after an ibpanic, perfquery the counters (64-bit data from -x), iblinkinfo the width."""
    fake = tmp_path / "fake_tool.py"
    fake.write_text(FAKE_TOOL)
    fx = FIXTURES
    empty = tmp_path / "sys"
    empty.mkdir()

    def cmd(tool: str) -> dict:
        return {"enabled": True, "command": [sys.executable, str(fake), str(fx), tool]}

    cfg = config(tmp_path, empty, sources={"ibstat": cmd("ibstat"), "perfquery": cmd("perfquery"),
                                           "iblinkinfo": cmd("iblinkinfo")})
    res = fabricmon("once", "--config", cfg)
    assert res.returncode == 0, res.stderr
    s = samples(res.stdout)
    up = port_values(s, "fabricmon_ib_port_up")
    assert up == {("mlx5_0", "1"): 1, ("mlx5_1", "1"): 1, ("mlx5_5", "1"): 1}   # partial output kept
    assert s[("fabricmon_source_up", (("source", "ibstat"),))] == 1
    assert s[("fabricmon_source_errors_total", (("kind", "exit_code"), ("source", "ibstat")))] == 1
    # mlx5_5: ibstat says 400, but PortInfo (iblinkinfo) says 1X NDR that could be 4X
    assert port_values(s, "fabricmon_ib_port_link_width_lanes")[("mlx5_5", "1")] == 1
    assert port_values(s, "fabricmon_ib_port_rate_bytes_per_second")[("mlx5_5", "1")] == 1.25e+10
    assert port_values(s, "fabricmon_ib_port_supported_link_width_lanes")[("mlx5_5", "1")] == 4
    assert s[("fabricmon_ib_port_degraded", (("device", "mlx5_5"), ("port", "1"), ("reason", "width")))] == 1
    # counters: errors from the basic query, data from -x (64-bit), bytes = words x 4
    assert port_values(s, "fabricmon_ib_port_symbol_errors_total")[("mlx5_5", "1")] == 17
    assert port_values(s, "fabricmon_ib_port_transmit_bytes_total")[("mlx5_5", "1")] == 98765432109876 * 4
    assert port_values(s, "fabricmon_ib_port_transmit_wait_total")[("mlx5_5", "1")] == 424242
    # the ports whose tools failed are still there, with their state, and without counters
    assert ("mlx5_0", "1") not in port_values(s, "fabricmon_ib_port_symbol_errors_total")
    assert s[("fabricmon_source_errors_total", (("kind", "exit_code"), ("source", "perfquery")))] == 4
    assert s[("fabricmon_source_errors_total", (("kind", "exit_code"), ("source", "iblinkinfo")))] == 2
    chk = fabricmon("check", "--no-state", "--config", cfg)
    assert chk.returncode == 2
    assert "CRITICAL degraded_link: mlx5_5 port 1 runs at 1X NDR" in chk.stdout
    assert "WARNING source: source ibstat:" in chk.stdout


def test_ports_other_than_1_and_excluded_devices(tmp_path: Path, tree: Path) -> None:
    """ConnectX-8 numbers its ports 3/6/9/12; an excluded device vanishes entirely."""
    ports = tree / IB / "mlx5_0/ports"
    (ports / "1").rename(ports / "3")
    (ports / "2").rename(ports / "12")
    res = fabricmon("once", "--config", config(tmp_path, tree, exclude_devices=["mlx5_1"]))
    assert res.returncode == 0, res.stderr
    s = samples(res.stdout)
    assert port_values(s, "fabricmon_ib_port_up") == {("mlx5_0", "3"): 1, ("mlx5_0", "12"): 0}
    assert not any(dict(l).get("device") == "mlx5_1" for _, l in s)


# --- check as an ordinary user: its state goes to a user state path, silently --------------------

def as_nobody(args: list[str], home: str) -> subprocess.CompletedProcess:
    """fabricmon as an ordinary user, with `home` as its HOME and no XDG_* variables."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("XDG_")}
    env.update(HOME=home, PYTHONDONTWRITEBYTECODE="1")
    return as_ordinary_user(args, env, timeout=120)


@pytest.fixture
def user_tree():
    """Under /tmp (pytest's tmp_path is 0700 root's): a state_dir the user cannot write (root's 0755,
    or ours at 0555), the user's own writable home, a home it cannot write, and an empty sysfs."""
    import tempfile
    d = Path(tempfile.mkdtemp(prefix="fabricmon-user-check-"))
    d.chmod(0o755)
    for sub in ("state", "home", "nohome", "sys"):
        (d / sub).mkdir()
    (d / "state").chmod(0o755 if os.geteuid() == 0 else 0o555)
    (d / "nohome").chmod(0o555)
    if os.geteuid() == 0:
        os.chown(d / "home", 65534, 65534)
    try:
        yield d
    finally:
        (d / "state").chmod(0o755)
        (d / "nohome").chmod(0o755)
        shutil.rmtree(d)


def test_check_as_an_ordinary_user_keeps_its_state_in_the_user_state_dir_silently(user_tree: Path) -> None:
    cfg = user_tree / "cfg.yml"
    # the kernel log is not what this is about: an ordinary user may not read it under kernel.dmesg_restrict=1,
    # and says so, a source error on stderr (tests/deployed/)
    cfg.write_text(yaml.safe_dump({"paths": {"sysfs": str(user_tree / "sys"), "state_dir": str(user_tree / "state")},
                                   "expected_links": NDR4, "sources": {"kernel_log": {"enabled": False}}}))
    cfg.chmod(0o644)
    res = as_nobody(["check", "--config", str(cfg)], str(user_tree / "home"))
    assert res.returncode == 2 and res.stdout.startswith("FABRICMON CRITICAL"), res.stdout + res.stderr
    assert res.stderr == "", res.stderr                       # no JSON warning about check-state.json
    assert (user_tree / "home" / ".local" / "state" / "fabricmon" / "check-state.json").is_file()
    assert list((user_tree / "state").iterdir()) == []
    # no writable home either: one plain line, never JSON, and the verdict all the same
    res = as_nobody(["check", "--config", str(cfg)], str(user_tree / "nohome"))
    assert res.returncode == 2 and res.stdout.startswith("FABRICMON CRITICAL"), res.stdout + res.stderr
    assert res.stderr.count("\n") == 1 and res.stderr.startswith("fabricmon: note: "), res.stderr
    assert "--sample-window" in res.stderr and "{" not in res.stderr, res.stderr
