"""NCCL Inspector files for the simulated fabric: what a job's ranks would dump, written as NCCL's
Inspector plugin writes them (docs/nccl.md, tests/fixtures/nccl_inspector/PROVENANCE.md), with bus
bandwidth that follows the simulated paths.

- One file per GPU, `<dir>/nccl_inspector_metrics_<CUDA UUID>.prom` (the UUID in lower case, without
  NVML's `GPU-`), truncated and rewritten in place every dump (`fopen(name, "w")`, then one write and
  flush per communicator, as `inspectorPromCommInfoListDump` does), values printed with `%.6g`.
- Labels of the current format (`version="v5.1"`): slurm_job_id, node, gpu (`GPU<cuda index>`),
  comm_name, n_nodes, nranks, collective, message_size (a bucket one 1024-based unit wide), algo_proto.
- NCCL dumps at most every 30 s in Prometheus mode; `interval` is that cadence, cut down in a test.

Bus bandwidth follows the paths (`SimPaths`): a collective runs at the pace of its slowest link, so
every rank of a job sees `line rate x efficiency x` the worst factor of the paths its traffic takes:
each host's cable to its leaf, and, for a job spanning leaves, each of its leaves' uplinks. An erroring
cable (link-level retries) and a polarised leaf (its traffic squeezed onto half its uplinks) each
slow the jobs whose paths cross them, and only those.
"""

from __future__ import annotations

import os
import threading
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field

from fabricmon.parsers.nccl_inspector import size_bucket

VERSION = "v5.1"
ERRORING_FACTOR = 0.5       # a cable retrying at the link layer: half its goodput
POLARISED_FACTOR = 0.5      # a leaf routing all its uplink traffic over half its uplinks


@dataclass(frozen=True, slots=True)
class SimGpu:
    host: str                   # the simulated host (the `node` label: NCCL's gethostname)
    uuid: str                   # the CUDA UUID, lower case, without "GPU-"
    cuda_index: int = 0


@dataclass(frozen=True, slots=True)
class SimJob:
    job_id: str                 # the Slurm job ID (slurm_job_id)
    gpus: tuple[SimGpu, ...]    # one rank per GPU
    comm: str = "DP Group 0"
    collective: str = "AllReduce"
    message_bytes: int = 4 << 30
    algo_proto: str = "RING_SIMPLE"

    @property
    def hosts(self) -> set[str]:
        return {g.host for g in self.gpus}


@dataclass(slots=True)
class SimPaths:
    """Where each host's traffic goes: its leaf and the leaf's port it is cabled to; which cables err
    and which leaves are polarised (what the test planted)."""
    cabled: Mapping[str, tuple[str, int]]           # host -> (leaf, leaf port)
    line_gbs: float                                 # the hosts' data rate, GB/s
    efficiency: float = 0.9                         # a healthy ring all-reduce's bus bandwidth / line rate
    erroring: set[tuple[str, int]] = field(default_factory=set)     # (switch, port) of erroring cables
    polarised: set[str] = field(default_factory=set)               # leaves routing unevenly

    def factor(self, job: SimJob) -> float:
        leaves = {self.cabled[h][0] for h in job.hosts}
        f = 1.0
        for h in job.hosts:
            if self.cabled[h] in self.erroring:
                f = min(f, ERRORING_FACTOR)
        if len(leaves) > 1:                         # the job's traffic crosses its leaves' uplinks
            if leaves & self.polarised:
                f = min(f, POLARISED_FACTOR)
        return f

    def busbw(self, job: SimJob) -> float:
        return self.line_gbs * self.efficiency * self.factor(job)


def file_name(uuid: str) -> str:
    return f"nccl_inspector_metrics_{uuid.lower().removeprefix('gpu-')}.prom"


def prom_lines(job: SimJob, gpu: SimGpu, busbw: float) -> str:
    """One communicator's lines, as inspector_prom.cc prints them."""
    nodes = len(job.hosts)
    labels = (f'version="{VERSION}",slurm_job_id="{job.job_id}",node="{gpu.host}",gpu="GPU{gpu.cuda_index}",'
              f'comm_name="{job.comm}",n_nodes="{nodes}",nranks="{len(job.gpus)}",collective="{job.collective}",'
              f'message_size="{size_bucket(job.message_bytes)[0]}",algo_proto="{job.algo_proto}"')
    # exec time of a ring all-reduce: 2 (n-1)/n of the message over the bus bandwidth
    n = len(job.gpus)
    exec_us = (2 * (n - 1) / n * job.message_bytes) / (busbw * 1e9) * 1e6 if busbw > 0 else 0.0
    return (f"nccl_bus_bandwidth_gbs{{{labels}}} {busbw:.6g}\n"
            f"nccl_collective_exec_time_microseconds{{{labels}}} {exec_us:.6g}\n")


def dump(directory: str, jobs: Iterable[SimJob], paths: SimPaths, host: str) -> list[str]:
    """Every file of `host`'s GPUs, written as NCCL writes them (in place, one flush per communicator)."""
    per_gpu: dict[SimGpu, list[SimJob]] = {}
    for j in jobs:
        for g in j.gpus:
            if g.host == host:
                per_gpu.setdefault(g, []).append(j)
    written = []
    for g, mine in sorted(per_gpu.items(), key=lambda kv: kv[0].uuid):
        path = os.path.join(directory, file_name(g.uuid))
        with open(path, "w") as fh:
            for j in mine:
                fh.write(prom_lines(j, g, paths.busbw(j)))
                fh.flush()
        written.append(path)
    return written


class InspectorWriter(threading.Thread):
    """Dumps every host's files every `interval` seconds (NCCL: 30 s at least) into `dirs[host]`, until
    stopped. `dumps` counts the rounds written; `paths` may be changed while it runs (plant a fault)."""

    def __init__(self, dirs: Mapping[str, str], jobs: list[SimJob], paths: SimPaths, interval: float):
        super().__init__(name="nccl-inspector-sim", daemon=True)
        self.dirs, self.jobs, self.paths, self.interval = dict(dirs), jobs, paths, interval
        self.dumps = 0
        self.lock = threading.Lock()
        self._stop_event = threading.Event()

    def run(self) -> None:
        while not self._stop_event.is_set():
            with self.lock:
                for host, d in self.dirs.items():
                    dump(d, self.jobs, self.paths, host)
                self.dumps += 1
            self._stop_event.wait(self.interval)

    def stop(self) -> None:
        self._stop_event.set()
        self.join(timeout=5)


__all__ = ["ERRORING_FACTOR", "InspectorWriter", "POLARISED_FACTOR", "SimGpu", "SimJob", "SimPaths", "VERSION",
           "dump", "file_name", "prom_lines"]
