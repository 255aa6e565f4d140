"""The kernel log's NIC events, as the kernel_log source hands them to the model: one aggregate per
(event, device the line named), with its exact count, and the source's own line counts.

The classes every node finding carries (the taxonomy an automation acts on) live in
model.finding (FATAL, DEGRADED, WATCH)."""

from __future__ import annotations

import re
from dataclasses import dataclass, field

from fabricmon.model.finding import DEGRADED, FATAL, WATCH


@dataclass(slots=True)
class KernelEvent:
    event: str              # the pattern's name (parsers.kmsg.PATTERNS)
    pci: str = ""           # the device as the line named it: a PCI address, a netdev, an ibdev, or none
    netdev: str = ""
    ibdev: str = ""
    count: int = 0          # lines of this event for this device (exact: never rate-limited)
    first: float = 0.0      # wall-clock times of the first and the last line
    last: float = 0.0
    text: str = ""          # the last line, verbatim
    detail: str = ""        # what the pattern extracted (the command, the module, the watts)

    @property
    def ref(self) -> str:
        return self.pci or self.netdev or self.ibdev

    @property
    def key(self) -> tuple[str, str]:
        return (self.event, self.ref)


@dataclass(slots=True)
class KernelLogData:
    events: dict[tuple[str, str], KernelEvent] = field(default_factory=dict)
    via: str = ""               # "kmsg" or "journal"
    boot_id: str = ""
    lines: int = 0              # records read since the daemon's state began (this boot)
    matched: int = 0            # of those, lines that matched a pattern
    lost: int = 0               # records overwritten in the ring buffer before they were read
    dropped_events: int = 0     # aggregates forgotten because more distinct ones came than are kept
    hold: float = 3600.0        # seconds a degraded or watch event stays a finding (sources.kernel_log.hold)



@dataclass(frozen=True, slots=True)
class AttributedEvent:
    """An aggregate as the node model judged it: the RDMA device and port it belongs to (the line's
    own name for the device where it is none of the inventory's), and its class now."""
    event: KernelEvent
    device: str
    port: int | None
    attributed: bool
    klass: str


@dataclass(slots=True)
class KernelSection:
    """The snapshot's kernel log: every aggregate judged, the lines naming no monitored device, the
    source's own counts, and the devices whose counters are not read (restricted functions)."""
    events: list[AttributedEvent] = field(default_factory=list)
    unattributed: int = 0
    data: KernelLogData | None = None
    restricted: dict[str, str] = field(default_factory=dict)    # device -> why its counters are not read


# The kernel log lines fabricmon acts on, one row per event: the regex (written from the Linux
# driver's format strings, test data with provenance in tests/data/kmsg/), how the device is named,
# the class, what happened, what the operator does, and how NVSentinel's NIC monitor and gpud treat
# the same line (docs/kernel-log.md shows the table, generated from these rows).
@dataclass(frozen=True, slots=True)
class KernelPattern:
    event: str
    regex: re.Pattern[str]
    device: str             # "pci" (the dev_printk prefix), "netdev" (the regex's netdev group) or "node"
    klass: str              # model.finding FATAL, DEGRADED or WATCH
    summary: str            # what happened
    fix: str                # what the operator does
    source: str             # the format string's file in the Linux tree (or the upstream test data)
    nvsentinel: str         # NVSentinel's NIC monitor: how it classifies the line ("" : not matched)
    gpud: str               # gpud's kmsg matcher ("" : not matched)
    # a line of one of these events' report (the lines the driver prints after it): within REPORT_WINDOW of
    # that event on the same device, the line is that event's reason (its detail), never a second event;
    # alone, it is an event of its own
    continues: tuple[str, ...] = ()


REPORT_WINDOW = 30.0        # seconds a report's lines may follow the line that opened it


def _p(event: str, regex: str, device: str, klass: str, summary: str, fix: str, source: str,
       nvsentinel: str = "", gpud: str = "", continues: tuple[str, ...] = ()) -> KernelPattern:
    return KernelPattern(event, re.compile(regex), device, klass, summary, fix, source, nvsentinel, gpud, continues)


_DRAIN = "drain the node, then reload mlx5_core or reboot; if it comes back, update the adapter's firmware or replace it"

