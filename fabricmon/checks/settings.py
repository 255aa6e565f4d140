"""The `checks` section: what several checks share (the severities of a port that is down, degraded
or saturated, the counter checks' windows and thresholds), declared with fabricmon.schema beside the
checks that read them, with `checks.optics` from checks/optics.py. fabricmon/config/__init__.py composes it;
a check receives these settings (ChecksConfig), never the whole config.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass, field
from typing import Any, Mapping

from fabricmon.checks import fabric_placement, nccl, optics, pcie, phy_ber
from fabricmon.checks.fabric_placement import PlacementCheckConfig
from fabricmon.checks.nccl import NcclSlowConfig
from fabricmon.checks.optics import OpticsCheckConfig
from fabricmon.checks.pcie import PcieCheckConfig
from fabricmon.checks.phy_ber import PhyBerConfig
from fabricmon.schema import (ConfigError, Context, Field, Schema, boolean, choice, number, section,
                              warning_below_critical)


@dataclass(frozen=True, slots=True)
class CounterCheckConfig:
    """Thresholds on how much a counter rose within a trailing window."""
    window: float
    warning: float | None
    critical: float | None
    # symbol_errors only: budgets as bit error ratios (errors / bits the link carried in the window,
    # from its rate), docs/optics.md#ber-budget. None: the counts above are the thresholds.
    ber_warning: float | None = None
    ber_critical: float | None = None


@dataclass(frozen=True, slots=True)
class ChecksConfig:
    """The `checks` section: one attribute per key of CHECKS (the counter checks gathered in
    `counters`); a check's own section (`section(name, its SCHEMA)`) is one attribute more."""
    compare_with_supported: bool
    down_severity: int
    degraded_severity: int
    saturation_severity: int
    counters: dict[str, CounterCheckConfig]
    optics: OpticsCheckConfig = field(default_factory=OpticsCheckConfig)
    placement: PlacementCheckConfig = field(default_factory=PlacementCheckConfig)
    nccl_slow_collective: NcclSlowConfig = field(default_factory=NcclSlowConfig)
    phy_ber: PhyBerConfig = field(default_factory=PhyBerConfig)
    pcie: PcieCheckConfig = field(default_factory=PcieCheckConfig)


# Counter checks: name -> (counters summed, window s, warning, critical)
COUNTER_CHECKS: dict[str, tuple[tuple[str, ...], float, float | None, float | None]] = {
    "symbol_errors": (("symbol_errors",), 3600.0, 120.0, 1200.0),
    "link_flap": (("link_downed",), 43200.0, 1.0, 3.0),
    "link_error_recovery": (("link_error_recovery",), 3600.0, 10.0, 100.0),
    "link_integrity": (("local_link_integrity_errors", "excessive_buffer_overrun_errors"),
                       3600.0, None, 1.0),
    "receive_errors": (("receive_errors", "receive_remote_physical_errors"), 3600.0, 120.0, 1200.0),
    "transmit_discards": (("transmit_discards",), 3600.0, 1000.0, None),
}
# symbol_errors as a bit error ratio (warning, critical): IBTA's 1e-12 BER target, and ten times it
# (the ratio of the count defaults above). Used when the link's rate is known and no count
# threshold is configured; docs/optics.md#ber-budget.
SYMBOL_BER_DEFAULTS = (1e-12, 1e-11)

SEVERITIES = {"ok": 0, "warning": 1, "critical": 2}


def _counter_check(name: str, window: float, warning: float | None, critical: float | None
                   ) -> Schema[CounterCheckConfig]:
    return Schema(fields=(number("window", window, "seconds of the trailing window", lo=1),
                          number("warning", warning, "increase within the window that is a WARNING", lo=0, null=True),
                          number("critical", critical, "... a CRITICAL", lo=0, null=True)),
                  check=warning_below_critical, build=lambda v, key, ctx: CounterCheckConfig(**v))


