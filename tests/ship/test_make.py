"""The two commands: `make demo` installs only what the demo needs (the simulator, infiniband-diags,
opensm; no test toolchain), `make test` the whole toolchain; both read one package list (read here with
make's own dry run, not by parsing the Makefile). A clean venv for the demo prints no warning banner."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import tempfile
from pathlib import Path

import pytest

from helpers import REPO, unavailable
from ship_helpers import make_apt_packages

DEMO = {"python3-venv", "ibsim-utils", "libumad2sim0", "infiniband-diags", "opensm"}
ETHERNET_DEMO = {"snmpsim", "snmp"}      # the Ethernet fabric beside it: the switch simulator, net-snmp's tools
TOOLCHAIN = {"prometheus", "prometheus-alertmanager", "chromium", "systemd", "openssl", "victoria-metrics", "etcd-server"}


def make() -> str:
    exe = shutil.which("make")
    if not exe:
        unavailable("make (Debian package make) is needed")
    return exe


def test_make_demo_installs_only_what_the_demo_needs() -> None:
    assert make_apt_packages("demo") == DEMO | ETHERNET_DEMO
    assert make_apt_packages("demo", DEMO_ETHERNET_PACKAGES="") == DEMO


def test_make_test_installs_the_test_toolchain() -> None:
    pkgs = make_apt_packages("test")
    assert DEMO | TOOLCHAIN <= pkgs
    assert DEMO | ETHERNET_DEMO | TOOLCHAIN <= pkgs


def test_the_demo_venv_installs_without_a_banner(tmp_path: Path) -> None:
    """What `make demo` runs for its venv, into a fresh one: quiet, and no setuptools deprecation or
    editable-install banner (pip's own notices about this machine's index settings aside)."""
    venv = tmp_path / "venv"
    res = subprocess.run([make(), "-C", str(REPO), f"VENV={venv}", f"{venv}/.installed"],
                         capture_output=True, text=True, timeout=600)
    assert res.returncode == 0, res.stdout + res.stderr
    noise = [ln for ln in res.stderr.splitlines()
             if ln.strip() and not re.match(r"WARNING: Location 'file:///\S+' is ignored", ln)]
    assert not noise, "\n".join(noise)
    assert (venv / "bin" / "fabricmon").exists()
    assert not any(w in res.stdout for w in ("Warning", "!!", "deprecated")), res.stdout


def fresh_clone(dest: Path) -> Path:
    """A fresh clone of this repository (its committed HEAD), or, where this is no git work tree (a
    source tarball), a copy of what `make demo` and `make wheel` read."""
    git = shutil.which("git")
    if git and (REPO / ".git").exists():
        res = subprocess.run([git, "clone", "-q", "--no-hardlinks", str(REPO), str(dest)],
                             capture_output=True, text=True, timeout=300)
        assert res.returncode == 0, res.stderr
        return dest
    dest.mkdir()
    for name in ("pyproject.toml", "README.md", "LICENSE", "Makefile"):
        shutil.copy(REPO / name, dest / name)
    shutil.copytree(REPO / "fabricmon", dest / "fabricmon", ignore=shutil.ignore_patterns("__pycache__"))
    return dest


def tree(root: Path) -> set[str]:
    return {str(p.relative_to(root)) for p in root.rglob("*") if ".git" not in p.relative_to(root).parts}


@pytest.mark.sim          # make demo starts ibsim
def test_fresh_clone_trial_make_demo(tmp_path: Path) -> None:
    """What a new user does first, scripted: clone, `make demo` (bounded with DEMO_ARGS), read what it
    printed. It shows both fabrics and a fault, prints each finding once and only whole lines, ends
    with a line saying why, raises nothing from its own shutdown, and leaves nothing in the clone but
    the venv it made (no sys-<pid>/, no build output) and nothing in the temp dir."""
    from fabricmon.sim.fabric import tools_available
    ok, why = tools_available()
    if not ok:
        unavailable(f"the fabric simulator cannot run ({why}): install ibsim-utils libumad2sim0 infiniband-diags opensm")
    clone = fresh_clone(tmp_path / "fabricmon")
    before = tree(clone)
    # the demo's TMPDIR, under the system one: snmpsimd (run as nobody when we are root) reads its data there,
    # and pytest's tmp_path is private to us
    tmp = Path(tempfile.mkdtemp(prefix="fabricmon-clone-trial-"))
    tmp.chmod(0o755)
    try:
        res = subprocess.run([make(), "-C", str(clone), "demo", "DEMO_ARGS=--port 0 --duration 25 --fault-after 2"],
                             capture_output=True, text=True, timeout=600, env={**os.environ, "TMPDIR": str(tmp)})
        left = [p.name for p in tmp.iterdir() if p.name.startswith("fabricmon-")]
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    out = res.stdout + res.stderr
    assert res.returncode == 0, out[-5000:]
    lines = [ln for ln in res.stdout.splitlines() if re.match(r"\[\d\d:\d\d:\d\d\] ", ln)]
    assert lines and lines[-1].endswith("the demo ended (--duration 25 s is up): every simulator stopped and its "
                                        "files removed"), out[-3000:]
    assert any("the live fabric map at http://127.0.0.1:" in ln for ln in lines), out[-3000:]
    assert any("the Ethernet (RoCE) fabric collector reads" in ln for ln in lines), out[-3000:]
    findings = [ln[11:] for ln in lines if re.match(r"\[..:..:..\] (CRITICAL|WARNING|OK) ", ln)]
    assert any("symbol_errors" in f for f in findings) and len(findings) == len(set(findings)), findings
    assert "exit -9" not in out and "expected_inventory" not in out and "finding " not in res.stderr, out[-3000:]
    made = tree(clone) - before
    stray = sorted(p for p in made if not p.startswith((".venv", "fabricmon.egg-info")))
    assert not stray, stray
    assert left == [], left
