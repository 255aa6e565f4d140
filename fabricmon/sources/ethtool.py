"""ethtool source: the curated RoCE/PFC statistics of each RoCE netdev (`ethtool -S <netdev>`).

An mlx5 netdev exposes 600+ statistics; only the curated set of
fabricmon.parsers.ethtool.curate_roce_stats is kept (per-priority pause frames, pause
duration in microseconds and transitions, pause-storm events, drops and PHY errors), and the
physical-layer error counters the BER check reads (fabricmon.parsers.phy_ber, docs/ber.md).
A netdev whose driver has no statistics ("no stats available") is recorded as such, not as a
failure. With `enabled: auto` (the default) a missing ethtool is not an error.
"""

from __future__ import annotations

from fabricmon.host.io import HostIO
from fabricmon.model.roce import roce_netdevs
from fabricmon.parsers.ethtool import EthtoolData, NetdevStats, curate_roce_stats, parse_ethtool_stats
from fabricmon.parsers.phy_ber import phy_counters
from fabricmon.pipeline.source import INVENTORY, Inputs, Source, SourceOutput, register, run_per_name

NO_STATS = "no stats available"


@register("ethtool", enabled="auto", interval=15.0, timeout=10.0, command=("ethtool",), needs=(INVENTORY,),
          concurrency=4, records=EthtoolData)
class EthtoolSource(Source):
    def collect(self, io: HostIO, inputs: Inputs) -> SourceOutput:
        out = SourceOutput()
        data = EthtoolData()
        names = roce_netdevs(inputs.inventory.devices, inputs.inventory.ports)
        run = run_per_name(io, self, inputs, out, names, lambda nd: ["-S", nd])
        data.tool_missing = run.tool_missing
        for nd, res in run.results:
            if res.error is None and NO_STATS in (res.stdout + res.stderr).lower():
                data.netdevs[nd] = NetdevStats(None)       # a driver without statistics (lo, veth)
                continue
            stats = out.parsed(res, parse_ethtool_stats)
            if stats is None:
                continue
            data.netdevs[nd] = NetdevStats(curate_roce_stats(stats), len(stats), phy_counters(stats))
        run.publish(out, data, bool(data.netdevs))
        return out
