"""The decisions, as pure functions of a published snapshot, the action record and what Slurm says: which
port to isolate and which node to drain, what is refused and why, when an action's clean window starts and
ends. No I/O and no clock: the Remediator (remediation/engine.py) reads the host, calls these and carries
out what they decide through the actuators.

Ports (the fabric collector):
- condemned: a finding of `isolate_port.checks` in `isolate_port.classes` on a switch port (both ends of a
  link are one link: the end the worst finding names is the one set);
- refused, in this order: on the exclusion list; a sharded collector (it does not see the graph); a link
  whose loss cuts a switch off the fabric (a leaf's last active uplink included: the graph is checked
  first); the circuit breaker: more than max(min_cap, max_fraction x cabled switch ports) links out of
  service at once, counting fabricmon's and those found down by others;
- a host port whose host runs a job waits: its node is drained first (drain_node), the port isolated once
  the node is idle;
- a port fabricmon returned, or that someone else returned, is condemned again only by a new error (its
  counters rose since), never by the history that condemned it before.

Nodes (the node daemon for its own findings; the collector for the host behind a host port):
- condemned: a finding of `drain_node.classes` (and `checks`, when set) on this node;
- refused: on the exclusion list; already drained (or down) for another reason (never stolen, never
  overwritten); the circuit breaker: more than max(min_cap, max_fraction x the partition's nodes) nodes of a
  partition drained by fabricmon at once.

The way back: an action in effect is clean while its condemning counters do not rise (a port) or its
condemning finding is absent (a node); after a clean window as long as the one that condemned it (doubled
for each earlier return of the same target) it is returned, but only what fabricmon itself put out."""

from __future__ import annotations

import math
from collections import deque
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field, replace

from fabricmon.checks.settings import COUNTER_CHECKS, ChecksConfig
from fabricmon.model.fabric import FabricSection, host_name
from fabricmon.model.finding import STATUS_NAMES, WARNING, WATCH, Finding, class_of
from fabricmon.model.remediation import (ACT, DONE, DRAIN, DRY_RUN, ISOLATE, OFF, OPEN, PREFIX, RELEASED, RETURNED,
                                         RETURNING, TODO, UNDONE, WAITING, Action, Breaker, Refusal)
from fabricmon.remediation.settings import RemediationConfig, exclusion_for

CHECK = "remediation"           # the name of remediation's own findings (the breaker, a failing action)
Key = tuple[str, int]


@dataclass(frozen=True, slots=True)
class Event:
    """One decision or step, for the log (one line each) and fabricmon_remediation_actions_total."""
    kind: str                   # ISOLATE or DRAIN
    mode: str
    result: str                 # model.remediation.RESULTS, or "" (logged, not counted)
    target: str
    label: str
    what: str                   # "isolate", "drain", "refuse", "return", "clean", "dirty", "release", ...
    why: str
    evidence: str = ""
    cap: str = ""


@dataclass(slots=True)
class Round:
    """What one decision round decided: the actions (replaced, never changed), the refusals, the breakers
    and the events to log and count."""
    actions: dict[str, Action]
    refusals: list[Refusal] = field(default_factory=list)
    breakers: dict[str, Breaker] = field(default_factory=dict)
    events: list[Event] = field(default_factory=list)

    def put(self, a: Action) -> Action:
        self.actions[a.id] = a
        return a


@dataclass(frozen=True, slots=True)
class SlurmNode:
    reason: str                 # "" when not drained
    user: str = ""
    since: str = ""
    state: str = ""             # sinfo's %T: idle, allocated, drained, draining, down, ...


