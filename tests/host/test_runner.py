"""Tests for fabricmon.host.runner.run_command: timeouts kill the whole tree, results never raise."""

from __future__ import annotations

import os
import sys
import textwrap
import time
from pathlib import Path

import psutil
import pytest

from fabricmon.host.runner import CommandResult, run_command
from helpers import wait_until

PY = sys.executable


def _alive(pid: int) -> bool:
    try:
        return psutil.Process(pid).status() != psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return False


def _wait_dead(pids: list[int], within: float = 3.0) -> list[int]:
    """PIDs still alive after `within` seconds (a killed orphan is reaped by init shortly)."""
    def alive() -> list[int]:
        return [p for p in pids if _alive(p)]
    try:
        return wait_until(alive, within, until=lambda left: not left)
    except AssertionError:
        return alive()


def _read_pids(path: Path, n: int, within: float = 5.0) -> list[int]:
    def recorded() -> list[int]:
        return [int(x) for x in path.read_text().split()] if path.exists() else []
    return wait_until(recorded, within, f"{path}: the test script recording {n} pid(s)",
                      until=lambda pids: len(pids) >= n, interval=0.02)


@pytest.fixture
def reaper():
    """Kill (by PID) anything a failing test left behind."""
    pids: list[int] = []
    yield pids
    for pid in pids:
        try:
            psutil.Process(pid).kill()
        except psutil.Error:
            pass


def _script(tmp_path: Path, name: str, body: str) -> Path:
    f = tmp_path / name
    f.write_text(textwrap.dedent(body).lstrip())
    return f


def test_success_captures_stdout_and_stderr() -> None:
    res = run_command([PY, "-c", "import sys; print('hello'); print('warn', file=sys.stderr)"], 10)
    assert res.ok
    assert (res.returncode, res.error) == (0, None)
    assert res.stdout == "hello\n" and res.stderr == "warn\n"
    assert res.argv[0] == PY and isinstance(res.argv, tuple)
    assert res.duration >= 0


def test_nonzero_exit_keeps_stdout() -> None:
    res = run_command(["sh", "-c", "echo 'CA mlx5_0 partial'; echo 'ibpanic: boom' >&2; exit 255"], 10)
    assert not res.ok
    assert res.returncode == 255
    assert res.error is None
    assert res.stdout == "CA mlx5_0 partial\n"
    assert "ibpanic: boom" in res.stderr
    assert "exit 255" in res.describe() and "ibpanic: boom" in res.describe()


def test_missing_tool_is_not_found() -> None:
    res = run_command(["/nonexistent/fabricmon-no-such-tool", "-x"], 5)
    assert res.error == "not_found"
    assert res.returncode is None and not res.ok
    assert "command not found" in res.describe()
    res = run_command(["fabricmon-no-such-tool-on-path"], 5)
    assert res.error == "not_found"


def test_non_executable_file_is_exec_error(tmp_path: Path) -> None:
    f = tmp_path / "not-exec"
    f.write_text("#!/bin/sh\necho hi\n")
    f.chmod(0o644)
    res = run_command([str(f)], 5)
    assert res.error == "exec_error"
    assert not res.ok and res.stderr


def test_env_is_passed_exactly() -> None:
    res = run_command([PY, "-c", "import os; print(os.environ.get('FM_TEST_VAR'))"], 10,
                      env={"FM_TEST_VAR": "sim-7", "PATH": os.environ.get("PATH", "")})
    assert res.stdout.strip() == "sim-7"


def test_stdin_is_not_inherited() -> None:
    """A tool must not read the daemon's stdin. pytest points fd 0 at /dev/null, which would hide
    an inherited stdin, so fd 0 is made a real open pipe holding data here: a child that
    inherited it would print that data (or block on it), one given /dev/null reads nothing."""
    r, w = os.pipe()
    saved = os.dup(0)
    try:
        os.write(w, b"the daemon's stdin\n")       # w stays open: an inherited stdin never ends
        os.dup2(r, 0)
        res = run_command([PY, "-c", "import os; print(repr(os.read(0, 64)))"], 10)
    finally:
        os.dup2(saved, 0)
        for fd in (saved, r, w):
            os.close(fd)
    assert res.ok, res.describe()
    assert res.stdout.strip() == "b''"


def test_hanging_command_is_killed_at_the_timeout() -> None:
    t0 = time.monotonic()
    res = run_command(["sleep", "1000"], 0.5)
    elapsed = time.monotonic() - t0
    assert res.error == "timeout"
    assert res.returncode is None and not res.ok
    assert 0.4 <= elapsed < 5, elapsed
    assert "timed out" in res.describe() and "process group killed" in res.describe()


def test_output_before_a_timeout_is_kept() -> None:
    res = run_command([PY, "-u", "-c", "import time; print('CA first'); time.sleep(1000)"], 1.0)
    assert res.error == "timeout"
    assert "CA first" in res.stdout


def test_background_child_in_the_group_is_killed(tmp_path: Path, reaper: list[int]) -> None:
    pidfile = tmp_path / "pids"
    s = _script(tmp_path, "bg.py", f"""
        import os, subprocess, time
        child = subprocess.Popen(["sleep", "1000"])
        with open({str(pidfile)!r}, "w") as fh:
            fh.write(f"{{os.getpid()}} {{child.pid}}")
        time.sleep(1000)
    """)
    res = run_command([PY, str(s)], 1.0)
    pids = _read_pids(pidfile, 2)
    reaper.extend(pids)
    assert res.error == "timeout"
    assert _wait_dead(pids) == []


