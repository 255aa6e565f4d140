"""`fabricmon demo` on a port another process holds (issue 53, item 7): it printed the node's URL, then
`cannot listen: [Errno 98] Address already in use (not a config error: exit 75, systemd retries)`, naming
neither the port nor the option that moves it, with a systemd hint that means nothing in a demo. Now one
line names the address:port it tried, whose port that is, and `--port` (with make: DEMO_ARGS); no word of
systemd; the simulators it started are stopped all the same."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest

from fabricmon.sim.fabric import tools_available
from fabricmon.sim.ports import free_ports
from helpers import REPO, unavailable

pytestmark = pytest.mark.sim      # the demo starts ibsim (and opensm) itself


@pytest.mark.parametrize("offset, whose", [(0, "the node daemon's port, --port"),
                                           (2, "the fabric collector's port, --port + 2")])
def test_a_port_in_use_names_the_port_and_the_option(tmp_path: Path, offset: int, whose: str) -> None:
    ok, why = tools_available()
    if not ok:
        unavailable(f"the fabric simulator cannot run ({why}): install ibsim-utils libumad2sim0 infiniband-diags opensm")
    tmp = Path(tempfile.mkdtemp(prefix="fabricmon-busy-test-"))
    tmp.chmod(0o755)
    # four ports in a row, free now: the demo's P, P+2 and P+3; the one at `offset` held by this test
    base = next(p for p in free_ports(64) if all(_free(p + i) for i in range(4)))
    with socket.socket() as busy:
        busy.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        busy.bind(("127.0.0.1", base + offset))
        busy.listen()
        res = subprocess.run([sys.executable, "-m", "fabricmon", "demo", "--port", str(base), "--duration", "60",
                              "--fault-after", "3600"], capture_output=True, text=True, timeout=120, cwd=tmp_path,
                             env={**os.environ, "TMPDIR": str(tmp), "PYTHONPATH": str(REPO)})
    assert res.returncode == 75, (res.returncode, res.stdout, res.stderr)
    assert "Traceback" not in res.stderr and "systemd" not in res.stdout + res.stderr, res.stderr
    where = f"127.0.0.1:{base + offset}"
    assert res.stderr.splitlines() == [
        f"fabricmon: cannot listen on {where} ({whose}): Address already in use: another process holds the port; "
        f"the demo listens on --port P, P+2 and P+3 ({base}, {base + 2}, {base + 3}): start it with another --port "
        f"(make demo DEMO_ARGS='--port P'), or --port 0 for any free ports"], res.stderr
    assert list(tmp.iterdir()) == [], list(tmp.iterdir())       # its temp dir and simulators are gone
    os.rmdir(tmp)


def _free(port: int) -> bool:
    with socket.socket() as s:
        try:
            s.bind(("127.0.0.1", port))
        except OSError:
            return False
    return True
