"""Counter sets: which families a scrape returns (UFM Telemetry's counter sets, node_exporter's
`collect[]`). Every catalogue row belongs to one set; the default set carries what the shipped rules
and dashboards read, the others are opt-in: by config (`server.collect`) and per scrape
(`/metrics?collect[]=packets`). A leaf module (no imports): the config validates names with it, the exporter and the server select with it."""

from __future__ import annotations

DEFAULT = "default"

# name -> what it adds (docs/metrics.md and the config reference print these)
SETS: dict[str, str] = {
    DEFAULT: "everything the shipped rules and dashboards read: state, link rate, degradation, the error "
             "counters the rules sum, transmit wait, data counters, checks and self-metrics",
    "packets": "switch port packet counters (`fabricmon_fabric_port_{transmit,receive}_packets_total`)",
    "unicast": "switch port unicast packet counters",
    "multicast": "switch port multicast packet counters",
    "rates": "switch port transmit/receive rate gauges over the last two sweeps (Prometheus derives them "
             "from the data counters: `rate(fabricmon_fabric_port_transmit_bytes_total[5m])`)",
    "extra_errors": "switch port error counters no shipped rule reads (switch relay, constraint, VL15 "
                    "drops, Ethernet receive discards)",
    "state": "the ports' state, small enough to scrape every few seconds (`/metrics?collect[]=state`, the shipped "
             "port-down alerts' fast path: docs/latency.md): the node's port state, phys state, up, degraded reasons, "
             "peer and check status (in the default set too), the switch ports' `fabricmon_fabric_port_up` (for a "
             "cabled port `fabricmon_fabric_port_degraded{reason=\"down\"}` is its inverse) with the switch and link "
             "info the alerts join it with (in the default set too), and the per-switch "
             "`fabricmon_fabric_switch_unresponsive` and `..._last_read_timestamp_seconds` "
             "(`fabricmon_fabric_check_status{check=\"unresponsive\"}` carries the verdict)",
    "phy_lanes": "each lane's raw (pre-FEC) bit errors of a node port (`fabricmon_port_phy_lane_raw_errors_total`); "
                 "the default set has their sum",
    "fec_histogram": "the RS-FEC histogram's bins of a node port (`fabricmon_port_fec_histogram_codewords_total`)",
    "pcie_aer": "each PCIe AER error type of a node's watched functions (`fabricmon_pcie_aer_errors_by_type_total`); "
                "the default set has the totals by severity",
}
ALL = "all"      # a scrape or config name for every set


def parse(names: list[str] | tuple[str, ...]) -> frozenset[str]:
    """The sets `names` select (`all` is every set); ValueError names an unknown one."""
    out: set[str] = set()
    for n in names:
        if n == ALL:
            out.update(SETS)
        elif n in SETS:
            out.add(n)
        else:
            raise ValueError(f"unknown counter set {n!r}: expected one of {', '.join([*SETS, ALL])}")
    return frozenset(out)


DEFAULT_SETS = frozenset((DEFAULT,))

__all__ = ["ALL", "DEFAULT", "DEFAULT_SETS", "SETS", "parse"]
