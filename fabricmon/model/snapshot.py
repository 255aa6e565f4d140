"""The typed snapshot the exporter renders and `check` judges: one section per domain
(InfiniBand ports, RoCE, GPUDirect and GPU-NIC affinity; the fabric comes next), the findings,
and every source's self-monitoring state. A snapshot is never mutated once published."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, TypedDict, TypeVar

from fabricmon.model.finding import Finding

if TYPE_CHECKING:
    from fabricmon.model.ber import BerSection
    from fabricmon.model.cable_ledger import CablesSection
    from fabricmon.model.fabric import FabricSection
    from fabricmon.model.gpu import AffinityResult, GpuData, GpudirectStatus
    from fabricmon.model.jobs import JobsSection
    from fabricmon.model.kernel_log import KernelSection
    from fabricmon.model.nccl import NcclSection, RasData
    from fabricmon.model.optics import OpticsSection
    from fabricmon.model.pcie import PcieSection
    from fabricmon.model.ports import DeviceView, LinkVerdict, PortView
    from fabricmon.model.remediation import RemediationSection
    from fabricmon.model.roce import RoceView

# Error kinds exported in fabricmon_source_errors_total{kind}; all are pre-declared at 0.
ERROR_KINDS = ("not_found", "timeout", "exit_code", "parse", "read")
R = TypeVar("R")


@dataclass(slots=True)
class SourceState:
    """One source's latest run, as the pipeline keeps it."""
    name: str
    enabled: bool
    interval: float
    timeout: float
    records: type | None = None
    up: bool = False
    ran: bool = False
    data: object = None                 # its records (of type `records`); None: none yet
    data_time: float = 0.0              # wall-clock time of the data
    duration: float = 0.0
    last_success: float = 0.0
    runs: int = 0
    errors_total: dict[str, int] = field(default_factory=lambda: {k: 0 for k in ERROR_KINDS})
    active_errors: set[str] = field(default_factory=set)
    # In use: enabled, and the program it runs (if any) is installed. An `enabled: auto` source
    # whose program is missing is off: it does not run and reports no error.
    active: bool = True
    program: str | None = None          # the resolved program file, for tool sources
    stale_after: float = 0.0            # seconds its records stay fresh (0: 2 x interval + timeout)

    def copy(self) -> SourceState:
        return SourceState(self.name, self.enabled, self.interval, self.timeout, self.records, self.up, self.ran,
                           self.data, self.data_time, self.duration, self.last_success, self.runs,
                           dict(self.errors_total), set(self.active_errors), self.active, self.program,
                           self.stale_after)

    @property
    def stale_bound(self) -> float:
        return self.stale_after or 2 * self.interval + self.timeout


def fresh_states(states: Mapping[str, SourceState], now: float) -> dict[str, SourceState]:
    """Copies of the states as one build may read them: a source's records are there only while they are
    fresh (produced within its staleness bound by a run that succeeded); older ones are taken out, and the
    source is down with an active error that says since when ("no data, no status": nothing remembered
    stands in for a source that stopped answering, whether its runs fail, hang or stopped)."""
    out = {}
    for n, s in states.items():
        c = s.copy()
        if c.enabled and c.data is not None and now - c.data_time > c.stale_bound:
            c.data, c.up = None, False
            c.active_errors.add(f"{n}: no fresh records for {now - c.data_time:.0f} s (stale after "
                                f"{c.stale_bound:g} s): its checks are not judged until a run succeeds")
        out[n] = c
    return out


def source_state(states: Mapping[str, SourceState], records: type) -> SourceState | None:
    """The enabled source whose records are of type `records` (records are picked by type, never by
    source name), or None: no such source, or it is disabled."""
    return next((s for s in states.values() if s.records is records and s.enabled), None)


def source_data(states: Mapping[str, SourceState], records: type[R]) -> R | None:
    """The latest records of that source (None: none yet, or no enabled source of them)."""
    st = source_state(states, records)
    return st.data if st is not None and isinstance(st.data, records) else None


def records_present(states: Mapping[str, SourceState]) -> set[str]:
    """The names of the record types the enabled sources yielded (what a check may need: checks.shape)."""
    return {s.records.__name__ for s in states.values()
            if s.enabled and s.records is not None and isinstance(s.data, s.records)}


@dataclass(frozen=True, slots=True)
class Unjudged:
    """Why a build could judge nothing ("" when it could): the snapshot's `unknown`, the health rule's
    UNKNOWN. A check that knows (expected_inventory on the node) derives it; the fabric model says it
    while no switch could be read."""
    reason: str = ""


