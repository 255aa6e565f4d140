"""The two commands: `make demo` installs only what the demo needs (the simulator, infiniband-diags,
opensm; no test toolchain), `make test` the whole toolchain; both read one package list (read here with
make's own dry run, not by parsing the Makefile). A clean venv for the demo prints no warning banner."""

from __future__ import annotations

import re
import shutil
import subprocess
from pathlib import Path

from helpers import REPO, unavailable
from ship_helpers import make_apt_packages

DEMO = {"python3-venv", "ibsim-utils", "libumad2sim0", "infiniband-diags", "opensm"}
ETHERNET_DEMO = {"snmpsim", "snmp"}      # the Ethernet fabric beside it: the switch simulator, net-snmp's tools
TOOLCHAIN = {"prometheus", "prometheus-alertmanager", "chromium", "systemd", "openssl"}


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
