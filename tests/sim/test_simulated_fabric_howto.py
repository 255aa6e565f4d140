"""docs/simulated-fabric.md works as written: its shell blocks, in order, in one bash (the variables they set
carry from block to block, as in the reader's terminal), with only the socket name, the collector's port, the
home directory and the venv (/opt/fabricmon) made this test's own. Between the blocks the test looks at what
the doc says the reader sees: the engine's sweep of 4 switches from `fabric once`, leaf01 port 3 up, down
within a sweep once its cable is pulled in ibsim's console, a counter set there on /metrics at the next sweep,
and after the simulator's restart the same collector (never restarted) sweeping the new simulator again."""

from __future__ import annotations

import os
import queue
import re
import shlex
import shutil
import signal
import subprocess
import sys
import threading
import time
import uuid
from pathlib import Path

import pytest

from helpers import REPO, free_port, sample_value, scrape_samples, unavailable, wait_until

pytestmark = pytest.mark.sim

DOC = REPO / "docs" / "simulated-fabric.md"
MARK = "<!-- howto: the commands below, as written, are run by tests/sim/test_simulated_fabric_howto.py -->"
LEAF01 = "0000000000200002"


def blocks() -> list[str]:
    text = DOC.read_text()
    assert MARK in text, "docs/simulated-fabric.md lost its marker"
    return re.findall(r"^```sh\n(.*?)^```", text.split(MARK, 1)[1], re.S | re.M)


class Shell:
    """One bash fed one block at a time (each sourced from a file, so a heredoc or a program reading its
    standard input never eats the next), its output read by a thread."""

    def __init__(self, cwd: Path, env: dict[str, str]) -> None:
        self.dir = cwd
        self.proc = subprocess.Popen(["bash", "--noprofile", "--norc"], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                     stderr=subprocess.STDOUT, text=True, cwd=cwd, env=env, start_new_session=True)
        self.lines: queue.Queue[str] = queue.Queue()
        threading.Thread(target=self._read, daemon=True).start()
        self.n = 0

    def _read(self) -> None:
        assert self.proc.stdout is not None
        for line in self.proc.stdout:
            self.lines.put(line)

    def run(self, block: str, timeout: float = 90) -> tuple[int, str]:
        """(exit status of the block's last command, what it printed)."""
        self.n += 1
        script = self.dir / f"block{self.n}.sh"
        script.write_text(block)
        marker = f"__block{self.n}_{uuid.uuid4().hex}__"
        assert self.proc.stdin is not None
        self.proc.stdin.write(f"source {shlex.quote(str(script))}; echo {marker}$?\n")
        self.proc.stdin.flush()
        out: list[str] = []
        end = time.monotonic() + timeout
        while True:
            try:
                line = self.lines.get(timeout=max(0.1, end - time.monotonic()))
            except queue.Empty:
                raise AssertionError(f"block {self.n} did not finish in {timeout:g} s:\n{block}\nit printed:\n{''.join(out)}")
            if line.startswith(marker):
                return int(line[len(marker):]), "".join(out)
            out.append(line)

    def value(self, name: str) -> str:
        return self.run(f"echo ${name}")[1].strip()

    def close(self, pids: list[int]) -> None:
        for pid in pids:                              # what the doc started, by PID, should its stop block not have run
            try:
                os.kill(pid, signal.SIGTERM)
            except ProcessLookupError:
                pass
        try:
            assert self.proc.stdin is not None
            self.proc.stdin.close()
            self.proc.wait(10)
        except (OSError, subprocess.TimeoutExpired):
            self.proc.kill()
            self.proc.wait()
        for pid in pids:
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass


def gone(pid: int) -> bool:
    """The process has exited (a zombie left for its parent counts): its /proc entry is gone, or going as
    it is read (ESRCH: ProcessLookupError), or it says Z."""
    try:
        return Path(f"/proc/{pid}/stat").read_text().split(")")[1].split()[0] == "Z"
    except OSError:
        return True


