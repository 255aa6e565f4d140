"""gpudirect source: the facts that decide which GPUDirect RDMA path exists on this node.

- nvidia-peermem: `nvidia_peermem` in /proc/modules, or /sys/module/nvidia_peermem/initstate;
- legacy nv_peer_mem: /sys/kernel/mm/memory_peers/nv_mem/version;
- DMA-BUF: kernel release (/proc/sys/kernel/osrelease), NVIDIA driver version and module flavour
  (/proc/driver/nvidia/version, else /sys/module/nvidia/{version,taint}: a proprietary module
  taints the kernel with 'P', the open one does not).

Absent files are facts ("not loaded"), never errors: only files that exist and cannot be read
(EACCES, EIO) count as source errors.
"""

from __future__ import annotations

import errno
from dataclasses import dataclass

from fabricmon.config import Config
from fabricmon.hostio import HostIO
from fabricmon.parsers.errors import ParseError
from fabricmon.parsers.proc_modules import (
    ModuleInfo, is_open_kernel_module, parse_kernel_release, parse_nvidia_driver_version,
    parse_proc_modules,
)
from fabricmon.sources import SourceOutput

_ABSENT = (errno.ENOENT, errno.ENOTDIR, errno.ENODEV)


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


class GpudirectSource:
    name = "gpudirect"

    def __init__(self, config: Config):
        self.config = config

    @staticmethod
    def _read(io: HostIO, root: str, rel: str, out: SourceOutput) -> str | None:
        try:
            return io.read(root, rel)
        except OSError as exc:
            if exc.errno not in _ABSENT:
                prefix = "/sys" if root == "sysfs" else "/proc"
                out.error("read", f"{prefix}/{rel}: {exc.strerror or exc}")
            return None

    def collect(self, io: HostIO) -> SourceOutput:
        out = SourceOutput()
        f = GpudirectFacts()
        text = self._read(io, "procfs", "modules", out)
        if text is not None:
            try:
                f.modules = parse_proc_modules(text)
            except ParseError as exc:
                out.error("parse", f"/proc/modules: {exc}")
        state = self._read(io, "sysfs", "module/nvidia_peermem/initstate", out)
        f.peermem_sysfs = state is not None and state.strip() == "live"
        ver = self._read(io, "sysfs", "kernel/mm/memory_peers/nv_mem/version", out)
        f.nv_mem_version = (ver.strip() or "unknown") if ver is not None else None
        rel = self._read(io, "procfs", "sys/kernel/osrelease", out)
        if rel is not None and rel.strip():
            f.kernel_release = rel.strip()
            try:
                f.kernel = parse_kernel_release(rel)
            except ParseError as exc:
                out.error("parse", f"/proc/sys/kernel/osrelease: {exc}")
        proc_ver = self._read(io, "procfs", "driver/nvidia/version", out)
        if proc_ver is not None:
            try:
                f.driver_version = parse_nvidia_driver_version(proc_ver)
            except ParseError as exc:
                out.error("parse", f"/proc/driver/nvidia/version: {exc}")
            if f.driver_version:
                f.open_module = is_open_kernel_module(proc_ver)
        sys_ver = self._read(io, "sysfs", "module/nvidia/version", out)
        if sys_ver is not None:
            f.nvidia_sysfs = True
            if f.driver_version is None:
                try:
                    f.driver_version = parse_nvidia_driver_version(sys_ver)
                except ParseError as exc:
                    out.error("parse", f"/sys/module/nvidia/version: {exc}")
        if f.open_module is None and (f.nvidia_sysfs or f.module_live("nvidia")):
            taint = self._read(io, "sysfs", "module/nvidia/taint", out)
            if taint is not None:
                f.open_module = "P" not in taint.strip()
        out.data = f
        return out
