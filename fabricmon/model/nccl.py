"""NCCL's own measurements (the Inspector profiler plugin's files), as the nccl_inspector source hands
them to the model: one NcclMeasure per (job, communicator, operation, message-size bucket, algo_proto)
of one GPU, read from that GPU's `nccl_inspector_metrics_<UUID>.prom` (or a JSON-mode log).

docs/nccl.md says where the files come from and what fabricmon does with them.
"""

from __future__ import annotations

import statistics
from collections.abc import Iterable, Mapping
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


BaselineKey = tuple[str, str, str, str, str]    # (job, comm, operation, message_size, NVML GPU UUID)


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
    sampled_at: float = 0.0     # the file's mtime: when NCCL wrote this measure (a new value per dump)

    @property
    def baseline_key(self) -> BaselineKey:
        """What a baseline is learned for: one job's communicator, operation and size bucket on one GPU."""
        m = self.measure
        return (m.job, m.comm, m.operation, m.message_size, self.gpu_uuid)

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
    baseline_gbs: dict[BaselineKey, float] = field(default_factory=dict)   # learned (NcclBaselines), by path
    slow: dict[BaselineKey, str] = field(default_factory=dict)  # paths the nccl_slow_collective check flags: why

    def baseline_ratio(self, p: NcclPath) -> float | None:
        """Bus bandwidth over the job's own learned baseline (None until learned)."""
        base = self.baseline_gbs.get(p.baseline_key)
        bw = p.measure.busbw_gbs
        return None if bw is None or not base else bw / base


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
                p.rate_gbps / 8 if p is not None and p.rate_gbps else None, f.mtime))
    return sec


MAX_LEARN_SAMPLES = 64


@dataclass(slots=True)
class JobBaseline:
    """One path's bus bandwidth while its job was young: the samples of the learning window, then
    their median, kept for the job's life."""
    first: float                # wall-clock time of the first sample
    last: float                 # the last sample's time (the file's mtime: one sample per dump)
    samples: list[float] = field(default_factory=list)
    gbs: float | None = None    # the learned baseline (None while learning)


@dataclass(slots=True)
class NcclBaselines:
    """Every job's learned baselines, by path (NcclPath.baseline_key). A baseline is the median bus
    bandwidth of the dumps in the job's first `learn_seconds` (at least `min_samples` of them); a job
    that starts already slow learns a slow baseline, which the line-rate judgement still catches.
    Forgotten `forget_after` seconds after its last dump (the job ended)."""
    entries: dict[BaselineKey, JobBaseline] = field(default_factory=dict)

    def learn(self, paths: Iterable[NcclPath], now: float, learn_seconds: float, min_samples: int,
              forget_after: float) -> bool:
        """Take each path's new dump (one whose file time is newer than the last taken) into its
        baseline while it learns. Returns whether anything changed."""
        changed = False
        for p in paths:
            bw = p.measure.busbw_gbs
            if bw is None or bw <= 0 or not p.sampled_at:
                continue
            key = p.baseline_key
            b = self.entries.get(key)
            if b is None:
                b = self.entries[key] = JobBaseline(first=p.sampled_at, last=0.0)
            if p.sampled_at <= b.last:
                continue
            b.last = p.sampled_at
            changed = True
            if b.gbs is not None:
                continue
            b.samples = (b.samples + [bw])[-MAX_LEARN_SAMPLES:]
            if p.sampled_at - b.first >= learn_seconds and len(b.samples) >= min_samples:
                b.gbs = statistics.median(b.samples)
                b.samples = []
        for key in [k for k, b in self.entries.items() if now - b.last > forget_after and b.last]:
            del self.entries[key]
            changed = True
        return changed

    def learned(self) -> dict[BaselineKey, float]:
        return {k: b.gbs for k, b in self.entries.items() if b.gbs is not None}

    def to_dict(self) -> dict[str, object]:
        return {"version": 1, "baselines": [
            {"key": list(k), "first": b.first, "last": b.last, "samples": b.samples, "gbs": b.gbs}
            for k, b in sorted(self.entries.items())]}

    @classmethod
    def from_dict(cls, doc: object) -> NcclBaselines:
        if not isinstance(doc, dict) or not isinstance(doc.get("baselines"), list):
            raise ValueError("not an NCCL baseline file (no `baselines` list)")
        out = cls()
        for raw in doc["baselines"]:
            key = raw["key"]
            if not isinstance(key, list) or len(key) != 5:
                raise ValueError(f"baseline key {key!r} is not [job, comm, operation, message_size, uuid]")
            gbs = raw.get("gbs")
            out.entries[(str(key[0]), str(key[1]), str(key[2]), str(key[3]), str(key[4]))] = JobBaseline(
                first=float(raw["first"]), last=float(raw["last"]), samples=[float(x) for x in raw.get("samples", [])],
                gbs=None if gbs is None else float(gbs))
        return out


