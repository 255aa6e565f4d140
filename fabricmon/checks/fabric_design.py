"""The fabric as designed against the fabric as found: every discovery compared with the design
file (sources.infiniband.design, model.design.compare). Each discrepancy is one finding naming
both ends as designed and as found, marked on the live switch and port where a technician finds it
(the map marks them there): a WARNING for a cable missing, not in the design, miswired or swapped,
a switch or host missing or not in the design, a cable below its designed width or speed; an OK
(information) for a switch or host replaced (same name, new GUID: a normal repair). The kinds are
a metric (fabricmon_fabric_design_discrepancies{kind}); docs/design.md says what each asks."""

from __future__ import annotations

from collections.abc import Sequence

from fabricmon.checks import OK, WARNING, Finding
from fabricmon.model.design import Discrepancy

CHECK = "design"
NEEDS = ("topology", "design")      # a discovery and a design file read
INFORMATION = frozenset({"replaced"})


def evaluate(found: Sequence[Discrepancy], path: str) -> list[Finding]:
    """`found`: the discrepancies between the design at `path` and the live fabric."""
    return [Finding(CHECK, d.switch, d.port, OK if d.kind in INFORMATION else WARNING,
                    f"{d.message} (design {path})") for d in found]


__all__ = ["CHECK", "NEEDS", "evaluate"]