def _symbol_ber_check(values: dict[str, Any], m: Mapping[str, Any], key: str, ctx: Context) -> None:
    """checks.symbol_errors: a configured count keeps working (the BER defaults apply only while no
    count is set); a bit error ratio is between 0 and 1, its warning not above its critical."""
    warning_below_critical(values, m, key, ctx)
    if ("warning" in m or "critical" in m):
        for k in ("ber_warning", "ber_critical"):
            if k not in m:
                values[k] = None
    for k in ("ber_warning", "ber_critical"):
        v = values[k]
        if v is not None and not 0 < v < 1:
            raise ConfigError(f"{key}.{k}", f"expected a bit error ratio between 0 and 1, got {v!r}")
    w, c = values["ber_warning"], values["ber_critical"]
    if w is not None and c is not None and w > c:
        raise ConfigError(f"{key}.ber_warning", f"{w:g} is above ber_critical ({c:g})")


def _symbol_errors_check(window: float, warning: float | None, critical: float | None
                         ) -> Schema[CounterCheckConfig]:
    """The symbol_errors counter check: counts as the others, plus its budget as a bit error
    ratio of the bits the link carried in the window (docs/optics.md#ber-budget)."""
    return Schema(fields=(
        number("window", window, "seconds of the trailing window", lo=1),
        number("warning", warning, "increase within the window that is a WARNING (used as is when the link's "
               "rate is unknown, or when ber_warning is null)", lo=0, null=True),
        number("critical", critical, "... a CRITICAL", lo=0, null=True),
        number("ber_warning", SYMBOL_BER_DEFAULTS[0], "bit error ratio over the bits the link carried in the "
               "window that is a WARNING (IBTA's 1e-12; unset when `warning` or `critical` is configured and "
               "this is not); [optics.md](optics.md#ber-budget)", lo=0, hi=1, null=True),
        number("ber_critical", SYMBOL_BER_DEFAULTS[1], "... a CRITICAL (ten times IBTA's target)", lo=0, hi=1,
               null=True),
    ), check=_symbol_ber_check, build=lambda v, key, ctx: CounterCheckConfig(**v))


def _severity(name: str, default: str, doc: str) -> Field:
    return choice(name, SEVERITIES[default], doc, SEVERITIES)


CHECKS: Schema[ChecksConfig] = Schema(fields=(
    boolean("compare_with_supported", True, "without an expectation, compare an IB port with what both ends could do"),
    _severity("down_severity", "critical", "a port that is down"),
    _severity("degraded_severity", "critical", "a port below its expected width or speed"),
    _severity("saturation_severity", "ok", "a saturated port"),
    *(section(name, (_symbol_errors_check if name == "symbol_errors" else functools.partial(_counter_check, name))(
                     w, warn, crit), f"the `{name}` counter check (thresholds on the "
                 "increase within the trailing window; `null` disables a level)")
      for name, (_, w, warn, crit) in COUNTER_CHECKS.items()),
    section("optics", optics.SCHEMA, "the optics checks ([optics.md](optics.md#checks))"),
    section("placement", fabric_placement.SCHEMA, "the fabric collector's placement check: running jobs spanning "
            "more leaves than needed ([slurm-topology.md](slurm-topology.md#placement))"),
    section("nccl_slow_collective", nccl.SCHEMA, "a job's NCCL collectives slower than its baseline or its NIC's "
            "line rate ([nccl.md](nccl.md#findings))"),
    section("phy_ber", phy_ber.SCHEMA, "raw, effective and symbol bit error ratios against the budget of the link's "
            "speed, FEC mode and medium ([ber.md](ber.md))"),
    section("pcie", pcie.SCHEMA, "the PCIe links and AER counters of the RDMA functions and GPUs ([pcie.md](pcie.md))"),
), build=lambda v, key, ctx: ChecksConfig(counters={n: v[n] for n in COUNTER_CHECKS},
                                           **{k: x for k, x in v.items() if k not in COUNTER_CHECKS}),
    doc="Every check with its thresholds: [checks.md](checks.md).")
