"""pcie source: the PCIe link of every RDMA device's PCI function and of every NVIDIA GPU, as sysfs says
it: `current_link_speed`/`current_link_width` against `max_link_speed`/`max_link_width` of the function
and of the port above it (its slot: the switch's downstream port or the root port), and the AER counters
`aer_dev_correctable`, `aer_dev_nonfatal`, `aer_dev_fatal` of both (an endpoint's errors may be counted at
its link partner instead: drivers/pci/pcie/aer.c). docs/pcie.md.

The RDMA functions come from the inventory (`/sys/class/infiniband/<dev>/device`, its realpath); the GPUs
from `/sys/bus/pci/devices/*` with vendor 0x10de and a display class (0x0300, 0x0302), listed again every
STATIC_TTL seconds. Reading sysfs cannot hang; a file that cannot be read costs only its value, a missing
file (no AER in this kernel, a function without a PCIe capability) is simply absent.
"""

from __future__ import annotations

import errno
import re
import time
from dataclasses import dataclass
from typing import TYPE_CHECKING

from fabricmon.host.io import HostIO
from fabricmon.model.pcie import AerCounts, PcieData, PcieDevice, PcieLink
from fabricmon.parsers.errors import ParseError
from fabricmon.parsers.pcie import parse_aer, parse_speed, parse_width
from fabricmon.pipeline.source import INVENTORY, Inputs, Source, SourceOutput, register
from fabricmon.registry import taking
from fabricmon.schema import DeviceFilter, Schema, boolean, from_class

if TYPE_CHECKING:
    from fabricmon.registry import SourceConfig

_BDF = re.compile(r"^[0-9a-f]{4}:[0-9a-f]{2}:[0-9a-f]{2}\.[0-7]$")
LINK_FILES = ("current_link_speed", "current_link_width", "max_link_speed", "max_link_width")
AER_FILES = (("correctable", "aer_dev_correctable"), ("nonfatal", "aer_dev_nonfatal"), ("fatal", "aer_dev_fatal"))
STATIC_TTL = 300.0
NVIDIA = "0x10de"
GPU_CLASSES = ("0x0300", "0x0302")


@dataclass(frozen=True, slots=True)
class PcieOptions:
    """sources.pcie's own keys."""
    gpus: bool = True
    exclude: DeviceFilter = DeviceFilter()      # exclude_devices


OPTIONS: Schema[PcieOptions] = Schema((
    boolean("gpus", True, "watch the NVIDIA GPUs' links too (found in /sys/bus/pci/devices by vendor and class)"),
), build=taking(from_class(PcieOptions), exclude=DeviceFilter), pure=False)


def relative(pci_path: str | None) -> str | None:
    """A /sys/devices/... realpath as a path relative to the sysfs root, when it is a PCI function's."""
    if not pci_path or not pci_path.startswith("/sys/"):
        return None
    rel = pci_path[len("/sys/"):].rstrip("/")
    return rel if _BDF.match(rel.rsplit("/", 1)[-1]) else None


