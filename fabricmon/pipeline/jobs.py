"""Which jobs a finding hurts: one annotation step applied to the findings of either
configuration after the checks ran (the checks know nothing of jobs).

- Node daemon: every WARNING/CRITICAL finding carries the jobs running on the node
  (NodeJobsData from the slurm source).
- Fabric collector: from every running job's hosts (ClusterJobsData, one squeue per sweep) and
  the topology, a finding about a switch names only the jobs it can hurt:
  - a host-facing port: the jobs with a node on that host;
  - an uplink of a switch (and a whole-leaf finding: ECMP imbalance, missing uplinks, routing):
    the jobs with nodes below that switch *and* nodes elsewhere (their traffic crosses the
    uplinks); a job confined below the switch is not named;
  - a down port towards a lower switch: the same rule for the subtree behind that port;
  - a whole spine or core switch: the jobs with nodes below it whose leaves are not all below
    one single switch of the level beneath (their traffic can cross it).
  Hosts are mapped to leaves by the first word of each CA's node description (`node01 mlx5_0`
  is host node01), which is how hosts name their HCAs; a job host with no CA in the topology
  is counted (`unmapped_hosts`), never guessed.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field, replace

from fabricmon.checks import OK, Finding
from fabricmon.model.fabric import FabricPort, FabricSection, Topology
from fabricmon.model.jobs import JobRef, JobsSection
from fabricmon.model.snapshot import SourceState
from fabricmon.parsers.slurm import ClusterJobsData, NodeJobsData


def _data(states: Mapping[str, SourceState], records: type) -> object:
    st = next((s for s in states.values() if s.records is records and s.enabled), None)
    return st.data if st is not None else None


def _sorted_refs(jobs: Iterable[JobRef]) -> tuple[JobRef, ...]:
    return tuple(sorted(jobs, key=lambda j: (len(j.job_id), j.job_id)))


def annotate(findings: list[Finding], jobs_for) -> list[Finding]:
    """Each WARNING/CRITICAL finding with the jobs `jobs_for(finding)` names (OK ones unchanged)."""
    out = []
    for f in findings:
        if f.status != OK:
            jobs = jobs_for(f)
            if jobs:
                f = replace(f, jobs=jobs)
        out.append(f)
    return out


# --- node -------------------------------------------------------------------------------------

def node_jobs(states: Mapping[str, SourceState], findings: list[Finding]) -> tuple[JobsSection | None, list[Finding]]:
    """The node's jobs section (None without a job source) and the findings naming them."""
    data = _data(states, NodeJobsData)
    if not isinstance(data, NodeJobsData):
        return None, findings
    sec = JobsSection(jobs=dict(data.jobs), lookup_failures=data.lookup_failures, ended=data.ended,
                      node=data.node, present=data.slurmd_present)
    refs = _sorted_refs(sec.jobs.values())
    return sec, annotate(findings, lambda f: refs) if refs else findings


# --- fabric -----------------------------------------------------------------------------------

def host_of(node_description: str) -> str:
    """A CA's host name: the first word of its node description (`node01 mlx5_0` -> node01)."""
    words = node_description.split()
    return words[0] if words else ""


