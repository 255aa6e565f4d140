"""Which netdevs the RoCE sources look at: the netdevs (sysfs `device/net/*`) of RDMA devices
whose ports run link_layer Ethernet. InfiniBand ports (and their IPoIB netdevs) are never
judged by RoCE rules."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field

from fabricmon.model.history import CounterIntake
from fabricmon.model.ports import DeviceView, PortView, pair_netdevs
from fabricmon.model.node_records import NetdevStats, QosResult, RoceNetdevStats


@dataclass(frozen=True, slots=True, order=True)
class RoceTarget:
    device: str     # RDMA device (mlx5_2)
    port: int       # its Ethernet port; counter-history keys and findings use it
    netdev: str     # the netdev (ens1f0np0) that ethtool/mlnx_qos/class/net are asked about

    def label(self) -> str:
        return f"{self.device} ({self.netdev or 'netdev unknown'})"


def roce_targets(devices: Mapping[str, DeviceView], ports: Mapping[tuple[str, int], PortView]) -> list[RoceTarget]:
    """One target per (RoCE device, netdev). With as many netdevs as Ethernet ports they pair up
    in order; otherwise every netdev belongs to the device's first Ethernet port. A device
    without a netdev gets one target per Ethernet port with netdev "" (hw_counters only)."""
    eth: dict[str, list[int]] = {}
    for (dev, num), p in ports.items():
        if p.link_layer == "Ethernet":
            eth.setdefault(dev, []).append(num)
    # a device without a netdev (no device/net): hw_counters still count; netdev tools are not asked
    return [RoceTarget(dev, num, nd) for dev, num, nd in pair_netdevs(devices, eth)]


def roce_netdevs(devices: Mapping[str, DeviceView], ports: Mapping[tuple[str, int], PortView]) -> list[str]:
    """The RoCE netdevs the netdev tools are asked about (ethtool, mlnx_qos, the netdev source), sorted,
    each once: the targets' netdevs, a device without one left out."""
    return sorted({t.netdev for t in roce_targets(devices, ports) if t.netdev})


@dataclass(slots=True)
class NetdevInfo:
    mtu: int | None = None
    speed_mbps: int | None = None       # None when the link is down or the driver does not say
    operstate: str | None = None        # "up", "down", "lowerlayerdown", ...


@dataclass(slots=True)
class NetdevData:
    netdevs: dict[str, NetdevInfo] = field(default_factory=dict)


# IB headers the kernel takes off the netdev MTU to get the RoCE MTU (iboe_get_mtu():
# GRH 40 + UDP 8 + BTH 12 + XRC ext 4 + AtomicETH 28 + ICRC 4).
ROCE_HEADER_BYTES = 96
IB_MTUS = (4096, 2048, 1024, 512, 256)


def roce_mtu(netdev_mtu: int | None) -> int | None:
    """Active RoCE (IB) MTU the kernel derives from a netdev MTU (9000 -> 4096, 1500 -> 1024)."""
    if netdev_mtu is None:
        return None
    room = netdev_mtu - ROCE_HEADER_BYTES
    return next((m for m in IB_MTUS if room >= m), 0)


@dataclass(slots=True)
class RoceView:
    """Everything known about one RoCE netdev, merged from the sources."""
    target: RoceTarget
    qos: QosResult | None = None
    qos_note: str = ""                 # why qos is None: "not installed", "failed", "disabled"
    stats: NetdevStats | None = None
    stats_note: str = ""
    netdev: NetdevInfo | None = None
    hw: dict[str, int] = field(default_factory=dict)

    @property
    def roce_mtu(self) -> int | None:
        return roce_mtu(self.netdev.mtu if self.netdev else None)

    @property
    def ethtool(self) -> RoceNetdevStats | None:
        """The netdev's RoCE statistics (None: no ethtool data, or the driver has none)."""
        return self.stats.stats if self.stats is not None else None


# hw_counters sampled into the history (rates) and exported (the congestion ones).
HW_TRACKED = ("np_cnp_sent", "np_ecn_marked_roce_packets", "rp_cnp_handled", "rp_cnp_ignored",
              "out_of_sequence", "packet_seq_err", "local_ack_timeout_err", "req_transport_retries_exceeded")
HW_LOSS = ("out_of_sequence", "local_ack_timeout_err")



def eth_key(t: RoceTarget, name: str) -> tuple[str, int, str]:
    return (t.device, t.port, f"ethtool:{t.netdev}:{name}")


def hw_key(t: RoceTarget, name: str) -> tuple[str, int, str]:
    return (t.device, t.port, f"hw:{name}")


def ethtool_counters(stats: NetdevStats | None) -> dict[str, int]:
    """The curated ethtool counters under their ethtool names."""
    if stats is None or stats.stats is None:
        return {}
    s = stats.stats
    out: dict[str, int] = {}
    for (prio, d), v in s.pause.items():
        out[f"{d}_prio{prio}_pause"] = v
    for (prio, d), v in s.pause_duration_us.items():
        out[f"{d}_prio{prio}_pause_duration"] = v
    for (prio, d), v in s.pause_transitions.items():
        out[f"{d}_prio{prio}_pause_transition"] = v
    for level, v in s.pause_storm.items():
        out[f"tx_pause_storm_{level}_events"] = v
    out.update(s.errors)
    return out


def record_roce_counters(views: list[RoceView], intake: CounterIntake, t_ethtool: float | None,
                         t_hw: float | None) -> None:
    """Sample the views' ethtool and hw counters through the one counter intake (a repeated sample is
    skipped), under eth_key and hw_key, by the same rules as every other counter."""
    for v in views:
        t = v.target
        port = (t.device, t.port)
        if t_ethtool is not None:
            values = {eth_key(t, name)[2]: value for name, value in ethtool_counters(v.stats).items()}
            intake.take_port(port, t_ethtool, values, {}, stream=f"ethtool:{t.netdev}")
        if t_hw is not None:
            values = {hw_key(t, name)[2]: v.hw[name] for name in HW_TRACKED if name in v.hw}
            intake.take_port(port, t_hw, values, {}, stream="hw")
