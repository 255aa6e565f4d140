"""The fabric as designed against the fabric as found: every discovery compared with the design
file (sources.infiniband.design, model.design.compare). Each discrepancy is one finding naming
both ends as designed and as found, marked on the live switch and port where a technician finds it
(the map marks them there): a WARNING for a cable missing, not in the design, miswired or swapped,
a switch or host missing or not in the design, a cable below its designed width or speed; an OK
(information) for a switch or host replaced (same name, new GUID: a normal repair). The kinds are
a metric (fabricmon_fabric_design_discrepancies{kind}); docs/design.md says what each asks."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

from fabricmon.checks import OK, WARNING, Finding
from fabricmon.checks.shape import Outcome, report
from fabricmon.model import design as fabric_design
from fabricmon.model.design import DesignData, Discrepancy
from fabricmon.model.fabric import DesignDrift, Topology
from fabricmon.model.snapshot import source_data

if TYPE_CHECKING:
    from fabricmon.checks.fabric_inputs import FabricInputs

CHECK = "design"
NEEDS = ("topology", "design")      # a discovery and a design file read
INFORMATION = frozenset({"replaced"})


def evaluate(found: Sequence[Discrepancy], path: str) -> list[Finding]:
    """`found`: the discrepancies between the design at `path` and the live fabric."""
    return [Finding(CHECK, d.switch, d.port, OK if d.kind in INFORMATION else WARNING,
                    f"{d.message} (design {path})") for d in found]


Rates = frozenset[tuple[tuple[str, int], tuple[int | None, str | None]]]


@dataclass(slots=True)
class DesignState:
    # the last comparison: its inputs (topology, design read, the ports a sweep read at another width or
    # speed than the discovery) and its discrepancies
    last: tuple[Topology, DesignData, Rates, list[Discrepancy]] | None = None


class DesignCheck:
    """design (checks.shape): the design against this topology, each port at the width and speed the
    last sweep read (docs/design.md); this shard's switches only (fabric-wide ones on shard 0). Compared
    again only when one of its inputs changed: a new discovery, a new design read, a port's rate."""
    reports = (report(CHECK, *NEEDS),)
    settings = None

    def __init__(self) -> None:
        self.state = DesignState()

    def run(self, inputs: FabricInputs) -> Outcome:
        design = source_data(inputs.states, DesignData)
        if design is None:
            return Outcome((), ())
        topo, sec = inputs.topo, inputs.sec
        rates = {}
        for k, p in sec.ports.items():          # where the sweep read another width or speed than the discovery
            if p.link is not None and p.up:
                info = topo.ports.get(k)
                if info is None or info.link is None or (info.link.width, info.link.speed) != (p.link.width, p.link.speed):
                    rates[k] = (p.link.width, p.link.speed)
        read = frozenset(rates.items())
        last = self.state.last
        if last is None or last[0] is not topo or last[1] is not design or last[2] != read:   # else: the same inputs
            last = self.state.last = (topo, design, read, fabric_design.compare(design.design, topo, rates))
        found = [d for d in last[3] if d.switch in sec.switches or (not d.switch and sec.shard[0] == 0)]
        # every switch of the shard was compared with the design (a status each, OK included)
        return Outcome(evaluate(found, design.path), tuple(sec.switches),
                       DesignDrift(len(design.design.cables), fabric_design.counts(found)))


__all__ = ["CHECK", "NEEDS", "DesignCheck", "DesignState", "evaluate"]
