"""Counter history: the samples that rate-based checks read deltas from.

Rules (the lessons of the exporters we compete with):
- a saturated counter is "unknown, at least max": the step onto the maximum counts as a lower
  bound (max - last value, so a 254 -> 255 LinkDowned step is still a flap), and every step
  from a saturated sample is unknown: never a rate;
- a decrease is a reset (or a counter jumping backwards): it contributes 0, never a negative
  increase, and the new value becomes the baseline;
- the history is bounded in time, and can be saved to disk so that `fabricmon check` run by
  cron or Slurm keeps rates between runs.

CounterIntake is the one way counters enter a history (node, RoCE and fabric alike): width, wrap,
saturation, reset and first baseline, each written once.
"""

from __future__ import annotations

import functools
import json
from collections.abc import Callable, Collection, Iterable, Mapping
from typing import Any
from dataclasses import dataclass

from fabricmon.model import ibspec
from fabricmon.fsutil import write_atomic
from fabricmon.model.compact import values_getter

Key = tuple[str, int, str]     # (device, port, counter)


@dataclass(slots=True)
class Sample:
    t: float
    value: int | None          # None: unknown
    saturated: bool = False    # value is the counter's maximum: "at least this"


def _delta(a: Sample, b: Sample) -> int | None:
    """The one delta rule: what a counter counted from sample a to the next, b. None when that is unknown
    (either value unknown, or a saturated: "at least its maximum" has no step from it); a decrease is a
    reset and counts 0."""
    if a.value is None or b.value is None or a.saturated:
        return None
    return b.value - a.value if b.value >= a.value else 0


def _covered(q: list[Sample] | None, window: float, now: float) -> float:
    """The seconds of the trailing window [now - window, now] that samples `q` cover: from the window's start (or
    the oldest sample, when it is younger) to the newest sample; 0 with fewer than two samples, or none in it."""
    if not q or len(q) < 2 or q[-1].t < now - window:
        return 0.0
    return q[-1].t - max(q[0].t, now - window)


def _last_step(q: list[Sample] | None) -> tuple[int, float] | None:
    """CounterHistory.last_step of a counter's samples (None: none kept)."""
    if not q or len(q) < 2:
        return None
    a, b = q[-2], q[-1]
    d = _delta(a, b)
    return None if d is None else (d, b.t - a.t)


