"""gpu source: each GPU's index, UUID and PCI bus id from NVML (HostIO.nvml_gpus, whose only
pynvml caller is fabricmon.sources.nvml), plus the GPU's sysfs PCI realpath
(/sys/bus/pci/devices/<bus id>) and NUMA node, for the GPU-NIC affinity check. It also reads
the NCCL environment file named by `gpu.nccl_env_file`, when set.

With `enabled: auto` (the default) a host without NVML (no libnvidia-ml, no driver) simply has
no GPUs; with `enabled: true` that is a source error. NVML that may not open the GPUs' device nodes
("Insufficient Permissions") is a source error either way, with the fix (sources.privilege). NVML calls can hang when a GPU falls off
the bus, so the query runs in a helper thread bounded by the source's timeout.
"""

from __future__ import annotations

import errno
import threading
from typing import TYPE_CHECKING, Any

from fabricmon.host.io import HostIO
from fabricmon.host.nvml import NO_PERMISSION, NvmlUnavailable
from fabricmon.model.gpu import GpuData, GpuInfo
from fabricmon.parsers.errors import ParseError
from fabricmon.parsers.nccl_env import parse_env_file, parse_nccl_ib_hca
from fabricmon.parsers.pci_topology import normalize_bus_id, parse_numa_node, pci_chain_or_none
from fabricmon.pipeline.source import Inputs, Source, SourceOutput, register
from fabricmon.registry import shared_settings
from fabricmon.sources.settings import GpuConfig
from fabricmon.sources.privilege import NVML_FIX

if TYPE_CHECKING:
    from fabricmon.registry import SourceConfig


@register("gpu", enabled="auto", interval=60.0, timeout=10.0, records=GpuData,
          options=shared_settings(lambda ctx: ctx.take(GpuConfig)))
class GpuSource(Source):
    def __init__(self, sc: SourceConfig):
        super().__init__(sc)
        self._hung: threading.Thread | None = None

    def _query(self, io: HostIO, timeout: float) -> tuple[list[dict[str, Any]] | None, BaseException | None]:
        """Call io.nvml_gpus() in a helper thread, bounded by the source timeout."""
        fn = io.nvml_gpus
        if self._hung is not None and self._hung.is_alive():
            return None, TimeoutError("a previous NVML query is still hanging")
        box: dict[str, Any] = {}

        def run() -> None:
            try:
                box["gpus"] = fn()
            except BaseException as exc:       # noqa: BLE001 - handed to the caller
                box["exc"] = exc
        t = threading.Thread(target=run, name="fabricmon-nvml", daemon=True)
        t.start()
        t.join(timeout)
        if t.is_alive():
            self._hung = t
            return None, TimeoutError(f"NVML query timed out after {timeout:g}s")
        return box.get("gpus"), box.get("exc")

    def collect(self, io: HostIO, inputs: Inputs) -> SourceOutput:
        out = SourceOutput()
        data = GpuData()
        gpus, exc = self._query(io, inputs.remaining(self.sc.timeout))
        nvml_failed = exc is not None and not (isinstance(exc, NvmlUnavailable) and self.sc.enabled is not True)
        if isinstance(exc, NvmlUnavailable):
            if self.sc.enabled is True:
                out.error("not_found", f"NVML: {exc}")
        elif isinstance(exc, TimeoutError):
            out.error("timeout", str(exc))
        elif exc is not None and NO_PERMISSION in str(exc):        # the device nodes: why, and the fix
            out.error("read", f"NVML: {exc}: {NVML_FIX}")
        elif exc is not None:
            out.error("read", f"NVML: {exc}")
        else:
            data.nvml_available = True
            for g in sorted(gpus or [], key=lambda g: int(g.get("index", 0))):
                info = self._gpu(io, g, out)
                if info is not None:
                    data.gpus.append(info)
                data.driver_version = data.driver_version or (g.get("driver_version") or None)
        self._nccl_env(io, data, out)
        if not nvml_failed or data.nccl_env is not None:
            out.data = data         # no NVML under `auto` is an answer ("no GPUs"), not a failure
        return out

    def _gpu(self, io: HostIO, g: dict[str, Any], out: SourceOutput) -> GpuInfo | None:
        try:
            bus = normalize_bus_id(str(g.get("bus_id", "")))
        except ParseError as exc:
            out.error("parse", f"NVML GPU {g.get('index')}: {exc}")
            return None
        rel = f"bus/pci/devices/{bus}"
        info = GpuInfo(index=int(g.get("index", 0)), uuid=str(g.get("uuid", "")), bus_id=bus,
                       pci_path=None, numa_node=None)
        try:
            info.pci_path = io.realpath("sysfs", rel)
        except OSError as exc:
            out.error("read", f"/sys/{rel}: {exc.strerror or exc}")
        info.pci_chain = pci_chain_or_none(info.pci_path)
        try:
            info.numa_node = parse_numa_node(io.read("sysfs", f"{rel}/numa_node"))
        except OSError as exc:
            if exc.errno != errno.ENOENT:
                out.error("read", f"/sys/{rel}/numa_node: {exc.strerror or exc}")
        except ParseError as exc:
            out.error("parse", f"/sys/{rel}/numa_node: {exc}")
        return info

    def _nccl_env(self, io: HostIO, data: GpuData, out: SourceOutput) -> None:
        path = self.sc.settings(GpuConfig).nccl_env_file
        if not path:
            return
        data.nccl_env_file = path
        try:
            data.nccl_env = parse_env_file(io.read_host_file(path))
            value = data.nccl_env.get("NCCL_IB_HCA")
            if value is not None:
                try:
                    data.nccl_ib_hca = parse_nccl_ib_hca(value)
                except ParseError as exc:
                    data.nccl_ib_hca_error = str(exc)
        except OSError as exc:
            out.error("read", f"gpu.nccl_env_file {path}: {exc.strerror or exc}")
