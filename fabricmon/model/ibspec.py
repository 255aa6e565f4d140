"""InfiniBand facts shared by parsers, checks and the exporter.

Everything here is a constant from the IBTA spec or the kernel's sysfs ABI, kept in one
place so that a parser never re-derives it.
"""

from __future__ import annotations

from dataclasses import dataclass

# PortInfo:PortState and PortPhysicalState, as sysfs prints them ("4: ACTIVE", "5: LinkUp").
PORT_STATES = {0: "NOP", 1: "DOWN", 2: "INIT", 3: "ARMED", 4: "ACTIVE", 5: "ACTIVE_DEFER"}
PHYS_STATES = {
    0: "NOP", 1: "Sleep", 2: "Polling", 3: "Disabled", 4: "PortConfigurationTraining",
    5: "LinkUp", 6: "LinkErrorRecovery", 7: "Phy Test",
}
STATE_ACTIVE = 4
PHYS_LINKUP = 5

# Names used by ibstat / iblinkinfo, mapped onto the numeric ids.
_STATE_WORDS = {
    "down": 1, "init": 2, "initializing": 2, "initialize": 2, "armed": 3, "active": 4,
    "active_defer": 5, "activedefer": 5, "nop": 0,
}
_PHYS_WORDS = {
    "nop": 0, "sleep": 1, "polling": 2, "disabled": 3, "portconfigurationtraining": 4,
    "linkup": 5, "linkerrorrecovery": 6, "phytest": 7, "phy test": 7,
}


def state_id(word: str) -> int | None:
    """Map an ibstat/iblinkinfo port state word ("Active", "Down") to its PortState id."""
    return _STATE_WORDS.get(word.strip().lower().replace(" ", "_"))


def phys_state_id(word: str) -> int | None:
    """Map a physical state word ("LinkUp", "Polling", "Phy Test") to its id."""
    w = word.strip().lower()
    return _PHYS_WORDS.get(w, _PHYS_WORDS.get(w.replace(" ", "")))


@dataclass(frozen=True, slots=True)
class Generation:
    name: str
    lane_gbps: float        # nominal data rate per lane, as sysfs `rate` and ibstat count it
    signal_gbps: float      # per-lane signalling rate, as iblinkinfo prints it


# Ordered slowest first; the index is used to compare generations.
GENERATIONS: tuple[Generation, ...] = (
    Generation("SDR", 2.5, 2.5),
    Generation("DDR", 5.0, 5.0),
    Generation("QDR", 10.0, 10.0),
    Generation("FDR10", 10.0, 10.3125),
    Generation("FDR", 14.0, 14.0625),
    Generation("EDR", 25.0, 25.78125),
    Generation("HDR", 50.0, 53.125),
    Generation("NDR", 100.0, 106.25),
    Generation("XDR", 200.0, 212.5),
)
_BY_NAME = {g.name: g for g in GENERATIONS}


def generation(name: str) -> Generation | None:
    """Look up a generation by name ("NDR", "hdr")."""
    return _BY_NAME.get(name.strip().upper())


_RANK = {g.name: i for i, g in enumerate(GENERATIONS)}


def generation_rank(name: str | None) -> int | None:
    if name is None:
        return None
    rank = _RANK.get(name)          # the common case, a name as the tables spell it (once per port a build)
    return rank if rank is not None else _RANK.get(name.strip().upper())


def generation_from_signal(gbps: float) -> Generation | None:
    """Generation from iblinkinfo's per-lane signalling rate ("53.125 Gbps" is HDR)."""
    for g in GENERATIONS:
        if abs(g.signal_gbps - gbps) < 0.01:
            return g
    # Plain nominal numbers (e.g. smpquery's "10.0 Gbps" for QDR) are accepted too.
    for g in GENERATIONS:
        if abs(g.lane_gbps - gbps) < 0.01 and g.name != "FDR10":
            return g
    return None


def generation_from_rate(total_gbps: float, width: int) -> Generation | None:
    """Generation from a total nominal rate and a lane count (400 Gb/s at 4X is NDR)."""
    if width <= 0:
        return None
    lane = total_gbps / width
    for g in GENERATIONS:
        if g.name != "FDR10" and abs(g.lane_gbps - lane) < 0.01:
            return g
    return None


def parse_width(text: str) -> int | None:
    """'4X' / '4x' / '12X' -> lanes."""
    t = text.strip().upper()
    if t.endswith("X") and t[:-1].isdigit():
        return int(t[:-1])
    return None


@dataclass(frozen=True, slots=True)
class CounterSpec:
    """One PortCounters field: its names in every source and its width in bits."""
    name: str               # canonical name; the metric is fabricmon_ib_port_<name>_total
    sysfs: str              # file under ports/<n>/counters/
    perfquery: str          # field name printed by perfquery
    bits: int               # width in the basic PortCounters attribute (saturates there)
    kind: str               # "error", "congestion", "traffic" or "discard"
    help: str
    scale: int = 1          # multiply raw value by this (data counters count 4-octet words)
    sysfs_ext: str = ""     # mlx4's 64-bit twin under ports/<n>/counters_ext/, if any


