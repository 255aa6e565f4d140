"""Degraded link: a port below its expected width or speed, or not ACTIVE/LinkUp.

Expectations come from the config (`expected_links`); without one, an InfiniBand port is
compared with what both ends report they could do (iblinkinfo's "Could be"). An Ethernet
(RoCE) port is never judged by InfiniBand rules unless an entry says so.
"""

from __future__ import annotations

import dataclasses
from typing import TYPE_CHECKING

from fabricmon.model import ibspec
from fabricmon.checks import OK, Finding, link_errors
from fabricmon.checks.inventory import ExpectedLink
from fabricmon.checks.settings import ChecksConfig
from fabricmon.checks.shape import Outcome, outcome_of, report
from fabricmon.model.ports import LinkVerdict, PortVerdicts, PortView

if TYPE_CHECKING:
    from fabricmon.checks.node_inputs import NodeInputs

CHECK = "degraded_link"
REASONS = ("down", "width", "speed")


def _expected_for(p: PortView, expected: tuple[ExpectedLink, ...]) -> ExpectedLink | None:
    # The first matching entry that says a rate applies; an entry with only `count` sets none.
    return next((e for e in expected
                 if e.sets_rate and e.matches(p.device, p.port, p.link_layer)), None)


def _expected_rate(e: ExpectedLink, p: PortView) -> float | None:
    if e.rate_gbps is not None:
        return e.rate_gbps
    width = e.width or p.width
    gen = ibspec.generation(e.speed) if e.speed else (ibspec.generation(p.generation) if p.generation else None)
    if width and gen:
        return width * gen.lane_gbps
    return None


def _state_text(p: PortView) -> str:
    st = ibspec.PORT_STATES.get(p.state_id, "unknown") if p.state_id is not None else "unknown"
    ph = ibspec.PHYS_STATES.get(p.phys_state_id, "unknown") if p.phys_state_id is not None else "unknown"
    return f"{st}/{ph}"


def evaluate_port(p: PortView, checks: ChecksConfig, expected: tuple[ExpectedLink, ...] = ()) -> LinkVerdict | None:
    """`checks`: the severities and compare_with_supported; `expected`: the expected_links entries. None: a
    port whose state no source read is not judged (no finding, no degraded series)."""
    degraded = {r: False for r in REASONS}
    exp = _expected_for(p, expected)
    expected_rate = _expected_rate(exp, p) if exp else None
    if p.state_id is not None and not p.up:
        degraded["down"] = True
        action = ("check the cable and the switch port, and that a subnet manager is running"
                  if p.phys_state_id == ibspec.PHYS_LINKUP else
                  "check the cable, the transceiver and the peer switch port")
        msg = f"{p.label()} is {_state_text(p)} ({p.link_layer}): {action}"
        return LinkVerdict(degraded, expected_rate, Finding(CHECK, p.device, p.port, checks.down_severity, msg))
    if p.state_id is None:
        return None
    problems: list[str] = []
    want = ""
    if exp is not None:
        want = " ".join(x for x in (f"{exp.width}X" if exp.width else "", exp.speed or "",
                                    f"{exp.rate_gbps:g} Gb/s" if exp.rate_gbps else "") if x)
        if exp.width and p.width and p.width < exp.width:
            degraded["width"] = True
        g_rank = ibspec.generation_rank(p.generation)
        e_rank = ibspec.generation_rank(exp.speed)
        if exp.speed and g_rank is not None and e_rank is not None and g_rank < e_rank:
            degraded["speed"] = True
        if exp.rate_gbps and p.rate_gbps is not None and p.rate_gbps < exp.rate_gbps \
                and not (degraded["width"] or degraded["speed"]):
            # A bare rate expectation: blame the width when the lanes are fewer than usual.
            degraded["width" if (p.width or 4) < 4 else "speed"] = True
    elif checks.compare_with_supported and p.is_ib:
        if p.could_be_width and p.width and p.could_be_width > p.width:
            degraded["width"] = True
            problems.append(f"both ends support {p.could_be_width}X")
        g_rank = ibspec.generation_rank(p.generation)
        c_rank = ibspec.generation_rank(p.could_be_generation)
        if c_rank is not None and g_rank is not None and c_rank > g_rank:
            degraded["speed"] = True
            problems.append(f"both ends support {p.could_be_generation}")
        want = ", ".join(problems)
    if degraded["width"] or degraded["speed"]:
        what = ("too few lanes and too slow a speed" if degraded["width"] and degraded["speed"]
                else "too few lanes" if degraded["width"] else "too slow a speed")
        action = ("reseat or replace the cable/transceiver" if degraded["width"] else
                  "check the cable/transceiver rating and the port speed settings")
        rate = f"{p.rate_gbps:g}" if p.rate_gbps is not None else "?"
        msg = (f"{p.label()} runs at {p.link_text()} ({rate} Gb/s; expected {want}): "
               f"{what}; {action}")
        return LinkVerdict(degraded, expected_rate,
                           Finding(CHECK, p.device, p.port, checks.degraded_severity, msg))
    return LinkVerdict(degraded, expected_rate,
                       Finding(CHECK, p.device, p.port, OK, f"{p.label()} up at {p.link_text()}"))


@dataclasses.dataclass
class NodePortsState:
    """The quiet ports (every counter check OK, nothing counted over a window their history spans), each with
    what it was judged on (link_errors.calm_mark) and how its findings are made again (link_errors.calm_findings):
    while the mark holds, nothing can have risen and each message moves only with its window's seconds, so the
    port's counters are not summed again at every poll (bench/node_profile.py: a third of the build)."""
    quiet: dict[tuple[str, int], tuple[tuple[object, ...], link_errors.QuietFindings]] = \
        dataclasses.field(default_factory=dict)


class NodePorts:
    """degraded_link and the counter checks (checks.link_errors) on the node's ports (checks.shape):
    one check, so that each port's findings stay together (degraded_link, then its counters); a counter
    check runs once a port read one of its counters, counter_saturation once one read a counter that
    saturates. The verdicts are its derived sub-section (the IB section's)."""
    reports = (report(CHECK, "ports"), *link_errors.counter_reports("ports"))

    def __init__(self, settings: ChecksConfig, expected: tuple[ExpectedLink, ...]):
        self.settings = settings
        self.expected = expected
        self.state = NodePortsState()

    def run(self, inputs: NodeInputs) -> Outcome:
        ib, checks, now = inputs.ib, self.settings, inputs.now
        findings: list[Finding] = []
        verdicts: dict[tuple[str, int], LinkVerdict] = {}
        history, was_quiet = inputs.history, self.state.quiet
        quiet: dict[tuple[str, int], tuple[tuple[object, ...], link_errors.QuietFindings]] = {}
        for key, p in ib.ports.items():
            v = evaluate_port(p, checks, self.expected)
            if v is not None:
                verdicts[key] = v
                findings.append(v.finding)
            mark = link_errors.calm_mark(p.device, p.port, p.counters, history, (p.rate_gbps, p.label()), p.counter_bits)
            kept = was_quiet.get(key)
            if kept is not None and kept[0] == mark:
                again = link_errors.calm_findings(p, kept[1], history, now)
                if again is not None:
                    quiet[key] = kept
                    findings.extend(again)
                    continue
            texts: link_errors.QuietFindings = []
            findings.extend(link_errors.evaluate_port(p, history, checks, now, ib.saturation[key], quiet=texts))
            if texts:
                quiet[key] = (mark, texts)
        self.state.quiet = quiet
        return outcome_of(findings, PortVerdicts(verdicts))