@dataclass(slots=True)
class JobMap:
    """Hosts and jobs placed on the topology's leaves (built once per topology and job list)."""
    topo: Topology
    host_leaves: dict[str, set[str]] = field(default_factory=dict)     # host -> leaf guids it is cabled to
    job_leaves: dict[str, frozenset[str]] = field(default_factory=dict)
    job_hosts: dict[str, frozenset[str]] = field(default_factory=dict)
    refs: dict[str, JobRef] = field(default_factory=dict)
    unmapped: int = 0
    _below: dict[str, frozenset[str]] = field(default_factory=dict)

    @classmethod
    def build(cls, topo: Topology, jobs: ClusterJobsData) -> JobMap:
        m = cls(topo)
        for guid, sw in topo.switches.items():
            for lk in sw.links.values():
                if lk.remote_type != "Switch":
                    host = host_of(lk.remote_name)
                    if host:
                        m.host_leaves.setdefault(host, set()).add(guid)
        unmapped = set()
        for job in jobs.jobs:
            if job.state != "RUNNING":
                continue
            leaves: set[str] = set()
            for h in job.nodes:
                got = m.host_leaves.get(h) or m.host_leaves.get(h.split(".")[0])
                if got:
                    leaves |= got
                else:
                    unmapped.add(h)
            m.refs[job.job_id] = job.ref
            m.job_leaves[job.job_id] = frozenset(leaves)
            m.job_hosts[job.job_id] = frozenset(job.nodes)
        m.unmapped = len(unmapped)
        return m

    def children(self, guid: str) -> list[str]:
        """The lower-level switches cabled to this one."""
        sw = self.topo.switches.get(guid)
        lvl = self.topo.levels.get(guid, 0)
        if sw is None:
            return []
        return sorted({lk.remote_guid for lk in sw.links.values() if lk.remote_type == "Switch"
                       and 0 < self.topo.levels.get(lk.remote_guid, 0) < lvl})

    def below(self, guid: str) -> frozenset[str]:
        """The leaves in this switch's subtree (a leaf: itself)."""
        got = self._below.get(guid)
        if got is None:
            lvl = self.topo.levels.get(guid, 0)
            if lvl <= 1:
                got = frozenset({guid}) if lvl == 1 else frozenset()
            else:
                self._below[guid] = frozenset()         # guards a malformed (cyclic) topology
                got = frozenset().union(*(self.below(c) for c in self.children(guid)))
            self._below[guid] = got
        return got

    # the rules ---------------------------------------------------------------------------
    def _crossing(self, under: frozenset[str]) -> set[str]:
        """Jobs with nodes under these leaves and nodes elsewhere."""
        return {j for j, lv in self.job_leaves.items() if lv & under and not lv <= under}

    def through(self, guid: str) -> set[str]:
        """Jobs whose traffic can cross this switch (level >= 2): nodes below it, leaves not all
        below one single child."""
        under = self.below(guid)
        kids = [self.below(c) for c in self.children(guid)]
        return {j for j, lv in self.job_leaves.items() if lv & under and not any(lv <= k for k in kids)}

    def jobs_for(self, guid: str, port: int | None, ports: Mapping[tuple[str, int], FabricPort]) -> set[str]:
        """The jobs a finding about this switch (and port, if any) can hurt. `ports`: the
        section's ports, which keep the role and link of a port that went down."""
        if guid not in self.topo.switches:
            return set()
        info = ports.get((guid, port)) if port is not None else None
        role = info.role if info is not None else None
        link = info.link if info is not None else None
        if role == "host" and link is not None:
            host = host_of(link.remote_name)
            return {j for j, hs in self.job_hosts.items() if host in hs or any(h.split(".")[0] == host for h in hs)}
        level = self.topo.levels.get(guid, 0)
        if role == "down" and link is not None:
            return self._crossing(self.below(link.remote_guid))
        if role == "up" or level == 1:
            return self._crossing(self.below(guid))
        return self.through(guid) if level >= 2 else set()


class FabricJobs:
    """The fabric collector's annotation step: keeps the job map between builds (rebuilt only
    when the topology or the job list changed)."""

    def __init__(self, max_series: int):
        self.max_series = max_series
        self._key: tuple[float, float, int] | None = None
        self._map: JobMap | None = None
        self._through: dict[str, set[str]] = {}

    def apply(self, states: Mapping[str, SourceState], sec: FabricSection, topo: Topology,
              findings: list[Finding]) -> tuple[JobsSection | None, list[Finding]]:
        st = next((s for s in states.values() if s.records is ClusterJobsData and s.enabled), None)
        if st is None or not isinstance(st.data, ClusterJobsData) or not st.data.configured:
            return None, findings
        key = (st.data_time, topo.time, id(topo))
        if key != self._key or self._map is None:
            self._map = JobMap.build(topo, st.data)
            self._key = key
            self._through = {}
        m = self._map
        out = JobsSection(scope="fabric", jobs=dict(m.refs), unmapped_hosts=m.unmapped,
                          hosts={j: tuple(sorted(h)) for j, h in m.job_hosts.items()})
        # job -> switches of this shard it can cross, at most max_series pairs in all
        through = self._through
        for g in sec.switches:
            if topo.levels.get(g, 0) >= 2 and g not in through:
                through[g] = m.through(g)
        pairs = 0
        for j in sorted(m.job_leaves, key=lambda j: (len(j), j)):
            lv = m.job_leaves[j]
            sws = [g for g in sec.switches if (topo.levels.get(g, 0) == 1 and g in lv)
                   or (len(lv) > 1 and j in through.get(g, ()))]
            room = max(0, self.max_series - pairs)
            if len(sws) > room:
                out.dropped_series += len(sws) - room
                sws = sws[:room]
            pairs += len(sws)
            if sws:
                out.switches[j] = tuple(sws)

        def jobs_for(f: Finding) -> tuple[JobRef, ...]:
            refs = _sorted_refs(m.refs[j] for j in m.jobs_for(f.device, f.port, sec.ports))
            if refs:
                key = (f.device, f.port)
                have = out.finding_jobs.get(key, ())
                out.finding_jobs[key] = tuple(dict.fromkeys(have + tuple(r.job_id for r in refs)))
            return refs
        return out, annotate(findings, jobs_for)


__all__ = ["FabricJobs", "JobMap", "annotate", "host_of", "node_jobs"]
