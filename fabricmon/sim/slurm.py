"""A real Slurm cluster on one machine, for tests and demos (Debian `slurm-wlm` and `munge`).

    with SimSlurm(["node01", "node02"], tmp_path) as slurm:
        job = slurm.submit("train", ["node01", "node02"])
        slurm.wait_state(job, "RUNNING")
        subprocess.run(["squeue"], env=slurm.env())

Everything lives under `workdir`: a munge key generated for this cluster (1,024 random bytes,
mode 400), `slurm.conf`, the controller's state and the logs. Its sockets do not: a Unix socket's
path holds 108 bytes, and a step's (`<spool>/<node>/<node>_<job>.<step>`) under a test's deep
temporary directory (a pytest-xdist worker's adds a level) passed that, so `munged`'s socket and one
spool directory per node (`SlurmdSpoolDir=<sockets>/%n`) live in a short directory of the cluster's
own in the system temp directory (`sockets`), made by start() and removed by stop(). `slurmctld` and one
`slurmd -N <name>` per node run in the foreground (`-D`) on 127.0.0.1, each on a free port of
its own, so several clusters can run side by side; name the nodes after the ibsim hosts and a
job lands "on" a simulated host. Every wait is bounded. `stop()` cancels the jobs, waits for
them to end (a running job keeps its slurmstepd alive), then stops the slurmds, slurmctld and
munged by their PIDs; it is registered with atexit too.

In a container `ProctrackType=proctrack/linuxproc`, `TaskPlugin=task/none` and
`SlurmUser=root` work; the harness must run as root (slurmd switches to the job's user).
"""

from __future__ import annotations

import atexit
import os
import shutil
import socket
import subprocess
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

from fabricmon.parsers.slurm import SQUEUE_FORMAT, parse_squeue
from fabricmon.sim.fabric import log_tail, pdeathsig_fn, stop_process
from fabricmon.sim.ports import free_ports
from fabricmon.sim.procs import end, processes_in, processes_with_environment

PROGRAMS = ("munged", "slurmctld", "slurmd", "sbatch", "squeue", "scancel", "scontrol", "sinfo")


def tools_available() -> tuple[bool, str]:
    """(ok, why not): the Slurm and munge programs are installed and we are root."""
    missing = [p for p in PROGRAMS if shutil.which(p) is None and not os.path.exists(f"/usr/sbin/{p}")]
    if missing:
        return False, f"Slurm/munge not installed (missing {', '.join(missing)}; apt install slurm-wlm munge)"
    if os.geteuid() != 0:
        return False, "the Slurm harness needs root (slurmd runs jobs as their user)"
    return True, ""


def _program(name: str) -> str:
    return shutil.which(name) or f"/usr/sbin/{name}"


class SlurmError(RuntimeError):
    pass


