"""Processes found by what they carry, wherever they sit in the process tree: a simulator's daemons
and jobs inherit the environment they were started with (`SLURM_CONF=<this cluster's slurm.conf>`, a
test session's marker), and a job's slurmstepd, which clears its environment and runs in a session of
its own (reparented to init once its slurmd is gone), works in the cluster's directory and listens on a
socket in its spool directory."""

from __future__ import annotations

import os

import psutil

from fabricmon.host.runner import processes_with_environment   # the runner's own sweep, on any key


def processes_in(directory: str) -> list[psutil.Process]:
    """Every process, other than this one, whose working directory or one of whose Unix sockets is in
    `directory` (or below it)."""
    root = os.path.join(os.path.abspath(directory), "")
    out = []
    me = os.getpid()
    for proc in psutil.process_iter():
        if proc.pid == me:
            continue
        try:
            paths = [os.path.join(proc.cwd(), "")]
            for c in proc.net_connections(kind="unix"):
                laddr: object = c.laddr      # a unix socket's is its path (types-psutil says an addr tuple only)
                if isinstance(laddr, str):
                    paths.append(laddr)
        except (psutil.Error, OSError):
            continue
        if any(p.startswith(root) for p in paths):
            out.append(proc)
    return out


def end(procs: list[psutil.Process], grace: float = 5.0) -> None:
    """SIGTERM these processes, SIGKILL those left after `grace` seconds."""
    for p in procs:
        try:
            p.terminate()
        except psutil.Error:
            pass
    _, alive = psutil.wait_procs(procs, timeout=grace)
    for p in alive:
        try:
            p.kill()
        except psutil.Error:
            pass
    psutil.wait_procs(alive, timeout=grace)


def kill_with_environment(key: str, value: str, grace: float = 5.0) -> list[psutil.Process]:
    """End every process whose environment has key=value; returns them."""
    procs = processes_with_environment(key, value)
    end(procs, grace)
    return procs


__all__ = ["end", "kill_with_environment", "processes_in", "processes_with_environment"]
