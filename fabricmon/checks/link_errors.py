"""Link errors: rate-based, from counter deltas between polls.

Each counter check sums the increases of its counters over a trailing window and compares
them with warning/critical thresholds. Saturated counters are reported, never turned into a
rate; a decrease is a reset, never a negative rate; any link_downed increase is a flap.

symbol_errors is judged as a bit error ratio where the link's rate is known and the config sets
`ber_warning`/`ber_critical` (the default: IBTA's 1e-12, and 1e-11): the budget is the ratio
times the bits the link carries in the window (its data rate x the window), so a 4X NDR link may
show 1,440 symbol errors an hour where a 4X EDR link may show 360 (docs/optics.md#ber-budget).
Without a rate, or with count thresholds configured, the counts apply as before.
"""

from __future__ import annotations

from collections.abc import Mapping

from fabricmon.checks import OK, WARNING, CRITICAL, Finding
from fabricmon.checks.settings import COUNTER_CHECKS, ChecksConfig, CounterCheckConfig
from fabricmon.checks.shape import Report, counters, report
from fabricmon.model.history import CounterHistory, saturation
from fabricmon.model.ports import PortView

SATURATION_CHECK = "counter_saturation"
CHECKS = (*COUNTER_CHECKS, SATURATION_CHECK)      # the names it reports
CHECKED_COUNTERS = frozenset(c for counters, *_ in COUNTER_CHECKS.values() for c in counters)


def counter_reports(*needs: str) -> tuple[Report, ...]:
    """The counter checks' names: each runs once one of its counters was read; counter_saturation once
    a counter that saturates was read (not one that wraps: Ethernet's ifTable counters)."""
    return (*(report(check, *needs, any_of=counters(names)) for check, (names, *_) in COUNTER_CHECKS.items()),
            report(SATURATION_CHECK, *needs, "saturating_counters"))

ACTIONS = {
    "symbol_errors": "physical-layer bit errors: clean or reseat the connectors, or replace the cable/transceiver",
    "link_flap": "the link went down and retrained: check the cable, the transceiver and the switch port log",
    "link_error_recovery": "the link is retraining: the cable or transceiver is marginal",
    "link_integrity": "local link integrity or buffer overrun errors: replace the cable and check VL credit settings",
    "receive_errors": "malformed packets arrive: check the cable and the remote port",
    "transmit_discards": "packets dropped on transmit: congestion or a peer that went away; look for hotspots",
}


_NAMES = {check: "+".join(counters) for check, (counters, *_) in COUNTER_CHECKS.items()}


def _fmt_window(seconds: float) -> str:
    if seconds >= 3600 and seconds % 3600 == 0:
        return f"{int(seconds // 3600)}h"
    if seconds >= 60:
        return f"{seconds / 60:.0f}m"
    return f"{seconds:.0f}s" if seconds >= 1 else "<1s"


def ber_limits(cc: CounterCheckConfig, rate_gbps: float | None) -> tuple[float | None, float | None] | None:
    """(warning, critical) symbol-error counts per window from the BER budget and the link's data
    rate, or None when the counts apply (no BER configured, rate unknown or 0: a down port)."""
    if (cc.ber_warning is None and cc.ber_critical is None) or not rate_gbps:
        return None
    bits = rate_gbps * 1e9 * cc.window
    return (None if cc.ber_warning is None else cc.ber_warning * bits,
            None if cc.ber_critical is None else cc.ber_critical * bits)


# How a quiet port's findings are made again (calm_findings): per finding, (check, the message's text before the
# window, after it, the window's seconds); the window 0 for a message that has none (counter_saturation's OK).
QuietFindings = list[tuple[str, str, str, float]]


def calm_mark(device: str, port: int, counters: Mapping[str, int], history: CounterHistory, rate: object,
              widths: object) -> tuple[object, ...]:
    """What a port's counter checks are judged on: its counters, its rate and counter widths (or the sweep's), and
    its checked counters' history marks (CounterHistory.marks). While it stays the same no window's sum can have
    risen (it only falls as time passes): the fabric judges such a port no further while it had nothing to say,
    the node makes a quiet port's findings again from their texts (calm_findings)."""
    return (tuple(counters.values()), rate, widths,
            history.marks(device, port, [n for n in counters if n in CHECKED_COUNTERS]))


def calm_findings(p: PortView, quiet: QuietFindings, history: CounterHistory, now: float) -> list[Finding] | None:
    """A quiet port's findings (evaluate_port's `quiet`: every check OK, nothing counted) at `now`, its calm_mark
    unchanged since: nothing can have been counted since, so the same findings, each with the seconds its window
    covers now (CounterHistory.covered, what evaluate_port reads with the sum). None where a window holds no two
    samples any more (a port unread for a whole window): evaluate_port says what that is."""
    read = p.counters.keys()
    out = []
    for check, head, tail, window in quiet:
        if window:
            covered = max(history.covered((p.device, p.port, c), window, now) for c in COUNTER_CHECKS[check][0]
                          if c in read)
            if not covered:
                return None
            out.append(Finding(check, p.device, p.port, OK, head + _fmt_window(covered) + tail))
        else:
            out.append(Finding(check, p.device, p.port, OK, head))
    return out