@dataclass(frozen=True, slots=True)
class SlurmView:
    """What Slurm says, read once per round: every node's state and drain reason, its partitions."""
    nodes: Mapping[str, SlurmNode]
    partitions: Mapping[str, tuple[str, ...]]      # node -> its partitions

    def members(self, partition: str) -> list[str]:
        return sorted(n for n, ps in self.partitions.items() if partition in ps)

    def ours(self, node: str) -> bool:
        """Drained by fabricmon (its reason prefix)."""
        n = self.nodes.get(node)
        return n is not None and n.reason.startswith(PREFIX)

    def taken(self, node: str) -> str:
        """Why the node is already out for someone else ("" when it is not): drained or down with a reason
        that is not fabricmon's."""
        n = self.nodes.get(node)
        if n is None or not n.reason or n.reason.startswith(PREFIX):
            if n is not None and n.state.startswith(("down", "fail")) and not n.reason.startswith(PREFIX):
                return f"{node} is {n.state}"
            return ""
        who = f" by {n.user}" if n.user else ""
        when = f" at {n.since}" if n.since else ""
        return f"{node} is already {n.state or 'drained'}{who}{when}: {n.reason!r}"


# --- helpers ------------------------------------------------------------------------------------

def port_label(sec: FabricSection, key: Key) -> str:
    g, p = key
    sw = sec.switches.get(g)
    fp = sec.ports.get(key)
    where = f"{sw.name if sw else g} (0x{g}) port {fp.label if fp else p}"
    lk = fp.link if fp else None
    if lk is not None:
        where += f' to "{lk.remote_name}"' + (f"[{lk.remote_port}]" if lk.remote_port else "")
    return where


def link_ends(sec: FabricSection, key: Key) -> tuple[Key, Key | None]:
    """The port and, for a link between two switches, the other end."""
    fp = sec.ports.get(key)
    lk = fp.link if fp is not None else None
    if lk is not None and lk.remote_type == "Switch" and lk.remote_port:
        return key, (lk.remote_guid, lk.remote_port)
    return key, None


def link_key(ends: tuple[Key, Key | None]) -> tuple[Key, ...]:
    a, b = ends
    return (a,) if b is None else tuple(sorted((a, b)))


def parse_key(text: str) -> Key:
    g, _, p = text.rpartition(":")
    return g, int(p)


def key_text(key: Key) -> str:
    return f"{key[0]}:{key[1]}"


def check_counters(check: str) -> tuple[str, ...]:
    row = COUNTER_CHECKS.get(check)
    return row[0] if row is not None else ()


def counters_now(sec: FabricSection, keys: Iterable[Key], names: Iterable[str]) -> dict[str, int]:
    """The condemning counters' values at the ports (those read), keyed "guid:port:counter"."""
    out: dict[str, int] = {}
    for k in keys:
        fp = sec.ports.get(k)
        if fp is None:
            continue
        for n in names:
            v = fp.counters.get(n)
            if v is not None:
                out[f"{key_text(k)}:{n}"] = int(v)
    return out


def rose(base: Mapping[str, int], now: Mapping[str, int]) -> list[str]:
    """The counters that rose from `base` (a counter missing from either is not judged)."""
    return [f"{k.rsplit(':', 1)[1]} +{now[k] - v} at port {k.rsplit(':', 2)[1]}" for k, v in base.items()
            if k in now and now[k] > v]


def window_of(check: str, checks: ChecksConfig, configured: float | None, default: float) -> float:
    if configured is not None:
        return configured
    cc = checks.counters.get(check)
    return cc.window if cc is not None else default


def cap_of(min_cap: int, fraction: float, size: int) -> int:
    return max(min_cap, math.floor(fraction * size + 1e-9))


def backoff(attempts: int, first: float, most: float) -> float:
    """Seconds before try `attempts + 1` of a failed step: first, doubling, at most `most`."""
    return float(min(most, first * 2.0 ** max(0, attempts - 1)))


def worst_first(findings: Iterable[Finding]) -> list[Finding]:
    return sorted(findings, key=lambda f: (-f.status, f.device, f.port or 0, f.check))


def cabled(sec: FabricSection) -> list[Key]:
    """The fabric's cabled switch ports (hosts and links between switches; not a switch's own
    Aggregation Node, not a port never cabled)."""
    return [k for k, fp in sec.ports.items() if fp.link is not None and fp.role in ("host", "up", "down")]


