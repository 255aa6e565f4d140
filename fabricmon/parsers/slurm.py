"""Slurm text -> typed records: host lists, `squeue` lines, slurm.conf keys and slurmd step
sockets. Pure functions; the sources that fetch the text are sources/slurm.py (a node's own
jobs) and sources/cluster_jobs.py (every running job, once per sweep).

- Host lists come compressed (`node[0001-0004,0010],gpu7`). `expand_hostlist` expands them as
  `scontrol show hostnames` does: the zero padding of a range is the width of its low bound
  (`n[09-11]` -> n09 n10 n11, `n[1-010]` -> n1 ... n10), several bracket groups multiply
  (`a[1-2]b[3-4]` -> a1b3 a1b4 a2b3 a2b4), items are separated by commas or white space.
- `squeue --noheader --format=SQUEUE_FORMAT` prints `jobid|user|state|nodelist|name`; the name
  comes last and is split off once, so a `|` inside a job name stays in the name.
- A running step leaves a socket `<node>_<jobid>.<stepid>` in its node's slurmd spool
  directory (what `scontrol listpids` reads); only sockets named after this node count.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Any

from fabricmon.model.jobs import JobRef
from fabricmon.model.slurm_topology import TopologyLine
from fabricmon.parsers.errors import ParseError

MAX_HOSTS = 100_000         # one host list expands to at most this many names
SQUEUE_FORMAT = "%A|%u|%T|%N|%j"
RUNNING = "RUNNING"
DEFAULT_SPOOL_DIR = "/var/spool/slurmd"

_RANGE = re.compile(r"^(\d+)(?:-(\d+))?$")
_JOB_ID = re.compile(r"^\d+$")
_STEP_SOCKET = re.compile(r"^(?P<node>.+)_(?P<job>\d+)\.(?P<step>\d+)$")


@dataclass(frozen=True, slots=True)
class SlurmJob:
    """One job as squeue prints it."""
    job_id: str
    user: str
    state: str
    nodes: tuple[str, ...]
    name: str

    @property
    def ref(self) -> JobRef:
        return JobRef(self.job_id, self.user, self.name)


@dataclass(slots=True)
class NodeJobsData:
    """The slurm source's records on a node: the jobs with a running step on this node (from its
    slurmd's step sockets), each with its user and name once looked up. A job whose lookup has
    not answered yet has an empty user and name; `lookup_failures` counts lookups that failed
    since the daemon started (slurmctld down or slow), `ended` jobs found ended at lookup."""
    node: str
    spool_dir: str
    jobs: dict[str, JobRef] = field(default_factory=dict)
    lookup_failures: int = 0
    ended: int = 0
    slurmd_present: bool = True       # the spool directory exists (a slurmd runs on this host)


@dataclass(slots=True)
class ClusterJobsData:
    """The fabric collector's records: every running job and its nodes (one squeue per sweep)."""
    jobs: list[SlurmJob] = field(default_factory=list)
    skipped_lines: int = 0
    configured: bool = True           # False: Slurm's tools are installed, but no cluster is configured here


def _split_top(text: str) -> list[str]:
    """Items of a host list: commas and white space outside brackets separate them."""
    items: list[str] = []
    cur: list[str] = []
    depth = 0
    for ch in text:
        if ch == "[":
            depth += 1
            if depth > 1:
                raise ParseError(f"nested '[' in host list {text[:120]!r}")
        elif ch == "]":
            depth -= 1
            if depth < 0:
                raise ParseError(f"unbalanced ']' in host list {text[:120]!r}")
        if depth == 0 and (ch == "," or ch.isspace()):
            if cur:
                items.append("".join(cur))
            cur = []
            continue
        cur.append(ch)
    if depth:
        raise ParseError(f"unbalanced '[' in host list {text[:120]!r}")
    if cur:
        items.append("".join(cur))
    return items


def _expand_ranges(body: str, whole: str) -> list[str]:
    out: list[str] = []
    for part in body.split(","):
        m = _RANGE.match(part.strip())
        if not m:
            raise ParseError(f"bad range {part!r} in host list {whole[:120]!r}")
        lo_s, hi_s = m.group(1), m.group(2) if m.group(2) is not None else m.group(1)
        lo, hi = int(lo_s), int(hi_s)
        if hi < lo:
            raise ParseError(f"reversed range {part!r} in host list {whole[:120]!r}")
        if hi - lo >= MAX_HOSTS:
            raise ParseError(f"range {part!r} expands to over {MAX_HOSTS} hosts")
        width = len(lo_s)
        out.extend(str(i).zfill(width) for i in range(lo, hi + 1))
    return out


