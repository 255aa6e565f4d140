"""Tools that are not installed are not failures: an `enabled: auto` tool source whose program
is found neither on PATH nor in paths.tool_dirs is quietly off (no run, no error, active 0);
an explicitly enabled one stays a WARNING; tools in /usr/sbin-like dirs are found off PATH."""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path

from fabricmon.config import from_dict
from fabricmon.exporter import render
from fabricmon.host import LiveIO, RecordingIO, ReplayIO
from fabricmon.host.runner import DEFAULT_TOOL_DIRS, resolve_program
from fabricmon.pipeline.scheduler import Pipeline
from fabricmon.sim import sysfs_tree
from helpers import FIXTURES

TOOLS = ("ibstat", "perfquery", "iblinkinfo", "mlnx_qos", "ethtool")


def _tool(d: Path, name: str, body: str = "print('ok')") -> Path:
    d.mkdir(parents=True, exist_ok=True)
    f = d / name
    f.write_text(f"#!{sys.executable}\n{body}\n")
    f.chmod(0o755)
    return f


def test_default_tool_dirs_are_the_sbin_dirs() -> None:
    assert "/usr/sbin" in DEFAULT_TOOL_DIRS and "/sbin" in DEFAULT_TOOL_DIRS


def test_resolve_looks_in_path_then_the_tool_dirs(tmp_path: Path) -> None:
    sbin, onpath, empty = tmp_path / "sbin", tmp_path / "bin", tmp_path / "empty"
    empty.mkdir()
    in_sbin = _tool(sbin, "ibstat")
    assert resolve_program("ibstat", str(empty), [str(sbin)]) == str(in_sbin)
    first = _tool(onpath, "ibstat")
    assert resolve_program("ibstat", str(onpath), [str(sbin)]) == str(first)     # PATH wins
    assert resolve_program("ibstat", str(empty), []) is None
    assert resolve_program(str(in_sbin), str(empty), []) == str(in_sbin)        # a path is kept
    assert resolve_program(str(tmp_path / "nope"), str(empty), []) is None
    (sbin / "notexec").write_text("x")
    assert resolve_program("notexec", str(empty), [str(sbin)]) is None


def test_liveio_runs_a_tool_found_in_a_tool_dir_with_argv_unchanged(tmp_path: Path) -> None:
    sbin = tmp_path / "sbin"
    _tool(sbin, "faketool", "import sys; print(' '.join(sys.argv[1:]))")
    io = LiveIO(str(tmp_path), str(tmp_path), env={"PATH": str(tmp_path / "empty")}, tool_dirs=[str(sbin)])
    res = io.run(["faketool", "-C", "mlx5_0"], 5)
    assert res.ok and res.stdout.strip() == "-C mlx5_0"
    assert res.argv == ("faketool", "-C", "mlx5_0")        # recorded as configured, replayable
    miss = io.run(["othertool"], 5)
    assert miss.error == "not_found" and miss.describe() == "othertool: command not found"


def _config(tmp_path: Path, sbin: Path, **sources: dict) -> object:
    srcs = {n: {"enabled": False} for n in ("netdev", "gpudirect", "gpu", "kernel_log")}
    srcs.update(sources)
    return from_dict({"paths": {"sysfs": str(tmp_path / "sys"), "tool_dirs": [str(sbin)]}, "sources": srcs})


def _pipe(tmp_path: Path, sbin: Path, **sources: dict) -> Pipeline:
    sysfs_tree.build(tmp_path / "sys", 2)
    cfg = _config(tmp_path, sbin, **sources)
    return Pipeline(cfg, LiveIO(cfg.sysfs, cfg.procfs, env={"PATH": str(tmp_path / "empty")},
                                tool_dirs=cfg.tool_dirs))


