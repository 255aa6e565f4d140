"""A one-member etcd (Debian `etcd-server`) on 127.0.0.1 for tests and benchmarks: its data in a directory of
the caller's, its client and peer ports told to it (fabricmon.sim.ports), stopped by its PID.

    with Etcd(tmp_path / "etcd") as e:
        e.url          # http://127.0.0.1:<port>, the v3 gateway's address
"""

from __future__ import annotations

import json
import shutil
import subprocess
import time
import urllib.request
from pathlib import Path

from fabricmon.sim.fabric import stop_process
from fabricmon.sim.ports import free_port


class Etcd:
    def __init__(self, workdir: Path, name: str = "fm"):
        self.workdir = Path(workdir)
        self.name = name
        self.client_port = free_port()
        self.peer_port = free_port()
        self.url = f"http://127.0.0.1:{self.client_port}"
        self.proc: subprocess.Popen[bytes] | None = None

    def __enter__(self) -> "Etcd":
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def start(self, timeout: float = 30.0) -> "Etcd":
        exe = shutil.which("etcd")
        if exe is None:
            raise RuntimeError("etcd not found: install the Debian package etcd-server")
        self.workdir.mkdir(parents=True, exist_ok=True)
        peer = f"http://127.0.0.1:{self.peer_port}"
        log = open(self.workdir / "etcd.log", "wb")
        self.proc = subprocess.Popen(
            [exe, "--name", self.name, "--data-dir", str(self.workdir / "data"),
             "--listen-client-urls", self.url, "--advertise-client-urls", self.url,
             "--listen-peer-urls", peer, "--initial-advertise-peer-urls", peer,
             "--initial-cluster", f"{self.name}={peer}", "--log-level", "warn", "--logger", "zap"],
            stdin=subprocess.DEVNULL, stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
        log.close()
        end = time.monotonic() + timeout
        while True:
            if self.proc.poll() is not None:
                raise RuntimeError(f"etcd exited {self.proc.returncode}: "
                                   f"{(self.workdir / 'etcd.log').read_text(errors='replace')[-2000:]}")
            try:
                with urllib.request.urlopen(self.url + "/health", timeout=2) as r:
                    if json.loads(r.read()).get("health") == "true":
                        return self
            except (OSError, ValueError):
                pass
            if time.monotonic() > end:
                raise RuntimeError(f"etcd not healthy within {timeout:g} s")
            time.sleep(0.1)

    def stop(self) -> None:
        stop_process(self.proc)


__all__ = ["Etcd"]
