"""The Ethernet (RoCE) fabric collector's sources (`fabricmon fabric` with fabric.kind: ethernet),
registered with collector="ethernet" under the InfiniBand sources' names, so that config keys,
self-metrics and rules are the same: discovery (identity, interfaces and LLDP of every switch, on
the discovery interval) and sweep (counters, state, speed and PFC pause frames, every sweep), both
over SNMP: v2c in this process, v3 through net-snmp's tools (sources.ethernet.snmp); and slurm_jobs
(every running Slurm job, sources/cluster_jobs.py, shared with the InfiniBand collector: hosts are the
LLDP neighbours).

Importing this package registers them."""

from fabricmon.sources.ethernet import discovery, sweep  # noqa: F401 - imported to register
from fabricmon.sources.ethernet import optics  # noqa: F401,E402 - registered after the sweep
from fabricmon.sources.ethernet import vitals  # noqa: F401,E402 - fans, power supplies, temperatures
from fabricmon.sources import cluster_jobs  # noqa: F401,E402 - slurm_jobs, kind-neutral (sources/cluster_jobs.py)
from fabricmon.sources import slurm_topology  # noqa: F401,E402 - the configured topology.conf (sources/slurm_topology.py)
