"""NCCL RAS's verdicts on the jobs of this node (docs/nccl.md#ras). Pure: the RAS records
(model.nccl.RasData, from JSON or text alike) and this node's ports in, findings out.

- nccl_ras_peer: a communicator with ranks whose process did not answer RAS, dead or unresponsive
  (WARNING, class watch: the job is hung or dying; the node that reports it is not the faulty one unless
  the peer is on it), naming each missing rank RAS names and, where that rank's host is this node, the
  state of this node's ports. One OK when every communicator has all its ranks.
- nccl_ras_stalled: a communicator whose ranks are at different operation counts of one collective,
  the same counts in two answers one after the other (WARNING, class watch): the ranks are not moving,
  the job is hung at that operation. One answer alone is no verdict (ranks launch a collective a few
  microseconds apart: a mismatch in one answer is often a snapshot mid-flight), so a mismatch seen once
  holds back the OK until the next answer says. One OK when no communicator has one.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from fabricmon.checks.shape import Outcome, outcome_of, report
from fabricmon.model.finding import OK, WARNING, WATCH, Finding
from fabricmon.model.nccl import RasComm, RasData, RasMismatch, RasPeer, RasRank
from fabricmon.model.ports import PortView
from fabricmon.model.snapshot import source_data

if TYPE_CHECKING:
    from fabricmon.checks.node_inputs import NodeInputs

CHECK = "nccl_ras_peer"
STALLED = "nccl_ras_stalled"
MAX_NAMED = 8           # ranks named per finding (the rest counted)

Key = tuple[str, str]   # (communicator hash, collective)
Signature = tuple[str, tuple[tuple[int, int], ...]]


def _where(host: str, pid: int, cuda: int, nvml: int) -> str:
    if pid < 0:
        return " (its process not named by RAS)" if host == "unknown" else f" on {host}"
    return f" on {host} (pid {pid}, CUDA device {cuda}, NVML device {nvml})"


def _here(host: str, local: str, ports: Mapping[tuple[str, int], PortView]) -> str:
    if not local or host.split(".")[0] != local:
        return ""
    states = ", ".join(f"{d} port {n} {'up' if v.up else 'DOWN'}" for (d, n), v in sorted(ports.items()))
    return f" (this node; its ports: {states or 'none seen'})"


def _peer(p: RasPeer, local: str, ports: Mapping[tuple[str, int], PortView]) -> str:
    why = "dead" if p.dead else "unresponsive"
    return f"rank {p.rank}{_where(p.host, p.pid, p.cuda_dev, p.nvml_dev)} is {why}{_here(p.host, local, ports)}"


def _named(items: list[str], total: int) -> str:
    shown = items[:MAX_NAMED]
    more = total - len(shown)
    if more <= 0:
        return "; ".join(shown)
    return "; ".join(shown + [f"{more} more not named"]) if shown else f"{more} not named by RAS"


def _missing(c: RasComm, data: RasData, ports: Mapping[tuple[str, int], PortView]) -> Finding:
    gone = [p for p in c.missing if p.unresponsive or p.dead]
    named = _named([_peer(p, data.local_host, ports) for p in gone], max(c.unreachable, len(gone)))
    return Finding(CHECK, f"comm:{c.hash}", None, WARNING,
                   f"NCCL communicator {c.hash}: {c.unreachable} of its {c.size} ranks did not answer RAS: {named}: "
                   "the job is hung or dying there; check that host's node daemon and ports, and the job's log",
                   klass=WATCH)


def _rank(r: RasRank, local: str, ports: Mapping[tuple[str, int], PortView]) -> str:
    return f"rank {r.rank} at {r.count}{_where(r.host, r.pid, r.cuda_dev, r.nvml_dev)}{_here(r.host, local, ports)}"


def _stalled(c: RasComm, m: RasMismatch, data: RasData, ports: Mapping[tuple[str, int], PortView]) -> Finding:
    groups = ", ".join(f"{n} rank{'s' if n > 1 else ''} at {count}" for count, n in m.groups)
    named = _named([_rank(r, data.local_host, ports) for r in m.named], len(m.named))
    return Finding(STALLED, f"comm:{c.hash}", None, WARNING,
                   f"NCCL communicator {c.hash} ({c.size} ranks): its ranks have stopped at different {m.collective} "
                   f"operation counts, the same in two RAS answers: {groups}"
                   + (f"; RAS names {named}" if named else "")
                   + ": the job is hung at that operation; the ranks at the odd count (or the host they share) "
                   "are where to look, the job's log says which operation", klass=WATCH)


@dataclass(slots=True)
class StalledState:
    """The mismatches of the last answer read (queried_at), to compare the next one with."""
    queried_at: float = 0.0
    seen: dict[Key, Signature] = field(default_factory=dict)     # key -> RasMismatch.signature
    stuck: set[Key] = field(default_factory=set)                           # the same in two answers running


def evaluate(data: RasData, ports: Mapping[tuple[str, int], PortView],
             state: StalledState | None = None) -> list[Finding]:
    """The findings of one RAS answer; `state` carries the last answer's mismatches (no state: every
    mismatch is seen for the first time, and none is a verdict yet)."""
    if data.refused or not data.version:
        return []                               # not read: fabricmon_nccl_ras_refused says why
    st = state if state is not None else StalledState()
    now = {(c.hash, m.collective): m.signature for c in data.comms for m in c.mismatches}
    if data.queried_at != st.queried_at:        # a new answer: the same mismatch twice running is stuck
        st.stuck = {k for k, sig in now.items() if st.seen.get(k) == sig}
        st.seen, st.queried_at = now, data.queried_at
    out = [_missing(c, data, ports) for c in data.comms if c.unreachable]
    if not out:
        out.append(Finding(CHECK, "", None, OK, f"NCCL {data.version}: every rank of every communicator answered RAS",
                           klass=WATCH))
    stalled = [_stalled(c, m, data, ports) for c in data.comms for m in c.mismatches
               if (c.hash, m.collective) in st.stuck]
    if stalled:
        out.extend(stalled)
    elif not now:
        out.append(Finding(STALLED, "", None, OK, f"NCCL {data.version}: no communicator has ranks at different "
                           "operation counts", klass=WATCH))
    return out                                  # a mismatch seen once: no stalled verdict, no OK either


class NcclRas:
    """nccl_ras_peer, nccl_ras_stalled (checks.shape): NCCL RAS's missing ranks and stalled
    communicators, named by their hosts and this node's ports."""
    reports = (report(CHECK, "RasData"), report(STALLED, "RasData"))
    settings = None

    def __init__(self) -> None:
        self.state = StalledState()

    def run(self, inputs: NodeInputs) -> Outcome:
        ras = source_data(inputs.states, RasData)
        return outcome_of(evaluate(ras, inputs.ib.ports, self.state) if ras is not None else [])


__all__ = ["CHECK", "MAX_NAMED", "NcclRas", "STALLED", "StalledState", "evaluate"]
