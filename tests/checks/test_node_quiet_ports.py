"""The node's quiet ports (checks.degraded_link.NodePorts, link_errors.calm_findings): a port whose counter checks
are all OK with nothing counted is not summed again while what it was judged on holds (link_errors.calm_mark), and
its findings are the ones a full judgement gives, poll after poll: while its history fills (the windows' seconds
move), once it spans the windows, after an error rose and left the window, while its source is late, and when its
rate changes."""

from __future__ import annotations

from types import SimpleNamespace

import pytest

from fabricmon.checks import OK, degraded_link, link_errors
from fabricmon.checks.degraded_link import NodePorts
from fabricmon.checks.link_errors import CHECKED_COUNTERS
from fabricmon.config import from_dict
from fabricmon.model import ibspec
from fabricmon.model.history import CounterHistory, saturation
from fabricmon.model.ports import PortView

CHECKS = from_dict({}, check_paths=False).checks
COUNTERS = {"symbol_errors": 0, "link_downed": 2, "link_error_recovery": 0, "local_link_integrity_errors": 0,
            "excessive_buffer_overrun_errors": 0, "receive_errors": 0, "receive_remote_physical_errors": 0,
            "transmit_discards": 7, "port_xmit_data": 0}
BITS = {"symbol_errors": 16, "link_downed": 8, "link_error_recovery": 8, "local_link_integrity_errors": 4,
        "excessive_buffer_overrun_errors": 4, "receive_errors": 16, "receive_remote_physical_errors": 16,
        "transmit_discards": 16, "port_xmit_data": 64}


def port(counters: dict[str, int], rate: float = 400.0) -> PortView:
    return PortView("mlx5_0", 1, state_id=ibspec.STATE_ACTIVE, phys_state_id=ibspec.PHYS_LINKUP, width=4,
                    generation="NDR", rate_gbps=rate, counters=dict(counters), counter_bits=dict(BITS))


def judge(check: NodePorts, p: PortView, history: CounterHistory, now: float) -> list:
    ib = SimpleNamespace(ports={p.key: p}, saturation={p.key: saturation(p.counters, p.counter_bits)})
    return list(check.run(SimpleNamespace(ib=ib, history=history, now=now)).findings)


@pytest.fixture
def calls(monkeypatch) -> list[int]:
    """How many ports were judged in full (link_errors.evaluate_port called)."""
    seen: list[int] = []
    full = link_errors.evaluate_port

    def counted(*a, **kw):
        seen.append(1)
        return full(*a, **kw)
    monkeypatch.setattr(degraded_link.link_errors, "evaluate_port", counted)
    return seen


def test_a_quiet_port_is_not_summed_again_and_says_what_a_full_judgement_says(calls) -> None:
    history = CounterHistory(horizon=43200.0)
    kept = NodePorts(CHECKS, ())
    counters = dict(COUNTERS)
    t = 1_000_000.0
    plan = ([("poll", 15.0, {})] * 20                          # the history fills: the windows' seconds move
            + [("poll", 300.0, {})] * 14                       # past the 1 h windows
            + [("poll", 15.0, {"symbol_errors": 5})]           # an error: judged in full, not quiet
            + [("poll", 600.0, {})] * 8                        # ... and out of its window again
            + [("late", 20.0, {})] * 3                         # the source late: the same samples, time moves
            + [("poll", 15.0, {})] * 3
            + [("rate", 15.0, {})] * 2)                        # the link retrained at another rate
    rate, reused = 400.0, 0
    for what, step, rise in plan:
        t += step
        for name, n in rise.items():
            counters[name] += n
        if what == "rate":
            rate = 200.0
        p = port(counters, rate)
        if what != "late":
            for name in CHECKED_COUNTERS & p.counters.keys():
                history.record((p.device, p.port, name), t, p.counters[name])
        before = len(calls)
        got = judge(kept, p, history, t)
        reused += len(calls) == before
        full = judge(NodePorts(CHECKS, ()), p, history, t)        # a judge with no memory: every port in full
        assert got == full, (what, t)
        assert all(f.status == OK for f in got) or not kept.state.quiet
    assert reused >= 40, reused                 # most polls reused the quiet port's findings
    assert any("in the last 1h" in f.message for f in got)        # the history spans the window now


def test_a_port_that_counted_is_judged_in_full_until_it_is_quiet(calls) -> None:
    history = CounterHistory(horizon=43200.0)
    kept = NodePorts(CHECKS, ())
    t = 2_000_000.0
    for i in range(4):
        t += 15.0
        p = port({**COUNTERS, "symbol_errors": 500 * i})
        for name in CHECKED_COUNTERS & p.counters.keys():
            history.record((p.device, p.port, name), t, p.counters[name])
        before = len(calls)
        got = judge(kept, p, history, t)
        assert len(calls) == before + 1         # judged in full: it was not quiet
        assert got == judge(NodePorts(CHECKS, ()), p, history, t)
    assert not kept.state.quiet