class SimSlurm:
    def __init__(self, nodes: list[str], workdir: Path, cluster: str = "fabricmon",
                 topology_conf: str | None = None) -> None:
        """`topology_conf`: a topology.conf written beside slurm.conf, with
        `TopologyPlugin=topology/tree` (None: no topology plugin)."""
        if not nodes:
            raise ValueError("SimSlurm needs at least one node")
        self.nodes = list(nodes)
        self.dir = Path(workdir).absolute()
        self.cluster = cluster
        self.topology_conf = topology_conf
        self.conf = self.dir / "slurm.conf"
        self.sockets: Path | None = None        # the short directory of the sockets (start() makes it)
        self.munged: subprocess.Popen[bytes] | None = None
        self.slurmctld: subprocess.Popen[bytes] | None = None
        self.slurmds: dict[str, subprocess.Popen[bytes]] = {}
        self.ctld_port = 0
        self.node_ports: dict[str, int] = {}
        self._started = False

    # --- environment ------------------------------------------------------------------
    def env(self) -> dict[str, str]:
        """The environment for Slurm clients (and fabricmon) to use this cluster."""
        return {**os.environ, "SLURM_CONF": str(self.conf)}

    @property
    def munge_socket(self) -> Path:
        assert self.sockets is not None, "SimSlurm.start() first"
        return self.sockets / "munge.socket"

    def spool_dir(self, node: str) -> Path:
        assert self.sockets is not None, "SimSlurm.start() first"
        return self.sockets / node

    def run(self, argv: list[str], timeout: float = 15.0, check: bool = True) -> subprocess.CompletedProcess[str]:
        res = subprocess.run([_program(argv[0]), *argv[1:]], env=self.env(), capture_output=True, text=True,
                             timeout=timeout)
        if check and res.returncode != 0:
            raise SlurmError(f"{' '.join(argv)}: exit {res.returncode}: {res.stderr.strip()[:500]}")
        return res

    # --- start ------------------------------------------------------------------------
    def _popen(self, argv: list[str], log: Path) -> subprocess.Popen[bytes]:
        with open(log, "ab") as out:
            return subprocess.Popen([_program(argv[0]), *argv[1:]], stdin=subprocess.DEVNULL, stdout=out,
                                    stderr=subprocess.STDOUT, env=self.env(), cwd=self.dir,
                                    start_new_session=True, preexec_fn=pdeathsig_fn())

    def _write_conf(self) -> None:
        host = socket.gethostname()
        lines = [
            f"ClusterName={self.cluster}",
            f"SlurmctldHost={host}(127.0.0.1)",
            f"SlurmctldPort={self.ctld_port}",
            "SlurmUser=root", "SlurmdUser=root",
            "AuthType=auth/munge", "CredType=cred/munge",
            f"AuthInfo=socket={self.munge_socket}",
            f"StateSaveLocation={self.dir / 'state'}",
            f"SlurmdSpoolDir={self.sockets}/%n",
            f"SlurmctldPidFile={self.dir / 'slurmctld.pid'}",
            f"SlurmdPidFile={self.dir / 'run'}/slurmd-%n.pid",
            f"SlurmctldLogFile={self.dir / 'log' / 'slurmctld.log'}",
            f"SlurmdLogFile={self.dir / 'log'}/slurmd-%n.log",
            "ProctrackType=proctrack/linuxproc", "TaskPlugin=task/none",
            "JobAcctGatherType=jobacct_gather/none", "AccountingStorageType=accounting_storage/none",
            "JobCompType=jobcomp/none", "SchedulerType=sched/builtin", "SelectType=select/linear",
            "MpiDefault=none", "ReturnToService=2", "SlurmctldTimeout=10", "SlurmdTimeout=30",
            "InactiveLimit=0", "MinJobAge=2", "KillWait=2", "MessageTimeout=5",
            "SlurmctldParameters=enable_configless",
        ]
        for n in self.nodes:
            lines.append(f"NodeName={n} NodeHostname={host} NodeAddr=127.0.0.1 Port={self.node_ports[n]} "
                         f"CPUs=1 State=UNKNOWN")
        lines.append(f"PartitionName=all Nodes={','.join(self.nodes)} Default=YES MaxTime=INFINITE State=UP")
        if self.topology_conf is not None:
            lines.append("TopologyPlugin=topology/tree")
            (self.dir / "topology.conf").write_text(self.topology_conf)
        self.conf.write_text("\n".join(lines) + "\n")

    def start(self, timeout: float = 30.0) -> SimSlurm:
        ok, why = tools_available()
        if not ok:
            raise SlurmError(why)
        for sub in ("munge", "state", "log", "run"):
            (self.dir / sub).mkdir(parents=True, exist_ok=True)
        self.sockets = Path(tempfile.mkdtemp(prefix="fmslurm-"))
        # munged wants its socket's directories searchable by all; --force lets it run below a
        # private parent (pytest's tmp_path), which only root's jobs use here
        os.chmod(self.dir / "munge", 0o755)
        os.chmod(self.sockets, 0o755)
        key = self.dir / "munge" / "munge.key"
        key.write_bytes(os.urandom(1024))
        os.chmod(key, 0o400)
        ports = free_ports(1 + len(self.nodes))
        self.ctld_port, self.node_ports = ports[0], dict(zip(self.nodes, ports[1:]))
        self._write_conf()
        self._started = True
        atexit.register(self.stop)
        m = self.dir / "munge"
        self.munged = self._popen(["munged", "-F", "--force", f"--socket={self.munge_socket}", f"--key-file={key}",
                                   f"--pid-file={m / 'munged.pid'}",
                                   f"--seed-file={m / 'munged.seed'}", "--num-threads=2"], m / "munged.out")
        self._wait(lambda: self.munge_socket.exists(), 10.0, "munged socket", m / "munged.out")
        self.start_controller(timeout)
        for n in self.nodes:
            self.slurmds[n] = self._popen(["slurmd", "-D", "-f", str(self.conf), "-N", n],
                                          self.dir / "log" / f"slurmd-{n}.out")
        self._wait(self._all_idle, timeout, "every node idle", self.dir / "log" / "slurmctld.log")
        return self

    def start_controller(self, timeout: float = 30.0) -> None:
        """Start slurmctld (again, after stop_controller); returns once it answers."""
        self.slurmctld = self._popen(["slurmctld", "-D", "-f", str(self.conf)], self.dir / "log" / "slurmctld.out")
        self._wait(lambda: self.run(["sinfo", "-h"], check=False, timeout=10).returncode == 0, timeout,
                   "slurmctld answering", self.dir / "log" / "slurmctld.log")

    def stop_controller(self) -> None:
        """Stop slurmctld by its PID (the slurmds and their jobs keep running)."""
        stop_process(self.slurmctld, grace=10.0)
        self.slurmctld = None

    def _all_idle(self) -> bool:
        res = self.run(["sinfo", "-h", "-N", "-o", "%N %t"], check=False, timeout=10)
        states = dict(line.split() for line in res.stdout.splitlines() if len(line.split()) == 2)
        return res.returncode == 0 and all(states.get(n) == "idle" for n in self.nodes)

    def _wait(self, pred: Callable[[], bool], timeout: float, what: str, log: Path) -> None:
        end = time.monotonic() + timeout
        while not pred():
            for name, proc in (("munged", self.munged), ("slurmctld", self.slurmctld), *self.slurmds.items()):
                if proc is not None and proc.poll() is not None:
                    raise SlurmError(f"{name} exited ({proc.returncode}) waiting for {what}:\n{log_tail(log)}")
            if time.monotonic() > end:
                raise SlurmError(f"timed out after {timeout:g}s waiting for {what}:\n{log_tail(log)}")
            time.sleep(0.2)

    # --- jobs -------------------------------------------------------------------------
    def submit(self, name: str, nodes: list[str], seconds: int = 600) -> str:
        """A batch job on exactly these nodes running `srun sleep <seconds>` (a step on every
        node); returns its job id."""
        res = self.run(["sbatch", "--parsable", "-J", name, "-N", str(len(nodes)), "-w", ",".join(nodes),
                        "-o", "/dev/null", "--wrap", f"srun sleep {int(seconds)}"])
        return res.stdout.strip().split(";")[0]

    def jobs(self) -> dict[str, str]:
        """job id -> state of every job slurmctld still knows."""
        res = self.run(["squeue", "--noheader", "--states=all", f"--format={SQUEUE_FORMAT}"], check=False)
        return {j.job_id: j.state for j in parse_squeue(res.stdout)[0]}

    def steps_on(self, node: str) -> list[str]:
        try:
            return sorted(n for n in os.listdir(self.spool_dir(node)) if n.startswith(node + "_"))
        except OSError:
            return []

    def wait_running(self, job: str, timeout: float = 30.0) -> None:
        """Until the job runs and its `srun` step is up on every node it has (a step socket each)."""
        def running() -> bool:
            got = parse_squeue(self.run(["squeue", "--noheader", "-j", job, "--states=all",
                                         f"--format={SQUEUE_FORMAT}"], check=False).stdout)[0]
            return bool(got) and got[0].state == "RUNNING" and all(
                f"{n}_{job}.0" in self.steps_on(n) for n in got[0].nodes)
        self._wait(running, timeout, f"job {job} running", self.dir / "log" / "slurmctld.log")

    def cancel(self, job: str, timeout: float = 30.0) -> None:
        """scancel the job and wait until no step socket of it is left on any node."""
        self.run(["scancel", job], check=False)

        def gone() -> bool:
            return not any(f"_{job}." in s for n in self.nodes for s in self.steps_on(n))
        self._wait(gone, timeout, f"job {job} ended", self.dir / "log" / "slurmctld.log")

    # --- stop -------------------------------------------------------------------------
    def stop(self) -> None:
        """Cancel every job, then stop the slurmds, slurmctld and munged by PID (GUIDE 10). A job's
        slurmstepd runs in its own session and outlives its slurmd, so jobs are cancelled through a
        controller: one stopped mid-test (stop_controller) is started again for that. What still runs
        of the cluster afterwards (its SLURM_CONF in the environment, or a slurmstepd working in its
        directory) is ended, so nothing of the cluster outlives stop()."""
        if not self._started:
            return
        self._started = False
        try:
            atexit.unregister(self.stop)
        except Exception:       # pragma: no cover
            pass
        if any(self.steps_on(n) for n in self.nodes):
            self._cancel_all()
        for proc in self.slurmds.values():
            stop_process(proc, grace=10.0)
        self.slurmds = {}
        stop_process(self.slurmctld, grace=10.0)
        self.slurmctld = None
        stop_process(self.munged, grace=5.0)
        self.munged = None
        end(list({p.pid: p for p in processes_with_environment("SLURM_CONF", str(self.conf))
                  + processes_in(str(self.dir)) + processes_in(str(self.sockets))}.values()))
        if self.sockets is not None:
            shutil.rmtree(self.sockets, ignore_errors=True)

    def _cancel_all(self, timeout: float = 20.0) -> None:
        try:
            if self.slurmctld is None or self.slurmctld.poll() is not None:
                self.start_controller()
            self.run(["scancel", "--full", "--partition=all"], check=False, timeout=10)
            end = time.monotonic() + timeout
            while time.monotonic() < end and any(self.steps_on(n) for n in self.nodes):
                time.sleep(0.2)
        except (SlurmError, subprocess.SubprocessError, OSError):
            pass            # the environment sweep in stop() ends what could not be cancelled

    def __enter__(self) -> SimSlurm:
        try:
            return self.start()
        except BaseException:
            self.stop()
            raise

    def __exit__(self, *exc: object) -> None:
        self.stop()


__all__ = ["SimSlurm", "SlurmError", "free_ports", "tools_available"]
