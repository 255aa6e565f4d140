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

slurm.conf's `PrivateData=jobs` (or `all`) hides other users' jobs from a user that is not root,
SlurmUser or a Slurm operator: squeue answers "Invalid job id" (one id) or nothing (several) for a
job that runs, as for one that ended. A job squeue did not show whose step socket is still there two
polls later is hidden, not ended: a source error says so, with the fix (the jobs stay unclaimed).

Where: slurm.conf from $SLURM_CONF (as Slurm's own tools), else /etc/slurm/slurm.conf; its
SlurmdSpoolDir (%n and %h substituted) or Slurm's default /var/spool/slurmd. No spool directory
means no slurmd on this host: no jobs, no error. `slurm.node_name` defaults to the short host
name. `enabled: auto` (the default) turns the source on when `squeue` is installed.
"""

from __future__ import annotations

import errno
import os
import pwd
import time
from typing import TYPE_CHECKING

import structlog

from fabricmon.host.io import HostIO
from fabricmon.model.jobs import JobRef
from fabricmon.parsers.slurm import (
    RUNNING, SQUEUE_FORMAT, NodeJobsData, parse_conf_value, parse_squeue, spool_dir, step_jobs,
)
from fabricmon.pipeline.source import Inputs, Source, SourceOutput, command_error, register
from fabricmon.registry import shared_settings
from fabricmon.sources.settings import SlurmConfig

if TYPE_CHECKING:
    from fabricmon.registry import SourceConfig

log = structlog.get_logger("fabricmon.sources.slurm")

DEFAULT_CONF = "/etc/slurm/slurm.conf"
HIDING = ("jobs", "all")    # PrivateData= values that hide other users' jobs from an ordinary user
HIDDEN_POLLS = 2            # polls a job squeue did not show keeps its step socket before it counts as hidden
MAX_LOOKUP = 200            # job ids asked in one squeue call (the rest on the next poll)


@register("slurm", enabled="auto", interval=15.0, timeout=5.0, command=("squeue",), records=NodeJobsData,
          options=shared_settings(lambda ctx: ctx.take(SlurmConfig)))
class SlurmSource(Source):

    def __init__(self, sc: SourceConfig):
        super().__init__(sc)
        self.conf_path = os.environ.get("SLURM_CONF") or DEFAULT_CONF
        self._known: dict[str, JobRef] = {}     # looked up, running on this node
        self._not_ours: set[str] = set()        # ended (or not this node's) at lookup, socket still there
        self._unshown: dict[str, int] = {}      # not shown by squeue under PrivateData -> polls its socket stayed
        self._private = ""                      # slurm.conf's PrivateData=, where it hides jobs
        self._hidden_retry_at = 0.0
        self._failures = 0
        self._ended = 0
        self._failing: str | None = None        # the lookup's error while it fails (logged once)
        self._retry_at = 0.0

    def _node(self, io: HostIO) -> tuple[str, str]:
        host = io.hostname()
        return self.sc.settings(SlurmConfig).node_name or host.split(".")[0], host

    def collect(self, io: HostIO, inputs: Inputs) -> SourceOutput:
        out = SourceOutput()
        node, host = self._node(io)
        try:
            conf = io.read_host_file(self.conf_path)
        except OSError:
            conf = None             # configless Slurm, or no slurm.conf here: Slurm's defaults
        spool = spool_dir(conf, node, host)
        private = (parse_conf_value(conf, "PrivateData") or "") if conf else ""
        self._private = private if any(v.strip().lower() in HIDING for v in private.split(",")) else ""
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
        self._unshown = {j: n + 1 for j, n in self._unshown.items() if j in current}
        hidden = sorted((j for j, n in self._unshown.items() if n >= HIDDEN_POLLS), key=int)
        if hidden:
            out.error("read", self._hidden_error(hidden))
            if time.monotonic() >= self._hidden_retry_at:      # asked again: once fixed, they are claimed
                self._not_ours -= set(hidden)
                self._hidden_retry_at = time.monotonic() + self.sc.settings(SlurmConfig).lookup_retry
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
                self._retry_at = time.monotonic() + self.sc.settings(SlurmConfig).lookup_retry
                if self._failing is None:
                    log.warning("slurm job lookup failed: jobs shown by id only until slurmctld answers",
                                error=err[1], retry_seconds=self.sc.settings(SlurmConfig).lookup_retry)
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
                self._unshown.pop(jid, None)
            else:
                self._not_ours.add(jid)     # ended, or not on this node: never claimed
                if job is None and self._private:
                    if jid in self._unshown:
                        continue            # a hidden job asked again, still hidden
                    self._unshown[jid] = 0      # or hidden by PrivateData: its socket will tell (collect)
                self._ended += 1

    def _hidden_error(self, hidden: list[str]) -> str:
        try:
            who = pwd.getpwuid(os.geteuid()).pw_name
        except KeyError:
            who = str(os.geteuid())
        more = f" (+{len(hidden) - 5} more)" if len(hidden) > 5 else ""
        return (f"squeue does not show job(s) {','.join(hidden[:5])}{more} whose steps run on this node: slurm.conf "
                f"PrivateData={self._private} hides other users' jobs from user {who}, so no finding can name them: "
                f"make {who} a Slurm operator (sacctmgr modify user {who} set adminlevel=operator) or take jobs out "
                "of PrivateData")


__all__ = ["SlurmSource"]
