"""The node sources' records: what the parsers of sysfs, ibstat, perfquery, iblinkinfo, mlnx_qos,
ethtool -S, NCCL_IB_HCA and /proc/modules return, and what the node model merges (model/ports.py,
model/roce.py, model/gpu.py). They live here, in the model, so that the parsers import the model and
never the other way round."""

from __future__ import annotations

from dataclasses import dataclass, field

from fabricmon.model.ber import PhyCounters


# --- sysfs (/sys/class/infiniband) and mlx5 hw_counters ----------------------------------------


@dataclass(slots=True)
class SysfsPort:
    port: int
    state_id: int | None = None            # state
    phys_state_id: int | None = None       # phys_state
    rate_gbps: float | None = None         # rate
    width: int | None = None
    generation: str | None = None
    link_layer: str | None = None          # link_layer
    port_guid: str | None = None           # gids/0
    counters: dict[str, int] = field(default_factory=dict)      # counters/ (+ counters_ext/): canonical -> raw
    counter_bits: dict[str, int] = field(default_factory=dict)  # width of each counter read


@dataclass(slots=True)
class SysfsDevice:
    name: str
    hca_type: str | None = None            # hca_type
    fw_ver: str | None = None              # fw_ver
    board_id: str | None = None            # board_id
    node_guid: str | None = None           # node_guid
    netdevs: list[str] = field(default_factory=list)   # device/net/*
    numa_node: int | None = None           # device/numa_node (None for -1)
    pci_path: str | None = None            # realpath of device
    pci_chain: tuple[str, ...] | None = None   # pci_path as a PCI chain (None: not a PCI device)
    ports: dict[int, SysfsPort] = field(default_factory=dict)


@dataclass(slots=True)
class PortStateData:
    """The ports' state and phys_state alone, read every second (sources/port_state.py): the newest read of
    a port's state, which wins over the sysfs source's (model/ports.py merge). (device, port) -> (state id,
    phys state id), either None where its file did not read."""
    ports: dict[tuple[str, int], tuple[int | None, int | None]] = field(default_factory=dict)


@dataclass(slots=True)
class HwCountersData:
    """mlx5 `hw_counters/` of every port (RoCE and QP diagnostics), by (device, port)."""
    ports: dict[tuple[str, int], dict[str, int]] = field(default_factory=dict)


@dataclass(slots=True)
class SysfsData:
    """Every RDMA device under /sys/class/infiniband (empty: no devices, not an error)."""
    devices: dict[str, SysfsDevice] = field(default_factory=dict)
    # devices whose port counters are not read, and why: a firmware-restricted function (a counter
    # read failed EINVAL/EIO/EACCES), or named in sources.sysfs.counters_exclude_devices
    restricted: dict[str, str] = field(default_factory=dict)


# --- ibstat ------------------------------------------------------------------------------------


@dataclass(slots=True)
class IbstatPort:
    port: int
    state: str | None = None
    physical_state: str | None = None
    rate_gbps: float | None = None
    base_lid: int | None = None
    sm_lid: int | None = None
    port_guid: str | None = None
    link_layer: str | None = None


@dataclass(slots=True)
class IbstatCa:
    name: str
    ca_type: str | None = None
    num_ports: int | None = None
    firmware_version: str | None = None
    hardware_version: str | None = None
    node_guid: str | None = None
    system_image_guid: str | None = None
    ports: list[IbstatPort] = field(default_factory=list)


@dataclass(slots=True)
class IbstatData:
    """The adapters `ibstat` listed (partial output before an ibpanic included)."""
    cas: list[IbstatCa] = field(default_factory=list)


# --- perfquery ---------------------------------------------------------------------------------


@dataclass(slots=True)
class PortCounterSet:
    counters: dict[str, int] = field(default_factory=dict)     # canonical name -> raw
    bits: dict[str, int] = field(default_factory=dict)         # canonical name -> width


@dataclass(slots=True)
class PerfqueryData:
    """PortCounters (+ PortCountersExtended) of each local (device, port)."""
    ports: dict[tuple[str, int], PortCounterSet] = field(default_factory=dict)


# --- iblinkinfo --------------------------------------------------------------------------------


@dataclass(slots=True)
class LinkInfo:
    lid: int
    port: int
    width: int | None              # active lanes
    lane_signal_gbps: float | None
    generation: str | None         # "HDR", from the per-lane speed
    state_id: int | None
    phys_state_id: int | None
    remote_lid: int | None
    remote_port: int | None
    remote_desc: str
    could_be_width: int | None     # supported by both ends, when above the active width
    could_be_generation: str | None
    node_desc: str | None = None   # the local node's description, when printed