def out_of_service(sec: FabricSection, actions: Iterable[Action]) -> set[tuple[Key, ...]]:
    """The links out of service now: fabricmon's (open isolate actions, decided or in effect) and every
    cabled link found down (by a pulled cable, a failure or someone else's disable), each link once."""
    out: set[tuple[Key, ...]] = set()
    for a in actions:
        if a.kind == ISOLATE and a.open:
            own = (a.guid, a.port)
            out.add(link_key((own, parse_key(a.peer) if a.peer else None)))
    for k in cabled(sec):
        if not sec.ports[k].up:
            out.add(link_key(link_ends(sec, k)))
    return out


# --- the graph ----------------------------------------------------------------------------------

def switch_graph(sec: FabricSection, removed: set[tuple[Key, ...]]) -> dict[str, dict[str, int]]:
    """The switches and the active links between them (link counts), less the links in `removed`."""
    adj: dict[str, dict[str, int]] = {g: {} for g in sec.switches}
    seen: set[tuple[Key, ...]] = set()
    for k, fp in sec.ports.items():
        lk = fp.link
        if lk is None or lk.remote_type != "Switch" or not fp.up or fp.role not in ("up", "down"):
            continue
        lkey = link_key(link_ends(sec, k))
        if lkey in seen or lkey in removed:
            continue
        far = sec.ports.get((lk.remote_guid, lk.remote_port))
        if far is not None and not far.up:
            continue
        seen.add(lkey)
        a, b = k[0], lk.remote_guid
        adj.setdefault(a, {})
        adj.setdefault(b, {})
        adj[a][b] = adj[a].get(b, 0) + 1
        adj[b][a] = adj[b].get(a, 0) + 1
    return adj


def connected(adj: Mapping[str, Mapping[str, int]], a: str, b: str, without: tuple[str, str]) -> bool:
    """Whether a reaches b over the links of `adj`, one link between `without`'s switches taken away."""
    x, y = without
    seen, todo = {a}, deque([a])
    while todo:
        u = todo.popleft()
        if u == b:
            return True
        for v, n in adj.get(u, {}).items():
            if {u, v} == {x, y} and n <= 1:
                continue
            if v not in seen:
                seen.add(v)
                todo.append(v)
    return False


def cuts_off(sec: FabricSection, key: Key, removed: set[tuple[Key, ...]]) -> str:
    """Why isolating the link at `key` would cut a switch off the fabric ("" when it would not), the
    links in `removed` already out: a leaf's last active uplink, or any link that is its switches'
    only path to each other."""
    fp = sec.ports.get(key)
    lk = fp.link if fp is not None else None
    if fp is None or lk is None or lk.remote_type != "Switch":
        return ""
    if not fp.up:
        return ""                               # already down: taking it out changes no path
    adj = switch_graph(sec, removed)
    a, b = key[0], lk.remote_guid
    if b not in adj.get(a, {}):
        return ""                               # not an active link now
    for g in (a, b):
        if sec.levels.get(g) == 1:
            ups = [k for k, p in sec.ports.items() if k[0] == g and p.role == "up" and p.up
                   and link_key(link_ends(sec, k)) not in removed]
            if len(ups) == 1 and link_key(link_ends(sec, ups[0])) == link_key(link_ends(sec, key)):
                name = sec.switches[g].name if g in sec.switches else g
                return f"it is the last active uplink of leaf {name}: isolating it cuts the leaf off the fabric"
    if not connected(adj, a, b, (a, b)):
        na = sec.switches[a].name if a in sec.switches else a
        nb = sec.switches[b].name if b in sec.switches else b
        return f"it is the only path left between {na} and {nb}: isolating it cuts a switch off the fabric"
    return ""


# --- ports --------------------------------------------------------------------------------------

def condemned_ports(sec: FabricSection, findings: Iterable[Finding], checks: tuple[str, ...],
                    classes: tuple[str, ...]) -> dict[tuple[Key, ...], Finding]:
    """Link -> its worst condemning finding (the end it names is the end set)."""
    out: dict[tuple[Key, ...], Finding] = {}
    for f in worst_first(findings):
        if f.check not in checks or class_of(f) not in classes or f.port is None:
            continue
        k = (f.device, f.port)
        fp = sec.ports.get(k)
        if fp is None or fp.link is None or fp.role not in ("host", "up", "down"):
            continue
        lkey = link_key(link_ends(sec, k))
        if lkey not in out:
            out[lkey] = f
    return out