def evaluate_port(p: PortView, history: CounterHistory, checks: ChecksConfig, now: float,
                  sat: dict[str, bool] | None = None, label: str | None = None,
                  unjudged: set[str] | None = None, quiet: QuietFindings | None = None) -> list[Finding]:
    """sat: the port's saturated() result when the caller has it already (the fabric collector's says
    which counters wrap instead); label: how the messages name the port (default PortView.label();
    the fabric collector names the switch and its port). A check none of whose counters the port has
    gives no finding (no status: absent, never OK); neither does one without two samples of them yet,
    unless they never counted (0 since they were cleared: OK), or one of them saturated (its rate is
    unknown: counter_saturation says so); counter_saturation is judged where a
    counter that can saturate was read. `unjudged` collects the checks a port read counters of and could not
    judge (a count before its second sample). `quiet` collects how to make the findings again (calm_findings)
    when the port is quiet: every one OK, each counter check's sum 0; it is left empty otherwise."""
    findings = []
    where = label if label is not None else p.label()
    read = p.counters.keys()
    judged = saturation(p.counters, p.counter_bits) if sat is None else sat
    texts: QuietFindings | None = [] if quiet is not None else None     # None once the port is not quiet
    for check, (counters, _w, _warn, _crit) in COUNTER_CHECKS.items():
        if read.isdisjoint(counters):
            continue
        cc = checks.counters[check]
        total, covered = 0, 0.0
        for c in counters:
            inc, cov = history.increase((p.device, p.port, c), cc.window, now)
            total += inc
            if cov > covered:
                covered = cov
        if not covered:     # no two samples yet: only a counter that never counted is judged (OK)
            if any(p.counters.get(c) for c in counters):
                if unjudged is not None:
                    unjudged.add(check)
                texts = None
                continue        # counted since it was cleared, when is unknown: not judged until a second sample
            findings.append(Finding(check, p.device, p.port, OK, f"{where}: no {_NAMES[check]} since the "
                                    "counters were cleared"))
            texts = None
            continue
        status = OK
        limit = None
        warn, crit = cc.warning, cc.critical
        ber = ber_limits(cc, p.rate_gbps) if check == "symbol_errors" else None
        if ber is not None:
            warn, crit = ber
        if crit is not None and total >= crit:
            status, limit = CRITICAL, crit
        elif warn is not None and total >= warn:
            status, limit = WARNING, warn
        if status == OK and any(judged.get(c) for c in counters):
            # saturated: "at least its maximum", what it counts now is unknown (counter_saturation says so); a
            # step onto the maximum is a lower bound that may still cross a threshold, but never an OK of 0
            if unjudged is not None:
                unjudged.add(check)
            texts = None
            continue
        names = _NAMES[check]
        budget = ""
        if ber is not None and p.rate_gbps:
            ratio = cc.ber_critical if status == CRITICAL else cc.ber_warning
            seen = total / (p.rate_gbps * 1e9 * max(covered, 1.0))
            budget = (f", bit error ratio {seen:.1e} over the {p.rate_gbps:g} Gb/s link"
                      + (f"; budget {ratio:g}" if status != OK and ratio is not None else ""))
        if status == OK:
            msg = f"{where}: {total} {names} in the last {_fmt_window(covered)}{budget}"
            if texts is not None:
                if total == 0:
                    texts.append((check, f"{where}: 0 {names} in the last ", budget, cc.window))
                else:
                    texts = None
        else:
            msg = (f"{where}: {names} rose by {total} in the last {_fmt_window(covered)} "
                   f"(threshold {limit:g} per {_fmt_window(cc.window)}{budget}): {ACTIONS[check]}")
            texts = None
        findings.append(Finding(check, p.device, p.port, status, msg))
    if not read.isdisjoint(judged):     # else no counter that can saturate was read: not judged
        full = [n for n, s in judged.items() if s]
        if full:
            msg = (f"{where}: counter(s) {', '.join(full)} saturated at their maximum; their rates are "
                   f"unknown: clear them in a maintenance window (perfquery -R) if your fabric policy allows")
            findings.append(Finding(SATURATION_CHECK, p.device, p.port, checks.saturation_severity, msg))
            texts = None
        else:
            findings.append(Finding(SATURATION_CHECK, p.device, p.port, OK, f"{where}: no saturated counter"))
            if texts is not None:
                texts.append((SATURATION_CHECK, f"{where}: no saturated counter", "", 0.0))
    if quiet is not None and texts is not None and len(texts) == len(findings):
        quiet.extend(texts)
    return findings


__all__ = ["CHECKED_COUNTERS", "CHECKS", "QuietFindings", "ber_limits", "calm_findings", "calm_mark", "counter_reports",
           "evaluate_port", "SATURATION_CHECK"]
