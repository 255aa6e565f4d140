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
  Hosts are mapped to leaves by the topology's host names (model.fabric.host_name: the node name
  map's name, else the first word of the CA's node description, `node01 mlx5_0` is host node01,
  as rdma-ndd sets it; a CA with the firmware's default description is its GUID, never merged
  with others); CAs inside a switch (SHARP Aggregation Nodes) are no hosts. A job host with no
  CA in the topology is counted (`unmapped_hosts`), never guessed.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field, replace

from fabricmon.checks import OK, Finding
from fabricmon.model.fabric import FabricPort, FabricSection, Topology
from fabricmon.model.jobs import JobRef, JobsSection
from fabricmon.model.snapshot import SourceState, source_data, source_state
from fabricmon.parsers.slurm import ClusterJobsData, NodeJobsData


def _sorted_refs(jobs: Iterable[JobRef]) -> tuple[JobRef, ...]:
    return tuple(sorted(jobs, key=lambda j: (len(j.job_id), j.job_id)))


def annotate(findings: list[Finding], jobs_for: Callable[[Finding], tuple[JobRef, ...]]) -> list[Finding]:
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
    data = source_data(states, NodeJobsData)
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
    """Hosts and jobs placed on the topology's leaves (built once per topology and job list),
    with the indexes that keep a finding's lookup proportional to the jobs near it."""
    topo: Topology
    host_leaves: dict[str, set[str]] = field(default_factory=dict)     # host -> leaf guids it is cabled to
    job_leaves: dict[str, frozenset[str]] = field(default_factory=dict)
    job_hosts: dict[str, frozenset[str]] = field(default_factory=dict)
    refs: dict[str, JobRef] = field(default_factory=dict)
    leaf_jobs: dict[str, set[str]] = field(default_factory=dict)       # leaf -> jobs with a node below it
    host_jobs: dict[str, set[str]] = field(default_factory=dict)       # host (short name) -> its jobs
    unmapped: int = 0
    _below: dict[str, frozenset[str]] = field(default_factory=dict)
    _kids: dict[str, dict[str, list[frozenset[str]]]] = field(default_factory=dict)   # switch -> leaf -> its kids' leaves
    _parents: dict[str, list[str]] | None = None
    _ancestors: dict[str, frozenset[str]] = field(default_factory=dict)
    _through: dict[str, set[str]] = field(default_factory=dict)

    @classmethod
    def build(cls, topo: Topology, jobs: ClusterJobsData) -> JobMap:
        m = cls(topo)
        for guid, sw in topo.switches.items():
            for lk in sw.links.values():
                host = topo.hosts.get(lk.remote_guid, "") if lk.remote_type != "Switch" else ""
                if host:
                    for name in {host, host.split(".")[0]} - {""}:      # a node description may hold the FQDN
                        m.host_leaves.setdefault(name, set()).add(guid)
        unmapped = set()
        for job in jobs.jobs:
            if job.state != "RUNNING":
                continue
            leaves: set[str] = set()
            for h in job.nodes:
                short = h.split(".")[0]
                got = m.host_leaves.get(h) or m.host_leaves.get(short)
                m.host_jobs.setdefault(short, set()).add(job.job_id)
                if got:
                    leaves |= got
                else:
                    unmapped.add(h)
            m.refs[job.job_id] = job.ref
            m.job_leaves[job.job_id] = frozenset(leaves)
            m.job_hosts[job.job_id] = frozenset(job.nodes)
            for lf in leaves:
                m.leaf_jobs.setdefault(lf, set()).add(job.job_id)
        m.unmapped = len(unmapped)
        return m

    # the topology, upwards and downwards ----------------------------------------------------
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

    def ancestors(self, guid: str) -> frozenset[str]:
        """Every higher-level switch above this one."""
        if self._parents is None:
            parents: dict[str, list[str]] = {}
            for g in self.topo.switches:
                for c in self.children(g):
                    parents.setdefault(c, []).append(g)
            self._parents = parents
        got = self._ancestors.get(guid)
        if got is None:
            self._ancestors[guid] = frozenset()         # guards a cycle
            ps = self._parents.get(guid, [])
            got = frozenset(ps).union(*(self.ancestors(p) for p in ps))
            self._ancestors[guid] = got
        return got

    def _jobs_below(self, under: frozenset[str]) -> set[str]:
        out: set[str] = set()
        for lf in under:
            out |= self.leaf_jobs.get(lf, set())
        return out

    # the rules ---------------------------------------------------------------------------
    def _crossing(self, under: frozenset[str]) -> set[str]:
        """Jobs with nodes under these leaves and nodes elsewhere."""
        return {j for j in self._jobs_below(under) if not self.job_leaves[j] <= under}

    def crosses(self, job: str, guid: str) -> bool:
        """The job's traffic can cross this switch (level >= 2): nodes below it, and its leaves
        not all below one single child (else that child carries it)."""
        lv, under = self.job_leaves[job], self.below(guid)
        if not lv & under:
            return False
        if not lv <= under:
            return True                 # traffic leaving the subtree goes up through this switch
        kids = self._kids.get(guid)
        if kids is None:
            kids = {}
            for c in self.children(guid):
                sub = self.below(c)
                for lf in sub:
                    kids.setdefault(lf, []).append(sub)
            self._kids[guid] = kids
        return not any(lv <= k for k in kids.get(next(iter(lv)), ()))

    def through(self, guid: str) -> set[str]:
        got = self._through.get(guid)
        if got is None:
            got = self._through[guid] = {j for j in self._jobs_below(self.below(guid)) if self.crosses(j, guid)}
        return got

    def switches_of(self, job: str) -> set[str]:
        """Every switch the job's traffic can cross: its leaves, and for a multi-leaf job the
        higher switches between them."""
        lv = self.job_leaves[job]
        if len(lv) <= 1:
            return set(lv)
        ups = frozenset().union(*(self.ancestors(lf) for lf in lv))
        return set(lv) | {g for g in ups if self.crosses(job, g)}

    def jobs_for(self, guid: str, port: int | None, ports: Mapping[tuple[str, int], FabricPort]) -> set[str]:
        """The jobs a finding about this switch (and port, if any) can hurt. `ports`: the
        section's ports, which keep the role and link of a port that went down."""
        if guid not in self.topo.switches:
            return set()
        info = ports.get((guid, port)) if port is not None else None
        role = info.role if info is not None else None
        link = info.link if info is not None else None
        if role == "host" and link is not None:
            host = self.topo.hosts.get(link.remote_guid) or host_of(link.remote_name)
            return set(self.host_jobs.get(host.split(".")[0], ()))
        level = self.topo.levels.get(guid, 0)
        if role == "down" and link is not None:
            return self._crossing(self.below(link.remote_guid))
        if role == "up" or level == 1:
            return self._crossing(self.below(guid))
        return set(self.through(guid)) if level >= 2 else set()


