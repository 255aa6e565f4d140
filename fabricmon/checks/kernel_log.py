"""kernel_log: the kernel log's NIC events (parsers.kmsg.PATTERNS) as findings, one per event and
device, each naming the device, its port, the switch port it is cabled to (the learned peer) and
the fix, with the pattern's class (fatal: CRITICAL, drain; degraded: WARNING, repair; watch: OK).

- A line is attributed to an RDMA device of the inventory by the PCI function, netdev or ibdev it
  names. One that names none of them (another driver's function, a device fabricmon does not
  watch, an excluded one) is counted (`unattributed`, fabricmon_kernel_log_lines_total{kind="unattributed"}),
  never judged: fabricmon never drains a node for a device it does not monitor.
- While the log is read (kmsg or the journal), the node itself has a kernel_log status (OK without a
  node-wide event); a log that could not be read has no records, so no status at all.
- link_down is judged with the port's state now: degraded while the port is still down, watch
  (a flap, counted) once it is up again.
- nvidia-peermem's load failure matters on a GPU node only (degraded there, watch elsewhere).
- A fatal event holds for the boot (the driver is broken until it is reloaded); the others for
  `hold` seconds after their last line.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from typing import TYPE_CHECKING

from fabricmon.model.finding import CRITICAL, DEGRADED, FATAL, OK, WARNING, WATCH, Finding
from fabricmon.model.kernel_log import BY_EVENT, PATTERNS, AttributedEvent, KernelEvent, KernelLogData, KernelSection
from fabricmon.model.ports import DeviceView, PortView
from fabricmon.checks.shape import Outcome, outcome_of, report
from fabricmon.model.node_records import SysfsData
from fabricmon.model.snapshot import source_data

if TYPE_CHECKING:
    from fabricmon.checks.node_inputs import NodeInputs

CHECK = "kernel_log"
RESTRICTED_CHECK = "restricted_counters"
CHECKS = (CHECK, RESTRICTED_CHECK)
STATUS_OF_CLASS = {FATAL: CRITICAL, DEGRADED: WARNING, WATCH: OK}


def _where(devices: Mapping[str, DeviceView], ports: Mapping[tuple[str, int], PortView],
           ev: KernelEvent) -> tuple[str, int | None] | None:
    """(ibdev, port) the line names, or None."""
    dev = ""
    if ev.ibdev and ev.ibdev in devices:
        dev = ev.ibdev
    if not dev and ev.pci:
        dev = next((n for n, d in sorted(devices.items()) if d.pci_path and os.path.basename(d.pci_path).lower() == ev.pci),
                   "")
    if not dev and ev.netdev:
        dev = next((n for n, d in sorted(devices.items()) if d.netdev == ev.netdev), "")
    if not dev:
        return None
    mine = sorted(p for (d, p) in ports if d == dev)
    return dev, (mine[0] if len(mine) == 1 else None)      # an mlx5 PCI function drives one port


def _port_text(dev: str, port: int | None, ports: Mapping[tuple[str, int], PortView]) -> str:
    if port is None:
        return dev
    p = ports.get((dev, port))
    peer = ""
    if p is not None and p.peer:
        peer = f" (cabled to {p.peer}" + (f" port {p.peer_port}" if p.peer_port is not None else "") + ")"
    return f"{dev} port {port}{peer}"


def evaluate(data: KernelLogData | None, devices: Mapping[str, DeviceView], ports: Mapping[tuple[str, int], PortView],
             now: float, hold: float, gpu_node: bool, excluded: frozenset[str] = frozenset()
             ) -> tuple[KernelSection, list[Finding]]:
    out = KernelSection(data=data)
    findings: list[Finding] = []
    if data is None:
        return out, findings
    for ev in sorted(data.events.values(), key=lambda e: (e.event, e.ref)):
        pat = BY_EVENT.get(ev.event)
        if pat is None:
            continue
        where = _where(devices, ports, ev)
        klass = pat.klass
        if where is None and pat.device != "node":
            out.unattributed += ev.count
            out.events.append(AttributedEvent(ev, ev.ref or "unknown", None, False, WATCH))
            continue
        dev, port = where if where is not None else ("node", None)
        if dev in excluded:
            continue
        note = ""
        if ev.event == "link_down" and port is not None:
            p = ports.get((dev, port))
            if p is not None and p.state_id is not None:
                klass = WATCH if p.up else DEGRADED
                note = "; up again (a flap)" if p.up else "; still down"
        if ev.event == "peermem_load_failed" and not gpu_node:
            klass, note = WATCH, "; no GPU on this node, so no GPUDirect RDMA is lost"
        out.events.append(AttributedEvent(ev, dev, port, True, klass))
        if klass != FATAL and now - ev.last > hold:
            continue        # quiet for longer than the hold: the count stays in the metric
        times = f"{ev.count} time{'s' if ev.count != 1 else ''}"
        detail = f" ({ev.detail})" if ev.detail else ""
        msg = (f"{_port_text(dev, port, ports)}: {pat.summary}{detail}{note} [{ev.event}, {times}; "
               f"last: {ev.text[:160]}]: {pat.fix}")
        findings.append(Finding(CHECK, dev, port, STATUS_OF_CLASS[klass], msg, klass=klass))
    if data.via and not any(f.device == "node" for f in findings):
        # the log was read: the node-wide verdict is OK (an unreadable log has no data, so no status); the lines
        # naming a device that is not monitored here are counted (fabricmon_kernel_log_lines_total), not judged
        findings.append(Finding(CHECK, "node", None, OK,
                                f"the kernel log is read ({data.via}): {data.lines} line(s), no NIC event of the node "
                                "itself", klass=WATCH))
    return out, findings


def restricted_findings(restricted: Mapping[str, str]) -> list[Finding]:
    """restricted_counters: one INFO finding per device whose counters fabricmon stopped reading (a
    firmware-restricted function, or one named in advance), so the operator knows why its counter
    checks are silent; its state and rate are still read."""
    return [Finding(RESTRICTED_CHECK, dev, None, OK,
                    f"{dev}: port counters not read ({why}); state and rate still are. Reading them would make "
                    f"the driver log an ACCESS_REG failure per read (a firmware-restricted function)", klass=WATCH)
            for dev, why in sorted(restricted.items())]


def taxonomy_table() -> str:
    """docs/kernel-log.md's table of events, from PATTERNS (tests/checks/test_kernel_log_check.py keeps
    the document in step)."""
    rows = ["| event | class (status) | what happened | what the operator does | NVSentinel NIC monitor | gpud |",
            "|---|---|---|---|---|---|"]
    for p in PATTERNS:
        status = {FATAL: "CRITICAL", DEGRADED: "WARNING", WATCH: "OK"}[p.klass]
        rows.append(f"| `{p.event}` | {p.klass} ({status}) | {p.summary} | {p.fix} | {p.nvsentinel or '-'} | "
                    f"{p.gpud or '-'} |")
    return "\n".join(rows) + "\n"


class KernelLog:
    """kernel_log and restricted_counters (checks.shape): the kernel log's events against the ports, and
    the devices whose counters the sysfs source does not read; the section goes into the snapshot."""
    reports = (report(CHECK, "KernelLogData"), report(RESTRICTED_CHECK, "restricted_counters"))
    settings = None
    state = None

    def run(self, inputs: NodeInputs) -> Outcome:
        sysfs = source_data(inputs.states, SysfsData)
        restricted = dict(sysfs.restricted) if sysfs is not None else {}
        data = source_data(inputs.states, KernelLogData)
        if data is None and not restricted:
            return Outcome((), ())
        gpus = inputs.gpus
        hold = data.hold if data is not None else 0.0       # the source's setting, carried by its record
        kernel, findings = evaluate(data, inputs.inv.devices, inputs.ib.ports, inputs.now, hold,
                                    gpu_node=bool(gpus is not None and gpus.gpus))
        kernel.restricted = restricted
        return outcome_of(findings + restricted_findings(restricted), kernel)


__all__ = ["CHECK", "CHECKS", "RESTRICTED_CHECK", "STATUS_OF_CLASS", "evaluate", "restricted_findings", "taxonomy_table"]
