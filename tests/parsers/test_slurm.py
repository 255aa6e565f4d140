"""Slurm parsers: host lists against the real `scontrol show hostnames`, squeue lines, slurm.conf
values and slurmd step sockets."""

from __future__ import annotations

import shutil
import subprocess

import pytest
from helpers import unavailable

from fabricmon.model.jobs import JobRef
from fabricmon.parsers.errors import ParseError
from fabricmon.parsers.slurm import (
    MAX_HOSTS, SlurmJob, expand_hostlist, parse_conf_value, parse_squeue, spool_dir, step_jobs,
)

HOSTLISTS = [
    "node[0001-0004,0010]", "node01", "node[01-03]", "n[9-11]", "n[09-11]", "node[001-3]", "node[1-010]",
    "x,y[1,3-4],z", "a[1-2]b[3-4]", "rack1-n[1-2]", "n[0-1],n[00-01]", " a1 , b2", "a b", "n[1-1]",
    "n[0010-0012]", "n[1-2],,m", "n[7]", "gpu-a[1-2],gpu-b[08-10,12]",
]


@pytest.fixture(scope="module")
def slurm_conf(tmp_path_factory):
    if shutil.which("scontrol") is None:
        unavailable("scontrol not installed (apt install slurm-client or slurm-wlm)")
    conf = tmp_path_factory.mktemp("slurmconf") / "slurm.conf"
    conf.write_text("ClusterName=t\nSlurmctldHost=localhost\nNodeName=n1\nPartitionName=p Nodes=n1\n")
    return str(conf)


@pytest.mark.parametrize("hostlist", HOSTLISTS)
def test_hostlist_matches_scontrol(hostlist, slurm_conf):
    res = subprocess.run(["scontrol", "show", "hostnames", hostlist], env={"SLURM_CONF": slurm_conf, "PATH": "/usr/bin:/bin"},
                         capture_output=True, text=True, timeout=30)
    assert res.returncode == 0, res.stderr
    assert expand_hostlist(hostlist) == res.stdout.split()


@pytest.mark.parametrize("bad", ["n[10-8]", "n[1-2", "a[]", "n[a-b]", "n]1[", "n[[1]]", "n[0-99999999]"])
def test_bad_hostlists_raise(bad):
    with pytest.raises(ParseError):
        expand_hostlist(bad)


def test_hostlist_product_is_bounded():
    with pytest.raises(ParseError, match=str(MAX_HOSTS)):
        expand_hostlist("a[0-999]b[0-999]")


def test_parse_squeue():
    text = ("1234|alice|RUNNING|node[01-02]|train llm|v2\n"
            "1235|bob|RUNNING|node03|eval\n"
            "garbage line\n"
            "1236|carol|PENDING||waiting\n"
            "1237|dave|RUNNING|node[3-1]|bad list\n")
    jobs, skipped = parse_squeue(text)
    assert jobs == [SlurmJob("1234", "alice", "RUNNING", ("node01", "node02"), "train llm|v2"),
                    SlurmJob("1235", "bob", "RUNNING", ("node03",), "eval"),
                    SlurmJob("1236", "carol", "PENDING", (), "waiting")]
    assert skipped == 2
    assert jobs[0].ref == JobRef("1234", "alice", "train llm|v2")


def test_conf_value_and_spool_dir():
    conf = "# SlurmdSpoolDir=/nope\nslurmdspooldir=/var/spool/slurm/%n  # per node\nClusterName=x\n"
    assert parse_conf_value(conf, "SlurmdSpoolDir") == "/var/spool/slurm/%n"
    assert spool_dir(conf, "node07", "host7") == "/var/spool/slurm/node07"
    assert spool_dir("SlurmdSpoolDir=/s/%h", "n", "h1") == "/s/h1"
    assert spool_dir(None, "n", "h") == "/var/spool/slurmd"
    assert spool_dir("ClusterName=x", "n", "h") == "/var/spool/slurmd"


def test_step_jobs_only_this_nodes_sockets():
    names = ["node01_12.0", "node01_12.4294967291", "node01_9.0", "node02_13.0", "cred_state", "job00012",
             "node011_14.0", "hwloc_topo_whole.xml"]
    assert step_jobs(names, "node01") == ["9", "12"]
    assert step_jobs(names, "node02") == ["13"]
    assert step_jobs(names, "node03") == []