def host_jobs(snap_jobs: Mapping[str, tuple[str, ...]] | None, host: str) -> list[str]:
    return sorted(j for j, hosts in (snap_jobs or {}).items() if host in hosts)


def _evidence(f: Finding) -> str:
    return f"{STATUS_NAMES[f.status]} {f.check}: {f.message.split(': ', 1)[-1]}"


def port_round(sec: FabricSection | None, findings: list[Finding], jobs: Mapping[str, tuple[str, ...]] | None,
               actions: Mapping[str, Action], cfg: RemediationConfig, checks: ChecksConfig, now: float,
               new_id: Callable[[str], str], shard: tuple[int, int] = (0, 1), slurm: SlurmView | None = None,
               sweep_time: float | None = None) -> Round:
    """One round of the fabric's decisions (see the module doc). `jobs`: job id -> its hosts (None: no job
    source: a host port then waits, its node's jobs unknown); `sweep_time`: the data time of the sweep the
    snapshot judged (a port's counters are compared once the sweep after its isolation read them)."""
    rnd = Round(dict(actions))
    iso = cfg.isolate_port
    mode = iso.mode
    if sec is None:
        return rnd
    _clean_ports(rnd, sec, now, sweep_time)
    if mode == OFF:
        return rnd
    size = len(cabled(sec))
    cap = cap_of(iso.min_cap, iso.max_fraction, size)
    used = out_of_service(sec, rnd.actions.values())
    detail = f"max({iso.min_cap}, {iso.max_fraction:g} x {size} cabled switch ports) = {cap}"
    refused = 0
    opened = {link_key(((a.guid, a.port), parse_key(a.peer) if a.peer else None)): a
              for a in rnd.actions.values() if a.kind == ISOLATE and a.open}
    closed = _last_closed(rnd.actions.values(), ISOLATE)
    removed = {lk for lk, a in opened.items()}
    for lkey, f in condemned_ports(sec, findings, iso.checks, iso.classes).items():
        key = (f.device, int(f.port or 0))
        if lkey in opened:
            continue
        ends = link_ends(sec, key)
        label = port_label(sec, key)
        target = key_text(key)
        names = check_counters(f.check)
        keys = [k for k in ends if k is not None]
        before = closed.get(lkey)
        if before is not None and before.check == f.check and names:
            base = dict(before.baseline)
            if not rose(base, counters_now(sec, keys, names)):
                continue                          # returned, and not failed again since: its old errors don't count
        why = ""
        sw = sec.switches.get(key[0])
        excl = exclusion_for(cfg.exclude, now, port=(key[0], sw.name if sw else "", key[1]))
        if excl is None and ends[1] is not None:
            osw = sec.switches.get(ends[1][0])
            excl = exclusion_for(cfg.exclude, now, port=(ends[1][0], osw.name if osw else "", ends[1][1]))
        if excl is not None:
            why = f"on the exclusion list ({excl.port}{': ' + excl.reason if excl.reason else ''}" + \
                  (f", until {_iso(excl.until)})" if excl.until is not None else ")")
        elif shard[1] > 1:
            why = (f"this collector is shard {shard[0]}/{shard[1]}: it does not see the whole graph, so it never "
                   "isolates (run remediation on an unsharded collector)")
        else:
            why = cuts_off(sec, key, removed)
        if not why and lkey not in used and len(used) >= cap:
            why = f"the circuit breaker: {len(used)} links out of service, the cap is {detail}"
            refused += 1
        if why:
            rnd.refusals.append(Refusal(ISOLATE, target, label, why))
            rnd.events.append(Event(ISOLATE, mode, "refused", target, label, "refuse", why, _evidence(f),
                                    f"{len(used)}/{cap}"))
            continue
        fp = sec.ports[key]
        host = host_name(fp.link.remote_guid, fp.link.remote_name, {}) if fp.role == "host" and fp.link else ""
        returns = before.returns + 1 if before is not None and before.state == RETURNED else 0
        window = window_of(f.check, checks, iso.clean_window, 3600.0) * (2 ** min(returns, 16))
        a = Action(id=new_id(ISOLATE), kind=ISOLATE, target=target, label=label, mode=mode, state=TODO,
                   reason=f.line().split(" [jobs:", 1)[0], check=f.check, window=window, created=now, updated=now,
                   returns=returns, guid=key[0], port=key[1], lid=sw.lid or 0 if sw else 0,
                   switch=sw.name if sw else "", address=sw.address if sw else "", port_name=fp.name, peer=key_text(ends[1]) if ends[1] else "",
                   node=host)
        if returns > iso.max_returns:
            a = replace(a, note=f"failed again after {returns - 1} returns: stays isolated until "
                        "`fabricmon actions undo`")
        busy = host_jobs(jobs, host) if host else []
        if host and (busy or jobs is None):
            waits = (f"{host} to be idle (jobs {', '.join(busy)})" if busy else
                     f"{host} to be idle (its jobs are unknown: no job source)")
            a = replace(a, state=WAITING, waits=waits)
        used.add(lkey)
        removed.add(lkey)
        opened[lkey] = a
        rnd.put(a)
        if a.state == WAITING:
            rnd.events.append(Event(ISOLATE, mode, "", target, label, "wait", f"host port: waits for {a.waits}",
                                    _evidence(f), f"{len(used)}/{cap}"))
            if busy and cfg.drain_node.mode != OFF:
                _drain_host(rnd, a, f, cfg, now, new_id, slurm)
        elif mode == DRY_RUN:
            rnd.put(replace(a, state=DONE, effective=now, clean_since=now,
                            note="dry run: would have disabled the port"))
            rnd.events.append(Event(ISOLATE, mode, "dry_run", target, label, "isolate",
                                    f"would disable the port ({f.check})", _evidence(f), f"{len(used)}/{cap}"))
        else:
            rnd.events.append(Event(ISOLATE, mode, "", target, label, "isolate", f"disabling the port ({f.check})",
                                    _evidence(f), f"{len(used)}/{cap}"))
    _wake_waiting(rnd, jobs, cfg, now)
    rnd.breakers[ISOLATE] = Breaker(cap, len(used), refused, refused > 0, detail)
    return rnd


