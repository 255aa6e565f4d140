"""Optics: the light a transceiver sees, judged the same way on a node (ethtool -m) and on a switch
(ENTITY-SENSOR-MIB), from model.optics records. Four checks, one Finding each per port:

- `optics_thresholds`: a reading beyond the module's (or switch's) alarm threshold is CRITICAL,
  beyond its warning threshold WARNING; a module that reports no thresholds is judged by the
  documented defaults of its class (DEFAULT_LIMITS, docs/optics.md#thresholds);
- `optics_lane_imbalance`: one lane `lane_spread_db` or more below the median of its siblings is a
  dirty or damaged connector or fibre (WARNING);
- `optics_dimming`: receive power `dimming_db` or more below the lane's own learned baseline
  (the best it read since this module was fitted) is a transceiver or fibre dimming before any
  threshold is crossed (WARNING);
- `optics_no_light`: a lane with no light (at or below `no_light_dbm`) on a port that is up is
  impossible and says so (WARNING: the diagnostics or the port mapping are wrong); on a port that
  is down it is the reason, told at OK (the down port is the parent alert).

A lane whose own transmitter is off (bias 0 or no transmit power: the unused lanes of a module run
at fewer lanes) is left out of every lane judgement. Receive power of a port that is down is not
judged against thresholds (the link checks own a down port). Pure: records in, findings and the
baseline updates to keep out.
"""

from __future__ import annotations

import operator
import statistics
import time
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from typing import Generic, Protocol, TypeVar

from fabricmon.checks import CRITICAL, OK, WARNING, Finding
from fabricmon.checks.shape import Outcome, Report, judged_in, report
from fabricmon.model.optics import LaneDiag, Limits, OpticsPort, RxBaseline
from fabricmon.schema import Schema, number

# --- settings: `checks.optics` (fabricmon.schema), composed by fabricmon/checks/settings.py --------

@dataclass(frozen=True, slots=True)
class OpticsCheckConfig:
    """The optics checks' settings (docs/optics.md)."""
    lane_spread_db: float = 4.0     # a lane this far below its siblings' median: a dirty/damaged connector
    dimming_db: float = 3.0         # receive power this far below the lane's learned baseline: dimming
    no_light_dbm: float = -30.0     # at or below: no light at all


_D_OPTICS = OpticsCheckConfig()
SCHEMA: Schema[OpticsCheckConfig] = Schema(fields=(
    number("lane_spread_db", _D_OPTICS.lane_spread_db, "dB a lane's receive power may sit below its siblings' "
           "median before `optics_lane_imbalance` (a dirty or damaged connector)", lo=0.1),
    number("dimming_db", _D_OPTICS.dimming_db, "dB a lane's receive power may fall below its learned baseline "
           "before `optics_dimming`", lo=0.1),
    number("no_light_dbm", _D_OPTICS.no_light_dbm, "receive power (dBm) at or below which an up port has no "
           "light (`optics_no_light`)", lo=-60),
), build=lambda v, key, ctx: OpticsCheckConfig(**v))

CHECKS = ("optics_thresholds", "optics_lane_imbalance", "optics_dimming", "optics_no_light")
NEEDS = ("transceiver_readings",)   # the fabric collector runs them once a source read the switches' optics

