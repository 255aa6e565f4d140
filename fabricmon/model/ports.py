"""Merge what every source said about a port into one PortView.

Precedence, most trusted first (sources are cross-checked, never trusted alone):
- state: the port state poll (every second: PortStateData), then sysfs, then ibstat, then iblinkinfo;
- width and speed: iblinkinfo (PortInfo), then sysfs `rate`, then ibstat's Rate (ibstat's
  rate is wrong under ibsim for HDR, and stale on a Down port);
- counters: sysfs, then perfquery (COUNTER_RECORDS: by record type, SysfsData before PerfqueryData);
- identity (GUID, HCA type, firmware): sysfs, then ibstat.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import TypeVar

from fabricmon.model import ibspec
from fabricmon.model.finding import Finding
from fabricmon.model.node_records import (HwCountersData, IbstatData, LinkData, PerfqueryData, PortStateData,
                                          SysfsData)

R = TypeVar("R")
# Where a port's counters come from, most trusted first: by record type, never by source name
# (sysfs reads the HCA's own counters without a MAD; perfquery asks the PMA over the fabric).
COUNTER_RECORDS: tuple[type, ...] = (SysfsData, PerfqueryData)


def _outranked(held: type | None, new: type) -> bool:
    """Whether counters already taken from `held` outrank those of `new` (COUNTER_RECORDS)."""
    return held is not None and COUNTER_RECORDS.index(held) < COUNTER_RECORDS.index(new)


@dataclass(slots=True)
class DeviceView:
    device: str
    hca_type: str = ""
    firmware_version: str = ""
    board_id: str = ""
    node_guid: str = ""
    netdev: str = ""
    numa_node: int | None = None
    pci_path: str | None = None
    pci_chain: tuple[str, ...] | None = None
    # why no source reads this device's port counters ("" when they are read): a firmware-restricted
    # function, each of whose counter reads logs an ACCESS_REG failure (SysfsData.restricted)
    counters_restricted: str = ""


@dataclass(slots=True)
class PortView:
    device: str
    port: int
    link_layer: str = "InfiniBand"
    state_id: int | None = None
    phys_state_id: int | None = None
    width: int | None = None
    generation: str | None = None
    rate_gbps: float | None = None
    could_be_width: int | None = None
    could_be_generation: str | None = None
    port_guid: str = ""
    lid: int | None = None
    counters: dict[str, int] = field(default_factory=dict)       # canonical -> raw
    counter_bits: dict[str, int] = field(default_factory=dict)
    counter_record: type | None = None      # the record type the counters came from (COUNTER_RECORDS)
    counter_source: str | None = None       # the name of the source that made it (the pipeline names it)
    hw_counters: dict[str, int] = field(default_factory=dict)
    # what the port is cabled to (iblinkinfo's remote end while the link is up; the learned
    # inventory's memory of it while it is down): the switch's node description and port
    peer: str = ""
    peer_port: int | None = None

    @property
    def key(self) -> tuple[str, int]:
        return (self.device, self.port)

    @property
    def up(self) -> bool:
        # An unreadable phys_state on an ACTIVE port is unknown, not down (ACTIVE implies LinkUp).
        return self.state_id == ibspec.STATE_ACTIVE and self.phys_state_id in (None, ibspec.PHYS_LINKUP)

    @property
    def is_ib(self) -> bool:
        return self.link_layer != "Ethernet"

    def label(self) -> str:
        return f"{self.device} port {self.port}"

    def link_text(self) -> str:
        w = f"{self.width}X" if self.width else "?X"
        return f"{w} {self.generation or '?'}"


@dataclass(slots=True)
class LinkVerdict:
    """What the degraded_link check concluded about one port (checks.degraded_link)."""
    degraded: dict[str, bool]
    expected_rate_gbps: float | None
    finding: Finding


@dataclass(frozen=True, slots=True)
class PortVerdicts:
    """The degraded_link check's verdicts of the node's ports it judged (its derived sub-section)."""
    verdicts: Mapping[tuple[str, int], LinkVerdict]


@dataclass(slots=True)
class Inventory:
    """The merged devices and ports: what per-port sources query and checks judge."""
    devices: dict[str, DeviceView] = field(default_factory=dict)
    ports: dict[tuple[str, int], PortView] = field(default_factory=dict)

    def ib_ports(self, without_sysfs_counters: bool = False) -> list[tuple[str, int]]:
        """The InfiniBand ports a per-port tool queries, sorted; optionally only those whose
        counters sysfs does not give."""
        return [key for key, p in sorted(self.ports.items())
                if p.is_ib and not (without_sysfs_counters and p.counter_record is SysfsData)]

    def counters_restricted(self, device: str) -> bool:
        """Whether no source may read the device's port counters (a restricted function)."""
        d = self.devices.get(device)
        return d is not None and bool(d.counters_restricted)


def _pick(records: Iterable[object], cls: type[R]) -> R | None:
    return next((r for r in records if isinstance(r, cls)), None)


