"""Uplink capacity: the members of a switch's uplink group (its active up ports, the ECMP group its
traffic is hashed over) run at one rate; a member narrower or slower than the others is a finding
whatever both ends enable (issue 52 item 3). An inter-switch link enabled at 1X among 4X peers (a port
misconfigured, a firmware default after a swap), or an EDR uplink among HDR ones, is not degraded by
the rule "a link running at what both ends enable is fine" (checks.fabric_links), yet the group's
hashing (and opensm's routes: destinations spread over ports, not over bandwidth) gives it an equal
share of the leaf's traffic at a fraction of the capacity. WARNING, naming the switch, each narrow
port, its far end, and what it costs: the group's capacity lost, and the share the narrow member's
flows run at once the uplinks are busy.

A member already reported by degraded_link (down, or below what both ends enable, its past or its
class) is left to that finding. Records in (the section's ports with the link verdicts applied),
findings out; nothing here parses or fetches."""

from __future__ import annotations

from collections import Counter
from collections.abc import Mapping
from typing import TYPE_CHECKING

from fabricmon.checks import WARNING, Finding
from fabricmon.checks.port_text import port_ranges
from fabricmon.checks.shape import Outcome, report
from fabricmon.model.fabric import FabricPort, SwitchNode

if TYPE_CHECKING:
    from fabricmon.checks.fabric_inputs import FabricInputs

CHECK = "uplink_capacity"
NEEDS = ("SweepData",)            # a fresh sweep: the trained width and speed of each port it read
MAX_NAMED = 4


def _gbps(rate: float) -> str:
    g = rate * 8 / 1e9
    return f"{g:.0f}" if g >= 10 else f"{g:.1f}"


def members(ports: Mapping[tuple[str, int], FabricPort], switches: Mapping[str, SwitchNode]
            ) -> dict[str, list[FabricPort]]:
    """Per switch, its uplink group: the up ports with a live link whose rate is known."""
    out: dict[str, list[FabricPort]] = {}
    for (g, _), p in ports.items():
        if g in switches and p.role == "up" and p.up and p.link is not None and p.rate_bps:
            out.setdefault(g, []).append(p)
    return out


def evaluate(ports: Mapping[tuple[str, int], FabricPort], switches: Mapping[str, SwitchNode]
             ) -> tuple[list[Finding], tuple[str, ...]]:
    """(findings, the switches judged: those with two uplinks or more)."""
    findings, judged = [], []
    for g, group in sorted(members(ports, switches).items()):
        if len(group) < 2:
            continue
        judged.append(g)
        rates = Counter(p.rate_bps for p in group)
        norm = max(rates.items(), key=lambda kv: (kv[1], kv[0] or 0))[0] or 0.0     # ties: the faster
        narrow = sorted((p for p in group if (p.rate_bps or 0) < norm and not any(p.degraded.values())),
                        key=lambda p: p.port)
        if not narrow:
            continue
        full = norm * len(group)
        carry = sum(p.rate_bps or 0.0 for p in group)
        slowest = min(p.rate_bps or 0.0 for p in narrow)
        ref = next(p for p in group if p.rate_bps == norm)
        named = "; ".join(
            f'port {p.label} to "{p.link.remote_name}"[{p.link.remote_port_label}] at {p.link.rate_class} '
            f"({_gbps(p.rate_bps or 0)} Gb/s)" for p in narrow[:MAX_NAMED] if p.link is not None)
        more = f"; {len(narrow) - MAX_NAMED} more" if len(narrow) > MAX_NAMED else ""
        others = len(group) - len(narrow)
        label = lambda port, g=g: ports[(g, port)].label       # noqa: E731 (port_ranges' label)
        findings.append(Finding(
            CHECK, g, narrow[0].port, WARNING,
            f"{switches[g].name} uplink port{'s' if len(narrow) > 1 else ''} "
            f"{port_ranges([p.port for p in narrow], label)} {'are' if len(narrow) > 1 else 'is'} narrower or slower "
            f"than the other {others} of its {len(group)} uplinks ({ref.link.rate_class if ref.link else '?'}, "
            f"{_gbps(norm)} Gb/s each): {named}{more}, what both ends are set to, so no cable fault. "
            f"The uplink group's hashing gives each member an equal share of the traffic whatever its rate: the "
            f"uplinks carry {_gbps(carry)} of {_gbps(full)} Gb/s ({_gbps(full - carry)} Gb/s, "
            f"{(full - carry) / full:.0%} lost), and once they are busy the flows on the narrow member run at "
            f"{slowest / norm:.0%} of the others' rate; set both ends back to the group's width and speed "
            f"(ibportstate <lid> <port> width/speed, or the switch's port configuration)"))
    return findings, tuple(judged)


class UplinkCapacity:
    """uplink_capacity (checks.shape): the members of each switch's uplink group at one rate."""
    reports = (report(CHECK, *NEEDS),)
    settings = None
    state = None

    def run(self, inputs: FabricInputs) -> Outcome:
        sec = inputs.sec
        findings, judged = evaluate(sec.ports, sec.switches)
        read = inputs.sweep.switches_read() if inputs.sweep is not None else set()
        return Outcome([f for f in findings if f.device in read], tuple(g for g in judged if g in read))


__all__ = ["CHECK", "NEEDS", "UplinkCapacity", "evaluate", "members"]
