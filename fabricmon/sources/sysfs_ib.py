"""sysfs source: /sys/class/infiniband/<dev>/{hca_type,fw_ver,...}/ports/<n>/{state,rate,counters/,hw_counters/}.

Reading sysfs cannot hang, but any single file may fail (EINVAL, EACCES, vanished between
listing and reading) or read `N/A (no PMA)`: that costs only that value.
"""

from __future__ import annotations

import errno
import time
from dataclasses import dataclass, field

from fabricmon.config import Config
from fabricmon.hostio import HostIO
from fabricmon.ibspec import COUNTER_BY_SYSFS
from fabricmon.parsers.errors import ParseError
from fabricmon.parsers.sysfs_ib import parse_counter, parse_enum, parse_rate, port_guid_from_gid
from fabricmon.sources import SourceOutput

BASE = "class/infiniband"
# hw_counters entries that are settings, not counters.
HW_NOT_COUNTERS = frozenset({"lifespan"})
# How long a device's static layout (identity, netdevs, port and counter lists) is reused
# before it is read again; a re-registered device (driver reload) is seen within this time.
STATIC_TTL = 60.0


@dataclass(slots=True)
class SysfsPort:
    port: int
    state_id: int | None = None
    phys_state_id: int | None = None
    rate_gbps: float | None = None
    width: int | None = None
    generation: str | None = None
    link_layer: str | None = None
    port_guid: str | None = None
    counters: dict[str, int] = field(default_factory=dict)      # canonical -> raw
    hw_counters: dict[str, int] = field(default_factory=dict)


@dataclass(slots=True)
class SysfsDevice:
    name: str
    hca_type: str | None = None
    fw_ver: str | None = None
    board_id: str | None = None
    node_guid: str | None = None
    netdevs: list[str] = field(default_factory=list)
    numa_node: int | None = None
    pci_path: str | None = None
    ports: dict[int, SysfsPort] = field(default_factory=dict)


@dataclass(slots=True)
class _PortLayout:
    num: int
    base: str
    link_layer: str | None
    port_guid: str | None
    counters: list[tuple[str, str]]       # (file, canonical name)
    hw_counters: list[tuple[str, str]]


@dataclass(slots=True)
class _Layout:
    static: SysfsDevice
    ports: list[_PortLayout]
    read_at: float


