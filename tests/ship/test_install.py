"""The README's install steps work as written: a fresh venv under (a stand-in for) /opt/fabricmon,
pip install of a checkout, `fabricmon check` from it, then `fabricmon install` (here under --root: a
test must not touch the system). tests/ship/test_wheel_install.py does it from a built wheel. Debian 12's and Ubuntu's system Python
refuse a system-wide `pip install`, which is why the README uses a venv."""

from __future__ import annotations

import os
import re
import shlex
import shutil
import subprocess
import sys
from pathlib import Path

from ship_helpers import ROOT

MARK = "<!-- install: tested by tests/ship/test_install.py -->"


def install_steps() -> list[str]:
    readme = (ROOT / "README.md").read_text()
    assert MARK in readme, "the README's install block lost its marker"
    block = re.search(re.escape(MARK) + r"\n```sh\n(.*?)```", readme, re.S).group(1)
    return [ln.split("  #")[0].strip() for ln in block.splitlines() if ln.strip() and not ln.startswith("#")]


def test_the_readme_install_steps_work(tmp_path: Path) -> None:
    steps = install_steps()
    assert steps[0].startswith("apt-get install python3-venv")
    # the distribution's Python: a pyenv/conda python3 (first on PATH here) makes a venv the service user cannot run
    assert any(s.startswith("/usr/bin/python3 -m venv /opt/fabricmon") for s in steps)
    # a checkout, without this one's venv and build leftovers
    src = tmp_path / "fabricmon-src"
    src.mkdir()
    for name in ("pyproject.toml", "README.md", "LICENSE"):
        shutil.copy(ROOT / name, src / name)
    shutil.copytree(ROOT / "fabricmon", src / "fabricmon", ignore=shutil.ignore_patterns("__pycache__"))
    opt = tmp_path / "opt-fabricmon"
    python = shutil.which("python3") or sys.executable
    for step in steps:
        if step.startswith("apt-get "):
            pkgs = [w for w in shlex.split(step)[2:] if not w.startswith("-")]
            apt = shutil.which("apt-cache")
            if apt:
                for pkg in pkgs:
                    assert subprocess.run([apt, "show", pkg], capture_output=True).returncode == 0, pkg
            continue
        argv = [w.replace("/opt/fabricmon", str(opt)).replace("/path/to/fabricmon", str(src))
                for w in shlex.split(step)]
        if argv[0] == "/usr/bin/python3" and not os.access(argv[0], os.X_OK):
            argv[0] = python                      # a host without it: the test's own Python stands in
        if argv[-1] == "check":
            argv.append("--no-state")             # a test must not write /var/lib/fabricmon
        if argv[-1] == "install":
            argv += ["--root", str(tmp_path / "root")]      # a test must not touch the system
        res = subprocess.run(argv, capture_output=True, text=True, timeout=300)
        if argv[-2:] == ["check", "--no-state"]:
            # a verdict, never a crash: 3 only as "nothing to check" (a host without any RDMA device)
            assert res.returncode in (0, 1, 2) or (
                res.returncode == 3 and res.stdout.startswith("FABRICMON UNKNOWN - nothing to check: ")), \
                res.stdout + res.stderr
            assert res.stdout.startswith("FABRICMON "), res.stdout + res.stderr
        else:
            assert res.returncode == 0, f"{step}:\n{res.stdout}\n{res.stderr}"
    assert (opt / "bin" / "fabricmon").exists()
    assert any(s.endswith("fabricmon install") for s in steps), "the README no longer installs with fabricmon install"
    unit = (tmp_path / "root" / "etc" / "systemd" / "system" / "fabricmon.service").read_text()
    assert f"\nExecStart={opt}/bin/fabricmon run $FABRICMON_ARGS\n" in unit
    assert (tmp_path / "root" / "etc" / "fabricmon" / "fabricmon.yml").is_file()
    version = subprocess.run([str(opt / "bin" / "fabricmon"), "--version"], capture_output=True, text=True)
    assert version.stdout.startswith("fabricmon ")
