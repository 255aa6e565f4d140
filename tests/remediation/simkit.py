"""What the remediation tests on ibsim share: a `fabricmon fabric run` collector as its own process under the
simulator's preload (its MAD engine reaches ibsim: the SubnSet goes through it), its record read as an
operator reads it (`fabricmon actions --json`), the end a test set read with the real `smpquery`, and the
forwarding tables with the real `dump_fts`.

What ibsim does not do, and the tests therefore play (GUIDE 18): a port set Disabled keeps its link up at
the other end, and its own LinkState Active, and opensm only unlinks a port it reads Down, so it would go on
routing through it; real hardware takes the link down at both ends and traps to the SM. `hardware_down`
does that (ibsim's `Unlink`: both ends Down, trap 128, opensm resweeps) once the end fabricmon set reads
Disabled. Nor does ibsim train a link: a port set back to Polling stays there; `hardware_trains` retrains it
(`ReLink`, then the running opensm brings it to Active) once fabricmon re-enabled it."""

from __future__ import annotations

import contextlib
import json
import re
import socket
import subprocess
import sys
import time
from pathlib import Path

from helpers import REPO


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


class Collector:
    """`fabricmon fabric run` under the simulator's preload, its JSON log in a file; restartable."""

    def __init__(self, fab, tmp_path: Path, doc: dict, name: str = "collector"):
        self.fab, self.dir = fab, tmp_path
        self.state = tmp_path / "state"
        self.state.mkdir(exist_ok=True)
        self.cfg = tmp_path / f"{name}.yml"
        self.cfg.write_text(json.dumps({"paths": {"state_dir": str(self.state)}, "logging": {"format": "json"},
                                        **doc}))
        self.log = tmp_path / f"{name}.log"
        self.port = free_port()
        self.proc: subprocess.Popen | None = None

    def start(self) -> "Collector":
        self.proc = subprocess.Popen([sys.executable, "-m", "fabricmon", "fabric", "run", "--config", str(self.cfg),
                                      "--listen", f"127.0.0.1:{self.port}"], env=self.fab.env(self.fab.hosts[0]),
                                     stdout=subprocess.DEVNULL, stderr=open(self.log, "a"), start_new_session=True,
                                     cwd=self.dir)
        return self

    def stop(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(15)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        self.proc = None

    def alive(self) -> None:
        assert self.proc is not None and self.proc.poll() is None, self.log.read_text()[-3000:]

    def lines(self) -> list[dict]:
        out = []
        for ln in self.log.read_text().splitlines():
            if ln.startswith("{"):
                try:
                    out.append(json.loads(ln))
                except ValueError:
                    pass
        return out

    def actions(self, *extra: str) -> list[dict]:
        r = subprocess.run([sys.executable, "-m", "fabricmon", "actions", "--json", "--scope", "fabric", "--all",
                            "--config", str(self.cfg), *extra], capture_output=True, text=True, timeout=30, cwd=REPO)
        assert r.returncode == 0, r.stderr
        return json.loads(r.stdout)["fabric"]["actions"]

    def cli(self, *argv: str, timeout: float = 60) -> subprocess.CompletedProcess:
        return subprocess.run([sys.executable, "-m", "fabricmon", *argv, "--config", str(self.cfg)],
                              capture_output=True, text=True, timeout=timeout, cwd=REPO, env=self.fab.env(self.fab.hosts[0]))

    def wait(self, pred, timeout: float, what: str):
        end = time.monotonic() + timeout
        while True:
            self.alive()
            try:
                got = pred()
            except OSError:             # not listening yet
                got = None
            if got:
                return got
            assert time.monotonic() < end, f"{what}: not within {timeout} s; log tail:\n{self.log.read_text()[-4000:]}"
            time.sleep(0.2)


@contextlib.contextmanager
def in_process_collector(fab, tmp_path: Path, doc: dict):
    """`fabric run`'s Daemon in this process (as tests/helpers.fabric_collector, with the whole config `doc`): its
    tools run under the simulator's preload, this process is not, so the MAD engine does not open here and the
    sweep and the remediation's Sets go through the tools (ibqueryerrors ..., ibportstate)."""
    from fabricmon.config import from_dict
    from fabricmon.host import LiveIO
    from fabricmon.pipeline.fabric import fabric_pipeline
    from fabricmon.serve.daemon import Daemon
    (tmp_path / "state" / "fabric").mkdir(parents=True, exist_ok=True)      # fabric.cache_dir: ibnetdiscover's cache
    cfg = from_dict({**doc, "server": {"address": "127.0.0.1", "collect": ["all"]},
                     "paths": {"state_dir": str(tmp_path / "state")}, "fabric": {"port": 0, **doc.get("fabric", {})}})
    io = LiveIO(cfg.sysfs, cfg.procfs, env=fab.env(fab.hosts[0]))
    d = Daemon(cfg, io, port=0, pipeline=fabric_pipeline(cfg, io))
    d.start()
    try:
        yield d
    finally:
        d.stop()


def lids(fab) -> dict[str, int]:
    """Switch name -> LID, from the real ibnetdiscover."""
    out = fab.run_tool(fab.hosts[0], "ibnetdiscover", timeout=60).stdout
    return {m[1]: int(m[2]) for m in re.finditer(r'^Switch\s+\d+\s+"S-[0-9a-f]+"\s+#\s+"([^"]+)".*?\blid (\d+)', out, re.M)}


def port_phys(fab, lid: int, port: int) -> str:
    """The PhysLinkState the real smpquery reads at one switch port ("" when it could not, five times a
    second apart: a loaded ibsim answers late, past smpquery's own 1 s timeout; each failure printed)."""
    for attempt in range(5):
        if attempt:
            time.sleep(1.0)
        r = fab.run_tool(fab.hosts[0], "smpquery", "-t", "3000", "portinfo", str(lid), str(port), timeout=20)
        m = re.search(r"^PhysLinkState:\.*(\S+)", r.stdout, re.M)
        if m:
            return m[1]
        print(f"smpquery portinfo {lid} {port}: rc {r.returncode}: {r.stdout[-300:]} {r.stderr[-300:]}")
    return ""


def routes_through(fab, switch: str, port: int) -> list[str]:
    """The destination LIDs the switch's forwarding table sends out of `port` (the real dump_fts -n)."""
    out = fab.run_tool(fab.hosts[0], "dump_fts", "-n", timeout=60).stdout
    block = out.split(f"({switch}):", 1)[1].split("valid lids dumped", 1)[0]
    return [m[1] for m in re.finditer(r"^(0x[0-9a-f]+) 0*(\d+)", block, re.M) if int(m[2]) == port]


def hardware_down(fab, switch: str, port: int) -> None:
    """ibsim's half-disabled link as hardware has it: down at both ends, the SM told (module doc)."""
    fab.unlink(switch, port)


def hardware_trains(fab, switch: str, port: int) -> None:
    """A port fabricmon set to Polling trains (module doc): ReLink; the running opensm makes it Active."""
    fab.console(f'ReLink "{switch}"[{port}]')
