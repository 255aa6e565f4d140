"""Counter history: the samples that rate-based checks read deltas from.

Rules (the lessons of the exporters we compete with):
- a saturated counter is "unknown, at least max": the step onto the maximum counts as a lower
  bound (max - last value, so a 254 -> 255 LinkDowned step is still a flap), and every step
  from a saturated sample is unknown: never a rate;
- a decrease is a reset (or a counter jumping backwards): it contributes 0, never a negative
  increase, and the new value becomes the baseline;
- the history is bounded in time, and can be saved to disk so that `fabricmon check` run by
  cron or Slurm keeps rates between runs.
"""

from __future__ import annotations

import json
from collections import deque
from typing import Any
from dataclasses import dataclass

from fabricmon.fsutil import write_atomic

Key = tuple[str, int, str]     # (device, port, counter)


@dataclass(slots=True)
class Sample:
    t: float
    value: int | None          # None: unknown
    saturated: bool = False    # value is the counter's maximum: "at least this"


class CounterHistory:
    def __init__(self, horizon: float = 43200.0, max_samples: int = 4096):
        self.horizon = horizon
        self.max_samples = max_samples
        self._data: dict[Key, deque[Sample]] = {}
        self.resets: dict[Key, int] = {}

    def add(self, key: Key, t: float, value: int | None, saturated: bool = False) -> None:
        q = self._data.get(key)
        if q is None:
            q = self._data[key] = deque(maxlen=self.max_samples)
        if q and t <= q[-1].t:
            return
        if len(q) >= 2 and q[-1].value == value == q[-2].value \
                and q[-1].saturated == saturated == q[-2].saturated:
            # A run of equal values keeps only its first and last sample: every delta inside
            # it is zero, so totals are unchanged, and a quiet counter costs two samples
            # whatever the poll interval (which keeps a 12 h window cheap and complete).
            q[-1] = Sample(t, value, saturated)
        else:
            q.append(Sample(t, value, saturated))
        while len(q) > 2 and q[1].t < t - self.horizon:
            q.popleft()

    def record(self, key: Key, t: float, value: int, saturated: bool = False) -> bool:
        """The one way counters enter the history, for every source alike: a saturated value
        is "at least this"; a decrease is a reset (counted, contributes 0). Returns True on a
        reset."""
        reset = not saturated and self.note_reset(key, value)
        self.add(key, t, value, saturated)
        return reset

    def increase(self, key: Key, window: float, now: float) -> tuple[int, float]:
        """Sum of non-negative deltas over the trailing window, and the seconds it covers."""
        q = self._data.get(key)
        if not q or len(q) < 2:
            return 0, 0.0
        total = 0
        start = None
        prev = None
        for s in q:
            if s.t < now - window:
                prev = s
                continue
            if prev is not None:
                if start is None:
                    start = max(prev.t, now - window)
                if prev.value is not None and s.value is not None and not prev.saturated \
                        and s.value >= prev.value:
                    total += s.value - prev.value
            prev = s
        if start is None:
            return 0, 0.0
        return total, q[-1].t - start

    def last_delta(self, key: Key) -> int | None:
        """Increase between the last two samples (None when unknown, 0 on a reset)."""
        q = self._data.get(key)
        if not q or len(q) < 2 or q[-1].value is None or q[-2].value is None or q[-2].saturated:
            return None
        return max(0, q[-1].value - q[-2].value)

    def last_step(self, key: Key) -> tuple[int, float] | None:
        """(increase, seconds) between the last two samples, for a rate; None when unknown (one
        sample, or a step from a saturated or unknown value). A reset contributes 0."""
        q = self._data.get(key)
        if not q or len(q) < 2 or q[-1].value is None or q[-2].value is None or q[-2].saturated:
            return None
        return max(0, q[-1].value - q[-2].value), q[-1].t - q[-2].t

    def has(self, key: Key) -> bool:
        return key in self._data

    def note_reset(self, key: Key, value: int) -> bool:
        q = self._data.get(key)
        if q and q[-1].value is not None and value < q[-1].value:
            self.resets[key] = self.resets.get(key, 0) + 1
            return True
        return False

    def prune(self, keep: set[tuple[str, int]]) -> None:
        """Drop the history of ports that no longer exist (a removed HCA)."""
        for key in [k for k in self._data if (k[0], k[1]) not in keep]:
            del self._data[key]
        for key in [k for k in self.resets if (k[0], k[1]) not in keep]:
            del self.resets[key]

    def to_dict(self) -> dict[str, list[list[float | int | None]]]:
        return {"|".join([k[0], str(k[1]), k[2]]): [[s.t, s.value, 1] if s.saturated else [s.t, s.value] for s in q]
                for k, q in self._data.items()}

    def to_json(self) -> str:
        return json.dumps(self.to_dict())

    @classmethod
    def from_json(cls, text: str, horizon: float = 43200.0) -> CounterHistory:
        return cls.from_dict(json.loads(text), horizon)

    @classmethod
    def from_dict(cls, doc: dict[str, list[list[Any]]], horizon: float = 43200.0) -> CounterHistory:
        h = cls(horizon)
        for k, samples in doc.items():
            dev, port, counter = k.rsplit("|", 2)
            for t, v, *sat in samples:
                h.add((dev, int(port), counter), float(t), None if v is None else int(v), bool(sat and sat[0]))
        return h

    def save(self, path: str) -> None:
        """Atomic write (temp file + rename)."""
        write_atomic(path, self.to_json().encode(), 0o600)