@dataclass(slots=True)
class IbSection:
    devices: dict[str, DeviceView] = field(default_factory=dict)
    ports: dict[tuple[str, int], PortView] = field(default_factory=dict)
    verdicts: dict[tuple[str, int], LinkVerdict] = field(default_factory=dict)
    saturation: dict[tuple[str, int], dict[str, bool]] = field(default_factory=dict)


@dataclass(slots=True)
class RoceSection:
    views: list[RoceView] = field(default_factory=list)


@dataclass(slots=True)
class GpuSection:
    gpudirect: GpudirectStatus | None = None     # None: the gpudirect source has no data
    gpus: GpuData | None = None
    affinity: AffinityResult | None = None


@dataclass(slots=True)
class BuildStats:
    """Snapshot builds so far (fabricmon_snapshot_build_duration_seconds, fabricmon_snapshot_build_failures_total)
    and whether this snapshot's own build failed (then it carries only the sources' states and why)."""
    count: int = 0
    total: float = 0.0
    buckets: list[int] = field(default_factory=list)     # cumulative, one per BUILD_BUCKETS bound
    failures: int = 0                # builds that raised (a bug: the log has the traceback)
    failed: bool = False             # this snapshot stands for a build that failed


class Sections(TypedDict, total=False):
    """What a pipeline model's build fills in of a Snapshot (its keyword arguments besides time,
    findings, sources and builds); a section left out keeps its default."""
    ib: IbSection
    roce: RoceSection
    gpu: GpuSection
    fabric: FabricSection | None
    jobs: JobsSection | None
    optics: OpticsSection | None
    kernel: KernelSection | None
    nccl: NcclSection | None
    ras: RasData | None
    ber: BerSection | None
    pcie: PcieSection | None
    cables: CablesSection | None
    inventory_known: bool
    unknown: str


BUILD_BUCKETS = (0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 1.0, float("inf"))


@dataclass(frozen=True, slots=True)
class Snapshot:
    """What one configuration of the pipeline built: one frozen product of one build, published by one
    assignment and never changed afterwards (nor are its sections). The node daemon fills ib, roce and gpu;
    the fabric collector fills fabric. A section it does not build stays empty."""
    time: float
    findings: list[Finding]
    sources: dict[str, SourceState]
    builds: BuildStats
    ib: IbSection = field(default_factory=IbSection)
    roce: RoceSection = field(default_factory=RoceSection)
    gpu: GpuSection = field(default_factory=GpuSection)
    fabric: FabricSection | None = None     # the fabric collector's section (None on a node)
    jobs: JobsSection | None = None         # when a job source runs, else None
    optics: OpticsSection | None = None     # when the optics source runs, else None
    kernel: KernelSection | None = None     # when the kernel_log source has data, else None
    nccl: NcclSection | None = None         # when the nccl_inspector source has data, else None
    ras: RasData | None = None              # NCCL RAS's last answer, when the nccl_ras source runs
    ber: BerSection | None = None           # the physical-layer BER view, when a source read phy counters
    pcie: PcieSection | None = None         # the PCIe links of the RDMA functions and GPUs, when the pcie source ran
    cables: CablesSection | None = None     # the cable ledger's ports (cable_history), when a module's serial was read
    # False until the port inventory is known (the inventory sources have answered): a daemon's
    # first snapshots may be built before sysfs/ibstat ran, and must not call the node empty.
    inventory_known: bool = True
    # the serving daemon's fabricmon_http_errors_total by kind, as of this snapshot's build (empty: not serving)
    http_errors: dict[str, int] = field(default_factory=dict)
    # Why this node has nothing to check ("" when it has): no InfiniBand/RoCE port, no
    # expected_links and no port learned before. `check` answers UNKNOWN with it.
    unknown: str = ""
    # the host this daemon reports on (slurm.node_name, else the short host name; a bundle's recorded host)
    host: str = ""
    # remediation's state as of this build (the daemon's Remediator: what it did, waits for, refused; its
    # modes); None where none runs (`once`, `check`, a replay)
    remediation: RemediationSection | None = None


__all__ = ["BUILD_BUCKETS", "ERROR_KINDS", "BuildStats", "GpuSection", "IbSection", "RoceSection", "Sections",
           "Snapshot", "SourceState", "Unjudged", "fresh_states", "records_present", "source_data", "source_state"]