# Defaults for a module (or switch) that reports no thresholds, per module class. Power in dBm,
# temperature in C, voltage in V. Sources (docs/optics.md#thresholds): receive power, the alarm and
# warning thresholds of the real modules in tests/fixtures/ethtool_module (SFP: JDSU
# PLRXPL-VI-S24-22; QSFP/CMIS: Mellanox MMA1B00-C100D 100G SR4); temperature, SFF-8472/8636's
# commercial case range 0-70 C (warning at its top, alarm 10 C above, as those modules set it);
# voltage, the 3.3 V supply +-5 % (warning) and +-10 % (alarm) of SFF-8419/8679.
_VOLTAGE = Limits(3.63, 2.97, 3.465, 3.135, source="default")
_TEMPERATURE = Limits(80.0, -10.0, 70.0, 0.0, source="default")
DEFAULT_LIMITS: dict[str, dict[str, Limits]] = {
    "SFP": {"rx_power": Limits(2.0, -20.0, 0.0, -17.0, source="default"),
            "temperature": _TEMPERATURE, "voltage": _VOLTAGE},
    "QSFP": {"rx_power": Limits(5.4, -13.3, 2.4, -10.3, source="default"),
             "temperature": _TEMPERATURE, "voltage": _VOLTAGE},
}
DEFAULT_LIMITS["CMIS"] = DEFAULT_LIMITS["QSFP"]
DEFAULT_LIMITS["switch"] = DEFAULT_LIMITS["QSFP"]
DEFAULT_LIMITS["unknown"] = DEFAULT_LIMITS["QSFP"]

_UNITS = {"rx_power": "dBm", "tx_power": "dBm", "tx_bias": "mA", "temperature": "C", "voltage": "V"}
_NAMES = {"rx_power": "receive power", "tx_power": "transmit power", "tx_bias": "laser bias",
          "temperature": "module temperature", "voltage": "module voltage"}


@dataclass(frozen=True, slots=True)
class Learn:
    """A baseline update for the pipeline to keep: this lane read `rx_dbm`, healthy."""
    key: str
    lane: int
    serial: str
    rx_dbm: float


def limits(port: OpticsPort, quantity: str, lane: int) -> Limits | None:
    """The thresholds that apply: the module's (or switch's) own, else the class default."""
    own = port.module.limits_for(quantity, lane)
    if own is not None and not own.empty:
        return own
    return DEFAULT_LIMITS.get(port.module.module_class, DEFAULT_LIMITS["unknown"]).get(quantity)


def _judge(value: float, lim: Limits) -> tuple[int, str, float] | None:
    """(status, which threshold, its value) when `value` is beyond one, else None."""
    for status, name, bound, beyond in (
            (CRITICAL, "low alarm", lim.low_alarm, operator.lt),
            (CRITICAL, "high alarm", lim.high_alarm, operator.gt),
            (WARNING, "low warning", lim.low_warning, operator.lt),
            (WARNING, "high warning", lim.high_warning, operator.gt)):
        if bound is not None and beyond(value, bound):
            return status, name, bound
    return None


def _used(lanes: Iterable[LaneDiag]) -> list[LaneDiag]:
    return [ln for ln in lanes if not ln.transmitter_off]


def _peer(port: OpticsPort) -> str:
    return f"; the other end: {port.peer}" if port.peer else ""


def _fmt(v: float, unit: str) -> str:
    return f"{v:.2f} {unit}" if unit in ("dBm", "V") else f"{v:.1f} {unit}" if unit == "C" else f"{v:.3f} {unit}"


def _lane_text(port: OpticsPort, lane: int) -> str:
    return f"lane {lane}" if lane else "the port"