class CounterHistory:
    def __init__(self, horizon: float = 43200.0, max_samples: int = 4096):
        self.horizon = horizon
        self.max_samples = max_samples
        # each counter's samples, oldest first: a plain list (72 bytes for the rate history's two samples, where
        # a deque takes 760 whatever it holds: at 26,000 switch ports' transmit and receive, about 35 MB)
        self._data: dict[Key, list[Sample]] = {}
        self.resets: dict[Key, int] = {}
        # (device, port) -> how many of its counters have a history: made on the first has_port() (a sparse
        # intake's question), then kept in step by add() and prune()
        self._ports: dict[tuple[str, int], int] | None = None

    def add(self, key: Key, t: float, value: int | None, saturated: bool = False) -> None:
        self._put(key, self._data.get(key), t, value, saturated)

    def _put(self, key: Key, q: list[Sample] | None, t: float, value: int | None, saturated: bool) -> None:
        """add() with the key's samples looked up already (None: none yet)."""
        if q is None:
            q = self._data[key] = []
            if self._ports is not None:
                pk = (key[0], key[1])
                self._ports[pk] = self._ports.get(pk, 0) + 1
        last = q[-1] if q else None
        if last is not None and t <= last.t:
            return
        if last is not None and len(q) >= 2 and last.value == value == q[-2].value \
                and last.saturated == saturated == q[-2].saturated:
            # A run of equal values keeps only its first and last sample: every delta inside
            # it is zero, so totals are unchanged, and a quiet counter costs two samples
            # whatever the poll interval (which keeps a 12 h window cheap and complete).
            # The run's last sample moves to t (in place: no sample is handed out).
            last.t = t
        else:
            q.append(Sample(t, value, saturated))
            if len(q) > self.max_samples:
                del q[0]
        while len(q) > 2 and q[1].t < t - self.horizon:
            del q[0]

    def record(self, key: Key, t: float, value: int, saturated: bool = False) -> bool:
        """The one way counters enter the history, for every source alike: a saturated value
        is "at least this"; a decrease is a reset (counted, contributes 0). Returns True on a
        reset."""
        q = self._data.get(key)         # looked up once for both (a sweep records tens of thousands)
        last = q[-1] if q else None
        reset = not saturated and last is not None and last.value is not None and value < last.value
        if reset:
            self.resets[key] = self.resets.get(key, 0) + 1
        self._put(key, q, t, value, saturated)
        return reset

    def increase(self, key: Key, window: float, now: float) -> tuple[int, float]:
        """Sum of non-negative deltas over the trailing window, and the seconds it covers (_covered)."""
        q = self._data.get(key)
        if not q or len(q) < 2:
            return 0, 0.0
        total = 0
        prev = None
        for s in q:
            if s.t < now - window:
                prev = s
                continue
            if prev is not None:
                total += _delta(prev, s) or 0
            prev = s
        return total, _covered(q, window, now)

    def covered(self, key: Key, window: float, now: float) -> float:
        """The seconds of the trailing window the key's samples cover (increase's second value) without the sum."""
        return _covered(self._data.get(key), window, now)

    def last_step(self, key: Key) -> tuple[int, float] | None:
        """(increase, seconds) between the last two samples, for a rate; None when unknown (one
        sample, or a step from a saturated or unknown value). A reset contributes 0."""
        return _last_step(self._data.get(key))

    def last_rates(self, ports: Iterable[tuple[str, int]], name: str, scale: float = 1.0) -> list[float | None]:
        """last_step as a rate (increase x scale / seconds) of `name` on each of `ports`, in their order (None where
        unknown or no time passed): a fabric's transmit and receive rates, 26,000 ports a sweep, in one call."""
        data, step = self._data.get, _last_step
        out: list[float | None] = []
        append = out.append
        for dev, port in ports:
            st = step(data((dev, port, name)))
            append(None if st is None or st[1] <= 0 else st[0] * scale / st[1])
        return out

    def has(self, key: Key) -> bool:
        return key in self._data

    def has_port(self, device: str, port: int) -> bool:
        """Whether one of the port's counters has a history."""
        if self._ports is None:
            self._ports = {}
            for k in self._data:
                pk = (k[0], k[1])
                self._ports[pk] = self._ports.get(pk, 0) + 1
        return (device, port) in self._ports

    def ports(self, names: Iterable[str]) -> set[tuple[str, int]]:
        """The (device, port) pairs holding a history of one of `names` (one pass over what is kept, which a
        sparse intake keeps small, rather than one lookup per port and name)."""
        wanted = set(names)
        return {(k[0], k[1]) for k in self._data if k[2] in wanted}

    def marks(self, device: str, port: int, names: Iterable[str]) -> tuple[tuple[int, int | None], ...]:
        """What changes when a sample that moves a sum enters or leaves `names`' histories on the port: each
        one's sample count and newest value (a run of equal values keeps its count: only its last sample's
        time moves). Two equal marks mean the same samples but for that time; the window sums can then only
        have fallen since."""
        data = self._data
        out = []
        for n in names:
            q = data.get((device, port, n))
            out.append((len(q), q[-1].value) if q else (0, None))
        return tuple(out)

    def prune(self, keep: set[tuple[str, int]]) -> None:
        """Drop the history of ports that no longer exist (a removed HCA)."""
        for key in [k for k in self._data if (k[0], k[1]) not in keep]:
            del self._data[key]
        if self._ports is not None:
            for pk in [pk for pk in self._ports if pk not in keep]:
                del self._ports[pk]
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


