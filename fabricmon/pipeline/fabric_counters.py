"""The fabric's counters (pipeline.fabric's step 2): every counter of a new sweep enters a CounterHistory
through the one CounterIntake (width, wrap, saturation, reset and first baseline: model.history), keyed
(switch_guid, port, counter); transmit/receive and pause-frame rates from the last step. Which checked
counters the sweep being judged yielded, and whether one of them saturates, say which counter checks run
(checks.link_errors.counter_reports): nothing of an earlier sweep stands in for them."""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import structlog

from fabricmon.model import ibspec
from fabricmon.checks.link_errors import CHECKED_COUNTERS
from fabricmon.checks.shape import counters
from fabricmon.model.fabric import FabricPort, FabricSection, SweepData
from fabricmon.model.history import PLAIN, CounterHistory, CounterIntake, ib_rule

log = structlog.get_logger("fabricmon.fabric")

RATE_COUNTERS = ("transmit_bytes", "receive_bytes")


class SweepCounters:
    """The counter histories and rates of the switch ports, between builds."""

    def __init__(self, horizon: float):
        # Error counters: the node daemon's windows. A counter enters it once it is non-zero
        # (preceded by a 0 at the previous sweep), so a healthy fabric keeps no history at all.
        self.history = CounterHistory(horizon=horizon)
        self.rates = CounterHistory(horizon=3600.0, max_samples=2)
        self.intake = CounterIntake(self.history, sparse=True)
        self.rate_intake = CounterIntake(self.rates)
        # the last sweep asked about and what it makes present: the checked counters it yielded
        # (checks.shape.counters), saturating_counters where one of them saturates
        self._read: tuple[SweepData | None, frozenset[str]] = (None, frozenset())

    def present(self, sweep: SweepData | None) -> frozenset[str]:
        """What this sweep's counters make present (nothing without a sweep)."""
        if sweep is None:
            return frozenset()
        if self._read[0] is not sweep:
            self._read = (sweep, self._present(sweep))
        return self._read[1]

    @staticmethod
    def _present(sweep: SweepData) -> frozenset[str]:
        read: set[str] = set()
        unseen = set(CHECKED_COUNTERS)
        for vals in sweep.ports.values():
            if not unseen:
                break
            if not unseen.isdisjoint(vals):
                read |= unseen.intersection(vals)
                unseen.difference_update(vals)
        out = set(counters(read))
        if any(ib_rule(n, sweep.bits.get(n), n in sweep.wrapping).saturates for n in read):
            out.add("saturating_counters")
        return frozenset(out)

    def record(self, sweep: SweepData, t: float, keep: set[tuple[str, int]]) -> None:
        """A new sweep's counters through the one intake: the error counters into the history (sparse:
        a quiet counter keeps none), transmit/receive and pause frames into the rates."""
        rules = {name: ib_rule(name, bits, name in sweep.wrapping) for name, bits in sweep.bits.items()}
        rates = {name: rules.get(name, PLAIN) for name in RATE_COUNTERS}
        pause = [(key, {f"pause:{prio}:{direction}": v for (prio, direction), v in vals.items()})
                 for key, vals in sweep.pause.items() if key in keep]
        # each switch's pause frames and traffic at the time it was read (SweepData.pause_read_ago,
        # read_ago), so a late answer is no traffic
        for at, group in _by_read_time(pause, t, {**sweep.read_ago, **sweep.pause_read_ago}):
            self.rate_intake.take_ports(group, at, {}, stream="pause")
        ports = [(key, vals) for key, vals in sweep.ports.items() if key in keep]
        for at, group in _by_read_time(ports, t, sweep.read_ago):
            self.rate_intake.take_ports(group, at, rates, only=RATE_COUNTERS)
        for key, name in self.intake.take_ports(ports, t, rules, only=CHECKED_COUNTERS):
            log.info("counter decreased (reset)", switch_guid=key[0], port=key[1], counter=name)
        self.intake.prune(keep)
        self.rate_intake.prune(keep)

    def fill(self, sweep: SweepData, sec: FabricSection) -> None:
        """The sweep's counters, pause frames and rates on the section's ports."""
        p: FabricPort | None
        for key, pause in sweep.pause.items():
            p = sec.ports.get(key)
            if p is None:
                continue
            p.pause = dict(pause)
            rates = {}
            for pd in pause:
                step = self.rates.last_step((key[0], key[1], f"pause:{pd[0]}:{pd[1]}"))
                if step is not None and step[1] > 0:
                    rates[pd] = step[0] / step[1]
            p.pause_rates = rates
        tx_scale, rx_scale = (sweep.scale.get(n, ibspec.COUNTER_BY_NAME[n].scale) for n in RATE_COUNTERS)
        ports = [(p, vals) for key, vals in sweep.ports.items() if (p := sec.ports.get(key)) is not None]
        keys = [(p.guid, p.port) for p, _ in ports]
        tx = self.rates.last_rates(keys, "transmit_bytes", tx_scale)
        rx = self.rates.last_rates(keys, "receive_bytes", rx_scale)
        for (p, vals), t, r in zip(ports, tx, rx):
            p.counters, p.tx_rate, p.rx_rate = vals, t, r


def _by_read_time(items: Sequence[tuple[tuple[str, int], Mapping[str, int]]], t: float, ago: Mapping[str, float]
                  ) -> list[tuple[float, list[tuple[tuple[str, int], Mapping[str, int]]]]]:
    """Ports' values grouped by when their switch was read: `t` less the switch's seconds ago."""
    if not ago:
        return [(t, list(items))] if items else []
    by_time: dict[float, list[tuple[tuple[str, int], Mapping[str, int]]]] = {}
    for key, vals in items:
        by_time.setdefault(t - ago.get(key[0], 0.0), []).append((key, vals))
    return list(by_time.items())


__all__ = ["RATE_COUNTERS", "SweepCounters"]
