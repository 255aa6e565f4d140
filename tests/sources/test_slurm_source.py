"""The node's slurm source on a scripted host: job ids from step sockets, one lookup per job,
jobs that ended between the two reads or run elsewhere never claimed, slurmctld down costing
only the names."""

from __future__ import annotations

import errno
import os

from helpers import run_inputs

from fabricmon.config import from_dict
from fabricmon.host.runner import CommandResult
from fabricmon.model.jobs import JobRef
from fabricmon.sources.slurm import SlurmSource


class Host:
    """A node: its slurm.conf, its spool directory listing and what squeue answers."""

    def __init__(self, sockets, squeue, conf="SlurmdSpoolDir=/var/spool/slurmd/%n\n"):
        self.sockets = sockets
        self.squeue = squeue          # callable(argv) -> CommandResult
        self.conf = conf
        self.calls: list[list[str]] = []

    def hostname(self):
        return "node07.cluster.example"

    def read_host_file(self, path):
        return self.conf

    def list_host_dir(self, path):
        assert path == "/var/spool/slurmd/node07"
        if self.sockets is None:
            raise FileNotFoundError(errno.ENOENT, "no such directory", path)
        return list(self.sockets)

    def run(self, argv, timeout):
        self.calls.append(list(argv))
        return self.squeue(argv)


def answer(lines: str, rc: int = 0, stderr: str = "", error=None):
    return lambda argv: CommandResult(tuple(argv), rc, lines, stderr, 0.01, error)


def source(**slurm) -> SlurmSource:
    return SlurmSource(from_dict({"slurm": slurm}, check_paths=False).sources["slurm"])


def test_jobs_from_step_sockets_looked_up_once():
    host = Host(["node07_12.0", "node07_12.4294967291", "node08_13.0", "cred_state"],
                answer("12|alice|RUNNING|node[07-08]|train llm\n"))
    src = source()
    for _ in range(3):
        out = src.collect(host, run_inputs())
        assert out.errors == []
        assert out.data.jobs == {"12": JobRef("12", "alice", "train llm")}
    assert len(host.calls) == 1 and host.calls[0][-1] == "--jobs=12"
    assert out.data.node == "node07"        # the short host name


def test_a_job_that_ended_between_the_reads_is_not_claimed():
    host = Host(["node07_20.0", "node07_21.0"], answer("20|bob|COMPLETED|node07|done\n"))
    out = source().collect(host, run_inputs())
    # 20 finished after its socket was listed; 21 is unknown to slurmctld (purged): neither runs
    assert out.data.jobs == {} and out.data.ended == 2
    host.sockets = []
    assert source().collect(host, run_inputs()).data.jobs == {}


def test_a_job_on_another_node_is_never_claimed():
    host = Host(["node07_30.0"], answer("30|eve|RUNNING|node[01-02]|other\n"))
    assert source().collect(host, run_inputs()).data.jobs == {}


def test_single_invalid_job_id_is_an_ended_job_not_a_failure():
    host = Host(["node07_31.0"], answer("", 1, "slurm_load_jobs error: Invalid job id specified\n"))
    out = source().collect(host, run_inputs())
    assert out.data.jobs == {} and out.data.lookup_failures == 0


