"""The Slurm harness (fabricmon.sim.slurm): a real slurmctld and one slurmd per simulated host on
127.0.0.1; jobs land on the named nodes, leave their step sockets in that node's spool
directory, and everything stops by PID."""

from __future__ import annotations

import os

import pytest

from fabricmon.parsers.slurm import SQUEUE_FORMAT, expand_hostlist, parse_squeue, step_jobs
from helpers import wait_until


@pytest.fixture
def slurm(sim_slurm):
    return sim_slurm(["node01", "node02", "node03"])


def _alive(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat") as fh:
            return fh.read().split(")")[-1].split()[0] != "Z"
    except OSError:
        return False


def test_jobs_land_on_named_nodes_and_stop(slurm):
    two = slurm.submit("two-nodes", ["node01", "node02"])
    one = slurm.submit("one-node", ["node03"])
    slurm.wait_running(two)
    slurm.wait_running(one)
    out = slurm.run(["squeue", "--noheader", f"--format={SQUEUE_FORMAT}"]).stdout
    jobs = {j.job_id: j for j in parse_squeue(out)[0]}
    assert jobs[two].nodes == ("node01", "node02") and jobs[one].nodes == ("node03",)
    nodelist = slurm.run(["squeue", "--noheader", "-j", two, "--format=%N"]).stdout.strip()
    assert expand_hostlist(nodelist) == slurm.run(["scontrol", "show", "hostnames", nodelist]).stdout.split()
    assert step_jobs(os.listdir(slurm.spool_dir("node01")), "node01") == [two]
    assert step_jobs(os.listdir(slurm.spool_dir("node03")), "node03") == [one]
    slurm.cancel(two)
    assert step_jobs(os.listdir(slurm.spool_dir("node01")), "node01") == []
    pids = [p.pid for p in (slurm.munged, slurm.slurmctld, *slurm.slurmds.values())]
    slurm.stop()
    assert not any(_alive(p) for p in pids)


def test_stop_ends_every_job_even_with_the_controller_stopped(slurm):
    """Issue 41.5: a test that stopped slurmctld mid-run (test_fabric_findings_name_only_the_jobs_they_hurt)
    left its jobs' slurmstepd and `srun sleep 600` running for good, orphaned. stop() cancels them
    through a controller it starts again, and ends what still carries the cluster's SLURM_CONF."""
    from fabricmon.sim.procs import processes_in, processes_with_environment

    def cluster() -> dict:
        return {p.pid: p for p in processes_with_environment("SLURM_CONF", str(slurm.conf))
                + processes_in(str(slurm.dir))}
    jobs = [slurm.submit("left-a", ["node01"]), slurm.submit("left-b", ["node02", "node03"])]
    for j in jobs:
        slurm.wait_running(j)
    # a job is RUNNING once slurmd took it; its batch script then starts srun, whose step starts sleep (on a
    # loaded machine some seconds later): wait for every kind of process stop() must end
    want = {"slurmstepd", "srun", "sleep", "slurmd", "slurmctld", "munged"}
    def kinds(procs: dict) -> set[str]:
        return {p.name() for p in procs.values()}
    mine = wait_until(cluster, 30, lambda: f"every kind running: {want} (running: {kinds(cluster())})",
                      until=lambda procs: want <= kinds(procs), interval=0.2)
    slurm.stop_controller()
    slurm.stop()
    assert cluster() == {}
    assert not any(_alive(pid) for pid in mine)
