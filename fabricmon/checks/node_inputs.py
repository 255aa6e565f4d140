"""What the node checks read (checks.shape: the one shape of a check): the latest records, the merged
port inventory, the counter history, the RoCE views, and the sections the checks run before wrote (the
NCCL join reads the GPU section's affinity). A check reads these and never changes them: what it
derives goes into the sections through its Outcome.

What must be present for a node check to run (pipeline.node's present): the name of each record type
a source yielded (`OpticsData`, `KernelLogData`, `NcclData`, `RasData`, ...), and
  ports                a port inventory with at least one port
  roce                 a RoCE port (model.roce.roce_targets)
  restricted_counters  the sysfs source names devices whose counters it does not read
  saturating_counters  a port read a counter that saturates
  counter:<name>       a port read that counter (checks.shape.counters)"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from fabricmon.model.ber import BerPort
from fabricmon.model.gpu import GpuData
from fabricmon.model.history import CounterHistory
from fabricmon.model.ports import Inventory
from fabricmon.model.roce import RoceView
from fabricmon.model.snapshot import IbSection, Sections, SourceState


@dataclass(frozen=True, slots=True)
class NodeInputs:
    states: Mapping[str, SourceState]
    inv: Inventory                      # the merge of the port records
    ib: IbSection                       # its ports, sorted, with each port's saturated counters
    history: CounterHistory
    now: float
    inventory_known: bool               # every inventory source answered (or one did, with ports)
    where: str                          # where the port inventory was looked for (the UNKNOWN line)
    views: Sequence[RoceView] = ()
    gpus: GpuData | None = None         # the GPUs (NVML), looked up once for the checks that read them
    built: Sections | None = None       # the sections being built: read here, composed only from derived sub-sections
    ber: Sequence[BerPort] = ()         # the ports whose physical-layer counters a source read (pipeline.ber)


__all__ = ["NodeInputs"]
