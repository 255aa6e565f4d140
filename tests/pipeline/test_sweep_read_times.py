"""A switch's traffic is timed at its own read, not at the sweep's end (SweepData.read_ago): a switch answered
early in one sweep and late in the next (a slow switch, a loaded collector) must not turn that difference
into traffic. On snmpsim under load this was a 300 Gb/s port read as 520 Gb/s."""

from __future__ import annotations

import pytest

from fabricmon.model.fabric import SweepData
from fabricmon.pipeline.fabric_counters import SweepCounters

KEY = ("0c42a1000001", 8)
GBPS = 1e9 / 8          # bytes a second in a Gb/s


def sweep(tx: int, ago: float | None) -> SweepData:
    s = SweepData(ports={KEY: {"transmit_bytes": tx, "receive_bytes": 0}}, scale={"transmit_bytes": 1, "receive_bytes": 1},
                  wrapping=set(), switches={KEY[0]})
    if ago is not None:
        s.read_ago = {KEY[0]: ago}
    return s


def rate(first: SweepData, t1: float, second: SweepData, t2: float) -> float | None:
    c = SweepCounters(horizon=3600.0)
    for s, t in ((first, t1), (second, t2)):
        c.record(s, t, {KEY})
    (r,) = c.rates.last_rates([KEY], "transmit_bytes")
    return r


def test_each_switch_at_its_own_read() -> None:
    # 300 Gb/s: read 0.2 s before the first sweep's end, 3.5 s before the second's (15 s apart): 11.7 s of traffic
    traffic = 300 * GBPS * (15 - 3.5 + 0.2)
    assert rate(sweep(0, 0.2), 100.0, sweep(int(traffic), 3.5), 115.0) == pytest.approx(300 * GBPS)
    # timed at the sweeps' ends instead, the same counters would read 234 Gb/s
    assert round(rate(sweep(0, None), 100.0, sweep(int(traffic), None), 115.0) / GBPS) == 234


def test_a_sweep_without_read_times_is_timed_at_its_end() -> None:
    assert rate(sweep(0, None), 0.0, sweep(int(10 * 100 * GBPS), None), 10.0) == pytest.approx(100 * GBPS)