def test_setsid_child_that_left_the_group_is_killed(tmp_path: Path, reaper: list[int]) -> None:
    pidfile = tmp_path / "pids"
    s = _script(tmp_path, "setsid.py", f"""
        import os, subprocess, sys, time
        ready = {str(tmp_path / "setsid-done")!r}
        child = subprocess.Popen([sys.executable, "-c", "import os, sys, time; os.setsid(); "
                                  "open(sys.argv[1], 'w').close(); time.sleep(1000)", ready])
        grandchild = subprocess.Popen(["sleep", "1000"], start_new_session=True)
        while not os.path.exists(ready):           # until the child has left the group
            time.sleep(0.01)
        with open({str(pidfile)!r}, "w") as fh:
            fh.write(f"{{os.getpid()}} {{child.pid}} {{grandchild.pid}}")
        time.sleep(1000)
    """)
    res = run_command([PY, str(s)], 1.5)
    pids = _read_pids(pidfile, 3)
    reaper.extend(pids)
    assert res.error == "timeout"
    # the children really had left our process group
    assert _wait_dead(pids) == []


def test_deep_tree_is_killed(tmp_path: Path, reaper: list[int]) -> None:
    pidfile = tmp_path / "pids"
    s = _script(tmp_path, "deep.sh", f"""
        #!/bin/sh
        sh -c 'sleep 1000 & echo $! >> {pidfile}; setsid sleep 1000 & echo $! >> {pidfile}; sleep 1000' &
        echo $! >> {pidfile}
        echo $$ >> {pidfile}
        sleep 1000
    """)
    s.chmod(0o755)
    res = run_command([str(s)], 1.0)
    pids = _read_pids(pidfile, 4)
    reaper.extend(pids)
    assert res.error == "timeout"
    assert _wait_dead(pids) == []


def test_exited_tool_leaves_no_background_child(tmp_path: Path, reaper: list[int]) -> None:
    """The tool exits at once but left a child (pipes closed) in its group: killed on return."""
    pidfile = tmp_path / "pids"
    s = _script(tmp_path, "leaver.py", f"""
        import subprocess
        child = subprocess.Popen(["sleep", "1000"], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        open({str(pidfile)!r}, "w").write(str(child.pid))
        print("done")
    """)
    t0 = time.monotonic()
    res = run_command([PY, str(s)], 10)
    pids = _read_pids(pidfile, 1)
    reaper.extend(pids)
    assert res.ok and res.stdout == "done\n"
    assert time.monotonic() - t0 < 5
    assert _wait_dead(pids) == []


def test_orphan_that_left_the_session_and_holds_the_pipe_is_killed(tmp_path: Path,
                                                                    reaper: list[int]) -> None:
    """The tool exits, but a setsid() grandchild (re-parented away, so no longer a descendant)
    keeps stdout open: run_command must still return at the timeout and kill it."""
    pidfile = tmp_path / "pids"
    s = _script(tmp_path, "orphan.py", f"""
        import subprocess, sys
        child = subprocess.Popen(["sleep", "1000"], start_new_session=True)   # inherits stdout
        open({str(pidfile)!r}, "w").write(str(child.pid))
        print("parent done", flush=True)
    """)
    t0 = time.monotonic()
    res = run_command([PY, str(s)], 1.0)
    elapsed = time.monotonic() - t0
    pids = _read_pids(pidfile, 1)
    reaper.extend(pids)
    assert res.error == "timeout"
    assert elapsed < 5, elapsed
    assert _wait_dead(pids) == []


def test_large_output_is_not_a_deadlock() -> None:
    res = run_command([PY, "-c", "import sys; sys.stdout.write('x' * 3_000_000)"], 20)
    assert res.ok and len(res.stdout) == 3_000_000


def test_invalid_utf8_is_replaced_not_raised() -> None:
    res = run_command([PY, "-c", "import sys; sys.stdout.buffer.write(b'ok \\xff\\xfe end')"], 10)
    assert res.ok and res.stdout.startswith("ok ") and res.stdout.endswith(" end")


def test_describe_of_a_clean_failure_uses_the_last_line() -> None:
    r = CommandResult(("perfquery", "-x"), 255, "", "ibwarn: x\nperfquery: iberror: failed: y\n", 0.1)
    assert r.describe() == "perfquery -x: exit 255: perfquery: iberror: failed: y"


def test_output_cut_at_the_bound_is_marked_and_an_error_of_the_source(monkeypatch) -> None:
    from fabricmon.host import runner
    from fabricmon.pipeline.source import command_error
    monkeypatch.setattr(runner, "MAX_OUTPUT", 1000)
    res = runner.run_command([sys.executable, "-c", "print('x' * 5000)"], 10)
    assert res.ok and res.truncated and len(res.stdout) == 1000
    assert command_error(res) == ("read", res.describe()) and "output longer than 0.000953674 MiB" in res.describe()
    whole = runner.run_command([sys.executable, "-c", "print('x' * 500)"], 10)
    assert not whole.truncated and command_error(whole) is None
