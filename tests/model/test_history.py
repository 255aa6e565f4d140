"""Tests for fabricmon.model.history.CounterHistory: gaps, resets, windows, persistence."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from fabricmon.model.history import CounterHistory

K = ("mlx5_0", 1, "symbol_errors")
K2 = ("mlx5_0", 1, "link_downed")
K3 = ("mlx5_1", 1, "symbol_errors")


def feed(h: CounterHistory, key: tuple, samples: list[tuple[float, int | None]]) -> None:
    for t, v in samples:
        if v is not None:
            h.record(key, t, v)
        else:
            h.add(key, t, v)


def last_increase(h: CounterHistory, key: tuple) -> int | None:
    step = h.last_step(key)
    return None if step is None else step[0]


def test_empty_and_single_sample() -> None:
    h = CounterHistory()
    assert h.increase(K, 3600, 100) == (0, 0.0)
    assert last_increase(h, K) is None
    h.add(K, 0, 5)
    assert h.increase(K, 3600, 100) == (0, 0.0)
    assert last_increase(h, K) is None


def test_increase_sums_deltas_and_reports_coverage() -> None:
    h = CounterHistory()
    feed(h, K, [(0, 10), (15, 12), (30, 12), (45, 20)])
    assert h.increase(K, 3600, 45) == (10, 45.0)
    assert last_increase(h, K) == 8


def test_window_only_counts_recent_deltas() -> None:
    h = CounterHistory()
    feed(h, K, [(0, 0), (1000, 500), (4000, 510), (5000, 530)])
    # window [1400, 5000]: deltas 1000->4000 (10) and 4000->5000 (20); the baseline is the
    # last sample before the window
    assert h.increase(K, 3600, 5000) == (30, 3600.0)      # coverage is clamped to the window
    # a window that holds no sample has no increase
    assert h.increase(K, 10, 6000) == (0, 0.0)
    # a huge window sees everything
    assert h.increase(K, 1e9, 5000) == (530, 5000.0)


def test_reset_contributes_zero_and_sets_a_new_baseline() -> None:
    h = CounterHistory()
    feed(h, K, [(0, 100), (10, 150), (20, 3), (30, 10)])
    # 100->150 = 50, 150->3 is a reset (0, never -147), 3->10 = 7
    assert h.increase(K, 3600, 30) == (57, 30.0)
    assert h.resets[K] == 1
    assert last_increase(h, K) == 7


def test_the_last_step_over_a_reset_is_zero() -> None:
    h = CounterHistory()
    feed(h, K, [(0, 100), (10, 40)])
    assert last_increase(h, K) == 0
    assert h.resets[K] == 1


def test_a_reset_is_a_decrease_only() -> None:
    h = CounterHistory()
    assert h.record(K, 0, 5) is False             # nothing recorded before
    assert h.record(K, 1, 5) is False
    assert h.record(K, 2, 6) is False
    assert h.record(K, 3, 4) is True
    assert h.resets == {K: 1}


def test_saturated_sample_is_a_gap_never_a_rate() -> None:
    h = CounterHistory()
    # 16-bit symbol error counter: 100, then saturated (None), then cleared to 0, then 5
    feed(h, K, [(0, 100), (10, None), (20, None), (30, 0), (40, 5)])
    total, covered = h.increase(K, 3600, 40)
    assert total == 5                # only the delta between two known samples counts
    assert covered == 40.0
    assert last_increase(h, K) == 5


def test_an_unknown_last_sample_has_no_last_step() -> None:
    h = CounterHistory()
    feed(h, K, [(0, 100), (10, None)])
    assert last_increase(h, K) is None
    assert h.increase(K, 3600, 10) == (0, 10.0)
    # a value after an unknown one is no reset (nothing known to have gone down)
    assert h.record(K, 20, 0) is False and h.resets == {}


def test_out_of_order_and_duplicate_times_are_ignored() -> None:
    h = CounterHistory()
    h.add(K, 10, 5)
    h.add(K, 10, 500)     # same time: ignored
    h.add(K, 5, 1000)     # older: ignored
    h.add(K, 20, 7)
    assert h.increase(K, 3600, 20) == (2, 10.0)


def test_keys_are_independent() -> None:
    h = CounterHistory()
    feed(h, K, [(0, 0), (10, 10)])
    feed(h, K2, [(0, 0), (10, 1)])
    feed(h, K3, [(0, 7), (10, 7)])
    assert h.increase(K, 100, 10)[0] == 10
    assert h.increase(K2, 100, 10)[0] == 1
    assert h.increase(K3, 100, 10)[0] == 0


def test_horizon_drops_old_samples_but_keeps_a_baseline() -> None:
    h = CounterHistory(horizon=100)
    feed(h, K, [(t, t) for t in range(0, 1001, 10)])
    q = h._data[K]
    assert q[-1].t == 1000
    assert q[0].t < 900 <= q[1].t       # one sample before the horizon remains as the baseline
    assert len(q) <= 12
    # the delta that crosses the window's start is counted; the coverage is clamped to the window
    assert h.increase(K, 100, 1000) == (110, 100.0)




def test_max_samples_bounds_memory() -> None:
    h = CounterHistory(horizon=1e12, max_samples=16)
    feed(h, K, [(t, t) for t in range(1000)])
    assert len(h._data[K]) == 16


def test_prune_drops_removed_ports() -> None:
    h = CounterHistory()
    feed(h, K, [(0, 10), (10, 5)])           # one reset on mlx5_0 port 1
    feed(h, K2, [(0, 0), (10, 1)])
    feed(h, K3, [(0, 9), (10, 1)])           # one reset on mlx5_1 port 1
    h.prune({("mlx5_0", 1)})
    assert set(h._data) == {K, K2}
    assert h.increase(K3, 100, 10) == (0, 0.0)
    assert K3 not in h.resets and h.resets[K] == 1
    h.prune(set())
    assert not h._data and not h.resets


def test_json_round_trip_keeps_values_gaps_and_times() -> None:
    h = CounterHistory()
    feed(h, K, [(0.5, 10), (15.25, None), (30.0, 2), (45.0, 9)])
    feed(h, ("mlx5_bond_0", 12, "link_downed"), [(1.0, 0), (2.0, 3)])
    text = h.to_json()
    data = json.loads(text)
    assert data["mlx5_0|1|symbol_errors"] == [[0.5, 10], [15.25, None], [30.0, 2], [45.0, 9]]
    h2 = CounterHistory.from_json(text)
    assert h2.increase(K, 3600, 45) == h.increase(K, 3600, 45) == (7, 44.5)
    assert h2.increase(("mlx5_bond_0", 12, "link_downed"), 3600, 2.0) == (3, 1.0)
    assert h2.last_step(K) == (7, 15.0)
    assert h2.to_json() == text


def test_from_json_applies_the_horizon() -> None:
    h = CounterHistory(horizon=1e9)
    feed(h, K, [(t, t) for t in range(0, 10001, 100)])
    h2 = CounterHistory.from_json(h.to_json(), horizon=1000)
    assert h2.horizon == 1000
    assert len(h2._data[K]) <= 12


@pytest.mark.parametrize("text", ["not json", '{"mlx5_0|x|c": [[0, 1]]}', '{"bad-key": [[0, 1]]}',
                                  '{"mlx5_0|1|c": [[0]]}'])
def test_from_json_garbage_raises_value_error(text: str) -> None:
    with pytest.raises((ValueError, KeyError, TypeError)):
        CounterHistory.from_json(text)


def test_save_is_atomic_and_loadable(tmp_path: Path) -> None:
    h = CounterHistory()
    feed(h, K, [(0, 1), (10, 4)])
    path = tmp_path / "state" / "nested" / "check-state.json"
    h.save(str(path))
    assert CounterHistory.from_json(path.read_text()).increase(K, 100, 10) == (3, 10.0)
    # overwrite, and no temp file is left behind
    feed(h, K, [(20, 6)])
    h.save(str(path))
    assert CounterHistory.from_json(path.read_text()).increase(K, 100, 20) == (5, 20.0)
    assert os.listdir(path.parent) == ["check-state.json"]


def test_save_into_an_unwritable_place_raises_oserror_and_leaves_nothing(tmp_path: Path) -> None:
    h = CounterHistory()
    blocker = tmp_path / "file"
    blocker.write_text("")
    with pytest.raises(OSError):
        h.save(str(blocker / "state.json"))      # parent is a file
    assert sorted(os.listdir(tmp_path)) == ["file"]


def test_last_rates_are_last_step_as_rates() -> None:
    """CounterHistory.last_rates (the fabric's transmit and receive rates in one call) is last_step per port
    as a rate: None with one sample, after a saturated or unknown sample, or with no time between; a reset
    contributes 0."""
    h = CounterHistory()
    h.record(("a", 1, "c"), 0.0, 100)
    h.record(("a", 1, "c"), 10.0, 300)                      # 200 in 10 s
    h.record(("a", 2, "c"), 0.0, 500)
    h.record(("a", 2, "c"), 10.0, 100)                      # a reset: 0
    h.record(("a", 3, "c"), 0.0, 255, saturated=True)
    h.record(("a", 3, "c"), 10.0, 255, saturated=True)      # from a saturated sample: unknown
    h.record(("a", 4, "c"), 0.0, 7)                         # one sample
    ports = [("a", 1), ("a", 2), ("a", 3), ("a", 4), ("a", 5)]
    assert h.last_rates(ports, "c", 4.0) == [80.0, 0.0, None, None, None]
    for (dev, port), rate in zip(ports, h.last_rates(ports, "c")):
        step = h.last_step((dev, port, "c"))
        assert rate == (None if step is None or step[1] <= 0 else step[0] / step[1])
