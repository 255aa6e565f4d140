"""What the fabric checks read (checks.shape: the one shape of a check): the latest records, the
topology, the section being built (its ports as the sweep and the link-state evidence left them, and
what the checks run before wrote into it), the counter history, the link-state evidence, and the
inputs a fabric capability names. A check reads these and never changes them: what it derives goes
into the section through its Outcome.

The capabilities (what must be present for a check to run; pipeline.fabric_checks.present computes
them, never from the fabric kind):
  topology             a fresh discovery (DiscoveryData)
  host_lids            ... one that reads each CA port's LID (DiscoveryData.reads_lids: ibnetdiscover, not LLDP)
  forwarding_tables    a source yielded LftData
  subnet_manager       a source yielded SmData
  pause_frames         a sweep yielded PFC pause frames (SweepData.pause)
  transceiver_readings a source yielded the switches' optics (SwitchOpticsData)
  switch_vitals        a source yielded the switches' fans, power supplies, temperatures (SwitchVitalsData)
  scheduler_topology   a configured Slurm topology.conf/.yaml was read (SchedulerTopologyData)
  running_jobs         a job source lists the running jobs (ClusterJobsData)
  design               a design file was read (DesignData)
  saturating_counters  the sweep yielded a counter that saturates (not one that wraps: Ethernet's ifTable)
  counter:<name>       the sweep yielded that counter (checks.shape.counters)
and the fresh records by their type's name (FRESH_RECORDS: `SweepData`, a sweep within its staleness bound).

Each is there only while it is fresh in this build: `topology` is a discovery within its source's staleness
bound (the structure a failed discovery leaves is still the sweep's input, but no verdict of the topology's
own: names, design, drift, placement); the counters and pause frames are the sweep's being judged. Nothing
remembered stands in for them (a sweep that failed takes its checks away: no status, never an old OK)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

from fabricmon.model.fabric import FabricSection, SweepData, Topology
from fabricmon.model.history import CounterHistory
from fabricmon.model.jobs import JobsSection
from fabricmon.model.link_ability import LinkAbility
from fabricmon.model.snapshot import SourceState

CAPABILITIES = ("topology", "host_lids", "forwarding_tables", "subnet_manager", "pause_frames", "transceiver_readings",
                "switch_vitals", "scheduler_topology", "running_jobs", "design", "saturating_counters")
FRESH_RECORDS = ("SweepData",)      # record types a fabric check needs fresh, by name
Key = tuple[str, int]


@dataclass(frozen=True, slots=True)
class SweepRead:
    """What one sweep got from one switch."""
    unanswered: int                  # queries left unanswered after retries
    queries: int                     # queries sent
    failed: tuple[str, ...] = ()     # what went unanswered (counters, state)


@dataclass(frozen=True, slots=True)
class FabricInputs:
    states: Mapping[str, SourceState]
    topo: Topology
    sec: FabricSection                  # the section being built: read here, written only by an Outcome
    now: float
    history: CounterHistory             # the error counters' history (the sweep's, through the one intake)
    sweep: SweepData | None = None      # the latest sweep
    new_sweep: bool = False             # ... not judged before (counts over consecutive sweeps advance)
    abilities: Mapping[Key, LinkAbility] = field(default_factory=dict)   # what each port may train at
    reads: Mapping[str, Sequence[SweepRead]] = field(default_factory=dict)   # each switch's last sweeps
    last_read: Mapping[str, float] = field(default_factory=dict)      # ... the data time of its last full read
    flagged: frozenset[tuple[str, str, int]] = frozenset()   # (check, switch, port) not OK at some build
    jobs: JobsSection | None = None     # the running jobs (after pipeline.jobs placed the findings)


__all__ = ["CAPABILITIES", "FRESH_RECORDS", "FabricInputs", "Key", "SweepRead"]
