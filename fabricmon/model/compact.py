"""Compact records for the tens of thousands of switch ports of a fabric (issue 40: bytes per port).

PortCounters: one port's counters as a tuple in ibspec.COUNTERS order behind a read-only mapping
(about 0.25 KB against a dict's 1.2 KB for 22 counters).
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Iterator, Mapping
from operator import itemgetter

from fabricmon.model import ibspec

COUNTER_NAMES: tuple[str, ...] = tuple(c.name for c in ibspec.COUNTERS)     # a PortCounters' slots, in order
_NAMES = COUNTER_NAMES
_INDEX: dict[str, int] = {n: i for i, n in enumerate(_NAMES)}


class PortCounters(Mapping[str, int]):
    """A port's counters (name -> raw value), read-only, packed in one tuple (None: not read)."""

    __slots__ = ("raw",)

    def __init__(self, values: tuple[int | None, ...]) -> None:
        self.raw = values       # the values in COUNTER_NAMES order, None where not read (do not change it)

    @classmethod
    def pack(cls, counters: Mapping[str, int]) -> Mapping[str, int]:
        """The packed form of `counters` (itself when packed already), or `counters` itself when it names a
        counter ibspec does not."""
        if isinstance(counters, PortCounters):
            return counters
        v: list[int | None] = [None] * len(_NAMES)
        for k, x in counters.items():
            i = _INDEX.get(k)
            if i is None:
                return counters
            v[i] = x
        return cls(tuple(v))

    def __getitem__(self, key: str) -> int:
        x = self.raw[_INDEX[key]]
        if x is None:
            raise KeyError(key)
        return x

    def get(self, key: str, default: int | None = None) -> int | None:  # type: ignore[override]
        i = _INDEX.get(key)
        if i is None:
            return default
        x = self.raw[i]
        return default if x is None else x

    def __contains__(self, key: object) -> bool:
        i = _INDEX.get(key) if isinstance(key, str) else None
        return i is not None and self.raw[i] is not None

    def __iter__(self) -> Iterator[str]:
        return (n for n, x in zip(_NAMES, self.raw) if x is not None)

    def __len__(self) -> int:
        return len(self.raw) - self.raw.count(None)

    def items(self) -> list[tuple[str, int]]:  # type: ignore[override]
        """(name, value) of every counter read, in ibspec.COUNTERS order (a list: no view over a tuple)."""
        return [(n, x) for n, x in zip(_NAMES, self.raw) if x is not None]

    def keys(self) -> list[str]:  # type: ignore[override]
        return [n for n, x in zip(_NAMES, self.raw) if x is not None]

    def values(self) -> list[int]:  # type: ignore[override]
        return [x for x in self.raw if x is not None]

    def __repr__(self) -> str:
        return f"PortCounters({dict(self.items())!r})"


@functools.lru_cache(maxsize=64)
def values_getter(names: tuple[str, ...]) -> Callable[[Mapping[str, int]], tuple[int | None, ...]]:
    """A function giving the values of `names` of a counter record as one tuple (None: not read): a packed
    record's in one step (the counter intake's question of every switch port), any other mapping's one by one."""
    at = [_INDEX.get(n) for n in names]
    if None in at or not names:
        return lambda rec: tuple(rec.get(n) for n in names)
    idx = [i for i in at if i is not None]
    one = itemgetter(*idx)
    packed: Callable[[tuple[int | None, ...]], tuple[int | None, ...]] = \
        (lambda v: (v[idx[0]],)) if len(idx) == 1 else one   # itemgetter of one index gives the value alone

    def get(rec: Mapping[str, int]) -> tuple[int | None, ...]:
        if type(rec) is PortCounters:
            return packed(rec.raw)
        return tuple(rec.get(n) for n in names)
    return get


__all__ = ["COUNTER_NAMES", "PortCounters", "values_getter"]