def thresholds(port: OpticsPort) -> Finding | None:
    """None (here and in the checks below): nothing could be judged (no reading with a threshold, fewer
    than two lit lanes, no baseline yet): no status, never an OK."""
    m = port.module
    worst, lines, judged = OK, [], 0
    readings: list[tuple[str, int, float | None]] = [("temperature", 0, m.temperature_c), ("voltage", 0, m.voltage_v)]
    for ln in sorted(m.lanes.values(), key=lambda x: x.lane):
        if ln.transmitter_off:
            continue
        readings += [("tx_power", ln.lane, ln.tx_power_dbm), ("tx_bias", ln.lane, ln.tx_bias_ma)]
        if port.up is not False:
            readings.append(("rx_power", ln.lane, ln.rx_power_dbm))
    for q, lane, value in readings:
        if value is None:
            continue
        lim = limits(port, q, lane)
        if lim is None:
            continue
        judged += 1
        j = _judge(value, lim)
        if j is None:
            continue
        status, which, bound = j
        worst = max(worst, status)
        src = {"module": "the module's", "switch": "the switch's", "default": "fabricmon's default"}[lim.source]
        where = f"{_lane_text(port, lane)} " if q not in ("temperature", "voltage") else ""
        lines.append(f"{where}{_NAMES[q]} {_fmt(value, _UNITS[q])} is beyond {src} {which} threshold "
                     f"{_fmt(bound, _UNITS[q])}")
    if not judged:
        return None
    if worst == OK:
        n = len(_used(m.lanes.values()))
        return Finding("optics_thresholds", port.owner, port.port, OK,
                       f"{port.label}: {n} lane(s) within thresholds")
    return Finding("optics_thresholds", port.owner, port.port, worst,
                   f"{port.label}: " + "; ".join(lines) + _peer(port) +
                   ": clean the connectors, reseat or replace the transceiver or the cable")


def lane_imbalance(port: OpticsPort, cfg: OpticsCheckConfig) -> Finding | None:
    lit = [(ln, rx) for ln in _used(port.module.lanes.values())
           if (rx := ln.rx_power_dbm) is not None and rx > cfg.no_light_dbm]
    if port.up is False or len(lit) < 2:
        return None         # not compared: the port is down, or fewer than two lanes are lit
    low = []
    for ln, rx in lit:
        others = [o_rx for o, o_rx in lit if o is not ln]
        med = statistics.median(others)
        if rx < med - cfg.lane_spread_db:
            low.append(f"lane {ln.lane} receives {rx:.2f} dBm, {med - rx:.1f} dB below "
                       f"its siblings' median {med:.2f} dBm (threshold {cfg.lane_spread_db:g} dB)")
    if not low:
        return Finding("optics_lane_imbalance", port.owner, port.port, OK,
                       f"{port.label}: {len(lit)} lanes within {cfg.lane_spread_db:g} dB of each other")
    return Finding("optics_lane_imbalance", port.owner, port.port, WARNING,
                   f"{port.label}: " + "; ".join(low) + _peer(port) +
                   ": a dirty or damaged connector or fibre on that lane; clean and inspect both ends")


def dimming(port: OpticsPort, cfg: OpticsCheckConfig, baseline: RxBaseline | None
            ) -> tuple[Finding | None, list[Learn]]:
    learn: list[Learn] = []
    if baseline is None or not port.key:
        return None, learn          # no baseline kept: nothing to compare with
    dim, compared = [], 0
    for ln in sorted(_used(port.module.lanes.values()), key=lambda x: x.lane):
        rx = ln.rx_power_dbm
        if rx is None or rx <= cfg.no_light_dbm or port.up is False:
            continue
        b = baseline.get(port.key, ln.lane, port.module.serial)
        if b is not None:
            compared += 1
            if rx < b.rx_dbm - cfg.dimming_db:
                when = time.strftime("%Y-%m-%d", time.gmtime(b.learned_at)) if b.learned_at else "earlier"
                dim.append(f"lane {ln.lane} receives {rx:.2f} dBm, {b.rx_dbm - rx:.1f} dB below its baseline "
                           f"{b.rx_dbm:.2f} dBm (learned {when}; threshold {cfg.dimming_db:g} dB)")
                continue
        lim = limits(port, "rx_power", ln.lane)
        if port.up and (lim is None or _judge(rx, lim) is None):
            learn.append(Learn(port.key, ln.lane, port.module.serial, rx))
    if dim:
        return Finding("optics_dimming", port.owner, port.port, WARNING,
                       f"{port.label}: " + "; ".join(dim) + _peer(port) +
                       ": the light is fading before any threshold; clean the connectors or plan a "
                       "replacement"), learn
    if not compared:
        return None, learn          # the baseline is being learned: nothing compared yet
    return Finding("optics_dimming", port.owner, port.port, OK,
                   f"{port.label}: {compared} lane(s) within {cfg.dimming_db:g} dB of their baseline"), learn