def _expand_item(item: str, whole: str) -> list[str]:
    names = [""]
    pos = 0
    for m in re.finditer(r"\[([^\]]*)\]", item):
        prefix = item[pos:m.start()]
        nums = _expand_ranges(m.group(1), whole)
        names = [n + prefix + x for n in names for x in nums]
        if len(names) > MAX_HOSTS:
            raise ParseError(f"host list {whole[:120]!r} expands to over {MAX_HOSTS} hosts")
        pos = m.end()
    tail = item[pos:]
    return [n + tail for n in names]


def expand_hostlist(text: str) -> list[str]:
    """`node[0001-0004,0010]` -> node0001 ... node0004 node0010, in order, duplicates kept as
    Slurm keeps them. Raises ParseError for a list scontrol would reject (an empty, reversed or
    non-numeric range, an unbalanced bracket) or one of over MAX_HOSTS names."""
    out: list[str] = []
    for item in _split_top(text):
        out.extend(_expand_item(item, text))
        if len(out) > MAX_HOSTS:
            raise ParseError(f"host list {text[:120]!r} expands to over {MAX_HOSTS} hosts")
    return out


def parse_squeue(text: str) -> tuple[list[SlurmJob], int]:
    """Lines of `squeue --noheader --format=SQUEUE_FORMAT` -> (jobs, lines skipped). A line that
    does not parse (a job name with a newline, a bad host list) is skipped and counted, never
    fatal; what squeue prints on stderr is the caller's business."""
    jobs: list[SlurmJob] = []
    skipped = 0
    for line in text.splitlines():
        if not line.strip():
            continue
        parts = line.split("|", 4)
        if len(parts) != 5 or not _JOB_ID.match(parts[0].strip()) or not parts[2].strip().isupper():
            skipped += 1
            continue
        job_id, user, state, nodelist = (p.strip() for p in parts[:4])
        try:
            nodes = tuple(expand_hostlist(nodelist)) if nodelist and nodelist != "(null)" else ()
        except ParseError:
            skipped += 1
            continue
        jobs.append(SlurmJob(job_id, user, state, nodes, parts[4].rstrip("\r")))
    return jobs, skipped


# What Slurm's clients print when no slurm.conf (nor SLURM_CONF, nor configless DNS records) exists.
_NOT_CONFIGURED = ("Could not establish a configuration source", "Unable to process configuration file")


def not_configured(stderr: str) -> bool:
    """A Slurm client failed because this host has no Slurm configuration at all."""
    return any(s in stderr for s in _NOT_CONFIGURED)


def parse_conf_value(text: str, key: str) -> str | None:
    """The value of `key` in slurm.conf text (keys are case-insensitive; the last setting wins;
    `#` starts a comment). None when unset."""
    want = key.lower()
    value = None
    for raw in text.splitlines():
        line = raw.split("#", 1)[0].strip()
        for token in line.split():
            k, sep, v = token.partition("=")
            if sep and k.lower() == want:
                value = v.strip().strip('"')
    return value


def spool_dir(conf_text: str | None, node: str, hostname: str) -> str:
    """slurmd's spool directory for `node`: SlurmdSpoolDir with %n (node name) and %h (host
    name) substituted, or Slurm's default."""
    value = parse_conf_value(conf_text, "SlurmdSpoolDir") if conf_text else None
    value = value or DEFAULT_SPOOL_DIR
    return value.replace("%n", node).replace("%h", hostname)


def step_jobs(names: list[str], node: str) -> list[str]:
    """Job ids with a step socket of `node` among a spool directory's entries, sorted by number.
    Sockets of other nodes (a spool directory shared by several slurmds) are not this node's."""
    jobs = set()
    for n in names:
        m = _STEP_SOCKET.match(n)
        if m and m["node"] == node:
            jobs.add(m["job"])
    return sorted(jobs, key=int)


__all__ = ["DEFAULT_SPOOL_DIR", "MAX_HOSTS", "RUNNING", "SQUEUE_FORMAT", "ClusterJobsData", "NodeJobsData",
           "SlurmJob", "expand_hostlist", "not_configured", "parse_conf_value", "parse_squeue", "parse_topology",
           "parse_topology_conf", "parse_topology_yaml", "spool_dir", "step_jobs"]


