"""ECMP imbalance: for every switch, the transmit rates of its `up` ports (for the top level,
its `down` ports towards the level below) are one group. The imbalance is max/mean, with the
coefficient of variation beside it. A group is flagged when max/mean exceeds the threshold
(and, if set, the CV its own) for N consecutive sweeps, and only while the group's mean
utilisation is above a floor of link rate, so an idle fabric never pages. Down and degraded
links are left out of the group (and reported by degraded_link).

Records in (FabricPort rates, levels), groups and findings out; nothing here parses or fetches."""

from __future__ import annotations

import math
import statistics
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from fabricmon.checks import OK, WARNING, Finding
from fabricmon.checks.port_text import port_ranges
from fabricmon.checks.shape import Outcome, report
from fabricmon.model.fabric import EcmpGroup, EcmpGroups, FabricPort, SwitchNode
from fabricmon.schema import Schema, integer, number

if TYPE_CHECKING:
    from fabricmon.checks.fabric_inputs import FabricInputs

CHECK = "ecmp"
NEEDS = ("SweepData",)            # a fresh sweep (its rates; the link check's verdicts of its ports)


# --- settings: `fabric.thresholds` (fabricmon.schema), composed by fabricmon/config/fabric.py -----

@dataclass(frozen=True, slots=True)
class FabricThresholds:
    """ECMP imbalance judgement: operational defaults, not standards (docs/fabric-collector.md)."""
    ecmp_ratio: float = 1.2              # max/mean transmit rate of a group
    ecmp_cv: float | None = None         # coefficient of variation; None: not used to flag
    consecutive_sweeps: int = 3          # over the threshold this many sweeps in a row
    utilisation_floor: float = 0.3       # judge a group only while its mean is above this share of link rate


_D_THRESHOLDS = FabricThresholds()
THRESHOLDS: Schema[FabricThresholds] = Schema(fields=(
    number("ecmp_ratio", _D_THRESHOLDS.ecmp_ratio, "max/mean transmit rate of a group above which it is over", lo=1.0),
    number("ecmp_cv", _D_THRESHOLDS.ecmp_cv,
           "coefficient of variation above which a group is over too (e.g. `0.2`); `null`: not used",
           lo=0, null=True),
    integer("consecutive_sweeps", _D_THRESHOLDS.consecutive_sweeps,
            "sweeps in a row over the threshold before a group is flagged", lo=1),
    number("utilisation_floor", _D_THRESHOLDS.utilisation_floor,
           "judge a group only while its mean is above this share of link rate", lo=0, hi=1,
           hi_reason="a share of link rate must be"),
), build=lambda v, key, ctx: FabricThresholds(**v))


def _remote(p: FabricPort) -> str:
    return p.link.remote_name if p.link is not None else "?"


def _gbps(bps: float) -> str:
    return f"{bps * 8 / 1e9:.1f} Gb/s"


def _pstdev(values: list[float], mean: float) -> float:
    """The population standard deviation of `values` around their mean, in floats (statistics.pstdev computes
    it in exact fractions: a tenth of a SuperPOD-size fabric's build for 650 groups of 20 rates)."""
    return math.sqrt(math.fsum((v - mean) ** 2 for v in values) / len(values))


def groups(ports: Mapping[tuple[str, int], FabricPort], switches: Mapping[str, SwitchNode],
           levels: Mapping[str, int]) -> list[EcmpGroup]:
    """The groups of every switch in `switches` (rates filled, judgement not yet)."""
    top = max(levels.values(), default=0)
    by_switch: dict[str, list[FabricPort]] = {}
    for (guid, _), p in ports.items():
        if guid in switches:
            by_switch.setdefault(guid, []).append(p)
    out = []
    for guid in sorted(by_switch):
        direction = "down" if levels.get(guid, 0) == top and top > 1 else "up"
        members = [p for p in by_switch[guid] if p.role == direction and p.link is not None]
        if len(members) < 2:
            continue
        # judged among links of one class: the most common rate class of the group's up links (a
        # 4X EDR uplink beside 4X HDR ones carries a different share by design); the others are excluded
        classes: dict[str, int] = {}
        for p in members:
            if p.up and p.link is not None:
                c = p.link.rate_class
                classes[c] = classes.get(c, 0) + 1
        main = max(classes, key=classes.__getitem__) if classes else None     # the first seen among the most
        ok = [p for p in members if p.up and not any(p.degraded.values())
              and (main is None or p.link is None or p.link.rate_class == main)]
        ok_ports = {p.port for p in ok}     # by port number: comparing whole records costs O(n^2) field compares
        g = EcmpGroup(guid=guid, switch=switches[guid].name, direction=direction,
                      ports=sorted(ok_ports),
                      excluded=sorted(p.port for p in members if p.port not in ok_ports))
        rates = {p.port: r for p in ok if (r := p.tx_rate) is not None}
        if len(ok) >= 2 and len(rates) == len(ok):
            g.rates = rates
            mean = statistics.fmean(rates.values())
            link = statistics.fmean(p.rate_bps or 0.0 for p in ok)
            g.utilisation = mean / link if link else None
            if mean > 0:
                g.ratio = max(rates.values()) / mean
                g.cv = _pstdev(list(rates.values()), mean) / mean
            else:
                g.ratio, g.cv = 1.0, 0.0
        out.append(g)
    return out


