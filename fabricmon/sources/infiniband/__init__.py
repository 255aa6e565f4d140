"""The InfiniBand fabric collector's sources (`fabricmon fabric` with fabric.kind: infiniband), registered with collector="infiniband":
discovery (ibnetdiscover, cached, on its own interval), sweep (every switch port's
counters from the cached topology, in two batched ibqueryerrors passes), routing (every
switch's forwarding table, one dump_fts run), sm (the subnet manager, sminfo), events (the SM's reports of
port changes, each reported switch re-read at once: docs/latency.md), then slurm_jobs
(every running Slurm job and its nodes, one squeue per run; sources/cluster_jobs.py, shared with the
Ethernet collector); failure: what its tools' errors
mean when no switch could be read (registry.failure_hint).

Importing this package registers them; the order here is the order they are listed in."""

from fabricmon.sources.infiniband import discovery, failure, routing, sm, sweep  # noqa: F401 - imported to register
from fabricmon.sources import cluster_jobs  # noqa: F401,E402 - slurm_jobs, kind-neutral (sources/cluster_jobs.py)
from fabricmon.sources import slurm_topology  # noqa: F401,E402 - the configured topology.conf (sources/slurm_topology.py)
from fabricmon.sources.infiniband import design  # noqa: F401,E402 - the fabric as designed (docs/design.md)
from fabricmon.sources.infiniband import events  # noqa: F401,E402 - the SM's reports (docs/latency.md)
