"""slurm source (node daemon): the Slurm jobs running on this node, so that every finding can
name the jobs it hurts.

No call to slurmctld per poll: job ids come from the local slurmd's spool directory, where
every running step leaves a socket `<node>_<jobid>.<stepid>` (what `scontrol listpids` reads).
A job's user and name are asked of slurmctld once per job (`squeue --jobs=<new ids>`, one call
for all the jobs that appeared since the last poll) and kept while the job runs. The lookup
also tells a job that ended between the two reads (not RUNNING, or no longer known), or one
that is not on this node: neither is ever claimed.

When slurmctld is down or slow the jobs are still listed by id, with no user or name; the
failed lookup is counted (NodeJobsData.lookup_failures), logged once until it answers again,
and tried again after `slurm.lookup_retry` seconds. It is no source error: a node must not turn
WARNING in its health check because the controller is down.

Where: slurm.conf from $SLURM_CONF (as Slurm's own tools), else /etc/slurm/slurm.conf; its
SlurmdSpoolDir (%n and %h substituted) or Slurm's default /var/spool/slurmd. No spool directory
means no slurmd on this host: no jobs, no error. `slurm.node_name` defaults to the short host
name. `enabled: auto` (the default) turns the source on when `squeue` is installed.
"""

from __future__ import annotations

import errno
import os
import time

import structlog

from fabricmon.host.io import HostIO
from fabricmon.model.jobs import JobRef
from fabricmon.parsers.slurm import RUNNING, SQUEUE_FORMAT, NodeJobsData, parse_squeue, spool_dir, step_jobs
from fabricmon.pipeline.source import Inputs, Source, SourceOutput, command_error, register

log = structlog.get_logger("fabricmon.sources.slurm")

DEFAULT_CONF = "/etc/slurm/slurm.conf"
MAX_LOOKUP = 200            # job ids asked in one squeue call (the rest on the next poll)


@register("slurm", enabled="auto", interval=15.0, timeout=5.0, command=("squeue",), records=NodeJobsData)
class SlurmSource(Source):

    def __init__(self, config, sc=None):
        super().__init__(config, sc)
        self.conf_path = os.environ.get("SLURM_CONF") or DEFAULT_CONF
        self._known: dict[str, JobRef] = {}     # looked up, running on this node
        self._not_ours: set[str] = set()        # ended (or not this node's) at lookup, socket still there
        self._failures = 0
        self._ended = 0
        self._failing: str | None = None        # the lookup's error while it fails (logged once)
        self._retry_at = 0.0

    def _node(self, io: HostIO) -> tuple[str, str]:
        host = io.hostname()
        return self.config.slurm.node_name or host.split(".")[0], host

    def collect(self, io: HostIO, inputs: Inputs) -> SourceOutput:
        out = SourceOutput()
        node, host = self._node(io)
        try:
            conf = io.read_host_file(self.conf_path)
        except OSError:
            conf = None             # configless Slurm, or no slurm.conf here: Slurm's defaults
        spool = spool_dir(conf, node, host)
        data = NodeJobsData(node=node, spool_dir=spool)
        try:
            names = io.list_host_dir(spool)
        except OSError as exc:
            if exc.errno in (errno.ENOENT, errno.ENOTDIR):
                data.slurmd_present = False         # no slurmd on this host: no jobs
                self._known.clear()
                self._not_ours.clear()
                out.data = data
                return out
            fix = (": this user must be able to list slurmd's spool directory (slurmd makes it mode 0755; where a site "
                   "restricted it, give the daemon's user read and search on it)"
                   if exc.errno in (errno.EACCES, errno.EPERM) else "")
            out.error("read", f"{spool}: {exc.strerror or exc}{fix}")
            return out
        ids = step_jobs(names, node)
        current = set(ids)
        self._known = {j: r for j, r in self._known.items() if j in current}
        self._not_ours &= current
        new = [j for j in ids if j not in self._known and j not in self._not_ours]
        if new and time.monotonic() >= self._retry_at:
            self._lookup(io, inputs, node, new[:MAX_LOOKUP])
        data.jobs = {j: self._known.get(j) or JobRef(j) for j in ids if j not in self._not_ours}
        data.lookup_failures, data.ended = self._failures, self._ended
        out.data = data
        return out

    def _lookup(self, io: HostIO, inputs: Inputs, node: str, ids: list[str]) -> None:
        argv = [*self.sc.command, "--noheader", "--states=all", f"--format={SQUEUE_FORMAT}", f"--jobs={','.join(ids)}"]
        res = io.run(argv, inputs.remaining(self.sc.timeout))
        if res.returncode == 1 and "Invalid job id" in res.stderr:
            res_ok, text = True, ""         # the only job asked for is gone: it ended between the reads
        else:
            err = command_error(res)
            res_ok, text = err is None, res.stdout
            if err is not None:
                self._failures += 1
                self._retry_at = time.monotonic() + self.config.slurm.lookup_retry
                if self._failing is None:
                    log.warning("slurm job lookup failed: jobs shown by id only until slurmctld answers",
                                error=err[1], retry_seconds=self.config.slurm.lookup_retry)
                self._failing = err[1]
                return
        if res_ok and self._failing is not None:
            log.info("slurm job lookup recovered", error=self._failing)
            self._failing = None
        found = {j.job_id: j for j in parse_squeue(text)[0]}
        for jid in ids:
            job = found.get(jid)
            if job is not None and job.state == RUNNING and node in job.nodes:
                self._known[jid] = job.ref
            else:
                self._not_ours.add(jid)     # ended, or not on this node: never claimed
                self._ended += 1


__all__ = ["SlurmSource"]
