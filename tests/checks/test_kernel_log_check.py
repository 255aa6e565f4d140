"""checks.kernel_log: attribution by PCI function, netdev and ibdev; the learned peer in the message;
link_down judged with the port's state; peermem on a node without GPUs; the hold; the node judged OK
only while the log is read (an unreadable log has no records, so no status); the class of every
finding (model.finding.class_of) and the drain reason (report.drain_reason)."""

from __future__ import annotations

from fabricmon.checks import kernel_log
from fabricmon.model.finding import CRITICAL, OK, WARNING, Finding, class_of
from fabricmon.model.kernel_log import KernelEvent, KernelLogData
from fabricmon.model.ports import DeviceView, PortView
from fabricmon.report import drain_reason

DEVICES = {"mlx5_0": DeviceView("mlx5_0", netdev="ibp12s0", pci_path="/sys/devices/pci0000:00/0000:00:01.0/0000:0c:00.0"),
           "mlx5_1": DeviceView("mlx5_1", netdev="ens1f1np1", pci_path="/sys/devices/pci0000:00/0000:12:00.1")}


def ports(up1: bool = True) -> dict:
    return {("mlx5_0", 1): PortView("mlx5_0", 1, state_id=4, phys_state_id=5, peer="leaf01 QM9700", peer_port=12),
            ("mlx5_1", 1): PortView("mlx5_1", 1, link_layer="Ethernet", state_id=4 if up1 else 1,
                                    phys_state_id=5 if up1 else 3)}


def data(*events: KernelEvent) -> KernelLogData:
    return KernelLogData(events={e.key: e for e in events}, via="kmsg", lines=100, matched=len(events))


def ev(event: str, pci: str = "", netdev: str = "", ibdev: str = "", last: float = 1000.0, count: int = 1) -> KernelEvent:
    return KernelEvent(event, pci, netdev, ibdev, count=count, first=last, last=last, text=f"a {event} line")


def run(d: KernelLogData, up1: bool = True, gpu: bool = False, now: float = 1000.0):
    return kernel_log.evaluate(d, DEVICES, ports(up1), now, 3600.0, gpu)


def test_attribution_and_the_cabled_switch_port() -> None:
    section, found = run(data(ev("cmd_timeout", pci="0000:0c:00.0"), ev("tx_watchdog", netdev="ens1f1np1"),
                              ev("module_error", ibdev="mlx5_0"), ev("health_miss_count", pci="0000:99:00.0", count=3)))
    by = {(f.device, f.message.split("[")[1].split(",")[0] if "[" in f.message else ""): f for f in found}
    cmd = by[("mlx5_0", "cmd_timeout")]
    assert (cmd.status, cmd.port, cmd.klass) == (CRITICAL, 1, "fatal")
    assert cmd.message.startswith("mlx5_0 port 1 (cabled to leaf01 QM9700 port 12): the adapter's firmware")
    assert by[("mlx5_1", "tx_watchdog")].status == WARNING
    assert by[("mlx5_0", "module_error")].status == WARNING
    # a line naming a function that is no RDMA device here: counted, not judged (no finding of it)
    assert section.unattributed == 3
    assert not [f for f in found if "0000:99:00.0" in f.message]
    # the log was read: the node itself is judged (OK: no node-wide event)
    [node] = [f for f in found if f.device == "node"]
    assert node.status == OK and "the kernel log is read (kmsg)" in node.message
    assert {(a.device, a.attributed, a.klass) for a in section.events if a.event.event == "health_miss_count"} == \
        {("0000:99:00.0", False, "watch")}


def test_link_down_is_judged_with_the_port_state_now() -> None:
    d = data(ev("link_down", pci="0000:12:00.1", netdev="ens1f1np1", count=3))
    [f, _] = run(d, up1=True)[1]
    assert (f.status, f.klass) == (OK, "watch") and "up again (a flap)" in f.message and "3 times" in f.message
    [f, _] = run(d, up1=False)[1]
    assert (f.status, f.klass) == (WARNING, "degraded") and "still down" in f.message


def test_peermem_matters_on_a_gpu_node_only() -> None:
    d = data(ev("peermem_load_failed"))
    [f] = run(d, gpu=False)[1]
    assert (f.device, f.status) == ("node", OK) and "no GPU" in f.message
    [f] = run(d, gpu=True)[1]
    assert (f.device, f.status, f.klass) == ("node", WARNING, "degraded")


def test_the_hold() -> None:
    d = data(ev("pcie_power_insufficient", pci="0000:0c:00.0", last=0.0), ev("cmd_timeout", pci="0000:12:00.1", last=0.0))
    section, found = run(d, now=4000.0)                 # 4000 s later: the degraded one is gone, the fatal one holds
    assert [(f.device, f.klass) for f in found] == [("mlx5_1", "fatal"), ("node", "watch")]
    assert {a.event.event for a in section.events} == {"pcie_power_insufficient", "cmd_timeout"}   # still counted


def test_every_finding_has_a_class_and_the_drain_reason_is_one_line() -> None:
    plain = [Finding("degraded_link", "mlx5_1", 1, CRITICAL, "mlx5_1 port 1 is DOWN/LinkUp"),
             Finding("symbol_errors", "mlx5_0", 1, WARNING, "mlx5_0 port 1: 200 symbol errors/h"),
             Finding("roce_pfc", "mlx5_0", 1, OK, "ok")]
    assert [class_of(f) for f in plain] == ["fatal", "degraded", "watch"]
    assert drain_reason(plain[1:]) == ""
    _, found = run(data(ev("cmd_timeout", pci="0000:0c:00.0")))
    reason = drain_reason(plain + found)
    # the kernel log's fatal event first; device, port, cable and cause in one line, no evidence tail
    assert reason == ("fabricmon: CRITICAL kernel_log: mlx5_0 port 1 (cabled to leaf01 QM9700 port 12): the adapter's "
                      "firmware did not answer a driver command (+1 more)")
    assert "\n" not in reason


def test_the_docs_table_is_generated_from_the_patterns() -> None:
    from pathlib import Path
    text = (Path(__file__).resolve().parents[2] / "docs" / "kernel-log.md").read_text()
    table = text.split("<!-- kernel-log-table: generated -->\n", 1)[1].split("<!-- /kernel-log-table -->", 1)[0]
    assert table == kernel_log.taxonomy_table(), "regenerate docs/kernel-log.md's table (see the command above it)"


def test_no_status_without_a_kernel_log_read() -> None:
    """A log that was not read (a replayed bundle: `via` empty) gives the node no kernel_log status."""
    section, found = kernel_log.evaluate(KernelLogData(), DEVICES, ports(), 1000.0, 3600.0, False)
    assert found == []
