"""NCCL's own measurements (the Inspector profiler plugin's files), as the nccl_inspector source hands
them to the model: one NcclMeasure per (job, communicator, operation, message-size bucket, algo_proto)
of one GPU, read from that GPU's `nccl_inspector_metrics_<UUID>.prom` (or a JSON-mode log).

docs/nccl.md says where the files come from and what fabricmon does with them.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field

from fabricmon.model.gpu import AffinityResult
from fabricmon.model.ports import DeviceView, PortView

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


@dataclass(frozen=True, slots=True)
class NcclPath:
    """One network measure joined to where its traffic leaves the node: the GPU NVML sees under the
    file's UUID, the NIC paired to it (AffinityResult.assigned: among its nearest NICs, the one with
    the fewest GPUs, ties by name, as NCCL pairs), that NIC's port and the switch port it is cabled to.
    Fields the node does not know are "" (or None)."""
    measure: NcclMeasure
    gpu_uuid: str               # NVML's form, "GPU-..."
    gpu_index: int | None       # NVML's index (None: no GPU of that UUID seen here)
    device: str = ""            # the RDMA device (mlx5_0)
    port: int | None = None
    node_guid: str = ""         # the HCA's node GUID: the fabric collector's remote_guid of the cabled switch port
    switch: str = ""            # the cabled switch's node description (iblinkinfo, else learned)
    switch_port: int | None = None
    line_rate_gbs: float | None = None      # the port's data rate in GB/s (rate_gbps / 8)

    @property
    def line_rate_ratio(self) -> float | None:
        bw = self.measure.busbw_gbs
        if bw is None or not self.line_rate_gbs:
            return None
        return bw / self.line_rate_gbs


@dataclass(slots=True)
class NcclSection:
    paths: list[NcclPath] = field(default_factory=list)     # network measures (n_nodes > 1) of GPU files
    files: int = 0              # Inspector files read (within the expiry)
    file_errors: int = 0        # of them, those whose last read was not taken
    expired: int = 0            # files of ended jobs forgotten so far
    unjoined: int = 0           # network measures whose GPU UUID no NVML GPU here has


def _port_of(device: str, ports: Mapping[tuple[str, int], PortView]) -> PortView | None:
    """The device's port NCCL's traffic takes: its first port that is up, else its first port."""
    mine = sorted((p for (d, _), p in ports.items() if d == device), key=lambda p: p.port)
    return next((p for p in mine if p.up), mine[0] if mine else None)


def join(data: NcclData, affinity: AffinityResult, devices: Mapping[str, DeviceView],
         ports: Mapping[tuple[str, int], PortView]) -> NcclSection:
    """NCCL's network measures joined to GPU, NIC, port and cabled switch port (docs/nccl.md)."""
    sec = NcclSection(files=len(data.files), file_errors=sum(1 for f in data.files.values() if f.error),
                      expired=data.expired)
    by_uuid = {g.uuid.lower(): g for g in affinity.gpus}
    for f in sorted(data.files.values(), key=lambda f: f.path):
        if not f.uuid:
            continue                                # a JSON-mode log: no GPU named
        uuid = nvml_uuid(f.uuid)
        g = by_uuid.get(uuid.lower())
        for m in f.measures:
            if not m.network:
                continue
            if g is None:
                sec.unjoined += 1
                sec.paths.append(NcclPath(m, uuid, None))
                continue
            dev = affinity.assigned.get(g.index, "")
            p = _port_of(dev, ports) if dev else None
            d = devices.get(dev)
            sec.paths.append(NcclPath(
                m, uuid, g.index, dev, p.port if p else None, d.node_guid if d else "",
                p.peer if p else "", p.peer_port if p else None,
                p.rate_gbps / 8 if p is not None and p.rate_gbps else None))
    return sec


__all__ = ["COLLECTIVE", "P2P", "NcclData", "NcclFile", "NcclMeasure", "NcclPath", "NcclSection", "join",
           "nvml_uuid"]
