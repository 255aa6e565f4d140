"""PFC storm at a switch port: pause frames of one priority and one direction above a rate
(fabric.pfc_storm.rate, frames/s) for N sweeps in a row (fabric.pfc_storm.sweeps). The finding
names the switch, the port, the priority, the direction and the host or switch at the other end,
and what each direction means: `tx`, the switch pauses its peer (the switch's buffer for that
priority is full: congestion further on); `rx`, the peer pauses the switch (the peer cannot
drain, typically a host whose receive ring is full or a NIC stuck in a pause storm).

Records in (FabricPort.pause_rates), findings out; nothing here parses or fetches."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from fabricmon.checks import OK, WARNING, Finding
from fabricmon.checks.shape import Outcome, report
from fabricmon.model.fabric import FabricPort, SwitchNode
from fabricmon.schema import Schema, integer, number

if TYPE_CHECKING:
    from fabricmon.checks.fabric_inputs import FabricInputs

CHECK = "pfc_storm"
NEEDS = ("pause_frames",)         # a sweep yielded PFC pause frames
Key = tuple[str, int, int, str]          # (switch, port, priority, direction)


@dataclass(frozen=True, slots=True)
class PfcStormSettings:
    """fabric.pfc_storm: whatever sweep reads pause frames (any fabric kind), judged alike."""
    rate: float = 1000.0        # pause frames/s on one port, priority and direction ...
    sweeps: int = 2             # ... for this many sweeps in a row: a PFC storm


_D = PfcStormSettings()
SCHEMA: Schema[PfcStormSettings] = Schema(fields=(
    number("rate", _D.rate, "pause frames/s on one port, priority and direction ...", lo=0),
    integer("sweeps", _D.sweeps, "... for this many sweeps in a row: a PFC storm (`pfc_storm`)", lo=1, hi=1000),
), build=lambda v, key, ctx: PfcStormSettings(**v))


def priority_label(prio: int) -> str:
    return "all" if prio < 0 else str(prio)


def evaluate(ports: Mapping[tuple[str, int], FabricPort], switches: Mapping[str, SwitchNode],
             previous: Mapping[Key, int], settings: PfcStormSettings, new_sweep: bool
             ) -> tuple[list[Finding], dict[Key, int]]:
    """Consecutive sweeps over the rate per (switch, port, priority, direction); a new sweep
    advances the count. Returns the non-OK findings and the new counts."""
    rate, sweeps = settings.rate, settings.sweeps
    counts: dict[Key, int] = {}
    findings = []
    for (guid, port), p in ports.items():
        for (prio, direction), r in sorted(p.pause_rates.items()):
            key = (guid, port, prio, direction)
            over = r > rate
            n = previous.get(key, 0)
            if new_sweep:
                n = n + 1 if over else 0
            elif not over:
                n = 0
            if n:
                counts[key] = n
            if n < sweeps:
                continue
            name = switches[guid].name if guid in switches else guid
            lk = p.link
            peer = f'"{lk.remote_name}"[{lk.remote_port_label}]' if lk is not None else "an unknown peer"
            role = f"{p.role} port" if p.role != "unconnected" else "port"
            if direction == "tx":
                what = (f"{name} sends pause frames to {peer}: its buffer for priority {priority_label(prio)} "
                        f"is full; look for congestion beyond it (a slow receiver, an ECMP hot spot) and at "
                        f"{peer}'s PFC watchdog")
            else:
                what = (f"{peer} pauses {name}: it cannot drain priority {priority_label(prio)} (a host whose "
                        f"receive ring is full, or a NIC stuck pausing); check {peer}'s RoCE counters "
                        f"(fabricmon_roce_pause_frames_total) and its PFC watchdog")
            findings.append(Finding(
                CHECK, guid, port, WARNING,
                f"PFC storm at {name} {role} {p.label} priority {priority_label(prio)} direction {direction}: "
                f"{r:.0f} pause frames/s for {n} sweeps (over {rate:g}/s); {what}"))
    return [f for f in findings if f.status != OK], counts


@dataclass(slots=True)
class PfcState:
    counts: dict[Key, int] = field(default_factory=dict)    # sweeps in a row over the rate


class PfcStorm:
    """pfc_storm (checks.shape), once a sweep yielded pause frames, whatever the fabric kind."""
    reports = (report(CHECK, *NEEDS),)

    def __init__(self, settings: PfcStormSettings):
        self.settings = settings
        self.state = PfcState()

    def run(self, inputs: FabricInputs) -> Outcome:
        findings, self.state.counts = evaluate(inputs.sec.ports, inputs.sec.switches, self.state.counts,
                                               self.settings, inputs.new_sweep)
        sweep = inputs.sweep
        judged = tuple(dict.fromkeys(g for g, _ in sweep.pause if g in inputs.sec.switches)) if sweep else ()
        return Outcome(findings, judged)       # the switches whose pause frames this sweep read


__all__ = ["CHECK", "NEEDS", "SCHEMA", "PfcState", "PfcStorm", "PfcStormSettings", "evaluate", "priority_label"]
