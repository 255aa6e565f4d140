"""sysfs source: /sys/class/infiniband/<dev>/{hca_type,fw_ver,...}/ports/<n>/{state,rate,counters/,
counters_ext/} (mlx5's hw_counters/ are the hw_counters source's, on their own interval).

Reading sysfs cannot hang, but any single file may fail (EINVAL, EACCES, vanished between
listing and reading) or read `N/A (no PMA)`: that costs only that value. Where mlx4 has a
data or packet counter in both `counters/` and `counters_ext/`, the live one wins: both count
from the same reset, so the larger is the live one and the smaller is stale (a `counters_ext/`
twin that reads 0) or saturated (a 32-bit `counters/` value stuck at 2^32-1).
"""

from __future__ import annotations

import errno
import fnmatch
import time
from dataclasses import dataclass, field
from collections.abc import Callable
from typing import TYPE_CHECKING, TypeVar, cast

import structlog

from fabricmon.host.io import HostIO
from fabricmon.model.ibspec import COUNTER_BY_NAME, COUNTER_BY_SYSFS, COUNTER_BY_SYSFS_EXT
from fabricmon.parsers.errors import ParseError
from fabricmon.parsers.pci_topology import pci_chain_or_none
from fabricmon.parsers.sysfs_ib import (
    SysfsData, SysfsDevice, SysfsPort, parse_counter, parse_enum, parse_rate, port_guid_from_gid,
)
from fabricmon.pipeline.source import Inputs, Source, SourceOutput, register
from fabricmon.registry import taking
from fabricmon.schema import ConfigError, Context, DeviceFilter, Schema, from_class, listing

if TYPE_CHECKING:
    from fabricmon.registry import SourceConfig

T = TypeVar("T")

log = structlog.get_logger("fabricmon.sources.sysfs")
BASE = "class/infiniband"
# A counter read failing so is a firmware-restricted function's (HGX B200/B300, GB200, DGX): each
# read makes the driver log an ACCESS_REG failure, so the device's counters are never read again.
RESTRICTED_ERRNOS = (errno.EINVAL, errno.EIO, errno.EACCES, errno.EPERM)


def _glob(v: object, key: str, ctx: Context) -> str:
    if not isinstance(v, str) or not v:
        raise ConfigError(key, f"expected a device name or glob, got {v!r}")
    return v


@dataclass(frozen=True, slots=True)
class SysfsOptions:
    """sources.sysfs's own keys."""
    counters_exclude_devices: tuple[str, ...] = ()
    exclude: DeviceFilter = DeviceFilter()      # exclude_devices: never read at all


OPTIONS: Schema[SysfsOptions] = Schema((
    listing("counters_exclude_devices", (), "RDMA devices (globs) whose port counters are never read (state and rate "
            "still are): firmware-restricted functions, whose every counter read logs an ACCESS_REG failure. "
            "fabricmon also finds them itself, on the first counter read that fails EINVAL/EIO/EACCES",
            _glob, "globs"),
), build=taking(from_class(SysfsOptions), exclude=DeviceFilter), pure=False)
# How long a device's static layout (identity, netdevs, port and counter lists) is reused
# before it is read again; a re-registered device (driver reload) is seen within this time.
STATIC_TTL = 60.0


@dataclass(slots=True)
class _PortLayout:
    num: int
    base: str
    link_layer: str | None
    port_guid: str | None
    counters: list[tuple[str, str]]       # (file, canonical name)
    counters_ext: list[tuple[str, str]]   # mlx4 counters_ext/: (file, canonical name)
    state: str = ""                       # paths of the files read every poll
    phys_state: str = ""
    rate: str = ""
    counter_bits: dict[str, int] = field(default_factory=dict)   # width of each counters/ file's counter
    names: tuple[str, ...] = ()                # the canonical name of each counters/ file, in order

    rels: tuple[str, ...] = ()                 # every file read each poll, in one read_many

    def __post_init__(self) -> None:
        self.state, self.phys_state, self.rate = f"{self.base}/state", f"{self.base}/phys_state", f"{self.base}/rate"
        self.names = tuple(name for _, name in self.counters)
        self.counter_bits = {name: (64 if COUNTER_BY_NAME[name].kind == "traffic" else COUNTER_BY_NAME[name].bits)
                             for _, name in self.counters}
        self.rels = (self.state, self.phys_state, self.rate, *(r for r, _ in self.counters),
                     *(r for r, _ in self.counters_ext))


@dataclass(slots=True)
class _Layout:
    static: SysfsDevice
    ports: list[_PortLayout]
    read_at: float