class SysfsSource:
    name = "sysfs"

    def __init__(self, config: Config):
        self.config = config
        self._layouts: dict[str, _Layout] = {}

    def _read(self, io: HostIO, rel: str, out: SourceOutput, optional: bool = False) -> str | None:
        try:
            return io.read("sysfs", rel).strip()
        except OSError as exc:
            if optional and exc.errno in (errno.ENOENT, None):
                return None
            out.error("read", f"/sys/{rel}: {exc.strerror or exc}")
            return None

    def _listdir(self, io: HostIO, rel: str, out: SourceOutput, optional: bool = True) -> list[str]:
        try:
            return io.listdir("sysfs", rel)
        except OSError as exc:
            if not (optional and exc.errno == errno.ENOENT):
                out.error("read", f"/sys/{rel}: {exc.strerror or exc}")
            return []

    def collect(self, io: HostIO) -> SourceOutput:
        out = SourceOutput()
        try:
            names = io.listdir("sysfs", BASE)
        except OSError as exc:
            if exc.errno == errno.ENOENT:
                out.data = {}           # no RDMA devices (or no rdma driver loaded): not an error
            else:
                out.error("read", f"/sys/{BASE}: {exc.strerror or exc}")
            return out
        now = time.monotonic()
        devices: dict[str, SysfsDevice] = {}
        for name in names:
            if self.config.device_excluded(name):
                continue
            layout = self._layouts.get(name)
            if layout is None or now - layout.read_at >= STATIC_TTL:
                layout = self._layouts[name] = self._layout(io, name, out, now)
            devices[name] = self._device(io, layout, out)
        for gone in set(self._layouts) - set(devices):
            del self._layouts[gone]     # a removed HCA: re-read in full if it comes back
        out.data = devices
        sweep = getattr(io, "sweep", None)
        if sweep is not None:
            sweep("sysfs", BASE)     # close the cached files of devices and ports that are gone
        return out

    def _layout(self, io: HostIO, name: str, out: SourceOutput, now: float) -> _Layout:
        """What does not change while a device stays registered: identity, netdevs, NUMA node,
        PCI path, the port list and which counter files exist. Re-read every STATIC_TTL."""
        base = f"{BASE}/{name}"
        dev = SysfsDevice(name=name)
        dev.hca_type = self._read(io, f"{base}/hca_type", out, optional=True)
        dev.fw_ver = self._read(io, f"{base}/fw_ver", out, optional=True)
        dev.board_id = self._read(io, f"{base}/board_id", out, optional=True)
        dev.node_guid = self._read(io, f"{base}/node_guid", out, optional=True)
        if dev.node_guid and ":" in dev.node_guid:       # sysfs prints a088:c203:00ad:eab8
            dev.node_guid = "0x" + dev.node_guid.replace(":", "")
        dev.netdevs = self._listdir(io, f"{base}/device/net", out)
        numa = self._read(io, f"{base}/device/numa_node", out, optional=True)
        if numa is not None:
            try:
                n = int(numa)
                dev.numa_node = n if n >= 0 else None
            except ValueError:
                out.error("parse", f"/sys/{base}/device/numa_node: {numa[:40]!r}")
        try:
            dev.pci_path = io.realpath("sysfs", f"{base}/device")
        except OSError:
            dev.pci_path = None
        ports = []
        for pname in self._listdir(io, f"{base}/ports", out, optional=False):
            if not pname.isdigit():
                continue
            pb = f"{base}/ports/{pname}"
            gid0 = self._read(io, f"{pb}/gids/0", out, optional=True)
            ports.append(_PortLayout(
                num=int(pname), base=pb,
                link_layer=self._read(io, f"{pb}/link_layer", out, optional=True),
                port_guid=port_guid_from_gid(gid0) if gid0 else None,
                counters=[(f"{pb}/counters/{f}", COUNTER_BY_SYSFS[f].name)
                          for f in self._listdir(io, f"{pb}/counters", out) if f in COUNTER_BY_SYSFS],
                hw_counters=[(f"{pb}/hw_counters/{f}", f)
                             for f in self._listdir(io, f"{pb}/hw_counters", out) if f not in HW_NOT_COUNTERS],
            ))
        return _Layout(dev, ports, now)

    def _device(self, io: HostIO, layout: _Layout, out: SourceOutput) -> SysfsDevice:
        s = layout.static
        dev = SysfsDevice(name=s.name, hca_type=s.hca_type, fw_ver=s.fw_ver, board_id=s.board_id,
                          node_guid=s.node_guid, netdevs=list(s.netdevs), numa_node=s.numa_node,
                          pci_path=s.pci_path)
        for pl in layout.ports:
            dev.ports[pl.num] = self._port(io, pl, out)
        return dev

    def _port(self, io: HostIO, pl: _PortLayout, out: SourceOutput) -> SysfsPort:
        base = pl.base
        p = SysfsPort(port=pl.num, link_layer=pl.link_layer, port_guid=pl.port_guid)
        for fname, setter in (("state", "state_id"), ("phys_state", "phys_state_id")):
            text = self._read(io, f"{base}/{fname}", out)
            if text is not None:
                try:
                    setattr(p, setter, parse_enum(text)[0])
                except ParseError as exc:
                    out.error("parse", f"/sys/{base}/{fname}: {exc}")
        text = self._read(io, f"{base}/rate", out)
        if text is not None:
            try:
                p.rate_gbps, p.width, p.generation = parse_rate(text)
            except ParseError as exc:
                out.error("parse", f"/sys/{base}/rate: {exc}")
        for rel, key in pl.counters:
            self._counter(io, rel, key, p.counters, out)
        for rel, key in pl.hw_counters:
            self._counter(io, rel, key, p.hw_counters, out)
        return p

    def _counter(self, io: HostIO, rel: str, key: str, into: dict[str, int], out: SourceOutput) -> None:
        text = self._read(io, rel, out)
        if text is None:
            return
        try:
            value = parse_counter(text)
        except ParseError as exc:
            out.error("parse", f"/sys/{rel}: {exc}")
            return
        if value is not None:
            into[key] = value