@dataclass(frozen=True, slots=True)
class CounterRule:
    """What a counter's raw values mean at its width: it saturates (stops at 2^bits - 1: "at least
    this"), wraps (rolls over to 0 at 2^bits: the intake adds 2^bits per wrap), or neither (64-bit
    counters, which neither reach their maximum nor roll over in a machine's lifetime)."""
    bits: int = 64
    saturates: bool = False
    wraps: bool = False

    def at_max(self, raw: int) -> bool:
        """The raw value is the saturation point: "unknown, at least this"."""
        return self.saturates and raw >= (1 << self.bits) - 1


PLAIN = CounterRule()

# ibspec's counter order: the order a sample's counters are taken in (a packed record's, model.compact)
_ORDER: tuple[str, ...] = tuple(c.name for c in ibspec.COUNTERS)
_RANK = frozenset(_ORDER)


@functools.lru_cache(maxsize=1024)
def ib_rule(name: str, bits: int | None = None, wraps: bool = False) -> CounterRule:
    """An InfiniBand (or ifTable) counter's rule: its width as read (`bits`, else the spec's), wrapping
    where the reader says so (Ethernet's 32-bit ifTable counters), else saturating where the spec says
    the counter saturates (the error and congestion counters)."""
    spec = ibspec.COUNTER_BY_NAME.get(name)
    width = bits or (spec.bits if spec is not None else 64)
    return CounterRule(width, saturates=not wraps and name in ibspec.SATURABLE, wraps=wraps)


def saturation(values: Mapping[str, int], bits: Mapping[str, int], wrapping: Collection[str] = ()) -> dict[str, bool]:
    """Which of a port's counters that saturate sit at their maximum, by the rule the intake records them
    with (ib_rule's CounterRule.at_max): one entry per counter read that saturates (a wrapping one never does)."""
    out = {}
    for n in ibspec.SATURABLE:              # the spec's order: how the exposition lists them
        v = values.get(n)
        if v is not None:
            rule = ib_rule(n, bits.get(n), n in wrapping)
            if rule.saturates:
                out[n] = rule.at_max(v)
    return out


