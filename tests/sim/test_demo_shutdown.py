"""A stopping daemon raises no finding from its own shutdown (issue 30).

- One pipeline stopping kills only its own tools: the demo runs three daemons in one process, and the
  first to stop used to kill the others' tools in flight (`ibstat: exit -9` source errors, and a false
  `CRITICAL expected_inventory ... no InfiniBand or RoCE port at all`).
- Tools never run in the caller's directory: under the umad2sim preload each one writes ./sys-<pid>/,
  left behind when it is killed, so demo and test runs left sys-<pid>/ in the checkout.
- `fabricmon demo --duration` prints each finding once, whole lines only, and ends with a line saying
  it ended and why; the README's sample of its output is what it prints."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

import pytest

from fabricmon.host import LiveIO
from fabricmon.host.runner import run_command, scratch_dir
from fabricmon.sim.fabric import tools_available
from helpers import REPO, unavailable, wait_until


def _sleeper(tmp_path: Path, name: str) -> dict[str, str]:
    """A PATH whose `name` sleeps for a minute and leaves a file in its working directory."""
    bin_dir = tmp_path / f"bin-{name}"
    bin_dir.mkdir()
    tool = bin_dir / name
    tool.write_text(f"#!/bin/sh\nmkdir -p \"sys-$$\"\ntouch {tmp_path}/ready-{name}\nexec sleep 60\n")
    tool.chmod(0o755)
    return {**os.environ, "PATH": f"{bin_dir}:{os.environ.get('PATH', '')}"}


def test_one_hostio_stopping_kills_only_its_own_tools(tmp_path: Path) -> None:
    a = LiveIO(env=_sleeper(tmp_path, "tool-a"))
    b = LiveIO(env=_sleeper(tmp_path, "tool-b"))
    results: dict[str, object] = {}
    threads = [threading.Thread(target=lambda io=io, n=n: results.__setitem__(n, io.run([n], 60)))
               for io, n in ((a, "tool-a"), (b, "tool-b"))]
    for t in threads:
        t.start()

    wait_until(lambda: all((tmp_path / f"ready-{n}").exists() for n in ("tool-a", "tool-b")), 20, "both tools running")
    try:
        a.kill_tools()                              # pipeline A stops
        threads[0].join(10)
        assert not threads[0].is_alive() and results["tool-a"].returncode == -9, results
        time.sleep(0.5)                             # what is tested: a while after A's kill, B's tool still runs
        assert threads[1].is_alive(), results       # B's tool is still running, never killed for A
    finally:
        b.kill_tools()
        threads[1].join(10)
    assert results["tool-b"].returncode == -9


def test_tools_run_in_a_scratch_directory_not_the_callers(tmp_path: Path) -> None:
    env = _sleeper(tmp_path, "litter")
    here = Path.cwd()
    before = set(here.glob("sys-*"))
    res = run_command(["sh", "-c", 'mkdir "sys-$$" && pwd'], 10, env)
    assert res.ok, res
    assert res.stdout.strip() == scratch_dir() and Path(scratch_dir()).parent == Path(tempfile.gettempdir())
    assert set(here.glob("sys-*")) == before
    # a relative program is still found relative to the caller
    script = tmp_path / "rel.sh"
    script.write_text("#!/bin/sh\necho hi\n")
    script.chmod(0o755)
    res = run_command([os.path.relpath(script)], 10)
    assert res.ok and res.stdout == "hi\n", res


def test_a_scratch_directory_removed_by_a_temp_cleaner_is_made_again() -> None:
    first = scratch_dir()
    shutil.rmtree(first)
    res = run_command(["pwd"], 10)
    assert res.ok, res
    assert res.stdout.strip() == scratch_dir() != first and Path(scratch_dir()).is_dir()


def test_the_scratch_directory_is_removed_when_the_process_exits(tmp_path: Path) -> None:
    code = ("from fabricmon.host.runner import run_command, scratch_dir\n"
            "run_command(['sh', '-c', 'mkdir sys-1'], 10)\nprint(scratch_dir())\n")
    res = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60, cwd=tmp_path,
                         env={**os.environ, "PYTHONPATH": str(REPO)})
    assert res.returncode == 0, res.stderr
    assert res.stdout.strip().startswith(tempfile.gettempdir()) and not Path(res.stdout.strip()).exists()
    assert list(tmp_path.iterdir()) == []


def readme_sample() -> list[str]:
    """The README's sample of the demo's output (its lines without the time)."""
    readme = (REPO / "README.md").read_text()
    block = re.search(r"\n```\n((?:\[\d\d:\d\d:\d\d\] [^\n]*\n)+)```", readme)
    assert block, "the README lost its sample of the demo's output"
    return [ln[11:] for ln in block[1].splitlines()]


_PORT = re.compile(r"127\.0\.0\.1:\d+")
_WINDOW = re.compile(r"in the last (\d+)s (\(threshold \d+ per 1h, bit error ratio )(\S+)( over the )(\d+)( Gb/s link;)")


def _masked(line: str) -> tuple[str, tuple[int, str, int] | None]:
    """The line with the demo's ports and the symbol error window and ratio masked; (window, ratio, Gb/s)."""
    line = _PORT.sub("127.0.0.1:PORT", line)
    m = _WINDOW.search(line)
    if m is None:
        return line, None
    return _WINDOW.sub(r"in the last Ns \2R\4\5\6", line), (int(m[1]), m[3], int(m[5]))