class FabricJobs:
    """The fabric collector's annotation step: keeps the job map and every job's switches
    between builds (recomputed only when the topology or the running jobs changed)."""

    def __init__(self, max_series: int):
        self.max_series = max_series
        self._key: tuple[int, float, tuple[object, ...], tuple[str, ...]] | None = None
        self._map: JobMap | None = None
        self._switches: dict[str, tuple[str, ...]] = {}
        self._dropped = 0

    def apply(self, states: Mapping[str, SourceState], sec: FabricSection, topo: Topology,
              findings: list[Finding]) -> tuple[JobsSection | None, list[Finding]]:
        st = source_state(states, ClusterJobsData)
        if st is None or not isinstance(st.data, ClusterJobsData) or not st.data.configured:
            return None, findings
        key = (id(topo), topo.time, tuple(st.data.jobs), tuple(sec.switches))
        if key != self._key or self._map is None:
            self._map = m = JobMap.build(topo, st.data)
            self._key = key
            # job -> switches of this shard it can cross, at most max_series pairs in all: once the
            # cap is reached the remaining jobs are counted, not placed (their cost is not paid either)
            mine = set(sec.switches)
            self._switches, self._dropped, pairs = {}, 0, 0
            for j in sorted(m.job_leaves, key=lambda j: (len(j), j)):
                if pairs >= self.max_series:
                    self._dropped += 1
                    continue
                sws = sorted(m.switches_of(j) & mine)
                if pairs + len(sws) > self.max_series:
                    self._dropped += 1          # a job is exported whole or not at all
                    continue
                pairs += len(sws)
                if sws:
                    self._switches[j] = tuple(sws)
        m = self._map
        out = JobsSection(scope="fabric", jobs=dict(m.refs), unmapped_hosts=m.unmapped,
                          hosts={j: tuple(sorted(h)) for j, h in m.job_hosts.items()},
                          switches=self._switches, dropped_series=self._dropped)

        def jobs_for(f: Finding) -> tuple[JobRef, ...]:
            refs = _sorted_refs(m.refs[j] for j in m.jobs_for(f.device, f.port, sec.ports))
            if refs:
                key = (f.device, f.port)
                have = out.finding_jobs.get(key, ())
                out.finding_jobs[key] = tuple(dict.fromkeys(have + tuple(r.job_id for r in refs)))
            return refs
        return out, annotate(findings, jobs_for)


__all__ = ["FabricJobs", "JobMap", "annotate", "host_of", "node_jobs"]
