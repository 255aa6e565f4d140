"""From a built wheel alone, one command installs a node: build the wheel from a clean copy of the
source, install it into a fresh venv, and run that venv's `fabricmon install --root` into a temporary
root. Every file is there, ExecStart is that venv's fabricmon, `systemd-analyze verify` passes on the
units it wrote, systemd-sysusers reads the user and groups the units run as from the file it wrote, a second run keeps an edited config, uninstall removes what install added, and the
rules `install --print` hands out pass their own promtool tests."""

from __future__ import annotations

import shutil
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

from ship_helpers import ROOT, require_tool

SOURCE = ("pyproject.toml", "README.md", "LICENSE")
UNITS = ("fabricmon.service", "fabricmon-fabric.service")


def run(argv: list, **kw) -> subprocess.CompletedProcess:
    res = subprocess.run([str(a) for a in argv], capture_output=True, text=True, timeout=600, **kw)
    assert res.returncode == 0, f"{argv}:\n{res.stdout[-3000:]}\n{res.stderr[-3000:]}"
    return res


@pytest.fixture(scope="module")
def wheel(tmp_path_factory) -> Path:
    """The wheel, built the way an operator's CI would (pip wheel, build isolation) from a clean copy."""
    src = tmp_path_factory.mktemp("src")
    for name in SOURCE:
        shutil.copy(ROOT / name, src / name)
    shutil.copytree(ROOT / "fabricmon", src / "fabricmon", ignore=shutil.ignore_patterns("__pycache__"))
    out = tmp_path_factory.mktemp("dist")
    res = run([sys.executable, "-m", "pip", "wheel", "--no-deps", "-w", out, src])
    assert "BuildBackendWarning" not in res.stderr and "SetuptoolsDeprecationWarning" not in res.stderr, res.stderr
    return next(out.glob("fabricmon-*.whl"))


@pytest.fixture(scope="module")
def venv(wheel: Path, tmp_path_factory) -> Path:
    v = tmp_path_factory.mktemp("opt") / "fabricmon"
    python = shutil.which("python3") or sys.executable
    run([python, "-m", "venv", v])
    run([v / "bin" / "pip", "install", "-q", wheel])
    return v


def test_the_wheel_carries_every_deploy_file(wheel: Path) -> None:
    names = set(zipfile.ZipFile(wheel).namelist())
    shipped = {str(p.relative_to(ROOT)) for p in (ROOT / "fabricmon" / "deploy").rglob("*")
               if p.is_file() and "__pycache__" not in p.parts}
    assert {"fabricmon/deploy/systemd/fabricmon.service", "fabricmon/deploy/udev/90-fabricmon-umad.rules",
            "fabricmon/deploy/prometheus/fabricmon.rules.yml", "fabricmon/deploy/grafana/fabricmon-node.json",
            "fabricmon/deploy/slurm/fabricmon-healthcheck.sh", "fabricmon/deploy/nhc/fabricmon.nhc",
            "fabricmon/deploy/fabricmon.yml"} <= shipped
    assert shipped <= names, sorted(shipped - names)
    assert "fabricmon/pages/runbooks.md" in names, "the runbooks every runbook_url opens (/runbooks)"
    assert any(n.endswith(".dist-info/licenses/LICENSE") for n in names), "LICENSE is not in the wheel"


def test_install_from_the_wheel_into_a_root(venv: Path, tmp_path: Path) -> None:
    exe = venv / "bin" / "fabricmon"
    root = tmp_path / "root"
    res = run([exe, "install", "--root", root, "--node", "--fabric"])
    written = {str(p.relative_to(root)) for p in root.rglob("*") if p.is_file()}
    assert written == {"etc/fabricmon/fabricmon.yml", "etc/default/fabricmon", "etc/default/fabricmon-fabric",
                       "etc/systemd/system/fabricmon.service", "etc/systemd/system/fabricmon-fabric.service",
                       "etc/udev/rules.d/90-fabricmon-umad.rules", "etc/sysusers.d/fabricmon.conf"}, res.stdout
    node = (root / "etc/systemd/system/fabricmon.service").read_text()
    fabric = (root / "etc/systemd/system/fabricmon-fabric.service").read_text()
    assert f"\nExecStart={exe} run $FABRICMON_ARGS\n" in node
    assert f"\nExecStart={exe} fabric run $FABRICMON_FABRIC_ARGS\n" in fabric

    # systemd-analyze verify: the units as written, their ExecStart the venv's real fabricmon
    tool = require_tool("systemd-analyze", "systemd")
    for unit in UNITS:
        v = subprocess.run([tool, "verify", "--man=no", str(root / "etc/systemd/system" / unit)],
                           capture_output=True, text=True, timeout=60)
        ours = [ln for ln in (v.stdout + v.stderr).splitlines() if "fabricmon" in ln]
        assert v.returncode == 0 and not ours, v.stdout + v.stderr

    # the sysusers file it wrote is valid: systemd-sysusers creates the user and groups in a scratch root
    sysusers = require_tool("systemd-sysusers", "systemd")
    scratch = tmp_path / "scratch"
    (scratch / "etc").mkdir(parents=True)
    run([sysusers, f"--root={scratch}", root / "etc/sysusers.d/fabricmon.conf"])
    passwd = (scratch / "etc/passwd").read_text()
    assert "fabricmon:" in passwd and ":/var/lib/fabricmon:/usr/sbin/nologin" in passwd, passwd
    groups = {ln.split(":")[0] for ln in (scratch / "etc/group").read_text().splitlines()}
    assert {"rdma", "fabricmon"} <= groups
    unit_user = [ln for ln in node.splitlines() if ln.startswith(("User=", "Group=", "SupplementaryGroups="))]
    assert unit_user == ["User=fabricmon", "Group=fabricmon", "SupplementaryGroups=rdma"]

    # a second run keeps an edited config
    cfg = root / "etc/fabricmon/fabricmon.yml"
    cfg.write_text(cfg.read_text() + "\nexclude_devices: [mlx5_9]\n")
    edited = cfg.read_text()
    res = run([exe, "install", "--root", root])
    assert cfg.read_text() == edited and f"kept {cfg}" in res.stdout

    # uninstall removes what install added, config and state kept; --purge the rest
    state = root / "var/lib/fabricmon"
    state.mkdir(parents=True)
    (state / "check-state.json").write_text("{}")
    run([exe, "uninstall", "--root", root])
    left = {str(p.relative_to(root)) for p in root.rglob("*") if p.is_file()}
    assert left == {"etc/fabricmon/fabricmon.yml", "etc/default/fabricmon", "etc/default/fabricmon-fabric",
                    "var/lib/fabricmon/check-state.json"}
    run([exe, "uninstall", "--root", root, "--purge"])
    assert [p for p in root.rglob("*") if p.is_file()] == []


def test_print_hands_out_rules_that_pass_their_tests(venv: Path, tmp_path: Path) -> None:
    run([venv / "bin" / "fabricmon", "install", "--print", "rules", tmp_path])
    promtool = require_tool("promtool", "prometheus")
    # issue 30: what the wheel ships passes `promtool check rules` with every lint fatal, and says SUCCESS
    res = run([promtool, "check", "rules", "--lint=all", "--lint-fatal", tmp_path / "fabricmon.rules.yml"])
    assert "SUCCESS" in res.stdout and "lint" not in (res.stdout + res.stderr).lower(), res.stdout + res.stderr
    run([promtool, "test", "rules", "fabricmon.rules.test.yml"], cwd=tmp_path)
