"""ethtool source: the curated RoCE/PFC statistics of each RoCE netdev (`ethtool -S <netdev>`).

An mlx5 netdev exposes 600+ statistics; only the curated set of
fabricmon.parsers.ethtool.curate_roce_stats is kept (per-priority pause frames, pause
duration in microseconds and transitions, pause-storm events, drops and PHY errors).
A netdev whose driver has no statistics ("no stats available") is recorded as such, not as a
failure. With `enabled: auto` (the default) a missing ethtool is not an error.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from fabricmon.config import Config
from fabricmon.hostio import HostIO
from fabricmon.parsers.errors import ParseError
from fabricmon.parsers.ethtool import RoceNetdevStats, curate_roce_stats, parse_ethtool_stats
from fabricmon.sources import SourceOutput, command_error, run_per_name
from fabricmon.sources.targets import RoceTarget

NO_STATS = "no stats available"


@dataclass(slots=True)
class NetdevStats:
    stats: RoceNetdevStats | None      # None when the driver has no statistics
    count: int = 0                     # how many statistics ethtool printed (not exported)


@dataclass(slots=True)
class EthtoolData:
    netdevs: dict[str, NetdevStats] = field(default_factory=dict)
    tool_missing: bool = False


class EthtoolSource:
    name = "ethtool"

    def __init__(self, config: Config):
        self.config = config
        self.sc = config.sources["ethtool"]

    def collect(self, io: HostIO, targets: list[RoceTarget]) -> SourceOutput:
        out = SourceOutput()
        data = EthtoolData()
        run = run_per_name(io, self.sc, out, sorted({t.netdev for t in targets if t.netdev}),
                           lambda nd: ["-S", nd])
        data.tool_missing = run.tool_missing
        for nd, res in run.results:
            if res.error is None and NO_STATS in (res.stdout + res.stderr).lower():
                data.netdevs[nd] = NetdevStats(None)       # a driver without statistics (lo, veth)
                continue
            err = command_error(res)
            if err:
                out.error(*err)
                continue
            try:
                stats = parse_ethtool_stats(res.stdout)
            except ParseError as exc:
                out.error("parse", f"{' '.join(res.argv)}: {exc}")
                continue
            data.netdevs[nd] = NetdevStats(curate_roce_stats(stats), len(stats))
        if data.netdevs or data.tool_missing or not targets or not out.errors:
            out.data = data
        return out