def test_auto_tools_that_are_missing_are_quietly_off(tmp_path: Path) -> None:
    pipe = _pipe(tmp_path, tmp_path / "empty-sbin")
    try:
        assert pipe.active() == ["sysfs", "hw_counters", "port_state", "pcie"]
        snap = pipe.collect()
    finally:
        pipe.close()
    for name in TOOLS:
        s = snap.sources[name]
        assert s.enabled and not s.active and not s.ran and s.runs == 0, name
        assert sum(s.errors_total.values()) == 0 and not s.active_errors, name
    assert len(snap.ib.ports) == 2
    text = render(snap).decode()
    assert 'fabricmon_source_active{source="ibstat"} 0' in text
    assert 'fabricmon_source_active{source="sysfs"} 1' in text
    assert 'fabricmon_source_enabled{source="ibstat"} 1' in text
    assert 'fabricmon_source_up{source="ibstat"}' not in text      # no "down" source to alert on


def test_an_explicitly_enabled_missing_tool_is_an_error(tmp_path: Path) -> None:
    pipe = _pipe(tmp_path, tmp_path / "empty-sbin", ibstat={"enabled": True})
    try:
        snap = pipe.collect()
    finally:
        pipe.close()
    s = snap.sources["ibstat"]
    assert s.enabled and not s.active and s.ran and not s.up
    assert s.errors_total["not_found"] == 1
    assert any("command not found" in e for e in s.active_errors)


def test_a_tool_in_a_tool_dir_is_used(tmp_path: Path) -> None:
    ibstat = (FIXTURES / "ibstat" / "four_cas_mixed.txt").read_text()
    sbin = tmp_path / "sbin"
    _tool(sbin, "ibstat", f"import sys; sys.stdout.write({ibstat!r})")
    pipe = _pipe(tmp_path, sbin)
    try:
        assert "ibstat" in pipe.active() and "perfquery" not in pipe.active()
        snap = pipe.collect()
    finally:
        pipe.close()
    s = snap.sources["ibstat"]
    assert s.active and s.up and s.program == str(sbin / "ibstat")
    assert sum(s.errors_total.values()) == 0


def test_a_tool_installed_later_is_picked_up(tmp_path: Path, monkeypatch) -> None:
    monkeypatch.setattr(LiveIO, "MISSING_RECHECK", 0.0)
    sbin = tmp_path / "sbin"
    pipe = _pipe(tmp_path, sbin)
    try:
        assert not pipe.collect().sources["ibstat"].active
        _tool(sbin, "ibstat", "print('')")
        snap = pipe.collect()
        assert snap.sources["ibstat"].active and snap.sources["ibstat"].ran
    finally:
        pipe.close()


def test_replay_knows_which_tools_the_recorded_host_had(tmp_path: Path) -> None:
    sysfs_tree.build(tmp_path / "sys", 1)
    cfg = _config(tmp_path, tmp_path / "empty-sbin")
    rec = RecordingIO(LiveIO(cfg.sysfs, cfg.procfs, env={"PATH": str(tmp_path / "empty")},
                             tool_dirs=cfg.tool_dirs), tmp_path / "bundle")
    pipe = Pipeline(cfg, rec)
    try:
        pipe.collect()
    finally:
        pipe.close()
    rec.save()
    manifest = json.loads((tmp_path / "bundle" / "bundle.json").read_text())
    assert manifest["programs"]["ibstat"] is None
    replay = Pipeline(cfg, ReplayIO(tmp_path / "bundle"))
    try:
        snap = replay.collect()
    finally:
        replay.close()
    assert not snap.sources["ibstat"].active and snap.sources["ibstat"].runs == 0
    # a bundle without that record: missing only where every recorded run was "not found"
    del manifest["programs"]
    manifest["commands"] = [{"argv": ["ibstat"], "returncode": None, "stdout": "", "stderr": "",
                             "duration": 0, "error": "not_found"}]
    (tmp_path / "bundle" / "bundle.json").write_text(json.dumps(manifest))
    io = ReplayIO(tmp_path / "bundle")
    assert io.which("ibstat") is None and io.which("perfquery") == "perfquery"
    assert os.path.isdir(tmp_path / "bundle")
