"""Host CAs without a name: a CA whose node description is still the firmware's default
(`MT4129 ConnectX7   Mellanox Technologies`, `localhost`, ...: rdma-ndd does not run on its host)
and that the site's node name map does not name cannot be matched to a scheduler's node, so no
finding on its leaf can name the jobs it hurts. One WARNING for the fabric, naming a few GUIDs;
each such CA stays a host of its own, named by its GUID (model.fabric.host_name), never merged
with the others.

Records in (the topology's unnamed host CAs), one finding out (none when every host is named)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING

from fabricmon.checks import WARNING, Finding
from fabricmon.checks.shape import Outcome, report


if TYPE_CHECKING:
    from fabricmon.checks.fabric_inputs import FabricInputs

CHECK = "node_description"
NEEDS = ("topology",)             # a fresh discovery (a fabric-wide check)
SHOWN = 5                         # GUIDs named in the message


def evaluate(unnamed: Sequence[str], hosts: int) -> list[Finding]:
    """`unnamed`: host CA GUIDs with a default description and no name-map entry; `hosts`: every host CA."""
    if not unnamed:
        return []
    shown = ", ".join(f"0x{g}" for g in unnamed[:SHOWN])
    more = f" and {len(unnamed) - SHOWN} more" if len(unnamed) > SHOWN else ""
    return [Finding(CHECK, "", None, WARNING,
                    f"{len(unnamed)} of {hosts} hosts have no node description ({shown}{more}): run rdma-ndd on "
                    "them or add them to the node name map (fabric.sources.discovery.node_name_map); until then "
                    "they are known by their GUID and their jobs cannot be named")]


class Names:
    """node_description (checks.shape): fabric-wide, no settings, no state."""
    reports = (report(CHECK, *NEEDS),)
    settings = None
    state = None

    def run(self, inputs: FabricInputs) -> Outcome:
        return Outcome(evaluate(inputs.topo.unnamed, len(inputs.topo.hosts)), ())


__all__ = ["CHECK", "NEEDS", "Names", "evaluate"]
