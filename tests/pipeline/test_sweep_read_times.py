"""A switch's traffic is timed at its own read, not at the sweep's end (SweepData.read_ago): a switch answered
early in one sweep and late in the next (a slow switch, a loaded collector) must not turn that difference
into traffic. On snmpsim under load this was a 300 Gb/s port read as 520 Gb/s."""

from __future__ import annotations

import pytest

from fabricmon.model.fabric import SweepData
from fabricmon.pipeline.fabric_counters import SweepCounters

KEY = ("0c42a1000001", 8)
GBPS = 1e9 / 8          # bytes a second in a Gb/s


def sweep(tx: int, ago: float | None, frames: int | None = None, pause_ago: float | None = None) -> SweepData:
    """One switch port's sweep: its traffic read `ago` s before the sweep's end (None: untimed), its
    pause frames (priority 3, rx) read `pause_ago` s before it."""
    s = SweepData(ports={KEY: {"transmit_bytes": tx, "receive_bytes": 0}}, scale={"transmit_bytes": 1, "receive_bytes": 1},
                  wrapping=set(), switches={KEY[0]})
    if frames is not None:
        s.pause = {KEY: {(3, "rx"): frames}}
    if ago is not None:
        s.read_ago = {KEY[0]: ago}
    if pause_ago is not None:
        s.pause_read_ago = {KEY[0]: pause_ago}
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


def pause_rate(first: SweepData, t1: float, second: SweepData, t2: float) -> float | None:
    c = SweepCounters(horizon=3600.0)
    for s, t in ((first, t1), (second, t2)):
        c.record(s, t, {KEY})
    step = c.rates.last_step((KEY[0], KEY[1], "pause:3:rx"))
    assert step is not None
    return step[0] / step[1]


def test_pause_frames_at_their_own_walk() -> None:
    # 4000 frames/s, the PFC walk answered at one 2 s sweep's end, then 1.5 s before the next's: 0.5 s of frames.
    # Timed at the sweeps' ends this read 1000/s, under a storm's rate (the demo's storm cleared and came back
    # on a loaded CI machine); timed at the traffic's walk (answered at both ends) it reads the same 1000/s
    frames = int(4000 * (2 - 1.5))
    assert pause_rate(sweep(0, 0.0, 0, 0.0), 100.0, sweep(0, 0.0, frames, 1.5), 102.0) == pytest.approx(4000)
    assert pause_rate(sweep(0, 0.0, 0, None), 100.0, sweep(0, 0.0, frames, None), 102.0) == pytest.approx(1000)
    # no PFC walk time of its own: the switch's traffic read time
    assert pause_rate(sweep(0, 0.0, 0, None), 100.0, sweep(0, 1.5, frames, None), 102.0) == pytest.approx(4000)