def _drain_host(rnd: Round, iso: Action, f: Finding, cfg: RemediationConfig, now: float,
                new_id: Callable[[str], str], slurm: SlurmView | None) -> None:
    """The collector drains the host behind a host port it isolates once idle (drain_node's mode and caps)."""
    node = iso.node
    if any(a.kind == DRAIN and a.open and a.node == node for a in rnd.actions.values()):
        return
    reason = f"{PREFIX} {STATUS_NAMES[f.status]} {f.check}: {iso.label}: host port to isolate"
    why = _drain_refusal(rnd, node, cfg, now, slurm)
    dmode = cfg.drain_node.mode
    if why:
        rnd.refusals.append(Refusal(DRAIN, node, node, why))
        rnd.events.append(Event(DRAIN, dmode, "refused", node, node, "refuse", why, _evidence(f)))
        return
    a = Action(id=new_id(DRAIN), kind=DRAIN, target=node, label=node, mode=dmode, state=TODO, reason=reason[:250],
               check=f.check, window=iso.window, created=now, updated=now, node=node, parent=iso.id)
    if dmode == DRY_RUN:
        a = replace(a, state=DONE, effective=now, note="dry run: would have drained the node")
        rnd.events.append(Event(DRAIN, dmode, "dry_run", node, node, "drain", "would drain the host behind "
                                f"{iso.label}", _evidence(f)))
    else:
        rnd.events.append(Event(DRAIN, dmode, "", node, node, "drain", f"draining the host behind {iso.label}",
                                _evidence(f)))
    rnd.put(a)


