"""The node decisions (remediation/policy.py node_round) on findings and what Slurm says: the drain reason (one
line naming the device and the event), the partition's breaker (5% of 20 nodes: one), a node someone else
drained, the exclusion list, dry run, Slurm unreadable, the clean window and the resume; remediation's own
findings never drain."""

from __future__ import annotations

from dataclasses import replace

from fabricmon.config import from_dict
from fabricmon.model.finding import CRITICAL, WARNING, Finding
from fabricmon.model.remediation import DONE, DRY_RUN, RETURNING, TODO, UNDONE
from fabricmon.remediation.policy import SlurmNode, SlurmView, node_round

FATAL = Finding("kernel_log", "mlx5_0", 1, CRITICAL, "mlx5_0 port 1: the adapter's firmware did not answer a driver "
                "command (ENABLE_HCA(0x104)) [mlx5_core 0000:17:00.0: wait_func ...]: drain the node", klass="fatal")
NODES = [f"gpu{i:03d}" for i in range(1, 21)]


def cfg(mode="act", **dr):
    return from_dict({"remediation": {"drain_node": {"mode": mode, **dr}}}, check_paths=False)


def view(drained: dict[str, tuple[str, str]] | None = None) -> SlurmView:
    nodes = {n: SlurmNode("", state="idle") for n in NODES}
    for n, (reason, user) in (drained or {}).items():
        nodes[n] = SlurmNode(reason, user, "2026-12-01T03:00:00", "drained")
    return SlurmView(nodes, {n: ("gpu",) for n in NODES})


def ids():
    n = [0]

    def new(kind: str) -> str:
        n[0] += 1
        return f"n{n[0]}"
    return new


def decide(findings, c, slurm, actions=None, now=100.0, node="gpu001"):
    return node_round(findings, node, actions or {}, c.remediation, c.checks, now, ids(), slurm)


def test_a_fatal_finding_drains_with_one_line_naming_the_device_and_the_event() -> None:
    rnd = decide([FATAL], cfg(), view())
    [a] = rnd.actions.values()
    assert (a.state, a.node, a.check, a.mode) == (TODO, "gpu001", "kernel_log", "act")
    assert a.reason == ("fabricmon: CRITICAL kernel_log: mlx5_0 port 1: the adapter's firmware did not answer a driver "
                        "command (ENABLE_HCA(0x104))")
    assert rnd.breakers["drain_node"].cap == 1


def test_the_breaker_allows_one_of_twenty_and_refuses_the_next() -> None:
    rnd = decide([FATAL], cfg(), view({"gpu007": ("fabricmon: CRITICAL kernel_log: x", "root")}))
    assert not rnd.actions
    assert rnd.refusals[0].why == ("the circuit breaker: 1 of partition gpu's 20 nodes drained by fabricmon, the cap "
                                   "is max(1, 0.05 x 20) = 1")
    b = rnd.breakers["drain_node"]
    assert (b.cap, b.used, b.refused, b.tripped) == (1, 1, 1, True)
    # 10% allows two
    assert len(decide([FATAL], cfg(max_fraction=0.1), view({"gpu007": ("fabricmon: x", "root")})).actions) == 1


def test_someone_elses_drain_is_never_taken_over_and_warnings_do_not_drain() -> None:
    rnd = decide([FATAL], cfg(), view({"gpu001": ("bad DIMM: ticket 4711", "alice")}))
    assert not rnd.actions
    assert "gpu001 is already drained by alice at 2026-12-01T03:00:00: 'bad DIMM: ticket 4711'" in rnd.refusals[0].why
    warn = Finding("symbol_errors", "mlx5_0", 1, WARNING, "mlx5_0 port 1: rose")
    own = Finding("remediation", "gpu001", None, CRITICAL, "the breaker", klass="fatal")
    assert not decide([warn, own], cfg(), view()).actions


def test_excluded_unreadable_slurm_and_dry_run() -> None:
    c = from_dict({"remediation": {"drain_node": {"mode": "act"}, "exclude": [{"node": "gpu00*", "reason": "burn-in"}]}},
                  check_paths=False)
    assert "on the exclusion list (gpu00*: burn-in)" in decide([FATAL], c, view()).refusals[0].why
    assert "Slurm could not be read" in decide([FATAL], cfg(), None).refusals[0].why
    [a] = decide([FATAL], cfg("dry_run"), view()).actions.values()
    assert (a.mode, a.state) == (DRY_RUN, DONE)
    assert not decide([FATAL], cfg("off"), view()).actions


def test_the_clean_window_then_the_resume_and_an_operators_undo_holds() -> None:
    c = cfg(clean_window=600)
    [a] = decide([FATAL], c, view()).actions.values()
    a = replace(a, state=DONE, effective=100.0, clean_since=100.0)
    # the finding still there: not clean
    r1 = decide([FATAL], c, view(), {a.id: a}, now=200.0)
    assert r1.actions[a.id].clean_since is None
    r2 = decide([], c, view(), r1.actions, now=300.0)
    assert r2.actions[a.id].clean_since == 300.0
    assert decide([], c, view(), r2.actions, now=899.0).actions[a.id].state == DONE
    assert decide([], c, view(), r2.actions, now=900.0).actions[a.id].state == RETURNING
    # undone by an operator: the same finding does not drain it again
    undone = {a.id: replace(a, state=UNDONE, closed=120.0)}
    assert not [x for x in decide([FATAL], c, view(), undone, now=130.0).actions.values() if x.open]
