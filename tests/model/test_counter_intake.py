"""The one counter intake (model.history.CounterIntake) that the node, RoCE and fabric share: each
rule (width and wrap, saturation as a lower bound, reset, first baseline) on its own."""

from __future__ import annotations

import re

from fabricmon.model.history import PLAIN, CounterHistory, CounterIntake, CounterRule, ib_rule
from helpers import REPO

PORT = ("sw", 1)
KEY = ("sw", 1, "c")


def last_increase(h: CounterHistory) -> int | None:
    """The increase between the last two samples (None when unknown: one sample, or a step from a saturated value)."""
    step = h.last_step(KEY)
    return None if step is None else step[0]


def feed(intake: CounterIntake, seq: list[int], rule: CounterRule = PLAIN, port: tuple[str, int] = PORT) -> None:
    for t, v in enumerate(seq, 1):
        intake.take_port(port, float(t), {"c": v}, {"c": rule})


def test_a_wrapping_counter_adds_its_width_per_wrap_and_a_drop_from_low_is_a_reset() -> None:
    top = 1 << 32
    intake = CounterIntake(CounterHistory())
    feed(intake, [top - 100, top - 10, 40, 90], CounterRule(32, wraps=True))
    assert intake.history.increase(KEY, 100.0, 4.0) == (90 + 50 + 50, 3.0)
    assert not intake.history.resets
    intake.take_port(PORT, 5.0, {"c": 5}, {"c": CounterRule(32, wraps=True)})       # 90 -> 5: a reboot
    assert last_increase(intake.history) == 0 and intake.history.resets[KEY] == 1
    intake.take_port(PORT, 6.0, {"c": 7}, {"c": CounterRule(32, wraps=True)})       # counts from the new baseline
    assert last_increase(intake.history) == 2


def test_a_drop_of_a_value_wider_than_the_declared_width_is_a_reset_not_a_wrap() -> None:
    intake = CounterIntake(CounterHistory())
    feed(intake, [(1 << 33) + 10, 3], CounterRule(32, wraps=True))
    assert last_increase(intake.history) == 0 and intake.history.resets[KEY] == 1


def test_a_saturated_counter_is_a_lower_bound_and_never_a_rate() -> None:
    rule = CounterRule(8, saturates=True)                      # LinkDownedCounter
    intake = CounterIntake(CounterHistory())
    feed(intake, [250, 254, 255, 255])
    intake2 = CounterIntake(CounterHistory())
    feed(intake2, [250, 254, 255, 255], rule)
    # the step onto the maximum counts (254 -> 255 is still a flap); the steps from it are unknown
    assert intake2.history.increase(KEY, 100.0, 4.0)[0] == 5
    assert last_increase(intake2.history) is None and intake2.history.last_step(KEY) is None
    assert last_increase(intake.history) == 0                 # without the rule: a plain counter that stopped
    assert rule.at_max(255) and not rule.at_max(254) and not CounterRule(8, wraps=True).at_max(255)


def test_a_decrease_is_a_reset_that_contributes_zero_and_becomes_the_baseline() -> None:
    intake = CounterIntake(CounterHistory())
    resets = [intake.take_port(PORT, float(t), {"c": v}, {}) for t, v in enumerate([10, 20, 4, 9], 1)]
    assert resets == [[], [], ["c"], []]
    assert intake.history.increase(KEY, 100.0, 4.0) == (10 + 0 + 5, 3.0)
    assert intake.history.resets[KEY] == 1


def test_a_first_sample_is_a_baseline_only() -> None:
    intake = CounterIntake(CounterHistory())
    feed(intake, [1000])
    assert intake.history.increase(KEY, 100.0, 1.0) == (0, 0.0) and last_increase(intake.history) is None


def test_a_sparse_intake_keeps_no_quiet_counter_and_counts_a_new_one_from_the_ports_previous_sample() -> None:
    intake = CounterIntake(CounterHistory(), sparse=True)
    feed(intake, [0, 0])
    assert not intake.history.has(KEY)                         # quiet: no history at all
    intake.take_port(PORT, 3.0, {"c": 7}, {})
    assert intake.history.increase(KEY, 100.0, 3.0) == (7, 1.0)     # it was 0 at t=2, this port's last sample
    # a port first seen with a non-zero counter (a switch added, or back after a sweep without it) has
    # no previous sample: its value is a baseline, never an increase since the fabric's last sweep
    intake.take_port(("sw2", 1), 3.0, {"c": 500}, {})
    assert intake.history.increase(("sw2", 1, "c"), 100.0, 3.0) == (0, 0.0)


def test_the_same_sample_again_is_skipped_and_streams_of_one_port_are_apart() -> None:
    intake = CounterIntake(CounterHistory())
    intake.take_port(PORT, 1.0, {"c": 1}, {}, stream="ethtool:eth0")
    intake.take_port(PORT, 1.0, {"d": 1}, {}, stream="hw")        # another source's sample of the port, same time
    assert intake.history.has(("sw", 1, "d"))
    assert intake.take_port(PORT, 1.0, {"c": 0}, {}, stream="ethtool:eth0") == []     # the same sample: skipped
    assert last_increase(intake.history) is None and not intake.history.resets


def test_prune_forgets_every_trace_of_a_port() -> None:
    intake = CounterIntake(CounterHistory())
    feed(intake, [(1 << 32) - 1, 3], CounterRule(32, wraps=True))
    intake.prune(set())
    assert not intake.history.has(KEY) and not intake._wrap and not intake._times


def test_a_prune_with_the_same_ports_skips_only_while_no_port_entered() -> None:
    """A fabric prunes every sweep with the same 26,000 ports: a prune with the ports of the last one, no port
    having entered since, has nothing to drop; a port that entered since is dropped by the next prune."""
    intake = CounterIntake(CounterHistory())
    a, b = ("sw", 1), ("sw", 2)
    intake.take_port(a, 1.0, {"c": 1}, {})
    intake.prune({a})
    intake.take_port(a, 2.0, {"c": 2}, {})
    intake.prune({a})
    assert intake._pruned == {a} and intake.history.has(("sw", 1, "c"))
    intake.take_port(b, 3.0, {"c": 1}, {})          # a port outside the kept ones entered
    assert intake._pruned is None
    intake.prune({a})
    assert not intake.history.has(("sw", 2, "c")) and ("sw", 2, "") not in intake._times
    intake.prune(set())
    assert not intake.history.has(("sw", 1, "c"))


def test_ib_rules_follow_the_spec_and_the_width_read() -> None:
    assert ib_rule("link_downed") == CounterRule(8, saturates=True)
    assert ib_rule("symbol_errors", 32) == CounterRule(32, saturates=True)
    assert ib_rule("receive_errors", 32, wraps=True) == CounterRule(32, wraps=True)
    assert ib_rule("transmit_bytes", 64) == CounterRule(64)


def test_counters_enter_a_history_only_through_the_intake() -> None:
    """node, RoCE and fabric alike: no module but model/history.py records into a CounterHistory."""
    bad = []
    for path in (REPO / "fabricmon").rglob("*.py"):
        if path.relative_to(REPO).as_posix() == "fabricmon/model/history.py":
            continue
        for n, line in enumerate(path.read_text().splitlines(), 1):
            if re.search(r"\b(history|rates)\.(record|add)\(", line):
                bad.append(f"{path.relative_to(REPO)}:{n}: {line.strip()}")
    assert not bad, "\n".join(bad)