PATTERNS: tuple[KernelPattern, ...] = (
    _p("cmd_timeout", r"(?P<detail>[A-Z][A-Z0-9_]*\(0x[0-9a-f]+\))(?: Async,)? timeout\. Will cause a leak of a command resource",
       "pci", FATAL, "the adapter's firmware did not answer a driver command", _DRAIN, "mlx5/core/cmd.c",
       nvsentinel="fatal (cmd_exec_timeout)"),
    _p("health_miss_count", r"device's health compromised - reached miss count", "pci", FATAL,
       "the adapter's firmware heartbeat stopped", _DRAIN, "mlx5/core/health.c",
       nvsentinel="fatal (health_poll_failed)"),
    _p("fw_fatal_error", r"(?P<detail>Fatal error \d+) detected", "pci", FATAL,
       "the adapter's health sensors report a fatal error", _DRAIN, "mlx5/core/health.c"),
    # print_health_info's report after either of those: its header (newer kernels) and its syndrome line carry the
    # reason; they are the reason of that event, not new ones (the other lines of the report match nothing)
    _p("health_issue", r"Health issue observed, (?P<detail>[^,]+), severity\(\d+\)", "pci", DEGRADED,
       "the adapter's firmware reported a health issue", "watch the device; with a health event before it, that "
       "event's class holds (drain)", "mlx5/core/health.c (print_health_info)",
       continues=("health_miss_count", "fw_fatal_error")),
    _p("health_syndrome", r"(?P<detail>synd 0x[0-9a-f]+: [^\n]+?)\s*$", "pci", FATAL,
       "the adapter's health report names a syndrome (unrecoverable hardware error, firmware internal error, ...)",
       _DRAIN + " (an RMA if the syndrome is a hardware error)", "mlx5/core/health.c (print_health_info, hsynd_str)",
       nvsentinel="fatal (unrecoverable_err)", continues=("health_miss_count", "fw_fatal_error", "health_issue")),
    _p("cmd_no_completion", r"cmd\[\d+\]: (?P<detail>[A-Z][A-Z0-9_]*\(0x[0-9a-f]+\)) No done completion", "pci",
       DEGRADED, "a driver command got no completion from the adapter's firmware in time (it may still recover; "
       "a cmd_timeout after it is the command lost)", "watch for cmd_timeout on the device; repeated ones need a "
       "drain and a reload", "mlx5/core/cmd.c (wait_func_handle_exec_timeout)"),
    _p("cmd_late_completion", r"Command completion arrived after timeout \(entry idx = (?P<detail>\d+)\)", "pci",
       WATCH, "a command's completion came after it had timed out (the firmware was slow)",
       "nothing by itself: evidence for the cmd_timeout before it", "mlx5/core/cmd.c (mlx5_cmd_comp_handler)"),
    _p("cmd_alloc_failed", r"failed to allocate command entry", "pci", DEGRADED,
       "the driver's command queue is full: commands to the firmware are not completing",
       "watch for cmd_timeout and failed probes on the device; a drain and a reload if they follow",
       "mlx5/core/cmd.c (cmd_work_handler)"),
    _p("probe_failed", r"(?P<detail>_?mlx5e_(?:resume|attach) failed, -?\d+|alloc (?:pd|td|tises|tis|uar|bfreg)[a-z]* "
       r"failed, -?\d+|create mkey failed, -?\d+)", "pci", FATAL,
       "a step of bringing the adapter's function up failed: it is not usable (no netdev, no RDMA port)",
       _DRAIN, "mlx5/core/en_main.c (_mlx5e_probe, mlx5e_create_mdev_resources)"),
    _p("tx_timeout", r"TX timeout detected|(?P<detail>TX timeout on queue: \d+)", "pci", DEGRADED,
       "a transmit queue stalled (the driver resets the channel)",
       "watch the port's traffic; repeated timeouts, or a timeout followed by a soft lockup, need a drain and a reboot",
       "mlx5/core/en_main.c, en/reporter_tx.c", nvsentinel="non-fatal (netdev_watchdog)"),
    _p("tx_watchdog", r"NETDEV WATCHDOG: (?P<netdev>[^\s:]+) \(mlx5_core\): (?P<detail>transmit queue(?: \d+)?) timed out",
       "netdev", DEGRADED, "the kernel's watchdog found a transmit queue of the NIC stalled",
       "as for tx_timeout: repeated stalls need a drain and a reboot", "net/sched/sch_generic.c",
       nvsentinel="non-fatal (netdev_watchdog)"),
    _p("module_high_temperature", r"Port module event\[error\]: (?P<detail>module \d+), Cable error, High Temperature",
       "pci", DEGRADED, "the port's transceiver or cable is over temperature",
       "check the airflow and the fans at the NIC; replace the transceiver if it stays hot (its readings: fabricmon_optics_*)",
       "mlx5/core/events.c", nvsentinel="non-fatal (port_module_high_temp)", gpud="event (port_module_high_temperature)"),
    _p("module_error", r"Port module event\[error\]: (?P<detail>module \d+, [^,]+, .+)", "pci", DEGRADED,
       "the port's transceiver or cable reported an error (power budget, bus stuck, bad or shorted cable, ...)",
       "reseat or replace the transceiver/cable named; check it is a supported part", "mlx5/core/events.c"),
    _p("module_unplugged", r"Port module event: (?P<detail>module \d+), Cable unplugged", "pci", WATCH,
       "the port's transceiver or cable was unplugged",
       "if nobody unplugged it, reseat the cable (the port is down while it is out)", "mlx5/core/events.c",
       nvsentinel="non-fatal (module_unplugged)"),
    _p("module_plugged", r"Port module event: (?P<detail>module \d+), Cable plugged", "pci", WATCH,
       "a transceiver or cable was plugged into the port", "nothing: evidence for the port's history",
       "mlx5/core/events.c"),
    _p("pcie_power_insufficient", r"Detected insufficient power on the PCIe slot \((?P<detail>\d+W)\)", "pci", DEGRADED,
       "the slot cannot power the adapter fully (it may throttle or drop its link)",
       "move the adapter to a slot that supplies the power it needs, or fix the riser/BIOS slot power setting",
       "mlx5/core/events.c", nvsentinel="non-fatal (pci_power_insufficient)", gpud="event (pci_power_insufficient)"),
    _p("pcie_power_not_advertised", r"PCIe slot power capability was not advertised", "pci", DEGRADED,
       "the slot did not tell the adapter how much power it may draw (after a hot-plug, or a slot/BIOS without "
       "the capability): the adapter may throttle its ports",
       "check the slot's power (lspci -vv: SlotPowerLimit); attach the adapter at boot rather than by hot-plug, "
       "or fix the BIOS slot power setting", "mlx5/core/events.c (mlx5_pcie_event)"),
    _p("pcie_aer_fatal", r"PCIe Bus Error: severity=Uncorrect(?:ed|able) \(Fatal\), (?P<detail>type=[^,]+)", "pci", FATAL,
       "an uncorrectable fatal PCIe error on the adapter's link", _DRAIN + "; reseat the adapter and its riser",
       "drivers/pci/pcie/aer.c"),
    _p("pcie_aer_nonfatal", r"PCIe Bus Error: severity=Uncorrect(?:ed|able) \(Non-Fatal\), (?P<detail>type=[^,]+)", "pci",
       DEGRADED, "an uncorrectable PCIe error on the adapter's link",
       "schedule a reseat of the adapter and its riser; check `lspci -vvv` LnkSta for a degraded link",
       "drivers/pci/pcie/aer.c"),
    _p("pcie_aer_corrected", r"PCIe Bus Error: severity=Correct(?:ed|able), (?P<detail>type=[^,]+)", "pci", WATCH,
       "a corrected PCIe error on the adapter's link", "nothing unless it keeps rising (then reseat at the next window)",
       "drivers/pci/pcie/aer.c"),
    _p("link_down", r"^mlx5_core \S+ (?P<netdev>[^\s:]+): Link down$", "pci", WATCH,
       "the port's link went down (judged with the port's state now: degraded while it stays down)",
       "see the port's link_flap and degraded_link findings and the cabled switch port", "mlx5/core/en_main.c"),
    _p("link_up", r"^mlx5_core \S+ (?P<netdev>[^\s:]+): Link up$", "pci", WATCH,
       "the port's link came up", "nothing: evidence for the port's flap history", "mlx5/core/en_main.c"),
    # mlx5_cmd_out_err (6.x) or mlx5_cmd_check (5.x) prints it: the words after the function name are the same
    _p("access_reg_failed", r"(?P<detail>ACCESS_REG\(0x805\)) op_mod\(0x[0-9a-f]+\) failed", "pci", WATCH,
       "a register read was refused (a firmware-restricted function, or a monitor reading it)",
       "name the device in exclude_devices (or sources.sysfs.counters_exclude) so nothing reads its counters",
       "mlx5/core/cmd.c", nvsentinel="non-fatal (access_reg_failed)", gpud="event (access_reg_failed)"),
    _p("soft_lockup", r"BUG: soft lockup - CPU#\d+ stuck for \d+s! \[(?P<detail>[^\]]+)\]", "node", FATAL,
       "a CPU is stuck in the kernel (after a NIC TX timeout this is the wedged node that still reports Ready)",
       "drain the node and reboot it; look for the NIC event just before it (tx_timeout, cmd_timeout)",
       "kernel/watchdog.c", nvsentinel="fatal (NAPI soft lockup)"),
    _p("peermem_load_failed", r"^nvidia[_-]peermem: (?P<detail>Unknown symbol \S+|disagrees about version of symbol \S+)",
       "node", DEGRADED, "nvidia-peermem could not load (GPUDirect RDMA is off)",
       "rebuild nvidia-peermem against the running MLNX_OFED/rdma-core (or switch to DMA-BUF); see gpudirect_rdma",
       "kernel/module/main.c"),
    _p("peermem_invalid_context", r"^nvidia-peermem (?P<detail>nv_get_p2p_free_callback):\d+ ERROR detected invalid context",
       "node", WATCH, "nvidia-peermem was handed a freed GPU memory context",
       "nothing unless jobs fail with GPUDirect errors; then update the NVIDIA driver", "gpud test data (dmesg.peermem.log)"),
)
BY_EVENT = {p.event: p for p in PATTERNS}


__all__ = ["BY_EVENT", "AttributedEvent", "KernelEvent", "KernelSection", "KernelLogData", "KernelPattern", "PATTERNS",
           "REPORT_WINDOW"]
