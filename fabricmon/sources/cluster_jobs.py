"""slurm_jobs (the fabric collector, both kinds): every running Slurm job and its nodes, one `squeue` per run
(the sweep's interval by default): `squeue --noheader --states=RUNNING --format=%A|%u|%T|%N|%j`.
One call per sweep from one collector is what slurmctld is asked, whatever the fabric's size;
the node lists are expanded by parsers.slurm (`node[0001-0004,0010]`).

The pipeline places the jobs on the topology (pipeline.jobs) so that a finding about a switch
names the jobs it can hurt: the hosts are the topology's non-switch neighbours (InfiniBand CAs by
node description, Ethernet hosts by their LLDP system name), the same leaf/uplink/spine attribution
on either kind, so the source knows no fabric kind and registers with both collectors. slurmctld down or slow is this source's error (counted, logged
once by the pipeline): the findings lose their job names and nothing else. `enabled: auto`
(the default): on when `squeue` is installed and finds a cluster (a slurm.conf, SLURM_CONF, or
configless DNS records); installed without one it is quietly off, as if not installed.
SLURM_CONF is honoured, as by Slurm's tools.
A Kubernetes pod source could register beside it with the same records later.
"""

from __future__ import annotations

from fabricmon.host.io import HostIO
from fabricmon.parsers.slurm import SQUEUE_FORMAT, ClusterJobsData, not_configured, parse_squeue
from fabricmon.pipeline.source import Inputs, Source, SourceOutput, register


@register("slurm_jobs", enabled="auto", interval=15.0, timeout=10.0, command=("squeue",),
          collector=("infiniband", "ethernet"), records=ClusterJobsData)
class SlurmJobsSource(Source):
    def collect(self, io: HostIO, inputs: Inputs) -> SourceOutput:
        out = SourceOutput()
        res = io.run([*self.sc.command, "--noheader", "--states=RUNNING", f"--format={SQUEUE_FORMAT}"],
                     inputs.remaining(self.sc.timeout))
        if self.sc.enabled == "auto" and res.error in ("not_found", "not_recorded"):
            return out                  # not installed (or a bundle recorded without it): quietly off
        if self.sc.enabled == "auto" and res.returncode not in (0, None) and not_configured(res.stderr):
            out.data = ClusterJobsData(configured=False)     # Slurm's tools installed, no cluster here: off
            return out
        got = out.parsed(res, parse_squeue)
        if got is not None:
            jobs, skipped = got
            out.data = ClusterJobsData(jobs=jobs, skipped_lines=skipped)
        return out


__all__ = ["SlurmJobsSource"]