# --- RAS (docs/nccl.md#ras) ------------------------------------------------------------------

@dataclass(frozen=True, slots=True)
class RasPeer:
    """A rank RAS reports missing from its communicator: where it ran and why it is missing."""
    rank: int
    host: str                   # as NCCL resolves the peer's address ("unknown" where it cannot)
    pid: int                    # -1 where NCCL did not name the process
    cuda_dev: int               # -1 where NCCL did not name the GPU (the text of 2.24 and 2.25)
    nvml_dev: int
    unresponsive: bool          # its process did not answer RAS's collective
    dead: bool                  # RAS considers its process dead


@dataclass(frozen=True, slots=True)
class RasRank:
    """A rank RAS names among those at one operation count: where it runs."""
    rank: int
    count: int                  # the operations of the collective it has launched
    host: str = "unknown"
    pid: int = -1
    cuda_dev: int = -1
    nvml_dev: int = -1


# NCCL's rasCountIsOutlier (client_support.cc, not verbose): the ranks of a group are named when the
# group is one rank, or at most DETAIL_THRESHOLD ranks and at most OUTLIER_FRACTION of the communicator
DETAIL_THRESHOLD = 10
OUTLIER_FRACTION = 0.25


def ras_outlier(count: int, comm_ranks: int = -1) -> bool:
    """Whether NCCL's text report names the ranks of a group of `count` (rasCountIsOutlier)."""
    if count == 1:
        return True
    return count <= DETAIL_THRESHOLD and (comm_ranks == -1 or count <= comm_ranks * OUTLIER_FRACTION)


@dataclass(frozen=True, slots=True)
class RasMismatch:
    """The ranks of one communicator at different operation counts of one collective (RAS's MISMATCH):
    each count and how many ranks launched up to it, most ranks first; the ranks RAS names (the groups
    its rule calls outliers: ras_outlier)."""
    collective: str             # AllReduce, AllGather, ... ("collective": NCCL 2.24-2.25 count them all as one)
    groups: tuple[tuple[int, int], ...]     # (operation count, ranks), most ranks first, then the higher count
    named: tuple[RasRank, ...] = ()

    @property
    def signature(self) -> tuple[str, tuple[tuple[int, int], ...]]:
        """What stays the same while the ranks stay where they are (two polls alike: they are stuck)."""
        return self.collective, self.groups


def ras_mismatch(collective: str, counts: Mapping[int, int], where: Mapping[int, RasRank],
                 comm_ranks: int) -> RasMismatch | None:
    """The mismatch of one collective from each rank's operation count (rank -> count), as NCCL's
    report has it: None when every rank is at the same count; named, the ranks of outlier groups."""
    by_count: dict[int, list[int]] = {}
    for rank, n in counts.items():
        by_count.setdefault(n, []).append(rank)
    if len(by_count) < 2:
        return None
    groups = sorted(((n, len(r)) for n, r in by_count.items()), key=lambda g: (-g[1], -g[0]))
    named = tuple(where.get(r, RasRank(r, n)) for n, size in groups if ras_outlier(size, comm_ranks)
                  for r in sorted(by_count[n]))
    return RasMismatch(collective, tuple(groups), named)


@dataclass(frozen=True, slots=True)
class RasComm:
    hash: str                   # NCCL's communicator hash, 16 hex digits as the text prints it
    size: int                   # ranks in the communicator
    unreachable: int = 0        # its ranks whose process did not answer RAS (named or not: missing)
    missing: tuple[RasPeer, ...] = ()       # the missing ranks RAS named
    mismatches: tuple[RasMismatch, ...] = ()


def ras_hash(text: str) -> str:
    """A communicator hash as JSON ("0x5f3a...") or text ("005f3a...") writes it: 16 hex digits."""
    return f"{int(text, 16):016x}"


@dataclass(slots=True)
class RasData:
    """The last RAS STATUS read on this node (sources.nccl_ras)."""
    version: str = ""           # nccl_version of the answer ("" when nothing was read)
    comms: list[RasComm] = field(default_factory=list)
    refused: str = ""           # why this NCCL version is not queried (docs/nccl.md#ras), "" when it is
    format: str = ""            # what the answer was read as: "json", "text" ("" when nothing was read)
    queried_at: float = 0.0     # when the last STATUS was sent (time.time())
    local_host: str = ""        # this node's short host name (a missing peer here: its ports are known)


__all__ = ["DETAIL_THRESHOLD", "OUTLIER_FRACTION", "RasComm", "RasData", "RasMismatch", "RasPeer", "RasRank",
           "ras_hash", "ras_mismatch", "ras_outlier", "BaselineKey", "COLLECTIVE", "JobBaseline", "P2P", "NcclBaselines", "NcclData", "NcclFile", "NcclMeasure",
           "NcclPath", "NcclSection", "join", "nvml_uuid"]
