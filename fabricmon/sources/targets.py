"""Which netdevs the RoCE sources look at: the netdevs (sysfs `device/net/*`) of RDMA devices
whose ports run link_layer Ethernet. InfiniBand ports (and their IPoIB netdevs) are never
judged by RoCE rules."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True, slots=True, order=True)
class RoceTarget:
    device: str     # RDMA device (mlx5_2)
    port: int       # its Ethernet port; counter-history keys and findings use it
    netdev: str     # the netdev (ens1f0np0) that ethtool/mlnx_qos/class/net are asked about

    def label(self) -> str:
        return f"{self.device} ({self.netdev or 'netdev unknown'})"


def roce_targets(devices: Mapping[str, Any], ports: Mapping[tuple[str, int], Any]) -> list[RoceTarget]:
    """One target per (RoCE device, netdev). With as many netdevs as Ethernet ports they pair up
    in order; otherwise every netdev belongs to the device's first Ethernet port. A device
    without a netdev gets one target per Ethernet port with netdev "" (hw_counters only)."""
    eth: dict[str, list[int]] = {}
    for (dev, num), p in ports.items():
        if getattr(p, "link_layer", None) == "Ethernet":
            eth.setdefault(dev, []).append(num)
    out = []
    for dev in sorted(eth):
        d = devices.get(dev)
        netdevs = sorted(n for n in (getattr(d, "netdev", "") or "").split(",") if n)
        nums = sorted(eth[dev])
        if not netdevs:      # no device/net: hw_counters still count; netdev tools are not asked
            out += [RoceTarget(dev, num, "") for num in nums]
        elif len(netdevs) == len(nums):
            out += [RoceTarget(dev, num, nd) for num, nd in zip(nums, netdevs)]
        else:
            out += [RoceTarget(dev, nums[0], nd) for nd in netdevs]
    return out