@dataclass(slots=True)
class LinkData:
    """iblinkinfo's view of each local (device, port) link."""
    links: dict[tuple[str, int], LinkInfo] = field(default_factory=dict)


# --- mlnx_qos ----------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class TrafficClass:
    """One ETS traffic class and the priorities mapped to it."""

    tc: int
    tsa: str  # "ets", "strict", "vendor" or "unknown"
    bw_percent: int | None  # only set for tsa == "ets"
    ratelimit: str  # "unlimited" or e.g. "25.0 Gbps"
    priorities: tuple[int, ...]


@dataclass(frozen=True, slots=True)
class QosConfig:
    """DCB/QoS settings of one netdev as reported by ``mlnx_qos``."""

    dcbx_mode: str | None  # "os", "firmware" or the raw value lowercased
    trust: str | None  # "pcp", "dscp" or "none"
    dscp2prio: dict[int, int]  # dscp -> priority; empty when not printed
    pfc_enabled: tuple[bool, ...]  # length 8, index = priority
    pfc_buffer: tuple[int, ...] | None  # receive buffer index per priority
    buffer_sizes: tuple[int, ...]  # receive buffer sizes in bytes
    cable_len: int | None
    traffic_classes: tuple[TrafficClass, ...]  # sorted by tc
    default_priority: int | None = None  # from the ``default priority:`` block
    buffer_total_size: int | None = None  # ``total_size=`` / ``max_buffer_size=``

    def pfc_priorities(self) -> tuple[int, ...]:
        """Priorities with PFC enabled."""
        return tuple(p for p, on in enumerate(self.pfc_enabled) if on)


@dataclass(slots=True)
class QosResult:
    qos: QosConfig | None          # None when the netdev has no DCB
    dcb_supported: bool = True


@dataclass(slots=True)
class MlnxQosData:
    netdevs: dict[str, QosResult] = field(default_factory=dict)
    tool_missing: bool = False     # enabled: auto and mlnx_qos is not installed


# --- ethtool -S --------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class RoceNetdevStats:
    """Curated RoCE/PFC counters of one netdev; absent counters are simply absent."""

    pause: dict[tuple[int, str], int] = field(default_factory=dict)  # (prio, "rx"/"tx") -> frames
    pause_duration_us: dict[tuple[int, str], int] = field(default_factory=dict)  # microseconds
    pause_transitions: dict[tuple[int, str], int] = field(default_factory=dict)
    pause_storm: dict[str, int] = field(default_factory=dict)  # "warning"/"error" -> events
    errors: dict[str, int] = field(default_factory=dict)  # raw ethtool name -> value

    def is_empty(self) -> bool:
        """True when no curated counter was found (e.g. a non-mlx5 NIC)."""
        return not (
            self.pause or self.pause_duration_us or self.pause_transitions
            or self.pause_storm or self.errors
        )


@dataclass(slots=True)
class NetdevStats:
    stats: RoceNetdevStats | None      # None when the driver has no statistics
    count: int = 0                     # how many statistics ethtool printed (not exported)
    phy: PhyCounters | None = None     # the mlx5 physical-layer error counters (parsers.phy_ber; docs/ber.md)


@dataclass(slots=True)
class EthtoolData:
    netdevs: dict[str, NetdevStats] = field(default_factory=dict)
    tool_missing: bool = False


# --- NCCL_IB_HCA -------------------------------------------------------------------------------


@dataclass(frozen=True)
class NcclHcaSpec:
    """Parsed NCCL_IB_HCA: ``entries`` are (device, port or None for any)."""

    exclude: bool
    exact: bool
    entries: tuple[tuple[str, int | None], ...]

    def matches(self, device: str, port: int) -> bool:
        """Whether NCCL would use ``device`` port ``port`` under this spec."""
        if not self.entries:
            listed = True
        else:
            listed = any(
                (device == name if self.exact else device.startswith(name))
                and (want is None or want == port)
                for name, want in self.entries
            )
        return listed != self.exclude


# --- /proc/modules -----------------------------------------------------------------------------


@dataclass(frozen=True)
class ModuleInfo:
    """One /proc/modules line; refcount is None when the kernel prints ``-``."""

    name: str
    size: int
    refcount: int | None
    used_by: tuple[str, ...]
    state: str
