"""The daemon's journal (fabricmon.serve.journal): diffs consecutive snapshots, one line per change."""

from __future__ import annotations

from structlog.testing import capture_logs

from fabricmon.checks import CRITICAL, OK, WARNING, Finding
from fabricmon.model.ports import PortView
from fabricmon.model.snapshot import BuildStats, GpuSection, IbSection, RoceSection, Snapshot, SourceState
from fabricmon.serve.journal import Journal


def snap(findings: list[Finding], ports: tuple[str, ...] = ("mlx5_0", "mlx5_1"), known: bool = True) -> Snapshot:
    ib = IbSection(ports={(d, 1): PortView(device=d, port=1, state_id=4, phys_state_id=5, width=4, generation="NDR",
                                           rate_gbps=400.0, counter_source="sysfs") for d in ports})
    sources = {"sysfs": SourceState("sysfs", True, 15, 5), "ibstat": SourceState("ibstat", True, 60, 10, active=False),
               "perfquery": SourceState("perfquery", False, 15, 10, active=False)}
    return Snapshot(time=0.0, ib=ib, roce=RoceSection(), gpu=GpuSection(), findings=findings, sources=sources,
                    builds=BuildStats(), inventory_known=known)


def f(status: int, msg: str = "m", device: str = "mlx5_0") -> Finding:
    return Finding("symbol_errors", device, 1, status, msg)


def test_inventory_then_one_line_per_change() -> None:
    j = Journal()
    with capture_logs() as logs:
        j(snap([f(OK)], known=False))                  # before the inventory: nothing
        j(snap([f(OK)]))
        j(snap([f(WARNING, "rose by 200")]))
        j(snap([f(WARNING, "rose by 300")]))           # same severity, new count: no line
        j(snap([f(CRITICAL, "rose by 2000")]))
        j(snap([f(OK)]))
        j(snap([f(OK)], ports=("mlx5_0",)))
    events = [(e["event"], e.get("severity"), e.get("previous")) for e in logs]
    assert events == [
        ("port found", None, None), ("port found", None, None), ("sources", None, None),
        ("finding", "WARNING", None),
        ("finding changed severity", "CRITICAL", "WARNING"),
        ("finding cleared", "OK", "CRITICAL"),
        ("port vanished", None, None)]
    assert logs[0]["rate"] == "4X NDR (400 Gb/s)" and logs[0]["state"] == "ACTIVE/LinkUp"
    assert logs[2]["active"] == ["sysfs"] and logs[2]["not_installed"] == ["ibstat"] and logs[2]["disabled"] == ["perfquery"]
    assert [e["log_level"] for e in logs[3:6]] == ["warning", "error", "info"]


def test_a_finding_of_a_vanished_port_clears_once() -> None:
    j = Journal()
    with capture_logs() as logs:
        j(snap([f(CRITICAL, device="mlx5_1")]))
        j(snap([], ports=("mlx5_0",)))
        j(snap([], ports=("mlx5_0",)))
    events = [e["event"] for e in logs if e["event"].startswith("finding")]
    assert events == ["finding", "finding cleared"]


def test_a_raised_finding_names_the_jobs_running_then() -> None:
    from fabricmon.model.jobs import JobRef
    j = Journal()
    jobs = (JobRef("41", "alice", "train"), JobRef("42"))
    with capture_logs() as logs:
        j(snap([f(OK)]))
        j(snap([Finding("symbol_errors", "mlx5_0", 1, WARNING, "rose", jobs)]))
    raised = [e for e in logs if e["event"] == "finding"]
    assert raised[0]["jobs"] == ["41 (alice/train)", "42"]
