"""The session-end guard of tests/conftest.py (issue 41.5) finds what a test leaves running: a child
still attached to the suite, and an orphan that started a session of its own and lost its parent."""

from __future__ import annotations

import os
import subprocess
import time

import psutil

from helpers import SESSION_MARK, leftover_processes


def test_a_child_and_an_orphan_left_running_are_named() -> None:
    mark = os.environ[SESSION_MARK]            # set for the whole session by the conftest fixture
    since = time.time() - 1.0
    child = subprocess.Popen(["sleep", "600"])
    # a shell that starts `sleep` in the background and exits at once: the sleep is reparented away from us
    out = subprocess.run(["setsid", "sh", "-c", "sleep 601 >/dev/null 2>&1 & echo $!"], capture_output=True,
                         text=True, timeout=10)
    orphan = int(out.stdout.strip())
    try:
        assert orphan not in {p.pid for p in psutil.Process().children(recursive=True)}
        left = leftover_processes(mark, since, ())
        assert any(ln.startswith(f"pid {child.pid} sleep: sleep 600 (started under tests/sim/test_leftovers.py::")
                   for ln in left), left
        assert any(ln.startswith(f"pid {orphan} sleep: sleep 601 ") for ln in left), left
    finally:
        child.kill()
        child.wait()
        psutil.Process(orphan).kill()
    psutil.wait_procs([psutil.Process(orphan)] if psutil.pid_exists(orphan) else [], timeout=5)
    left = leftover_processes(mark, since, ())
    assert not [ln for ln in left if f"pid {child.pid} " in ln or f"pid {orphan} " in ln], left