@register("sysfs", enabled=True, interval=15.0, timeout=5.0, provides_inventory=True, records=SysfsData,
          options=OPTIONS)
class SysfsSource(Source):
    def __init__(self, sc: SourceConfig):
        super().__init__(sc)
        self._layouts: dict[str, _Layout] = {}
        self._parsed: dict[tuple[str, str], object] = {}    # (file, text) -> parsed: states and rates repeat
        self._counters_exclude: tuple[str, ...] = self.sc.settings(SysfsOptions).counters_exclude_devices
        self._restricted: dict[str, str] = {}     # device -> why its counters are not read (never forgotten)
        self._verified: set[str] = set()          # devices one counter of which read fine
        self._excluded: dict[str, bool] = {}      # device -> in exclude_devices (the setting does not change)
        # (state, phys_state, rate texts) -> (state id, phys state id, Gb/s, width, generation)
        self._heads: dict[tuple[str | OSError, str | OSError, str | OSError],
                          tuple[int | None, int | None, float | None, int | None, str | None]] = {}

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

    def collect(self, io: HostIO, inputs: Inputs) -> SourceOutput:
        out = SourceOutput()
        try:
            names = io.listdir("sysfs", BASE)
        except OSError as exc:
            if exc.errno == errno.ENOENT:
                out.data = SysfsData()  # no RDMA devices (or no rdma driver loaded): not an error
            else:
                out.error("read", f"/sys/{BASE}: {exc.strerror or exc}")
            return out
        now = time.monotonic()
        devices: dict[str, SysfsDevice] = {}
        relaid = False
        excluded = self._excluded
        for name in names:
            skip = excluded.get(name)
            if skip is None:
                if len(excluded) > 4096:
                    excluded.clear()
                skip = excluded[name] = self.sc.settings(SysfsOptions).exclude.excluded(name)
            if skip:
                continue
            layout = self._layouts.get(name)
            if layout is None or now - layout.read_at >= STATIC_TTL:
                layout = self._layouts[name] = self._layout(io, name, out, now)
                relaid = True
            devices[name] = self._device(io, layout, out)
        gone = set(self._layouts) - set(devices)
        for name in gone:
            del self._layouts[name]     # a removed HCA: re-read in full if it comes back
        out.data = SysfsData(devices, {d: why for d, why in self._restricted.items() if d in devices})
        if relaid or gone or out.errors:
            # the files of devices and ports that are gone are closed when the layout changes
            io.close_unread("sysfs", BASE)
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
        dev.pci_chain = pci_chain_or_none(dev.pci_path)
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
                counters_ext=[(f"{pb}/counters_ext/{f}", COUNTER_BY_SYSFS_EXT[f].name)
                              for f in self._listdir(io, f"{pb}/counters_ext", out) if f in COUNTER_BY_SYSFS_EXT],
            ))
        return _Layout(dev, ports, now)

    def _device(self, io: HostIO, layout: _Layout, out: SourceOutput) -> SysfsDevice:
        s = layout.static
        dev = SysfsDevice(name=s.name, hca_type=s.hca_type, fw_ver=s.fw_ver, board_id=s.board_id,
                          node_guid=s.node_guid, netdevs=list(s.netdevs), numa_node=s.numa_node,
                          pci_path=s.pci_path, pci_chain=s.pci_chain)
        for pl in layout.ports:
            dev.ports[pl.num] = self._port(io, pl, out, self._counters_allowed(io, s.name, pl))
        return dev

    def _counters_allowed(self, io: HostIO, name: str, pl: _PortLayout) -> bool:
        """Whether this port's counters are read: never for a restricted device; for one not yet
        verified, one counter is read alone first, so that a restricted function costs one failing
        read (one kernel log line), not one per counter file."""
        if name in self._restricted:
            return False
        if any(fnmatch.fnmatchcase(name, g) for g in self._counters_exclude):
            self._restricted[name] = "named in sources.sysfs.counters_exclude_devices"
            return False
        if name in self._verified or not pl.counters:
            return True
        rel = pl.counters[0][0]
        try:
            io.read("sysfs", rel)
        except OSError as exc:
            if exc.errno in RESTRICTED_ERRNOS:
                self._restricted[name] = f"reading /sys/{rel} failed: {exc.strerror or exc}"
                log.warning("port counters not read: a restricted function", device=name, path=f"/sys/{rel}",
                            error=exc.strerror or str(exc))
                return False
            return True         # vanished (ENOENT) and the like: the usual per-file error below
        self._verified.add(name)
        return True

    def _parse(self, fname: str, text: str, parse: Callable[[str], T], base: str, out: SourceOutput) -> T | None:
        """parse(text), remembered per distinct text (a port's state and rate rarely change)."""
        key = (fname, text)
        hit = self._parsed.get(key)
        if hit is None:
            try:
                parsed = parse(text)
            except ParseError as exc:
                out.error("parse", f"/sys/{base}/{fname}: {exc}")
                return None
            if len(self._parsed) > 1024:
                self._parsed.clear()
            self._parsed[key] = parsed
            return parsed
        return cast(T, hit)         # what `parse` made of this file's text: one parser per file name

    def _text(self, rel: str, answer: str | OSError, out: SourceOutput) -> str | None:
        if isinstance(answer, OSError):
            out.error("read", f"/sys/{rel}: {answer.strerror or answer}")
            return None
        return answer.strip()

    def _port(self, io: HostIO, pl: _PortLayout, out: SourceOutput, counters: bool = True) -> SysfsPort:
        p = SysfsPort(port=pl.num, link_layer=pl.link_layer, port_guid=pl.port_guid)
        answers = io.read_many("sysfs", pl.rels if counters else pl.rels[:3])   # state, phys_state, rate, counters
        head = (answers[0], answers[1], answers[2])
        known = self._heads.get(head)
        if known is not None:       # the same three texts as a poll before: one lookup
            p.state_id, p.phys_state_id, p.rate_gbps, p.width, p.generation = known
        else:
            self._head(pl, head, p, out)
        if counters:
            self._counters(pl, answers, p, out)
        return p

    def _head(self, pl: _PortLayout, head: tuple[str | OSError, str | OSError, str | OSError], p: SysfsPort,
              out: SourceOutput) -> None:
        """A port's state, phys_state and rate from their texts, remembered per three texts when all
        three read and parsed (a read or parse error is recorded each poll)."""
        base, answers, errors = pl.base, head, len(out.errors)
        for i, (fname, rel) in enumerate((("state", pl.state), ("phys_state", pl.phys_state))):
            text = self._text(rel, answers[i], out)
            if text is not None:
                enum = self._parse(fname, text, parse_enum, base, out)
                if enum is not None:
                    if fname == "state":
                        p.state_id = enum[0]
                    else:
                        p.phys_state_id = enum[0]
        text = self._text(pl.rate, answers[2], out)
        if text is not None:
            rate = self._parse("rate", text, parse_rate, base, out)
            if rate is not None:
                p.rate_gbps, p.width, p.generation = rate
        if len(out.errors) == errors:
            if len(self._heads) > 1024:
                self._heads.clear()
            self._heads[head] = (p.state_id, p.phys_state_id, p.rate_gbps, p.width, p.generation)

    def _counters(self, pl: _PortLayout, answers: list[str | OSError], p: SysfsPort, out: SourceOutput) -> None:
        n = len(pl.counters)
        bits = pl.counter_bits
        try:
            # the common case: every counter a decimal integer and a newline
            # (an OSError among them raises TypeError: the per-file path below records it)
            p.counters = dict(zip(pl.names, map(int, cast("list[str]", answers[3:3 + n]))))
            p.counter_bits = dict(bits)
        except (ValueError, TypeError):         # one that is not (N/A, garbage) or could not be read
            values = p.counters = {}
            for (rel, key), answer in zip(pl.counters, answers[3:3 + n]):
                self._counter(rel, key, answer, values, out)
            p.counter_bits = {name: bits[name] for name in values}
        for (rel, key), answer in zip(pl.counters_ext, answers[3 + n:]):
            ext: dict[str, int] = {}
            self._counter(rel, key, answer, ext, out)
            # the live one of the twins: the larger (the other is stale, or saturated at 2^32-1)
            if key in ext and ext[key] > p.counters.get(key, -1):
                p.counters[key] = ext[key]
                p.counter_bits[key] = 64

    @staticmethod
    def _counter(rel: str, key: str, text: str | OSError, into: dict[str, int], out: SourceOutput) -> None:
        if isinstance(text, OSError):
            out.error("read", f"/sys/{rel}: {text.strerror or text}")
            return
        try:
            into[key] = int(text)        # the common case: a decimal integer and a newline
            return
        except ValueError:
            pass
        try:
            value = parse_counter(text)
        except ParseError as exc:
            out.error("parse", f"/sys/{rel}: {exc}")
            return
        if value is not None:
            into[key] = value