def merge(records: Iterable[object]) -> Inventory:
    """Merge the latest records of every source, picked by their type (SysfsData, IbstatData,
    PerfqueryData, LinkData, HwCountersData); records of other types are ignored."""
    records = list(records)
    sysfs_data: SysfsData | None = _pick(records, SysfsData)
    ibstat_data: IbstatData | None = _pick(records, IbstatData)
    perfq_data: PerfqueryData | None = _pick(records, PerfqueryData)
    link_data: LinkData | None = _pick(records, LinkData)
    hw_data: HwCountersData | None = _pick(records, HwCountersData)
    state_data: PortStateData | None = _pick(records, PortStateData)
    devices: dict[str, DeviceView] = {}
    ports: dict[tuple[str, int], PortView] = {}
    p: PortView | None

    def port(dev: str, num: int) -> PortView:
        key = (dev, num)
        if key not in ports:
            ports[key] = PortView(device=dev, port=num)
            devices.setdefault(dev, DeviceView(device=dev))
        return ports[key]

    # ibstat first, so that sysfs overwrites what both know.
    for ca in ibstat_data.cas if ibstat_data else []:
        d = devices.setdefault(ca.name, DeviceView(device=ca.name))
        d.hca_type = ca.ca_type or d.hca_type
        d.firmware_version = ca.firmware_version or d.firmware_version
        d.node_guid = ca.node_guid or d.node_guid
        for ip in ca.ports:
            p = port(ca.name, ip.port)
            p.link_layer = ip.link_layer or p.link_layer
            p.state_id = ibspec.state_id(ip.state) if ip.state else None
            p.phys_state_id = ibspec.phys_state_id(ip.physical_state) if ip.physical_state else None
            p.port_guid = ip.port_guid or ""
            p.lid = ip.base_lid
            if ip.rate_gbps:
                p.rate_gbps = ip.rate_gbps
    for name, sd in (sysfs_data.devices if sysfs_data else {}).items():
        d = devices.setdefault(name, DeviceView(device=name))
        d.hca_type = sd.hca_type or d.hca_type
        d.firmware_version = sd.fw_ver or d.firmware_version
        d.board_id = sd.board_id or ""
        d.node_guid = sd.node_guid or d.node_guid
        d.netdev = ",".join(sd.netdevs)
        d.numa_node = sd.numa_node
        d.pci_path = sd.pci_path
        d.pci_chain = sd.pci_chain
        for num, sp in sd.ports.items():
            p = port(name, num)
            if sp.link_layer:
                p.link_layer = sp.link_layer
            if sp.port_guid and not p.port_guid:
                p.port_guid = sp.port_guid
            if sp.state_id is not None:
                p.state_id = sp.state_id
            if sp.phys_state_id is not None:
                p.phys_state_id = sp.phys_state_id
            if sp.rate_gbps is not None:
                p.rate_gbps, p.width, p.generation = sp.rate_gbps, sp.width, sp.generation
            if sp.counters:
                p.counters = dict(sp.counters)
                p.counter_bits = dict(sp.counter_bits)
                p.counter_record = SysfsData
    # the ports' state alone, read every second: the newest read of it (sources/port_state.py)
    for key, (state, phys) in (state_data.ports if state_data else {}).items():
        p = ports.get(key)
        if p is not None:
            if state is not None:
                p.state_id = state
            if phys is not None:
                p.phys_state_id = phys
    for name, why in (sysfs_data.restricted if sysfs_data else {}).items():
        if name in devices:
            devices[name].counters_restricted = why
    for (dev, num), cs in (perfq_data.ports if perfq_data else {}).items():
        p = ports.get((dev, num))
        if p is None or _outranked(p.counter_record, PerfqueryData):
            continue
        p.counters, p.counter_bits, p.counter_record = dict(cs.counters), dict(cs.bits), PerfqueryData
    for key, values in (hw_data.ports if hw_data else {}).items():
        p = ports.get(key)
        if p is not None:
            p.hw_counters = dict(values)
    for (dev, num), li in (link_data.links if link_data else {}).items():
        p = ports.get((dev, num))
        if p is None:
            continue
        if p.state_id is None and li.state_id is not None:
            p.state_id, p.phys_state_id = li.state_id, li.phys_state_id
        if li.width is not None and li.generation is not None:
            p.width, p.generation = li.width, li.generation
        p.could_be_width = li.could_be_width
        p.could_be_generation = li.could_be_generation
        if li.remote_desc and li.remote_port is not None:
            p.peer, p.peer_port = li.remote_desc, li.remote_port
    for p in ports.values():
        if p.width and p.generation:
            g = ibspec.generation(p.generation)
            if g is not None:
                p.rate_gbps = p.width * g.lane_gbps
        if p.state_id is not None and not p.up:
            p.rate_gbps = 0.0   # a Down port shows a stale rate in ibstat and sysfs
    return Inventory(devices, ports)


def pair_netdevs(devices: Mapping[str, DeviceView], ports_by_device: dict[str, list[int]]
                 ) -> list[tuple[str, int, str]]:
    """(device, port, netdev) for each device's ports and the netdevs its DeviceView lists
    (comma-separated): with as many netdevs as ports they pair up in order, otherwise every netdev
    belongs to the device's first port; a device without a netdev gives each port with netdev ""."""
    out: list[tuple[str, int, str]] = []
    for dev in sorted(ports_by_device):
        d = devices.get(dev)
        netdevs = sorted(n for n in (getattr(d, "netdev", "") or "").split(",") if n)
        nums = sorted(ports_by_device[dev])
        if not netdevs:
            out += [(dev, num, "") for num in nums]
        elif len(netdevs) == len(nums):
            out += list(zip([dev] * len(nums), nums, netdevs))
        else:
            out += [(dev, nums[0], nd) for nd in netdevs]
    return out