def _wake_waiting(rnd: Round, jobs: Mapping[str, tuple[str, ...]] | None, cfg: RemediationConfig, now: float) -> None:
    """A host port waiting for its node: isolated once the node runs no job."""
    for a in list(rnd.actions.values()):
        if a.kind != ISOLATE or a.state != WAITING or jobs is None or host_jobs(jobs, a.node):
            continue
        if a.mode == DRY_RUN:
            rnd.put(replace(a, state=DONE, effective=now, clean_since=now, waits="", updated=now,
                            note=f"dry run: {a.node} idle: would have disabled the port"))
            rnd.events.append(Event(ISOLATE, a.mode, "dry_run", a.target, a.label, "isolate",
                                    f"{a.node} is idle: would disable the port", a.reason))
        else:
            rnd.put(replace(a, state=TODO, waits="", updated=now, note=f"{a.node} idle: disabling the port"))
            rnd.events.append(Event(ISOLATE, a.mode, "", a.target, a.label, "isolate",
                                    f"{a.node} is idle: disabling the port", a.reason))


def _clean_ports(rnd: Round, sec: FabricSection, now: float, sweep_time: float | None) -> None:
    """Each isolated port's clean window: its condemning counters (both ends) compared with their values
    when the first sweep after it took effect read them; a rise restarts the window. A window that ran out
    moves the action to RETURNING (unless it failed again too often: it stays)."""
    for a in list(rnd.actions.values()):
        if a.kind != ISOLATE or a.state != DONE or a.effective is None:
            continue
        keys = [(a.guid, a.port)] + ([parse_key(a.peer)] if a.peer else [])
        names = check_counters(a.check)
        now_vals = counters_now(sec, keys, names) if names else {}
        if names and sweep_time is not None and sweep_time > a.effective:
            if not a.baseline:
                if now_vals:
                    a = rnd.put(replace(a, baseline=tuple(sorted(now_vals.items())), updated=now))
            else:
                up = rose(dict(a.baseline), now_vals)
                if up:
                    a = rnd.put(replace(a, baseline=tuple(sorted({**dict(a.baseline), **now_vals}.items())),
                                        clean_since=now, updated=now, note=f"not clean: {', '.join(up)}"))
                    rnd.events.append(Event(ISOLATE, a.mode, "", a.target, a.label, "dirty",
                                            f"errors while isolated: the clean window restarts ({', '.join(up)})"))
        end = a.returns_at()
        if end is not None and now >= end and not a.note.startswith("failed again after"):
            rnd.put(replace(a, state=RETURNING, attempts=0, next_try=None, updated=now,
                            note=f"clean for {a.window:g} s: {'would re-enable' if a.mode == DRY_RUN else 're-enabling'}"))
            rnd.events.append(Event(ISOLATE, a.mode, "", a.target, a.label, "return",
                                    f"clean for {a.window:g} s: returning the port to service"))


def _last_closed(actions: Iterable[Action], kind: str) -> dict[tuple[Key, ...], Action]:
    out: dict[tuple[Key, ...], Action] = {}
    for a in sorted((a for a in actions if a.kind == kind and not a.open), key=lambda a: a.closed or 0.0):
        if kind == ISOLATE:
            out[link_key(((a.guid, a.port), parse_key(a.peer) if a.peer else None))] = a
    return out


def _iso(t: float | None) -> str:
    import time as _t
    return "never" if t is None else _t.strftime("%Y-%m-%dT%H:%M:%SZ", _t.gmtime(t))


# --- nodes --------------------------------------------------------------------------------------

def _drain_refusal(rnd: Round, node: str, cfg: RemediationConfig, now: float, slurm: SlurmView | None,
                   count_self: bool = True) -> str:
    """Why draining `node` now is refused ("" when it is not): excluded, taken by another reason, Slurm
    unreadable, or the partition's breaker."""
    excl = exclusion_for(cfg.exclude, now, node=node)
    if excl is not None:
        return f"on the exclusion list ({excl.node}{': ' + excl.reason if excl.reason else ''})"
    if slurm is None:
        return "Slurm could not be read (sinfo): no drain without knowing who else is drained"
    if node not in slurm.partitions:
        return f"{node} is not a node Slurm knows"
    taken = slurm.taken(node)
    if taken:
        return taken + " (never stolen or overwritten)"
    dr = cfg.drain_node
    planned = {a.node for a in rnd.actions.values() if a.kind == DRAIN and a.open and a.mode == dr.mode}
    for part in slurm.partitions.get(node, ()):
        members = slurm.members(part)
        cap = cap_of(dr.min_cap, dr.max_fraction, len(members))
        out = {n for n in members if slurm.ours(n)}
        if dr.mode == DRY_RUN:
            out |= planned & set(members)
        out.discard(node)
        if len(out) + 1 > cap:
            return (f"the circuit breaker: {len(out)} of partition {part}'s {len(members)} nodes drained by "
                    f"fabricmon, the cap is max({dr.min_cap}, {dr.max_fraction:g} x {len(members)}) = {cap}")
    return ""