def judge(gs: list[EcmpGroup], previous: Mapping[tuple[str, str], int], th: FabricThresholds,
          new_sweep: bool, ports: Mapping[tuple[str, int], FabricPort]) -> tuple[list[Finding], dict[tuple[str, str], int]]:
    """Counts consecutive sweeps over the threshold (only a new sweep advances the count) and
    flags groups; returns the findings (non-OK only) and the new counts."""
    counts: dict[tuple[str, str], int] = {}
    findings = []
    for g in gs:
        key = (g.guid, g.direction)
        g.judged = g.ratio is not None and g.utilisation is not None and g.utilisation >= th.utilisation_floor
        over = g.judged and g.ratio is not None and (
            g.ratio > th.ecmp_ratio or (th.ecmp_cv is not None and (g.cv or 0) > th.ecmp_cv))
        n = previous.get(key, 0)
        if new_sweep:
            n = n + 1 if over else 0
        elif not over:
            n = 0
        counts[key] = n
        g.over = n
        g.imbalanced = over and n >= th.consecutive_sweeps
        if not g.imbalanced:
            continue
        mean = sum(g.rates.values()) / len(g.rates)
        hot = max(g.rates, key=lambda p: g.rates[p])
        g.hot = sorted({hot} | {p for p, r in g.rates.items() if r > mean * th.ecmp_ratio})
        low = min(g.rates.values())
        cold = sorted(p for p, r in g.rates.items() if r <= low * 1.1 + mean * 0.01 and p != hot)

        def label(port: int, guid: str = g.guid) -> str:
            return ports[(guid, port)].label if (guid, port) in ports else str(port)

        def remote(port: int, guid: str = g.guid) -> str:
            link = ports[(guid, port)].link
            return f'"{link.remote_name}"[{link.remote_port_label}]' if link else "?"
        # every port over the threshold is named, hottest first (two equally hot ports of a
        # polarised group are both the fault: naming one, then the other next sweep, misleads)
        over_ports = sorted(g.hot, key=lambda p: (-g.rates[p], p))
        if len(over_ports) == 1:
            hot_txt = (f"port {label(hot)} to {remote(hot)} carries {g.rates[hot] / mean:.1f}x the mean "
                       f"({_gbps(g.rates[hot])}, mean {_gbps(mean)}")
        else:
            each = "; ".join(f"port {label(p)} to {remote(p)} at {_gbps(g.rates[p])}, {g.rates[p] / mean:.1f}x"
                             for p in over_ports)
            hot_txt = (f"ports {port_ranges(sorted(over_ports), label)} carry over {th.ecmp_ratio:g}x the mean "
                       f"({each}; mean {_gbps(mean)}")
        cold_txt = "; ".join(
            f'port {label(c)} to "{_remote(ports[(g.guid, c)])}" at {_gbps(g.rates[c])}' for c in cold[:4])
        word = "idle" if low <= mean * 0.05 else "coldest"
        idle = f"{word}: port{'s' if len(cold) > 1 else ''} {port_ranges(cold, label)} ({cold_txt})"
        excl = f"; left out (down/degraded): ports {port_ranges(g.excluded, label)}" if g.excluded else ""
        what = "uplinks" if g.direction == "up" else "downlinks"
        findings.append(Finding(     # about the switch's group (the message names the ports): no port
            CHECK, g.guid, None, WARNING,
            f"{g.switch} {what}: {hot_txt}, max/mean {g.ratio:.2f}, CV {g.cv:.2f}, "
            f"{n} sweeps); {idle}{excl}: check ECMP hashing / adaptive routing on {g.switch}"))
    return [f for f in findings if f.status != OK], counts


@dataclass(slots=True)
class EcmpState:
    counts: dict[tuple[str, str], int] = field(default_factory=dict)    # sweeps in a row over, per group


class Ecmp:
    """ecmp (checks.shape): every switch's uplink group (its downlinks at the top level) judged over
    consecutive sweeps; the groups go into the section."""
    reports = (report(CHECK, *NEEDS),)

    def __init__(self, settings: FabricThresholds):
        self.settings = settings
        self.state = EcmpState()

    def run(self, inputs: FabricInputs) -> Outcome:
        sec = inputs.sec
        gs = groups(sec.ports, sec.switches, inputs.topo.levels)
        findings, self.state.counts = judge(gs, self.state.counts, self.settings, inputs.new_sweep, sec.ports)
        # judged: the switches with a group whose rates the last two sweeps gave (a first sweep has none)
        judged = tuple(dict.fromkeys(g.guid for g in gs if g.rates))
        return Outcome(findings, judged, EcmpGroups(tuple(gs)))


__all__ = ["CHECK", "NEEDS", "Ecmp", "EcmpState", "groups", "judge"]
