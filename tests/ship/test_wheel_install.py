"""From a built wheel alone, one command installs a node: build the wheel from a clean copy of the
source with the command the README names (`make wheel`), install it into a fresh venv, and run that venv's `fabricmon install --root` into a temporary
root. Every file is there, ExecStart is that venv's fabricmon, `systemd-analyze verify` passes on the
units it wrote, systemd-sysusers reads the user and groups the units run as from the file it wrote, a second run keeps an edited config, uninstall removes what install added, and the
rules `install --print` hands out pass their own promtool tests."""

from __future__ import annotations

import os
import re
import shlex
import shutil
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

from helpers import unavailable
from ship_helpers import ROOT, require_tool

SOURCE = ("pyproject.toml", "README.md", "LICENSE", "Makefile")
WHEEL_MARK = "<!-- wheel: tested by tests/ship/test_wheel_install.py -->"
UNITS = ("fabricmon.service", "fabricmon-fabric.service")


def run(argv: list, **kw) -> subprocess.CompletedProcess:
    res = subprocess.run([str(a) for a in argv], capture_output=True, text=True, timeout=600, **kw)
    assert res.returncode == 0, f"{argv}:\n{res.stdout[-3000:]}\n{res.stderr[-3000:]}"
    return res


def readme_wheel_command() -> list[str]:
    """The one command of the README's wheel block (after its marker)."""
    readme = (ROOT / "README.md").read_text()
    assert WHEEL_MARK in readme, "the README no longer says how to build the wheel"
    block = re.search(re.escape(WHEEL_MARK) + r"\n```sh\n(.*?)```", readme, re.S).group(1)
    [cmd] = [ln.split("  #")[0].strip() for ln in block.splitlines() if ln.strip() and not ln.startswith("#")]
    return shlex.split(cmd)


def test_the_readme_names_the_wheel_build() -> None:
    assert readme_wheel_command() == ["make", "wheel"]
    install = (ROOT / "README.md").read_text().split("## Install", 1)[1].split("\n## ", 1)[0]
    assert "make wheel" in install and "dist/fabricmon-" in install


@pytest.fixture(scope="module")
def wheel(tmp_path_factory) -> Path:
    """The wheel, built from a clean copy (what a fresh clone has) with the README's own command
    (`make wheel`: pip wheel, build isolation); the venv it builds in is this test run's, so that
    nothing is installed into a new one."""
    src = tmp_path_factory.mktemp("src")
    for name in SOURCE:
        shutil.copy(ROOT / name, src / name)
    shutil.copytree(ROOT / "fabricmon", src / "fabricmon", ignore=shutil.ignore_patterns("__pycache__"))
    argv = readme_wheel_command()
    make = shutil.which(argv[0]) or unavailable("make (Debian package make) is needed")
    venv = Path(sys.prefix)
    if not (venv / "bin" / "python").exists():
        unavailable(f"the tests run outside a venv ({sys.prefix}): make wheel needs one")
    res = run([make, "-C", src, *argv[1:], f"VENV={venv}"])
    assert "BuildBackendWarning" not in res.stderr and "SetuptoolsDeprecationWarning" not in res.stderr, res.stderr
    [whl] = (src / "dist").glob("fabricmon-*.whl")
    assert whl.name == f"fabricmon-{version(src)}-py3-none-any.whl"
    assert str(whl.relative_to(src)) in res.stdout, res.stdout        # it says where the wheel is
    return whl


def version(src: Path) -> str:
    return re.search(r'^version = "([^"]+)"', (src / "pyproject.toml").read_text(), re.M).group(1)


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
            "fabricmon/deploy/fabricmon.yml", "fabricmon/deploy/alertmanager/fabricmon.alertmanager.yml"} <= shipped
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
    # and they are the files test_rules' promtool run passes, byte for byte (one run of the 500-case file is enough)
    shipped = ROOT / "fabricmon" / "deploy" / "prometheus"
    for name in ("fabricmon.rules.yml", "fabricmon.rules.test.yml"):
        assert (tmp_path / name).read_bytes() == (shipped / name).read_bytes(), name


def test_print_hands_out_the_alertmanager_example(venv: Path, tmp_path: Path) -> None:
    """Issue 27: the wheel's `install --print alertmanager` gives the shipped example, as amtool accepts it."""
    run([venv / "bin" / "fabricmon", "install", "--print", "alertmanager", tmp_path])
    got = tmp_path / "fabricmon.alertmanager.yml"
    assert got.read_text() == (ROOT / "fabricmon" / "deploy" / "alertmanager" / "fabricmon.alertmanager.yml").read_text()
    amtool = require_tool("amtool", "prometheus-alertmanager")
    res = run([amtool, "check-config", got])
    assert "SUCCESS" in res.stdout, res.stdout + res.stderr


def test_the_wheel_trial_as_an_operator(venv: Path, tmp_path: Path) -> None:
    """The operator's first hour from the wheel alone: what issue 30 found, run from the installed venv."""
    import socket

    import yaml
    exe = venv / "bin" / "fabricmon"
    # install --dry-run on the running system (it changes nothing): a venv under /tmp would never start
    res = subprocess.run([exe, "install", "--dry-run"], capture_output=True, text=True, timeout=120)
    assert res.returncode == 0, res.stdout + res.stderr
    assert "would write /etc/systemd/system/fabricmon.service" in res.stdout
    assert "fabricmon.service could not start" in res.stderr and "PrivateTmp=" in res.stderr, res.stderr
    if os.geteuid() != 0:
        assert "needs root" in res.stderr, res.stderr
    # nothing to check: once and check agree on UNKNOWN
    sysfs = tmp_path / "sys"
    sysfs.mkdir()
    cfg = tmp_path / "fabricmon.yml"
    cfg.write_text(yaml.safe_dump({"paths": {"sysfs": str(sysfs), "state_dir": str(tmp_path / "state")}}))
    once = run([exe, "once", "--config", cfg])
    assert "\nfabricmon_health_status 3.0\n" in once.stdout, [ln for ln in once.stdout.splitlines() if "health" in ln]
    check = subprocess.run([exe, "check", "--config", cfg], capture_output=True, text=True, timeout=120)
    assert check.returncode == 3 and check.stdout.startswith("FABRICMON UNKNOWN - nothing to check"), check.stdout
    # a port in use: a restartable failure (75), not a config error (2)
    with socket.socket() as busy:
        busy.bind(("127.0.0.1", 0))
        busy.listen()
        res = subprocess.run([exe, "run", "--config", cfg, "--listen", f"127.0.0.1:{busy.getsockname()[1]}"],
                             capture_output=True, text=True, timeout=60)
    assert res.returncode == 75 and res.stderr.count("\n") == 1, res.stderr