def no_light(port: OpticsPort, cfg: OpticsCheckConfig) -> Finding | None:
    dark = [ln.lane for ln in _used(port.module.lanes.values())
            if ln.rx_power_dbm is not None and ln.rx_power_dbm <= cfg.no_light_dbm]
    if not any(ln.rx_power_dbm is not None for ln in _used(port.module.lanes.values())):
        return None         # no receive power reported
    if not dark:
        return Finding("optics_no_light", port.owner, port.port, OK, f"{port.label}: light on every used lane")
    lanes = "the port" if dark == [0] else "lane(s) " + ", ".join(str(n) for n in dark)
    if port.up:
        return Finding("optics_no_light", port.owner, port.port, WARNING,
                       f"{port.label}: no light (at or below {cfg.no_light_dbm:g} dBm) on {lanes} while the "
                       f"port is up: impossible, so the module's diagnostics are wrong or the reading belongs to "
                       f"another port{_peer(port)}")
    return Finding("optics_no_light", port.owner, port.port, OK,
                   f"{port.label}: no light on {lanes}; the port is "
                   f"{'down' if port.up is False else 'of unknown state'}: the far end is dark or the fibre is cut"
                   f"{_peer(port)}")


def evaluate(ports: Iterable[OpticsPort], cfg: OpticsCheckConfig, baseline: RxBaseline | None
             ) -> tuple[list[Finding], list[Learn]]:
    """Every optics check on every port with readings; the baseline updates to keep."""
    findings: list[Finding] = []
    learn: list[Learn] = []
    for p in ports:
        if not p.module.has_readings:
            continue
        f, lr = dimming(p, cfg, baseline)
        learn += lr
        findings += [x for x in (thresholds(p), lane_imbalance(p, cfg), f, no_light(p, cfg)) if x is not None]
    return findings, learn


In = TypeVar("In")


class BaselineKeeper(Protocol):
    """Where the learned receive power is kept (stores.optics_baseline.BaselineStore: a file in the
    state directory): the optics checks' state."""

    @property
    def baseline(self) -> RxBaseline: ...

    def learn(self, updates: Iterable[Learn], now: float) -> int: ...


@dataclass(frozen=True, slots=True)
class Readings:
    """What the optics checks judge, as the model joined the readings to its ports: the ports with their
    modules, what the join gives the section (its derived sub-section), and the devices whose readings were
    read (each given a status where the caller keeps one per device; None: the devices of the findings)."""
    ports: Sequence[OpticsPort]
    now: float
    derived: object = None
    judged: Iterable[str] | None = None


class Optics(Generic[In]):
    """The optics checks (checks.shape), node and fabric alike: the model says where the readings are
    (`select`: the node's ethtool -m, the switches' sensors) and what must be present (`needs`); each
    lane's learned baseline is the state."""

    def __init__(self, settings: OpticsCheckConfig, baseline: BaselineKeeper,
                 select: Callable[[In], Readings | None], needs: Sequence[str]):
        self.settings = settings
        self.state = baseline
        self.select = select
        self.reports: tuple[Report, ...] = tuple(report(c, *needs) for c in CHECKS)

    def run(self, inputs: In) -> Outcome:
        r = self.select(inputs)
        if r is None:
            return Outcome((), ())
        findings, learn = evaluate(r.ports, self.settings, self.state.baseline)
        self.state.learn(learn, r.now)
        return Outcome(findings, judged_in(findings) if r.judged is None else tuple(r.judged), r.derived)


__all__ = ["CHECKS", "DEFAULT_LIMITS", "NEEDS", "BaselineKeeper", "Learn", "Optics", "Readings", "evaluate", "limits"]