def parse_topology_conf(text: str) -> list[TopologyLine]:
    """topology.conf (topology/tree) -> its switch lines, host lists expanded. Keys are case
    insensitive, `#` starts a comment, a trailing `\\` continues a line; a line without
    `SwitchName=`, or with a bad host list, raises ParseError naming its line number."""
    out: list[TopologyLine] = []
    pending, start = "", 0
    for no, raw in enumerate(text.splitlines(), 1):
        body = raw.split("#", 1)[0].rstrip()
        if not pending:
            start = no
        if body.endswith("\\"):
            pending += body[:-1] + " "
            continue
        body, pending = (pending + body).strip(), ""
        if not body:
            continue
        fields: dict[str, str] = {}
        for word in body.split():
            key, sep, value = word.partition("=")
            if not sep:
                raise ParseError(f"topology.conf line {start}: {word!r} is not KEY=VALUE")
            fields[key.lower()] = value
        if not fields.get("switchname"):
            raise ParseError(f"topology.conf line {start}: no SwitchName=")
        try:
            switches = tuple(expand_hostlist(fields["switches"])) if fields.get("switches") else ()
            nodes = tuple(expand_hostlist(fields["nodes"])) if fields.get("nodes") else ()
        except ParseError as exc:
            raise ParseError(f"topology.conf line {start}: {exc}") from exc
        out.append(TopologyLine(start, fields["switchname"], switches, nodes, body))
    return out


def _scalar_keys(node: Any) -> dict[str, Any]:
    """A YAML mapping node's entries whose keys are scalars (a key that is a list or a mapping names no field).
    A key given twice is a ParseError naming it and both lines (not the last one winning, as the config's)."""
    import yaml
    out: dict[str, Any] = {}
    lines: dict[str, int] = {}
    for k, v in node.value:
        if isinstance(k, yaml.ScalarNode):
            line = k.start_mark.line + 1
            if k.value in lines:
                raise ParseError(f"topology.yaml line {line}: duplicate key {k.value!r} (lines {lines[k.value]} "
                                 f"and {line})")
            out[k.value], lines[k.value] = v, line
    return out


def _scalar(node: Any, default: str) -> str:
    """A scalar node's text; `default` for none or for a list or mapping where a scalar belongs."""
    import yaml
    return str(node.value) if isinstance(node, yaml.ScalarNode) else default


def parse_topology_yaml(text: str, name: str = "") -> list[TopologyLine]:
    """topology.yaml (Slurm 25.05+) -> the switch lines of its tree topology: the one named
    `name`, else the first with `cluster_default: true`, else the first tree. Line numbers are the
    `switch:` entries'. Raises ParseError for YAML that does not parse, a file that is not a list
    of topologies, or one without the tree asked for (block topologies are not compared)."""
    import yaml
    try:
        root = yaml.compose(text)
    except yaml.YAMLError as exc:
        raise ParseError(f"topology.yaml: {exc}") from exc
    if not isinstance(root, yaml.SequenceNode):
        raise ParseError("topology.yaml: expected a list of topologies")
    trees: list[tuple[str, bool, yaml.Node]] = []
    for topo in root.value:
        if not isinstance(topo, yaml.MappingNode):
            raise ParseError(f"topology.yaml line {topo.start_mark.line + 1}: a topology is a mapping")
        keys = _scalar_keys(topo)
        if "tree" in keys:
            default = _scalar(keys.get("cluster_default"), "false").lower() == "true"
            trees.append((_scalar(keys.get("topology"), ""), default, keys["tree"]))
    pick = ([t for t in trees if t[0] == name] if name else
            [t for t in trees if t[1]] or trees)
    if not pick:
        raise ParseError(f"topology.yaml: no tree topology{f' named {name!r}' if name else ''} "
                         "(block topologies are not compared)")
    tree = pick[0][2]
    switches = _scalar_keys(tree).get("switches") if isinstance(tree, yaml.MappingNode) else None
    if not isinstance(switches, yaml.SequenceNode):
        raise ParseError(f"topology.yaml line {tree.start_mark.line + 1}: a tree needs a list of switches")
    out: list[TopologyLine] = []
    for sw in switches.value:
        line = sw.start_mark.line + 1
        fields = ({k: v.value for k, v in _scalar_keys(sw).items() if isinstance(v, yaml.ScalarNode)}
                  if isinstance(sw, yaml.MappingNode) else {})
        if not isinstance(fields.get("switch"), str) or not fields["switch"]:
            raise ParseError(f"topology.yaml line {line}: a switch entry needs `switch:`")
        try:
            kids = tuple(expand_hostlist(str(fields["children"]))) if fields.get("children") else ()
            nodes = tuple(expand_hostlist(str(fields["nodes"]))) if fields.get("nodes") else ()
        except ParseError as exc:
            raise ParseError(f"topology.yaml line {line}: {exc}") from exc
        out.append(TopologyLine(line, fields["switch"], kids, nodes, f"switch: {fields['switch']}"))
    return out


def parse_topology(text: str, path: str) -> list[TopologyLine]:
    """The scheduler's topology file by its name: topology.yaml (`.yaml`, `.yml`) or topology.conf."""
    return parse_topology_yaml(text) if path.endswith((".yaml", ".yml")) else parse_topology_conf(text)
