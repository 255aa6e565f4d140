"""`fabricmon demo` stopped with SIGTERM (systemd, `timeout`, a CI runner) cleans up as on Ctrl-C:
every simulator process it started is gone and its temp directory is removed (issue 18, item 6)."""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
import tempfile
from pathlib import Path

import psutil
import pytest

from fabricmon.sim.fabric import tools_available
from helpers import REPO, unavailable, wait_until

pytestmark = pytest.mark.sim      # the demo starts ibsim (and opensm, snmpsimd) itself

READY = "the Ethernet (RoCE) fabric collector reads"      # the last of the demo's parts to start


def _name(p: psutil.Process) -> str:
    """A child's name, "" when it ended since it was listed (a tool the demo ran)."""
    try:
        return p.name()
    except psutil.NoSuchProcess:
        return ""


def test_demo_under_sigterm_leaves_no_process_and_no_temp_dir(tmp_path: Path) -> None:
    ok, why = tools_available()
    if not ok:
        unavailable(f"the fabric simulator cannot run ({why}): install ibsim-utils libumad2sim0 infiniband-diags opensm")
    # the demo's TMPDIR: its own directory under the system one, not under pytest's private tmp_path,
    # since the Ethernet simulator (snmpsimd, run as nobody when started as root) must read its data there
    tmp = Path(tempfile.mkdtemp(prefix="fabricmon-sigterm-test-"))
    tmp.chmod(0o755)
    cwd = tmp_path / "checkout"         # where it runs (a checkout): nothing may be left there
    cwd.mkdir()
    out = open(tmp_path / "demo.out", "w+")
    proc = subprocess.Popen([sys.executable, "-m", "fabricmon", "demo", "--port", "0", "--fault-after", "3600"],
                            stdout=out, stderr=subprocess.STDOUT, cwd=cwd,
                            env={**os.environ, "TMPDIR": str(tmp), "PYTHONPATH": str(REPO)},   # this fabricmon
                            start_new_session=True)
    try:
        def ready() -> bool:
            assert proc.poll() is None, (tmp_path / "demo.out").read_text()
            return READY in (tmp_path / "demo.out").read_text()
        wait_until(ready, 90, lambda: (tmp_path / "demo.out").read_text(), interval=0.2)
        children = psutil.Process(proc.pid).children(recursive=True)
        names = sorted(filter(None, (_name(c) for c in children)))
        assert "ibsim" in names and "opensm" in names, names
        [workdir] = list(tmp.glob("fabricmon-demo-*"))
        assert list(tmp.glob("fabricmon-ethsim-*")), list(tmp.iterdir())     # the Ethernet simulator's data
        assert (workdir / "fabric").is_dir()
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(30) == 0, (tmp_path / "demo.out").read_text()
        gone, alive = psutil.wait_procs(children, timeout=10)
        assert not alive, [(p.pid, p.name()) for p in alive]
        assert list(tmp.iterdir()) == [], list(tmp.iterdir())      # the temp dir, ibsim's log in it, is gone
        text = (tmp_path / "demo.out").read_text()
        assert "stopping: SIGTERM" in text and text.splitlines()[-1].endswith(
            "the demo ended (SIGTERM): every simulator stopped and its files removed"), text
        # stopping is no finding: the tools it killed are no source error, and the inventory no verdict
        assert "exit -9" not in text and "expected_inventory" not in text, text
        assert list(cwd.iterdir()) == [], list(cwd.iterdir())      # no sys-<pid>/ left where it ran
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait(10)
        out.close()
        shutil.rmtree(tmp, ignore_errors=True)
