"""nccl_ras_peer: a rank RAS reports missing from its NCCL communicator, dead or unresponsive, named by
its host, process and GPU (docs/nccl.md#ras). Pure: the RAS records (model.nccl.RasData) and this
node's ports in, findings out.

One finding per communicator with missing ranks (WARNING, class watch: the job is hung or dying; the
node that reports it is not the faulty one unless the peer is on it), naming each missing peer and,
where that peer's host is this node, the state of this node's ports. One OK finding when every
communicator has all its ranks.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING

from fabricmon.model.finding import OK, WARNING, WATCH, Finding
from fabricmon.model.nccl import RasData, RasPeer
from fabricmon.model.ports import PortView
from fabricmon.checks.shape import Outcome, outcome_of, report
from fabricmon.model.snapshot import source_data

if TYPE_CHECKING:
    from fabricmon.checks.node_inputs import NodeInputs

CHECK = "nccl_ras_peer"
MAX_NAMED = 8           # peers named per finding (the rest counted)


def _peer(p: RasPeer, local: str, ports: Mapping[tuple[str, int], PortView]) -> str:
    why = "dead" if p.dead else "unresponsive" if p.unresponsive else "missing"
    text = f"rank {p.rank} on {p.host} (pid {p.pid}, CUDA device {p.cuda_dev}, NVML device {p.nvml_dev}) is {why}"
    if local and p.host.split(".")[0] == local:
        states = ", ".join(f"{d} port {n} {'up' if v.up else 'DOWN'}" for (d, n), v in sorted(ports.items()))
        text += f" (this node; its ports: {states or 'none seen'})"
    return text


def evaluate(data: RasData, ports: Mapping[tuple[str, int], PortView]) -> list[Finding]:
    if data.refused or not data.version:
        return []                               # not read: fabricmon_nccl_ras_refused says why
    out = []
    for c in data.comms:
        if not c.missing:
            continue
        named = "; ".join(_peer(p, data.local_host, ports) for p in c.missing[:MAX_NAMED])
        more = f"; {len(c.missing) - MAX_NAMED} more" if len(c.missing) > MAX_NAMED else ""
        out.append(Finding(CHECK, f"comm:{c.hash}", None, WARNING,
                           f"NCCL communicator {c.hash} ({c.ranks_count} of {c.size} ranks answered RAS): {named}{more}"
                           ": the job is hung or dying there; check that host's node daemon and ports, and the job's "
                           "log", klass=WATCH))
    if not out:
        out.append(Finding(CHECK, "", None, OK, f"NCCL {data.version}: {len(data.comms)} communicator(s), every rank "
                           "answered RAS", klass=WATCH))
    return out


class NcclRas:
    """nccl_ras_peer (checks.shape): NCCL RAS's dead and unresponsive peers, named by their ports."""
    reports = (report(CHECK, "RasData"),)
    settings = None
    state = None

    def run(self, inputs: NodeInputs) -> Outcome:
        ras = source_data(inputs.states, RasData)
        return outcome_of(evaluate(ras, inputs.ib.ports) if ras is not None else [])


__all__ = ["CHECK", "MAX_NAMED", "evaluate"]