def node_round(findings: list[Finding], node: str, actions: Mapping[str, Action], cfg: RemediationConfig,
               checks: ChecksConfig, now: float, new_id: Callable[[str], str], slurm: SlurmView | None) -> Round:
    """One round of the node daemon's decisions for its own node (see the module doc)."""
    rnd = Round(dict(actions))
    dr = cfg.drain_node
    bad = [f for f in worst_first(findings)
           if class_of(f) in dr.classes and (not dr.checks or f.check in dr.checks)
           and f.check not in (CHECK, "source")]
    _clean_nodes(rnd, bad, now)
    if dr.mode == OFF or not node:
        return rnd
    mine = [a for a in rnd.actions.values() if a.kind == DRAIN and a.node == node]
    refused = 0
    cap_text = ""
    if bad and not any(a.open for a in mine):
        f = bad[0]
        reason = _drain_reason(f, len(bad))
        last = max((a for a in mine if not a.open), key=lambda a: a.closed or 0.0, default=None)
        if last is not None and last.state in (UNDONE, RELEASED) and last.reason == reason:
            return rnd                    # an operator returned it: the same finding does not drain it again
        why = _drain_refusal(rnd, node, cfg, now, slurm)
        if why:
            refused += why.startswith("the circuit breaker")
            cap_text = why if why.startswith("the circuit breaker") else ""
            rnd.refusals.append(Refusal(DRAIN, node, node, why))
            rnd.events.append(Event(DRAIN, dr.mode, "refused", node, node, "refuse", why, reason))
        else:
            window = max(dr.clean_window, window_of(f.check, checks, None, 0.0))
            a = Action(id=new_id(DRAIN), kind=DRAIN, target=node, label=node, mode=dr.mode, state=TODO,
                       reason=reason, check=f.check, window=window, created=now, updated=now, node=node,
                       baseline=((f.device, f.port or 0),))
            if dr.mode == DRY_RUN:
                a = replace(a, state=DONE, effective=now, note="dry run: would have drained the node")
                rnd.events.append(Event(DRAIN, dr.mode, "dry_run", node, node, "drain", "would drain the node", reason))
            else:
                rnd.events.append(Event(DRAIN, dr.mode, "", node, node, "drain", "draining the node", reason))
            rnd.put(a)
    if slurm is not None:
        parts = slurm.partitions.get(node, ())
        caps = [cap_of(dr.min_cap, dr.max_fraction, len(slurm.members(p))) for p in parts]
        used = max((sum(1 for n in slurm.members(p) if slurm.ours(n)) for p in parts), default=0)
        rnd.breakers[DRAIN] = Breaker(min(caps, default=dr.min_cap), used, refused, refused > 0,
                                      cap_text or f"max({dr.min_cap}, {dr.max_fraction:g} x the partition's nodes)")
    return rnd


def _drain_reason(f: Finding, n: int) -> str:
    """One line (report.drain_reason's form): fabricmon's prefix, the finding's device, port and cause."""
    where = f.device + (f" port {f.port}" if f.port is not None else "")
    head = f.message.split(" [", 1)[0]
    if f.device not in head:
        head = f"{where}: {head}"
    more = f" (+{n - 1} more)" if n > 1 else ""
    text = f"{PREFIX} {STATUS_NAMES[f.status]} {f.check}: {head}{more}".replace("|", "/").replace("\n", " ")
    return text[:250]