def test_jobs_hidden_by_private_data_are_a_source_error_with_the_fix(monkeypatch):
    """PrivateData=jobs: squeue, as a user that is not root, SlurmUser or an operator, answers a running job
    of another user as it answers an ended one (measured with a real slurmctld as the service user:
    tests/deployed/). A job squeue did not show whose step socket stays two polls is hidden: an error
    naming the jobs, the setting, the user and the fix; the jobs stay unclaimed. Once the user may see
    them (asked again after lookup_retry) they are claimed and the error clears."""
    import pwd
    conf = "SlurmdSpoolDir=/var/spool/slurmd/%n\nPrivateData=accounts,jobs\n"
    host = Host(["node07_50.0", "node07_51.0"], answer("", 1, "slurm_load_jobs error: Invalid job id specified\n"),
                conf=conf)
    src = source()
    for _ in range(2):          # looked up, then seen once more: not yet told from an ended job
        out = src.collect(host, run_inputs())
        assert out.errors == [] and out.data.jobs == {}
    out = src.collect(host, run_inputs())
    who = pwd.getpwuid(os.geteuid()).pw_name
    assert out.errors == [("read", f"squeue does not show job(s) 50,51 whose steps run on this node: slurm.conf "
                                   f"PrivateData=accounts,jobs hides other users' jobs from user {who}, so no finding "
                                   f"can name them: make {who} a Slurm operator (sacctmgr modify user {who} set "
                                   "adminlevel=operator) or take jobs out of PrivateData")]
    assert out.data.jobs == {} and out.data.ended == 2         # each counted ended once, not at every ask
    host.squeue = answer("50|alice|RUNNING|node07|train\n51|bob|RUNNING|node07|eval\n")    # now an operator
    src._hidden_retry_at = 0.0          # lookup_retry (60 s) has passed
    out = src.collect(host, run_inputs())       # asked again: the error is still this poll's
    out = src.collect(host, run_inputs())
    assert out.errors == [] and set(out.data.jobs) == {"50", "51"}
    # a job that really ended under PrivateData: its socket goes, no error
    host.sockets, host.squeue = ["node07_52.0"], answer("", 1, "slurm_load_jobs error: Invalid job id specified\n")
    assert src.collect(host, run_inputs()).errors == []
    host.sockets = []
    for _ in range(3):
        assert src.collect(host, run_inputs()).errors == []
    # without PrivateData an unshown job is an ended one, whatever its socket does
    host = Host(["node07_53.0"], answer("", 1, "slurm_load_jobs error: Invalid job id specified\n"))
    src = source()
    assert all(src.collect(host, run_inputs()).errors == [] for _ in range(4))


def test_slurmctld_down_costs_only_the_names(monkeypatch):
    host = Host(["node07_40.0"], answer("", None, "", error="timeout"))
    src = source(lookup_retry=60)
    out = src.collect(host, run_inputs())
    assert out.errors == [] and out.data.jobs == {"40": JobRef("40")} and out.data.lookup_failures == 1
    src.collect(host, run_inputs())
    assert len(host.calls) == 1             # not retried before lookup_retry
    src._retry_at = 0.0
    host.squeue = answer("40|carol|RUNNING|node07|sim\n")
    out = src.collect(host, run_inputs())
    assert out.data.jobs == {"40": JobRef("40", "carol", "sim")} and out.data.lookup_failures == 1


def test_no_slurmd_here_is_no_error():
    out = source().collect(Host(None, answer("")), run_inputs())
    assert out.errors == [] and out.data.jobs == {} and not out.data.slurmd_present


def test_configured_node_name():
    host = Host(["node07_50.0", "gpu-x_51.0"], answer("51|dan|RUNNING|gpu-x|a\n"))
    host.list_host_dir = lambda path: ["node07_50.0", "gpu-x_51.0"]
    out = source(node_name="gpu-x").collect(host, run_inputs())
    assert out.data.jobs == {"51": JobRef("51", "dan", "a")}


# --- the fabric collector's slurm_jobs source --------------------------------------------------

def fabric_source(enabled="auto"):
    from fabricmon.sources.cluster_jobs import SlurmJobsSource
    cfg = from_dict({"fabric": {"sources": {"slurm_jobs": {"enabled": enabled}}}}, check_paths=False)
    return SlurmJobsSource(cfg.fabric.sources["slurm_jobs"])


def test_fabric_one_squeue_of_running_jobs():
    host = Host([], answer("7|ann|RUNNING|node[0001-0002,0010]|big\n8|bo|RUNNING|n1|small\n"))
    out = fabric_source().collect(host, run_inputs())
    assert out.errors == [] and [j.nodes for j in out.data.jobs] == [("node0001", "node0002", "node0010"), ("n1",)]
    assert host.calls == [["squeue", "--noheader", "--states=RUNNING", "--format=%A|%u|%T|%N|%j"]]


def test_fabric_slurm_missing_or_unconfigured_is_quietly_off():
    out = fabric_source().collect(Host([], answer("", None, error="not_found")), run_inputs())
    assert out.errors == [] and out.data is None
    unconfigured = answer("", 1, "squeue: fatal: Could not establish a configuration source\n")
    out = fabric_source().collect(Host([], unconfigured), run_inputs())
    assert out.errors == [] and out.data.configured is False
    # enabled: true says Slurm must be there: the same answers are errors
    assert fabric_source(True).collect(Host([], unconfigured), run_inputs()).errors


def test_fabric_slurmctld_down_is_a_counted_source_error():
    down = answer("", 1, "slurm_load_jobs error: Unable to contact slurm controller (connect failure)\n")
    out = fabric_source().collect(Host([], down), run_inputs())
    assert out.data is None and out.errors[0][0] == "exit_code"
