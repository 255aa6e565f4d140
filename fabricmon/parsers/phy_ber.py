"""The mlx5 physical-layer error counters of `ethtool -S <netdev>`, named as the Linux mlx5 driver names
them (drivers/net/ethernet/mellanox/mlx5/core/en_stats.c; their meaning in the kernel's
Documentation/networking/device_drivers/ethernet/mellanox/mlx5/counters.rst):

  rx_corrected_bits_phy   bits the FEC corrected (pport_phy_statistical_stats_desc: phy_corrected_bits)
  rx_pcs_symbol_err_phy   symbol errors the FEC did not correct, or with no FEC active (phy_symbol_errors)
  rx_err_lane_<n>_phy     raw errors of lane n before FEC (pport_phy_statistical_err_lanes_stats_desc)
  rx_bits_phy             bits received (phy_received_bits; newer kernels only)
  rx_symbol_err_phy       IEEE 802.3 SymbolErrorDuringCarrier (a_symbol_error_during_carrier)

Pure: the parsed `ethtool -S` statistics in, the port's PhyCounters out (None: the driver has none of them).
"""

from __future__ import annotations

import re

from fabricmon.model.ber import PhyCounters

_LANE = re.compile(r"^rx_err_lane_(\d+)_phy$")
_NAMES = {"rx_corrected_bits_phy": "corrected_bits", "rx_pcs_symbol_err_phy": "effective_errors",
          "rx_bits_phy": "received_bits", "rx_symbol_err_phy": "symbol_errors"}
NAMES = (*_NAMES, "rx_err_lane_<n>_phy")


def phy_counters(stats: dict[str, int]) -> PhyCounters | None:
    out: dict[str, int] = {}
    lanes: dict[int, int] = {}
    for name, value in stats.items():
        key = _NAMES.get(name)
        if key is not None:
            out[key] = value
        elif (m := _LANE.match(name)) is not None:
            lanes[int(m.group(1))] = value
    if lanes:
        for n, v in sorted(lanes.items()):
            out[f"raw_errors_lane{n}"] = v
        out["raw_errors"] = sum(lanes.values())
    return PhyCounters(out) if out else None


__all__ = ["NAMES", "phy_counters"]