def _clean_nodes(rnd: Round, bad: list[Finding], now: float) -> None:
    """A node drained by this daemon is clean while no condemning finding is left; after its window it is
    resumed (RETURNING). A drain for a host port (the collector's) returns with its port."""
    for a in list(rnd.actions.values()):
        if a.kind != DRAIN or a.state != DONE or a.parent:
            continue
        if bad:
            if a.clean_since is not None:
                rnd.put(replace(a, clean_since=None, updated=now, note=f"not clean: {bad[0].check} again"))
                rnd.events.append(Event(DRAIN, a.mode, "", a.target, a.label, "dirty",
                                        f"the finding is back: the clean window restarts ({bad[0].check})"))
            continue
        if a.clean_since is None:
            a = rnd.put(replace(a, clean_since=now, updated=now, note="clean: the finding cleared"))
            rnd.events.append(Event(DRAIN, a.mode, "", a.target, a.label, "clean",
                                    f"the finding cleared: resumed after {a.window:g} s clean"))
        end = a.returns_at()
        if end is not None and now >= end:
            rnd.put(replace(a, state=RETURNING, attempts=0, next_try=None, updated=now,
                            note=f"clean for {a.window:g} s: {'would resume' if a.mode == DRY_RUN else 'resuming'}"))
            rnd.events.append(Event(DRAIN, a.mode, "", a.target, a.label, "return",
                                    f"clean for {a.window:g} s: resuming the node"))


def host_drains_follow(rnd: Round, now: float) -> None:
    """The collector's drains for host ports: returned with their port (the isolate action closed)."""
    for a in list(rnd.actions.values()):
        if a.kind != DRAIN or not a.parent or a.state != DONE:
            continue
        parent = rnd.actions.get(a.parent)
        if parent is None or not parent.open:
            rnd.put(replace(a, state=RETURNING, attempts=0, next_try=None, updated=now,
                            note="its host port is back in service: resuming"))
            rnd.events.append(Event(DRAIN, a.mode, "", a.target, a.label, "return",
                                    "its host port is back in service: resuming the node"))


# --- the findings remediation raises ---------------------------------------------------------------

def findings_of(breakers: Mapping[str, Breaker], actions: Iterable[Action], scope_device: str,
                refusals: Iterable[Refusal] = ()) -> list[Finding]:
    """A WARNING when a breaker tripped (what was left and why) and one per action whose step keeps failing.
    Their class is `watch`: remediation's own findings never drain or isolate anything."""
    out: list[Finding] = []
    left = {k: [r for r in refusals if r.kind == k and r.why.startswith("the circuit breaker")] for k in breakers}
    for kind, b in sorted(breakers.items()):
        if b.tripped:
            names = ", ".join(r.label for r in left.get(kind, [])[:5])
            more = f" (+{len(left[kind]) - 5} more)" if len(left.get(kind, [])) > 5 else ""
            out.append(Finding(CHECK, scope_device, None, WARNING,
                               f"the {kind} circuit breaker tripped: {b.refused} more condemned, {b.used} already out "
                               f"(cap {b.detail}); left in service and reported: {names}{more}: find the common cause "
                               "(a switch, a power feed, a firmware rollout) before raising the cap", klass=WATCH))
    for a in actions:
        if a.open and a.mode == ACT and a.error and a.state in (TODO, RETURNING):
            step = "put out of service" if a.state == TODO else "returned to service"
            out.append(Finding(CHECK, a.guid or scope_device, a.port or None, WARNING,
                               f"{a.kind} {a.id} {a.label} could not be {step} ({a.attempts} tries): {a.error}: "
                               "it is retried with backoff; never assumed done", klass=WATCH))
    return out


__all__ = ["CHECK", "Event", "Round", "SlurmNode", "SlurmView", "backoff", "cabled", "cap_of", "condemned_ports",
           "connected", "counters_now", "cuts_off", "findings_of", "host_drains_follow", "key_text", "link_ends",
           "link_key", "node_round", "out_of_service", "parse_key", "port_label", "port_round", "rose",
           "switch_graph", "window_of"]
