"""NCCL's own measurements (the Inspector profiler plugin's files), as the nccl_inspector source hands
them to the model: one NcclMeasure per (job, communicator, operation, message-size bucket, algo_proto)
of one GPU, read from that GPU's `nccl_inspector_metrics_<UUID>.prom` (or a JSON-mode log).

docs/nccl.md says where the files come from and what fabricmon does with them.
"""

from __future__ import annotations

from dataclasses import dataclass, field

COLLECTIVE = "collective"
P2P = "p2p"


@dataclass(frozen=True, slots=True)
class NcclMeasure:
    kind: str                   # COLLECTIVE or P2P
    job: str                    # slurm_job_id ("unknown" outside Slurm)
    node: str                   # the writer's host name
    gpu: str                    # "GPU<cuda device index>" (not the NVML index under CUDA_VISIBLE_DEVICES)
    comm: str                   # comm_name (comm_id in the first format, JSON mode)
    n_nodes: int
    nranks: int
    operation: str              # the collective (AllReduce, ...) or the p2p_operation (Send, Recv)
    message_size: str           # NCCL's bucket label, e.g. "4-5GB" (1024-based units, one unit wide)
    message_bytes: int          # the bucket's lower bound in bytes
    algo_proto: str = ""        # e.g. "RING_SIMPLE" ("" where the format has none)
    busbw_gbs: float | None = None      # mean bus bandwidth over the dump window, GB/s
    exec_time_us: float | None = None   # mean execution time over the dump window, microseconds
    version: str = ""           # the format's `version` label ("" before it had one)

    @property
    def key(self) -> tuple[str, str, str, str, str, str, str]:
        return (self.kind, self.job, self.comm, self.operation, self.message_size, self.algo_proto, self.gpu)

    @property
    def network(self) -> bool:
        """The communicator spans nodes: its traffic crosses the NICs (n_nodes > 1)."""
        return self.n_nodes > 1


@dataclass(slots=True)
class NcclFile:
    path: str
    uuid: str                   # the GPU's UUID from the file name, lower case, without NVML's "GPU-" ("": JSON mode)
    mtime: float
    size: int
    measures: list[NcclMeasure] = field(default_factory=list)
    error: str | None = None    # why the last read was not taken (the measures are the last good read's)
    read_at: float = 0.0        # when the measures were read (time.time())


@dataclass(slots=True)
class NcclData:
    directory: str = ""
    files: dict[str, NcclFile] = field(default_factory=dict)     # by path
    expired: int = 0            # files dropped so far because their job ended (mtime older than the expiry)
    skipped_lines: int = 0      # lines of the last reads that were not Inspector metrics

    def measures(self) -> list[tuple[NcclFile, NcclMeasure]]:
        return [(f, m) for f in self.files.values() for m in f.measures]


def nvml_uuid(file_uuid: str) -> str:
    """The UUID NVML reports for the GPU of a file's UUID (NVML prefixes "GPU-"; NCCL's file name does not)."""
    return "GPU-" + file_uuid.lower()


__all__ = ["COLLECTIVE", "P2P", "NcclData", "NcclFile", "NcclMeasure", "nvml_uuid"]
