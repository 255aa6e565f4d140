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

from fabricmon.host.io import HostIO
from fabricmon.model.gpu import GpudirectFacts
from fabricmon.parsers.errors import ParseError
from fabricmon.parsers.proc_modules import (
    is_open_kernel_module, parse_kernel_release, parse_nvidia_driver_version,
    parse_proc_modules,
)
from fabricmon.pipeline.source import Inputs, Source, SourceOutput, register

_ABSENT = (errno.ENOENT, errno.ENOTDIR, errno.ENODEV)


@register("gpudirect", enabled=True, interval=60.0, timeout=5.0, records=GpudirectFacts)
class GpudirectSource(Source):

    @staticmethod
    def _read(io: HostIO, root: str, rel: str, out: SourceOutput) -> str | None:
        try:
            return io.read(root, rel)
        except OSError as exc:
            if exc.errno not in _ABSENT:
                prefix = "/sys" if root == "sysfs" else "/proc"
                out.error("read", f"{prefix}/{rel}: {exc.strerror or exc}")
            return None

    def collect(self, io: HostIO, inputs: Inputs) -> SourceOutput:
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