class CounterIntake:
    """The one way counters enter a CounterHistory, for the node, RoCE and fabric alike. Per counter:

    - width and wrap: a wrapping counter's raw value plus 2^bits per wrap seen (a drop from the upper
      half of its width to a value a short step past 0 is a wrap; any other drop is a reset);
    - saturation: a raw value at the maximum of a saturating counter is recorded as "at least this"
      (CounterHistory: a lower bound, never a rate from it);
    - reset: a decrease is a reset (counted by the history, contributes 0, the new value is the baseline);
    - first baseline: a port's first sample is only a baseline (no increase from it). A `sparse` intake
      (the fabric: thousands of ports whose error counters stay 0) keeps no history for a counter until
      it is non-zero; a counter first seen non-zero on a port sampled before was 0 at that port's
      previous sample, so its increase counts from there.

    Counters are never reset on the device: only Get() is ever sent, and nothing here writes."""

    def __init__(self, history: CounterHistory, sparse: bool = False) -> None:
        self.history = history
        self.sparse = sparse
        self._wrap: dict[Key, tuple[int, int]] = {}            # key -> (last raw value, offset)
        self._times: dict[tuple[str, int, str], float] = {}     # (device, port, stream) -> its last sample time
        # the ports kept at the last prune, while no port entered since (None: one did): a prune with the same
        # ports has nothing to drop (a fabric prunes every sweep, 26,000 ports whose set rarely changes)
        self._pruned: frozenset[tuple[str, int]] | None = None

    def take_port(self, port: tuple[str, int], t: float, values: Mapping[str, int],
                  rules: Mapping[str, CounterRule], only: Collection[str] | None = None, stream: str = "") -> list[str]:
        """One sample at `t` of a port's counters (those in `only`, if given; a counter without a rule
        is PLAIN), keyed (device, port, name). A sample at or before the port's last one of this
        `stream` (the same source's data again) is skipped. Returns the counters that reset."""
        return [name for _, name in self.take_ports([(port, values)], t, rules, only, stream)]

    def take_ports(self, ports: Iterable[tuple[tuple[str, int], Mapping[str, int]]], t: float,
                   rules: Mapping[str, CounterRule], only: Collection[str] | None = None, stream: str = ""
                   ) -> list[tuple[tuple[str, int], str]]:
        """take_port for many ports at `t` with the same rules (a fabric sweep: tens of thousands of switch
        ports), the rules looked up once. Returns the (port, counter) pairs that reset. A sparse intake
        passes over a port whose counters in `only` are all 0 and none of which has a history (a healthy
        port's error counters) without looking at them one by one: what take_port does for each of them
        (nothing kept) at once; counters that wrap are always taken one by one (a raw 0 may be a wrap)."""
        history, sparse, wrap, times = self.history, self.sparse, self._wrap, self._times
        resets: list[tuple[tuple[str, int], str]] = []
        names: tuple[str, ...] | None = None
        pick: Callable[[Mapping[str, int]], tuple[int | None, ...]] = values_getter(())
        if only is not None:
            names = tuple(n for n in _ORDER if n in only) + tuple(sorted(n for n in only if n not in _RANK))
            pick = values_getter(names)
        plan: dict[str, tuple[CounterRule, int]] = {}     # name -> (its rule, its saturation point or -1)
        skim = sparse and names is not None and not any(rules.get(n, PLAIN).wraps for n in names)
        has_port, add, record = history.has_port, history.add, history.record
        for port, values in ports:
            dev, num = port
            tkey = (dev, num, stream)
            prev = times.get(tkey)
            if prev is None:
                self._pruned = None             # a port entered: the next prune looks
            elif t <= prev:
                continue
            times[tkey] = t
            if names is not None:
                raws = pick(values)
                if skim and not any(raws) and not has_port(dev, num):
                    continue            # every counter 0, none kept: nothing to keep (take_port's sparse rule)
                pairs: Iterable[tuple[str, int | None]] = zip(names, raws)
            else:
                pairs = values.items()
            for name, raw in pairs:
                if raw is None:
                    continue
                rp = plan.get(name)
                if rp is None:
                    rule = rules.get(name, PLAIN)
                    rp = plan[name] = (rule, (1 << rule.bits) - 1 if rule.saturates else -1)
                rule, top_sat = rp
                key = (dev, num, name)
                value = raw
                if rule.wraps:
                    last, offset = wrap.get(key, (raw, 0))
                    if raw < last:
                        top = 1 << rule.bits
                        offset = offset + top if top // 2 <= last < top and raw + top - last < top // 2 else 0
                    wrap[key] = (raw, offset)
                    value = raw + offset
                sat = top_sat >= 0 and raw >= top_sat
                if sparse and not history.has(key):
                    if value == 0 and not sat:
                        continue                # quiet: no history needed (its increase is 0 either way)
                    if prev is not None:
                        add(key, prev, 0)       # it was 0 at this port's previous sample
                if record(key, t, value, saturated=sat):
                    resets.append((port, name))
        return resets

    def prune(self, keep: set[tuple[str, int]]) -> None:
        """Forget the ports that no longer exist (a removed HCA, a switch gone from the topology)."""
        if self._pruned is not None and self._pruned == keep:
            return                              # the same ports as the last prune, and none entered since
        self.history.prune(keep)
        for k in [k for k in self._wrap if (k[0], k[1]) not in keep]:
            del self._wrap[k]
        for t in [t for t in self._times if (t[0], t[1]) not in keep]:
            del self._times[t]
        self._pruned = frozenset(keep)
