"""sysfs source: /sys/class/infiniband/<dev>/{hca_type,fw_ver,...}/ports/<n>/{state,rate,counters/,hw_counters/}.

Reading sysfs cannot hang, but any single file may fail (EINVAL, EACCES, vanished between
listing and reading) or read `N/A (no PMA)`: that costs only that value.
"""

from __future__ import annotations

import errno
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


class SysfsSource:
    name = "sysfs"

    def __init__(self, config: Config):
        self.config = config

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
        devices: dict[str, SysfsDevice] = {}
        for name in names:
            if self.config.device_excluded(name):
                continue
            devices[name] = self._device(io, name, out)
        out.data = devices
        sweep = getattr(io, "sweep", None)
        if sweep is not None:
            sweep("sysfs", BASE)     # close the cached files of devices and ports that are gone
        return out

    def _device(self, io: HostIO, name: str, out: SourceOutput) -> SysfsDevice:
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
        for pname in self._listdir(io, f"{base}/ports", out, optional=False):
            if not pname.isdigit():
                continue
            dev.ports[int(pname)] = self._port(io, f"{base}/ports/{pname}", int(pname), out)
        return dev

    def _port(self, io: HostIO, base: str, num: int, out: SourceOutput) -> SysfsPort:
        p = SysfsPort(port=num)
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
        p.link_layer = self._read(io, f"{base}/link_layer", out, optional=True)
        gid0 = self._read(io, f"{base}/gids/0", out, optional=True)
        if gid0:
            p.port_guid = port_guid_from_gid(gid0)
        for fname in self._listdir(io, f"{base}/counters", out):
            spec = COUNTER_BY_SYSFS.get(fname)
            if spec is None:
                continue
            self._counter(io, f"{base}/counters/{fname}", spec.name, p.counters, out)
        for fname in self._listdir(io, f"{base}/hw_counters", out):
            if fname not in HW_NOT_COUNTERS:
                self._counter(io, f"{base}/hw_counters/{fname}", fname, p.hw_counters, out)
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
