"""GPU records: the GPUDirect RDMA facts of the node and the GPUs NVML sees."""

from __future__ import annotations

import re
from dataclasses import dataclass, field

from fabricmon.model.finding import Finding
from fabricmon.model.pci import gpudirect_capable
from fabricmon.model.node_records import ModuleInfo, NcclHcaSpec


@dataclass(slots=True)
class GpudirectFacts:
    modules: dict[str, ModuleInfo] | None = None   # None: /proc/modules not available
    peermem_sysfs: bool = False                    # /sys/module/nvidia_peermem is live
    nv_mem_version: str | None = None              # legacy nv_peer_mem's version, when loaded
    kernel_release: str | None = None
    kernel: tuple[int, int] | None = None
    driver_version: str | None = None
    open_module: bool | None = None                # None: flavour unknown
    nvidia_sysfs: bool = False                     # /sys/module/nvidia exists (driver loaded)

    def module_live(self, name: str) -> bool:
        m = (self.modules or {}).get(name)
        return m is not None and m.state == "Live"

    @property
    def peermem(self) -> bool:
        return self.module_live("nvidia_peermem") or self.peermem_sysfs

    @property
    def nv_peer_mem(self) -> bool:
        return self.nv_mem_version is not None or self.module_live("nv_peer_mem")

    @property
    def nvidia_loaded(self) -> bool:
        return self.module_live("nvidia") or self.nvidia_sysfs or self.driver_version is not None


@dataclass(slots=True)
class GpuInfo:
    index: int
    uuid: str
    bus_id: str                  # sysfs form, 0000:19:00.0
    pci_path: str | None         # /sys/devices/pci0000:18/.../0000:1b:00.0
    numa_node: int | None        # None: unknown (sysfs -1)
    pci_chain: tuple[str, ...] | None = None   # parsed from pci_path (None: unknown)


@dataclass(slots=True)
class GpuData:
    gpus: list[GpuInfo] = field(default_factory=list)
    nvml_available: bool = False
    driver_version: str | None = None
    nccl_env_file: str | None = None
    nccl_env: dict[str, str] | None = None       # None: not configured or not readable
    nccl_ib_hca: NcclHcaSpec | None = None       # NCCL_IB_HCA parsed, when set and valid
    nccl_ib_hca_error: str | None = None         # why NCCL_IB_HCA does not parse


# DMA-BUF GPUDirect RDMA needs kernel 5.12+, the open NVIDIA kernel module and driver 515+ (CUDA 11.7).
DMABUF_MIN_KERNEL = (5, 12)
DMABUF_MIN_DRIVER_MAJOR = 515


def dmabuf_supported(
    kernel: tuple[int, int] | None,
    open_module: bool | None,
    driver_version: str | None,
) -> tuple[bool, str]:
    """Whether DMA-BUF GPUDirect RDMA is possible, with a reason naming what is missing."""
    missing: list[str] = []
    if kernel is None:
        missing.append("kernel version unknown")
    elif kernel < DMABUF_MIN_KERNEL:
        missing.append(f"kernel {kernel[0]}.{kernel[1]} < 5.12")
    if open_module is None:
        missing.append("NVIDIA kernel module flavour unknown")
    elif not open_module:
        missing.append("proprietary NVIDIA kernel module (open module required)")
    major = _driver_major(driver_version)
    if major is None:
        missing.append("NVIDIA driver version unknown")
    elif major < DMABUF_MIN_DRIVER_MAJOR:
        missing.append(f"NVIDIA driver {driver_version} < 515 (CUDA 11.7)")
    if missing:
        return False, "DMA-BUF unavailable: " + "; ".join(missing)
    assert kernel is not None
    return True, (
        f"DMA-BUF available: kernel {kernel[0]}.{kernel[1]}, open kernel module, "
        f"driver {driver_version}"
    )


def _driver_major(version: str | None) -> int | None:
    if not version:
        return None
    m = re.match(r"\s*(\d+)", version)
    return int(m[1]) if m else None


# --- what the GPU checks conclude (checks.gpudirect, checks.affinity) ---------------------

@dataclass(slots=True)
class GpudirectStatus:
    methods: dict[str, bool] = field(default_factory=dict)
    dmabuf_reason: str = ""
    has_gpus: bool = False          # GPUs seen by NVML, or the NVIDIA driver loaded
    finding: Finding | None = None


@dataclass(slots=True)
class AffinityResult:
    gpus: list[GpuInfo] = field(default_factory=list)
    paths: dict[tuple[int, str], str] = field(default_factory=dict)      # (gpu, device) -> class
    nearest: dict[int, tuple[str, tuple[str, ...]]] = field(default_factory=dict)
    assigned: dict[int, str] = field(default_factory=dict)               # gpu -> device
    findings: list[Finding] = field(default_factory=list)

    def affinity_ok(self, gpu: int) -> bool | None:
        """True at PXB or closer, False beyond, None when unknown or no NIC."""
        cls = self.nearest.get(gpu, ("UNKNOWN", ()))[0]
        return None if cls == "UNKNOWN" else gpudirect_capable(cls)