def test_the_simulated_fabric_howto_works_as_written(sim_fabric, tmp_path) -> None:
    # sim_fabric is requested only for its skip-or-fail policy when the simulator's packages are missing: the
    # doc's own commands start ibsim and opensm
    for tool in ("ibsim-run", "curl", "sminfo"):
        if shutil.which(tool, path=os.environ.get("PATH", "") + ":/usr/sbin") is None:
            unavailable(f"{tool} is needed (apt-get install ibsim-utils curl infiniband-diags, as make test does)")
    steps = blocks()
    assert len(steps) == 10, f"the how-to's blocks changed ({len(steps)}): this test walks them one by one"
    apt, env_block, start, collector, look_down, unlink, counter, look_counter, restart, stop = steps
    # 1. packages: each one the distribution has (the test never installs)
    assert apt.startswith("sudo apt-get install ")
    if shutil.which("apt-cache"):
        for pkg in shlex.split(apt)[3:]:
            assert subprocess.run(["apt-cache", "show", pkg], capture_output=True).returncode == 0, pkg
    sock, port = f"howto{os.getpid()}_{uuid.uuid4().hex[:6]}", free_port()
    venv = Path(sys.executable).parent.parent

    def own(block: str) -> str:
        assert "IBSIM_SOCKNAME=simfabric" in env_block and "/opt/fabricmon" in env_block
        return (block.replace("IBSIM_SOCKNAME=simfabric", f"IBSIM_SOCKNAME={sock}").replace("/opt/fabricmon", str(venv))
                .replace("127.0.0.1:9881", f"127.0.0.1:{port}"))

    env = {k: v for k, v in os.environ.items() if k not in ("LD_PRELOAD", "IBSIM_SOCKNAME", "SIM_HOST")}
    env["HOME"] = str(tmp_path)
    sh = Shell(tmp_path, env)
    pids: list[int] = []
    work = tmp_path / "simfabric"

    def logs() -> str:
        return "".join(f"\n--- {f.name}:\n{f.read_text(errors='replace')[-2500:]}" for f in sorted(work.glob("*.log")))

    def ran(block: str, timeout: float = 90) -> str:
        rc, out = sh.run(own(block), timeout)
        assert rc == 0, f"exit {rc}:\n{block}\n{out}{logs()}"
        return out

    def sees(block: str, value: str, timeout: float = 60) -> None:
        """The look block, run again until it prints its one series with `value`."""
        wait_until(lambda: sh.run(own(block))[1], timeout, lambda: f"{block!r} printing {value}{logs()}",
                   until=lambda out: re.search(r"\} " + re.escape(value) + "$", out.strip()) is not None, interval=1.0)

    try:
        ran(env_block)
        assert (work / "fabric.net").read_text().count("Switch") == 4
        ran(start)
        pids += [int(sh.value(v)) for v in ("HOLD", "IBSIM", "OPENSM")]
        once = ran(collector, 180)
        pids.append(int(sh.value("COLLECTOR")))
        assert "fabricmon_fabric_switches 4.0" in once and 'fabricmon_fabric_sweep_method{method="mad"} 1.0' in once, once
        sees(look_down, "0.0")                       # leaf01 port 3 up
        ran(unlink)
        t0 = time.monotonic()
        sees(look_down, "1.0")                       # down within a sweep (5 s), on a loaded machine a few
        assert time.monotonic() - t0 < 30
        ran(counter)
        sees(look_counter, "500.0")
        ran(restart)
        pids[1:3] = [int(sh.value(v)) for v in ("IBSIM", "OPENSM")]
        wait_until(lambda: scrape_samples(port), 60, lambda: f"the sweep up again after the restart{logs()}",
                   until=lambda s: sample_value(s, "fabricmon_source_up", source="sweep") == 1
                   and sample_value(s, "fabricmon_fabric_sweep_method", method="mad") == 1, interval=1.0,
                   ignore=(OSError,))
        sees(look_down, "0.0")                       # the new simulator's fabric: the cable is there
        sees(look_counter, "0.0")                    # and its counters
        log = (work / "collector.log").read_text()
        assert log.count("MAD port lost") == 1 and log.count("MAD port reopened") == 1, log[-3000:]
        ran(stop)
        for pid in pids:
            wait_until(lambda: gone(pid), 20, f"pid {pid} gone")
    finally:
        sh.close(pids)