COUNTERS: tuple[CounterSpec, ...] = (
    CounterSpec("symbol_errors", "symbol_error", "SymbolErrorCounter", 16, "error",
                "Minor link errors detected on one or more physical lanes."),
    CounterSpec("link_error_recovery", "link_error_recovery", "LinkErrorRecoveryCounter", 8, "error",
                "Times the link completed the link error recovery process."),
    CounterSpec("link_downed", "link_downed", "LinkDownedCounter", 8, "error",
                "Times the link failed error recovery and went down (flaps)."),
    CounterSpec("receive_errors", "port_rcv_errors", "PortRcvErrors", 16, "error",
                "Packets received with errors."),
    CounterSpec("receive_remote_physical_errors", "port_rcv_remote_physical_errors",
                "PortRcvRemotePhysicalErrors", 16, "error",
                "Packets received marked with the EBP delimiter (bad upstream)."),
    CounterSpec("receive_switch_relay_errors", "port_rcv_switch_relay_errors",
                "PortRcvSwitchRelayErrors", 16, "error",
                "Packets discarded because they could not be forwarded by the switch relay."),
    CounterSpec("transmit_discards", "port_xmit_discards", "PortXmitDiscards", 16, "error",
                "Outbound packets discarded because the port was down or congested."),
    CounterSpec("transmit_constraint_errors", "port_xmit_constraint_errors",
                "PortXmitConstraintErrors", 8, "error",
                "Packets not transmitted because of constraints (partition/raw filtering)."),
    CounterSpec("receive_constraint_errors", "port_rcv_constraint_errors",
                "PortRcvConstraintErrors", 8, "error",
                "Packets received and discarded because of constraints."),
    CounterSpec("local_link_integrity_errors", "local_link_integrity_errors",
                "LocalLinkIntegrityErrors", 4, "error",
                "Times the local physical errors exceeded the threshold."),
    CounterSpec("excessive_buffer_overrun_errors", "excessive_buffer_overrun_errors",
                "ExcessiveBufferOverrunErrors", 4, "error",
                "Times consecutive flow-control update periods had buffer overruns."),
    CounterSpec("vl15_dropped", "VL15_dropped", "VL15Dropped", 16, "error",
                "Incoming VL15 (subnet management) packets dropped."),
    CounterSpec("transmit_wait", "port_xmit_wait", "PortXmitWait", 32, "congestion",
                "Ticks during which the port had data to send but no flow-control credits."),
    CounterSpec("transmit_bytes", "port_xmit_data", "PortXmitData", 32, "traffic",
                "Data octets transmitted (the port counts 4-octet words; converted to bytes).", 4,
                "port_xmit_data_64"),
    CounterSpec("receive_bytes", "port_rcv_data", "PortRcvData", 32, "traffic",
                "Data octets received (the port counts 4-octet words; converted to bytes).", 4,
                "port_rcv_data_64"),
    CounterSpec("transmit_packets", "port_xmit_packets", "PortXmitPkts", 32, "traffic",
                "Packets transmitted.", 1, "port_xmit_packets_64"),
    CounterSpec("receive_packets", "port_rcv_packets", "PortRcvPkts", 32, "traffic",
                "Packets received.", 1, "port_rcv_packets_64"),
    CounterSpec("transmit_unicast_packets", "unicast_xmit_packets", "PortUnicastXmitPkts", 64, "traffic",
                "Unicast packets transmitted.", 1, "port_unicast_xmit_packets"),
    CounterSpec("receive_unicast_packets", "unicast_rcv_packets", "PortUnicastRcvPkts", 64, "traffic",
                "Unicast packets received.", 1, "port_unicast_rcv_packets"),
    CounterSpec("transmit_multicast_packets", "multicast_xmit_packets", "PortMulticastXmitPkts", 64, "traffic",
                "Multicast packets transmitted.", 1, "port_multicast_xmit_packets"),
    CounterSpec("receive_multicast_packets", "multicast_rcv_packets", "PortMulticastRcvPkts", 64, "traffic",
                "Multicast packets received.", 1, "port_multicast_rcv_packets"),
    CounterSpec("receive_discards", "port_rcv_discards", "", 32, "discard",
                "Inbound packets discarded by the port (sysfs port_rcv_discards, where the driver has it)."),
)
COUNTER_BY_NAME = {c.name: c for c in COUNTERS}
COUNTER_BY_SYSFS = {c.sysfs: c for c in COUNTERS}
COUNTER_BY_PERFQUERY = {c.perfquery: c for c in COUNTERS if c.perfquery}
COUNTER_BY_SYSFS_EXT = {c.sysfs_ext: c for c in COUNTERS if c.sysfs_ext}
# Counters whose saturation we report: every error counter plus PortXmitWait.
SATURABLE = tuple(c.name for c in COUNTERS if c.kind in ("error", "congestion"))


def counter_max(spec: CounterSpec, bits: int | None = None) -> int:
    """Largest raw value of a counter of the given width (its saturation point)."""
    return (1 << (bits or spec.bits)) - 1
