"""Compact records for the tens of thousands of switch ports of a fabric (issue 40: bytes per port).

PortCounters: one port's counters as a tuple in ibspec.COUNTERS order behind a read-only mapping
(about 0.25 KB against a dict's 1.2 KB for 22 counters).

LastSteps: the last step of many counters, what a rate over the last two sweeps needs and no more.
The fabric collector keeps a transmit and a receive rate (and pause frame rates) for every switch
port: tens of thousands of counters. A CounterHistory keeps a deque of Sample objects per counter
(about 1 KB each even at two samples); this keeps one tuple `(t_before, v_before, t_last, v_last)`
per counter (about 0.2 KB) with CounterHistory's rules for a step: a decrease is a reset and
contributes 0, a sample not newer than the last is ignored.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping

from fabricmon import ibspec
from fabricmon.model.history import Key

_NAMES: tuple[str, ...] = tuple(c.name for c in ibspec.COUNTERS)
_INDEX: dict[str, int] = {n: i for i, n in enumerate(_NAMES)}


class PortCounters(Mapping[str, int]):
    """A port's counters (name -> raw value), read-only, packed in one tuple (None: not read)."""

    __slots__ = ("_v",)

    def __init__(self, values: tuple[int | None, ...]) -> None:
        self._v = values

    @classmethod
    def pack(cls, counters: Mapping[str, int]) -> Mapping[str, int]:
        """The packed form of `counters`, or `counters` itself when it names a counter ibspec does not."""
        v: list[int | None] = [None] * len(_NAMES)
        for k, x in counters.items():
            i = _INDEX.get(k)
            if i is None:
                return counters
            v[i] = x
        return cls(tuple(v))

    def __getitem__(self, key: str) -> int:
        x = self._v[_INDEX[key]]
        if x is None:
            raise KeyError(key)
        return x

    def get(self, key: str, default: int | None = None) -> int | None:  # type: ignore[override]
        i = _INDEX.get(key)
        if i is None:
            return default
        x = self._v[i]
        return default if x is None else x

    def __contains__(self, key: object) -> bool:
        i = _INDEX.get(key) if isinstance(key, str) else None
        return i is not None and self._v[i] is not None

    def __iter__(self) -> Iterator[str]:
        return (n for n, x in zip(_NAMES, self._v) if x is not None)

    def __len__(self) -> int:
        return len(self._v) - self._v.count(None)

    def items(self) -> list[tuple[str, int]]:  # type: ignore[override]
        """(name, value) of every counter read, in ibspec.COUNTERS order (a list: no view over a tuple)."""
        return [(n, x) for n, x in zip(_NAMES, self._v) if x is not None]

    def keys(self) -> list[str]:  # type: ignore[override]
        return [n for n, x in zip(_NAMES, self._v) if x is not None]

    def values(self) -> list[int]:  # type: ignore[override]
        return [x for x in self._v if x is not None]

    def __repr__(self) -> str:
        return f"PortCounters({dict(self.items())!r})"


class LastSteps:
    """(increase, seconds) between the last two samples of each counter."""

    __slots__ = ("_data",)

    def __init__(self) -> None:
        # key -> (t_before, v_before, t_last, v_last); t_before is None after the first sample
        self._data: dict[Key, tuple[float | None, int, float, int]] = {}

    def __len__(self) -> int:
        return len(self._data)

    def record(self, key: Key, t: float, value: int) -> bool:
        """Add a sample; True when it is below the last one (a reset: the step contributes 0)."""
        old = self._data.get(key)
        if old is None:
            self._data[key] = (None, value, t, value)
            return False
        if t <= old[2]:
            return False
        self._data[key] = (old[2], old[3], t, value)
        return value < old[3]

    def last_step(self, key: Key) -> tuple[int, float] | None:
        """(increase, seconds) between the last two samples; None after one sample."""
        s = self._data.get(key)
        if s is None or s[0] is None:
            return None
        return max(0, s[3] - s[1]), s[2] - s[0]

    def prune(self, keep: set[tuple[str, int]]) -> None:
        """Drop the counters of ports that no longer exist."""
        for key in [k for k in self._data if (k[0], k[1]) not in keep]:
            del self._data[key]


__all__ = ["LastSteps", "PortCounters"]