def check_readme_sample(printed: list[str]) -> None:
    """Each line of the README's sample is a line the demo printed: the same text, where `(...)` stands for
    the rest of a line and the ports are the demo's own (--port 0 here, 9879 in the README). The symbol error
    finding's window (the demo's first perfquery poll to the poll after the fault: about 25 s with the default
    --fault-after 20) is within a few seconds of the printed one, and its bit error ratio is that window's."""
    lines = [_masked(ln) for ln in printed]
    for line in readme_sample():
        text, window = _masked(line)
        pattern = r"\(.+\)".join(re.escape(part) for part in text.split("(...)"))
        got = [(t, w) for t, w in lines if re.fullmatch(pattern, t)]
        assert got, f"the README's demo line is not what the demo prints:\n  README: {line}\n  printed:\n    " + \
            "\n    ".join(printed)
        if window is not None:
            (seconds, ratio, gbps), printed_window = window, got[0][1]
            assert printed_window is not None and abs(printed_window[0] - seconds) <= 6, (line, printed_window)
            assert ratio == f"{8000 / (seconds * gbps * 1e9):.1e}", line      # the ratio of its own window


@pytest.mark.sim
def test_the_demo_ends_cleanly_prints_each_finding_once_and_leaves_nothing(tmp_path: Path) -> None:
    ok, why = tools_available()
    if not ok:
        unavailable(f"the fabric simulator cannot run ({why}): install ibsim-utils libumad2sim0 infiniband-diags opensm")
    # the demo's own TMPDIR (readable by snmpsimd run as nobody) and a working directory standing in for a checkout
    tmp = Path(tempfile.mkdtemp(prefix="fabricmon-demo-test-"))
    tmp.chmod(0o755)
    cwd = tmp_path / "checkout"
    cwd.mkdir()
    try:
        # the default --fault-after (20 s), as `make demo` runs it: the README shows its output
        res = subprocess.run([sys.executable, "-m", "fabricmon", "demo", "--port", "0", "--duration", "34"],
                             capture_output=True, text=True, timeout=180, cwd=cwd,
                             env={**os.environ, "TMPDIR": str(tmp), "PYTHONPATH": str(REPO)})   # this fabricmon
        out = res.stdout + res.stderr
        assert res.returncode == 0, out
        lines = res.stdout.splitlines()
        assert res.stdout.endswith("\n")
        assert all(re.match(r"\[\d\d:\d\d:\d\d\] ", ln) or ln == "" for ln in lines), out   # whole lines only
        assert re.search(r"stopping: --duration 34 s is up", res.stdout), out
        assert re.match(r"\[\d\d:\d\d:\d\d\] the demo ended \(--duration 34 s is up\)", lines[-1]), out
        findings = [ln[11:] for ln in lines if re.match(r"\[..:..:..\] (CRITICAL|WARNING|OK) ", ln)]
        assert any("symbol_errors" in f for f in findings), out
        assert any("leaf02" in f for f in findings) and any("rocel04" in f for f in findings), out
        assert len(findings) == len(set(findings)), findings                 # each printed once
        check_readme_sample([ln[11:] for ln in lines])
        assert "finding" not in res.stderr, res.stderr                        # not the collectors' log line too
        # its own shutdown is no finding: no killed tool counted as an error, no inventory verdict
        assert "exit -9" not in out and "expected_inventory" not in out, out
        assert list(cwd.iterdir()) == [], list(cwd.iterdir())                # no sys-<pid>/ left here
        assert list(tmp.iterdir()) == [], list(tmp.iterdir())                # nor in the temp dir
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
