"""GPU records: the GPUDirect RDMA facts of the node and the GPUs NVML sees."""

from __future__ import annotations

from dataclasses import dataclass, field

from fabricmon.parsers.proc_modules import ModuleInfo


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


@dataclass(slots=True)
class GpuData:
    gpus: list[GpuInfo] = field(default_factory=list)
    nvml_available: bool = False
    driver_version: str | None = None
    nccl_env_file: str | None = None
    nccl_env: dict[str, str] | None = None       # None: not configured or not readable