@register("pcie", enabled=True, interval=60.0, timeout=5.0, needs=(INVENTORY,), records=PcieData, options=OPTIONS)
class PcieSource(Source):
    def __init__(self, sc: SourceConfig):
        super().__init__(sc)
        self._gpus: list[str] = []            # the GPUs' sysfs paths, relative
        self._listed = float("-inf")

    def collect(self, io: HostIO, inputs: Inputs) -> SourceOutput:
        out = SourceOutput()
        data = PcieData()
        inv = inputs.inventory
        for name, d in sorted(inv.devices.items()):
            if self.sc.settings(PcieOptions).exclude.excluded(name):
                continue
            rel = relative(d.pci_path)
            if rel is None:
                continue
            addr = rel.rsplit("/", 1)[-1]
            ports = tuple(sorted(p for (dev, p) in inv.ports if dev == name))
            if addr in data.devices:          # a bond's device shares the first function: one record
                continue
            data.devices[addr] = self._read(io, rel, "nic", name, ports, out)
        if self.sc.settings(PcieOptions).gpus:
            for rel in self._gpu_paths(io, out):
                addr = rel.rsplit("/", 1)[-1]
                if addr not in data.devices:
                    data.devices[addr] = self._read(io, rel, "gpu", addr, (), out)
        out.data = data
        return out

    def _gpu_paths(self, io: HostIO, out: SourceOutput) -> list[str]:
        now = time.monotonic()
        if now - self._listed < STATIC_TTL:
            return self._gpus
        self._listed = now
        gpus: list[str] = []
        try:
            names = io.listdir("sysfs", "bus/pci/devices")
        except OSError as exc:
            if exc.errno != errno.ENOENT:
                out.error("read", f"/sys/bus/pci/devices: {exc.strerror or exc}")
            self._gpus = gpus
            return gpus
        for bdf in names:
            if not _BDF.match(bdf):
                continue
            base = f"bus/pci/devices/{bdf}"
            vendor, klass = io.read_many("sysfs", [f"{base}/vendor", f"{base}/class"])
            if not isinstance(vendor, str) or not isinstance(klass, str) or vendor.strip() != NVIDIA \
                    or not klass.strip().startswith(GPU_CLASSES):
                continue
            try:
                rel = relative(io.realpath("sysfs", base))
            except OSError:
                rel = None
            if rel is not None:
                gpus.append(rel)
        self._gpus = sorted(gpus)
        return self._gpus

    def _read(self, io: HostIO, rel: str, kind: str, name: str, ports: tuple[int, ...], out: SourceOutput) -> PcieDevice:
        dev = PcieDevice(rel.rsplit("/", 1)[-1], kind, name, ports=ports)
        dev.current, dev.maximum, dev.aer = self._function(io, rel, out, current=True)
        parent = rel.rsplit("/", 1)[0]
        if _BDF.match(parent.rsplit("/", 1)[-1]):
            dev.slot_address = parent.rsplit("/", 1)[-1]
            _, slot, dev.slot_aer = self._function(io, parent, out, current=False)
            dev.slot = slot if slot.known else None
        return dev

    def _function(self, io: HostIO, rel: str, out: SourceOutput, current: bool
                  ) -> tuple[PcieLink, PcieLink, dict[str, AerCounts]]:
        files = [f"{rel}/{f}" for f in LINK_FILES] + [f"{rel}/{f}" for _, f in AER_FILES]
        answers = io.read_many("sysfs", files)
        vals: list[float | int | None] = []
        for i, (path, ans) in enumerate(zip(files[:4], answers[:4])):
            if isinstance(ans, OSError):
                if ans.errno != errno.ENOENT and (current or i >= 2):
                    out.error("read", f"/sys/{path}: {ans.strerror or ans}")
                vals.append(None)
                continue
            try:
                vals.append(parse_speed(ans) if i % 2 == 0 else parse_width(ans))
            except ParseError as exc:
                out.error("parse", f"/sys/{path}: {exc}")
                vals.append(None)
        cur = PcieLink(_f(vals[0]), _i(vals[1]))
        mx = PcieLink(_f(vals[2]), _i(vals[3]))
        aer: dict[str, AerCounts] = {}
        for (severity, fname), ans in zip(AER_FILES, answers[4:]):
            if isinstance(ans, OSError):
                if ans.errno != errno.ENOENT:
                    out.error("read", f"/sys/{rel}/{fname}: {ans.strerror or ans}")
                continue
            try:
                aer[severity] = parse_aer(ans)
            except ParseError as exc:
                out.error("parse", f"/sys/{rel}/{fname}: {exc}")
        return cur, mx, aer


def _f(v: float | int | None) -> float | None:
    return None if v is None else float(v)


def _i(v: float | int | None) -> int | None:
    return None if v is None else int(v)
