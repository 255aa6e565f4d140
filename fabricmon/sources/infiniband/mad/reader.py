"""What one sweep reads from each switch over the MAD engine, in as few round trips as the data allows.

Per switch (the topology's LID; one engine, one pass for the whole fabric or a shard's switches):
1. PerfMgt ClassPortInfo, once per switch and cached across sweeps: whether the switch supports
   AllPortSelect (bit 8) and the extended counters (bit 9). Until a switch answers it, both are
   assumed (a switch without them answers those Gets with an error status: no data, never zeros).
2. In one engine run: PortCountersExtended of every port cabled now or at an earlier discovery
   (64-bit data and packet counters; a port never cabled and down exports none: plan_targets; the
   32-bit PortCounters of every port where the switch lacks the extended ones), the PortCounters
   aggregate (PortSelect 255) where AllPortSelect is supported, and PortInfo (SMP) of every port
   whose link state this switch reads (plan_targets: one end of each inter-switch link both of
   whose ends this read reads, every other cabled port).
3. PortCounters of each port of the switches whose aggregate shows a non-zero error counter or
   PortXmitWait: error counters are sums (saturating), so an aggregate of zero proves every port's
   are zero, as infiniband-diags' ibqueryerrors reasons. A never-cabled port's error counters come
   from here too, as before: reported where its switch is drilled, not at all where the aggregate
   proves them zero (no traffic counters of it are read).
4. PortInfo of the far end of each host link (the CA port, LID-routed to its own LID): what it
   may train at (its enabled widths and speeds), read once and kept, and read again only when the
   switch end's link changed (came up, trained at another width or speed, or its own enabled set
   changed): a fabric costs one MAD per host port once, then none while nothing changes. A CA
   that does not answer leaves its end unknown; it is not counted against its switch.
   The other end of an inter-switch link whose state comes from this end (a mirror) is read the
   same way for its own ability (a switch that does not answer is asked again next sweep), and in
   the same engine run the other end's own PortInfo where this end's went unanswered or read the
   link down (fallback).
5. Each mirror's other end takes this end's link_up, width and speed (one physical link, trained
   to one state, width and speed at both ends), with its own ability. Where this end read the link
   down, each end keeps its own reading (a cable moved away from this end reads down here and up at
   its other end's new port, never down at both); where this end went unanswered, it takes the
   other end's reading (its own ability unknown this sweep), so a silent switch's inter-switch
   ports have their links' state as read at their other ends, and only where both ends go
   unanswered is a link's state unread at both.

Unreached is not down: a PortInfo that went unanswered leaves that port out of `link_up`; a switch
whose error aggregate went unanswered has `errors_ok` False (its error counters are not reported
this sweep, never as zero)."""

from __future__ import annotations

import functools
import threading
from collections.abc import Callable, Collection, Mapping, Sequence
from dataclasses import dataclass, field

from fabricmon.model import gc_pause
from fabricmon.host.mad import Request
from fabricmon.model.compact import COUNTER_NAMES, PortCounters
from fabricmon.model.fabric import Topology
from fabricmon.model.link_ability import LinkAbility
from fabricmon.sources.infiniband.mad import codec

# a port's counters are kept packed (model.compact.PortCounters, ibspec order): the error and congestion
# counters, then PortCountersExtended's eight in its own order (one unpack a port, no dict), then the rest
_AT = COUNTER_NAMES.index(codec.PCE_NAMES[0])
assert COUNTER_NAMES[_AT:_AT + len(codec.PCE_NAMES)] == codec.PCE_NAMES
_HEAD, _TAIL = COUNTER_NAMES[:_AT], (None,) * (len(COUNTER_NAMES) - _AT - len(codec.PCE_NAMES))
ASSUMED_CAPS = codec.CAP_ALL_PORT_SELECT | codec.CAP_EXT_WIDTH
_UNKNOWN = LinkAbility(frozenset(), frozenset())     # a far end that could not be read


@functools.lru_cache(maxsize=2048)
def _tmpl(encode: Callable[..., bytearray], *args: int) -> bytes:
    """One request's MAD, TID 0 (the engine writes the TID into its own copy): shared by every switch."""
    return bytes(encode(*args, 0))


def _plan(t: "SwitchTarget", cap: int) -> tuple[list[Request], bool, bool, tuple[int, ...]]:
    """A switch's requests of step 2, in this order: the counters of its counter ports
    (PortCountersExtended; every port's PortCounters without the extended ones: they carry its error
    counters too), the PortCounters aggregate where AllPortSelect is supported, the PortInfo of each
    of its state_ports. With whether it reads the extended counters and the aggregate, and the ports
    whose counters it reads."""
    ext = bool(cap & codec.CAP_EXT_WIDTH)
    agg = bool(cap & codec.CAP_ALL_PORT_SELECT)
    enc = codec.encode_port_counters_ext if ext else codec.encode_port_counters
    ports = t.counter_ports if ext and t.counter_ports is not None else tuple(range(1, t.nports + 1))
    reqs = [Request(t.guid, t.lid, _tmpl(enc, p)) for p in ports]
    if agg:
        reqs.append(Request(t.guid, t.lid, _tmpl(codec.encode_port_counters, codec.ALL_PORTS)))
    reqs += [Request(t.guid, t.lid, _tmpl(codec.encode_port_info, p)) for p in t.state_ports]
    return reqs, ext, agg, ports


@dataclass(slots=True)
class SwitchTarget:
    guid: str
    lid: int
    nports: int
    state_ports: tuple[int, ...] = ()    # ports whose PortInfo (link state) this sweep reads
    # host links: (switch port, the CA port's LID, the CA port's number), whose far end's PortInfo
    # (what it may train at) is read when not known yet or when the switch end's link changed
    peers: tuple[tuple[int, int, int], ...] = ()
    # inter-switch links whose other end is a switch of this read and takes its state from this end's
    # PortInfo (plan_targets): (this switch's port, the other switch's GUID, its LID, its port)
    mirrors: tuple[tuple[int, str, int, int], ...] = ()
    # the ports whose PortCountersExtended is read (plan_targets: the cabled ones and those cabled
    # before); None: every port
    counter_ports: tuple[int, ...] | None = None


@dataclass(slots=True)
class SwitchResult:
    # traffic (+ errors when errors_ok), packed (model.compact.PortCounters)
    ports: dict[int, Mapping[str, int]] = field(default_factory=dict)
    errors_ok: bool = False
    link_up: dict[int, bool] = field(default_factory=dict)
    # port -> (active width, active speed, what it may train at), from the same PortInfo as link_up
    link: dict[int, tuple[int | None, str | None, LinkAbility]] = field(default_factory=dict)
    peer_ability: dict[int, LinkAbility] = field(default_factory=dict)   # switch port -> its far end's
    queries: int = 0
    unanswered: int = 0
    failed: set[str] = field(default_factory=set)                    # "counters", "port state"
    # when its traffic counters were read: the mean of their answers' times (time.monotonic()); None
    # where the run says no times (a replay) or none answered
    read_at: float | None = None


Key = tuple[str, int]
# a switch's plan is kept while these stay: (GUID, LID, port count, capability mask, state ports, counter ports)
_PlanKey = tuple[str, int, int, int, tuple[int, ...], tuple[int, ...] | None]


def plan_targets(topo: Topology, mine: Collection[str], read_state: bool = True) -> tuple[list[SwitchTarget], list[str]]:
    """What one read asks of each of `mine`'s switches, and those without a LID: the one plan of the
    daemon's sweep (sources/infiniband/sweep.py) and of `python -m fabricmon.sources.infiniband.mad`.

    - Counters: the PortCountersExtended of each port cabled in the topology or cabled at an earlier
      discovery (topo.down_links); a port never cabled (role unconnected) and down exports none and
      no rate or check reads its traffic, so it is not asked (a port cabled later is in the next
      discovery's topology, from which the targets are made again).
    - Link state (read_state): the PortInfo of each cabled port and each port of down_links, except
      that an inter-switch link whose both ends are cabled to each other in the topology and read by
      this read is read at one end only (_orient: each switch reads half of its such ports, rounded
      either way), the other end a mirror of it.
    - Far ends: the ports at the far end of links this read does not read as its own (CA ports,
      switches of other shards), asked for what they may train at (step 4)."""
    readable = {g for g in mine if (sw := topo.switches.get(g)) is not None
                and sw.kind == "infiniband" and sw.lid is not None}
    state: dict[str, set[int]] = {}          # switch -> the ports whose PortInfo it reads
    if read_state:
        for (g, p), info in topo.ports.items():
            if info.link is not None and g in mine:
                state.setdefault(g, set()).add(p)
        for g, p in topo.down_links:
            if g in mine:
                state.setdefault(g, set()).add(p)
    pairs: list[tuple[Key, Key]] = []
    for (g, p), info in sorted(topo.ports.items()):
        lk = info.link
        if lk is None or lk.remote_type != "Switch" or g not in readable or lk.remote_guid not in readable \
                or p not in state.get(g, ()) or lk.remote_port not in state.get(lk.remote_guid, ()):
            continue
        far = (lk.remote_guid, lk.remote_port)
        back = topo.ports.get(far)
        if (g, p) < far and back is not None and back.link is not None \
                and (back.link.remote_guid, back.link.remote_port) == (g, p):
            pairs.append(((g, p), far))
    mirrors: dict[str, list[tuple[int, str, int, int]]] = {}
    for (a, b), a_reads in zip(pairs, _orient(pairs)):
        rd, other = (a, b) if a_reads else (b, a)
        state[other[0]].discard(other[1])
        lid = topo.switches[other[0]].lid
        assert lid is not None                  # readable
        mirrors.setdefault(rd[0], []).append((rd[1], other[0], lid, other[1]))
    targets, no_lid = [], []
    for g in sorted(mine):
        sw = topo.switches[g]
        if sw.kind != "infiniband":
            continue
        if sw.lid is None:
            no_lid.append(g)
            continue
        # the far ends this read does not reach as its own switches' ports: CA ports, and the
        # switches of other shards (what they may train at: checks.fabric_links)
        links = [(p, topo.ports[(g, p)].link) for p in sorted(state.get(g, ())) if (g, p) in topo.ports]
        peers = tuple((p, lk.remote_lid, lk.remote_port) for p, lk in links
                      if lk is not None and lk.remote_lid and lk.remote_port
                      and not (lk.remote_type == "Switch" and lk.remote_guid in mine))
        counted = tuple(p for p in range(1, sw.nports + 1)
                        if ((pi := topo.ports.get((g, p))) is not None and pi.link is not None)
                        or (g, p) in topo.down_links)
        targets.append(SwitchTarget(g, sw.lid, sw.nports, tuple(sorted(state.get(g, ()))), peers,
                                    tuple(sorted(mirrors.get(g, ()))), counted))
    return targets, no_lid


def _orient(pairs: Sequence[tuple[Key, Key]]) -> list[bool]:
    """For each link (a, b) between two switches, whether a's end is the one read: along an Euler
    circuit of the switch graph (the switches of odd degree joined to one added node, so that every
    degree is even), each link read at the end the circuit leaves it from, so every switch reads as
    many of its links as it mirrors: half of them, rounded either way. Deterministic (sorted input)."""
    ends = [(a[0], b[0]) for a, b in pairs]
    adj: dict[str, list[int]] = {}
    for i, (u, v) in enumerate(ends):
        adj.setdefault(u, []).append(i)
        adj.setdefault(v, []).append(i)
    for n in sorted(n for n, es in adj.items() if len(es) % 2):
        ends.append((n, ""))                    # "" is no switch's GUID
        adj[n].append(len(ends) - 1)
        adj.setdefault("", []).append(len(ends) - 1)
    used = [False] * len(ends)
    reads = [False] * len(pairs)
    at = dict.fromkeys(adj, 0)
    for start in sorted(adj):
        stack = [start]                         # Hierholzer's walk, without recursion
        while stack:
            u = stack[-1]
            es, k = adj[u], at[u]
            while k < len(es) and used[es[k]]:
                k += 1
            at[u] = k
            if k == len(es):
                stack.pop()
                continue
            i = es[k]
            used[i] = True
            x, y = ends[i]
            if i < len(reads):
                reads[i] = x == u
            stack.append(y if x == u else x)
    return reads


class FabricReader:
    """Reads switches through `run` (a HostIO's mad_run); keeps each switch's PerfMgt capability mask
    between sweeps."""

    def __init__(self, run: Callable[[Sequence[Request], float, list[float] | None], list[bytes | None]]) -> None:
        self.run = run
        self.caps: dict[str, int] = {}
        self._plans: dict[_PlanKey, tuple[list[Request], bool, bool, tuple[int, ...]]] = {}   # switch -> its sweep's requests
        # (far end's LID, its port) -> (its ability, the read end's (up, width, speed, ability) when it was read)
        self.peers: dict[tuple[int, int], tuple[LinkAbility, tuple[bool, int | None, str | None, LinkAbility]]] = {}
        self.peer_reads = 0                 # far-end PortInfo MADs sent (bench/mad_sweep.py reports it)
        self.fallback_reads = 0             # other-end PortInfo MADs sent where a mirror's read end went unanswered or read down
        self._lock = threading.Lock()       # one read at a time on the one port (two pipelines in a process)

    def read(self, targets: list[SwitchTarget], deadline: float, error_names: tuple[str, ...]) -> dict[str, SwitchResult]:
        # no cyclic garbage collection while the MADs fly (fabricmon.model.gc_pause): a read allocates tens of
        # thousands of acyclic objects (answers, counter records), and in a collector holding the whole
        # fabric's model each collection they trigger walks all of it (measured on the director: up to
        # 0.6 s of a sweep)
        with self._lock, gc_pause.paused():
            return self._read(targets, deadline, error_names)

    def _read(self, targets: list[SwitchTarget], deadline: float, error_names: tuple[str, ...]) -> dict[str, SwitchResult]:
        out = {t.guid: SwitchResult() for t in targets}
        # 1. capability masks not known yet
        ask = [t for t in targets if t.guid not in self.caps]
        if ask:
            reqs: list[Request] = [Request(t.guid, t.lid, _tmpl(codec.encode_class_port_info)) for t in ask]
            for t, ans in zip(ask, self.run(reqs, deadline, None)):
                out[t.guid].queries += 1
                try:
                    if ans is None:
                        raise codec.MadError("unanswered")
                    self.caps[t.guid] = codec.decode_class_port_info(ans)
                except codec.MadError:
                    out[t.guid].unanswered += ans is None
        # 2. counters, aggregates and link state in one run: each switch's requests in a plan kept
        # across sweeps (the same Get()s every sweep while its capabilities and cabled ports stay)
        reqs = []
        spans = []
        drill: list[SwitchTarget] = []
        plans, used = self._plans, []
        for t in targets:
            # no ClassPortInfo answer yet: assume both (asked again next sweep); a switch without them
            # answers those requests with an error status, which reads as no data, never as zeros
            cap = self.caps.get(t.guid, ASSUMED_CAPS)
            key = (t.guid, t.lid, t.nports, cap, t.state_ports, t.counter_ports)
            used.append(key)
            plan = plans.get(key)
            if plan is None:
                plan = plans[key] = _plan(t, cap)
            ext, agg = plan[1], plan[2]
            if not agg and ext:                   # no aggregate: every port's PortCounters
                drill.append(t)
            spans.append((t, len(reqs), ext, agg, plan[3]))
            reqs.extend(plan[0])
        if len(plans) > 2 * len(targets) + 64:            # drop the plans of switches gone or changed
            self._plans = {k: plans[k] for k in used}
        times = [-1.0] * len(reqs)                          # each answer's time (-1: none said)
        answers = self.run(reqs, deadline, times) if reqs else []
        per_port_errors: dict[str, dict[int, dict[str, int]]] = {}
        agg_seen: set[str] = set()
        dec_pce, dec_pc, dec_link, MadError = codec.port_counters_ext_values, codec.decode_port_counters, codec.decode_port_link, codec.MadError
        traffic: dict[str, dict[int, tuple[int | None, ...]]] = {}      # switch -> port -> PCE_NAMES' values
        for t, at, ext, agg, cports in spans:
            res = out[t.guid]
            nports, nstate = len(cports), len(t.state_ports)
            chunk = answers[at:at + nports + agg + nstate]
            res.queries += len(chunk)
            ports = traffic[t.guid] = {}
            bad = 0
            read = [x for x in times[at:at + nports] if x >= 0]
            if read:
                res.read_at = sum(read) / len(read)
            for p, ans in zip(cports, chunk[:nports]):      # the counters of its counter ports
                if ans is None:
                    bad += 1
                    res.unanswered += 1
                    continue
                try:
                    if ext:
                        ports[p] = dec_pce(ans)
                    else:
                        vals = dec_pc(ans)[1]
                        ports[p] = tuple(vals.get(k) for k in codec.PCE_NAMES)
                        per_port_errors.setdefault(t.guid, {})[p] = {k: vals[k] for k in error_names}
                except MadError:
                    bad += 1
            if agg:                                         # the error aggregate
                ans = chunk[nports]
                try:
                    if ans is None:
                        res.unanswered += 1
                        raise MadError("unanswered")
                    vals = dec_pc(ans)[1]
                    agg_seen.add(t.guid)
                    if any(vals.get(k, 0) for k in error_names):
                        drill.append(t)
                except MadError:
                    bad += 1
            if bad:
                res.failed.add("counters")
            link_up, link = res.link_up, res.link
            for p, ans in zip(t.state_ports, chunk[nports + agg:]):     # the link state of the cabled ports
                if ans is None:
                    res.unanswered += 1
                    res.failed.add("port state")
                    continue
                try:
                    up, width, speed, ability = dec_link(ans)
                    link_up[p] = up
                    link[p] = (width, speed, ability)
                except MadError:
                    res.failed.add("port state")
        # 3. per-port error counters where the aggregate is not zero
        if drill:
            reqs = [Request(t.guid, t.lid, _tmpl(codec.encode_port_counters, p)) for t in drill for p in range(1, t.nports + 1)]
            keys = [(t, p) for t in drill for p in range(1, t.nports + 1)]
            bad_guids: set[str] = set()      # switches whose per-port counters did not all read
            for (t, p), ans in zip(keys, self.run(reqs, deadline, None)):
                out[t.guid].queries += 1
                try:
                    if ans is None:
                        out[t.guid].unanswered += 1
                        raise codec.MadError("unanswered")
                    _sel, vals = codec.decode_port_counters(ans)
                    per_port_errors.setdefault(t.guid, {})[p] = {k: vals[k] for k in error_names}
                except codec.MadError:
                    bad_guids.add(t.guid)
                    out[t.guid].failed.add("counters")
            for g in bad_guids:
                per_port_errors.pop(g, None)
        self._read_links(targets, out, deadline)
        drilled = {t.guid for t in drill}
        unread = (None,) * len(_HEAD)
        zeros = tuple(0 if n in error_names else None for n in _HEAD)
        no_traffic = (None,) * len(codec.PCE_NAMES)
        for t in targets:
            res = out[t.guid]
            ports = traffic.get(t.guid, {})
            if t.guid in per_port_errors and (t.guid in drilled or self.caps.get(t.guid, ASSUMED_CAPS) & codec.CAP_ALL_PORT_SELECT == 0):
                errs = per_port_errors[t.guid]
                res.errors_ok = all(p in errs for p in ports)
                if res.errors_ok:
                    res.ports = {p: PortCounters(tuple(errs[p].get(n) for n in _HEAD) + vals + _TAIL)
                                 for p, vals in ports.items()}
                    # the ports whose traffic is not read (never cabled): their error counters as read
                    # here (the counter checks judge a port's error counters wherever they moved)
                    for p, e in errs.items():
                        if p not in ports and 1 <= p <= t.nports:
                            res.ports[p] = PortCounters(tuple(e.get(n) for n in _HEAD) + no_traffic + _TAIL)
                    continue
            elif t.guid in agg_seen and t.guid not in drilled:
                res.errors_ok = True
                res.ports = {p: PortCounters(zeros + vals + _TAIL) for p, vals in ports.items()}
                continue
            res.ports = {p: PortCounters(unread + vals + _TAIL) for p, vals in ports.items()}
        return out

    def _read_links(self, targets: list[SwitchTarget], out: dict[str, SwitchResult], deadline: float) -> None:
        """4. and 5. (module doc), in one engine run: what the far ends of the read links may train at
        (a host link's CA port, a mirror's other switch end), each asked where it is not known yet or
        the read end's link changed since it was read, the others from what was read before; and the
        other end's own PortInfo of each mirror whose read end went unanswered this sweep. Then each
        mirror's other end takes the read end's state with its own ability."""
        asks: list[tuple[Request, Callable[[bytes | None], None]]] = []
        got: dict[tuple[int, int], LinkAbility] = {}          # the mirrors' other ends known or read now

        def far_end(res: SwitchResult, port: int, guid: str, key: tuple[int, int], switch: bool) -> None:
            now = res.link.get(port)
            if now is None or not res.link_up.get(port):
                if switch and (known := self.peers.get(key)) is not None:
                    got[key] = known[0]
                return                              # not read up this sweep: nothing to judge
            sig = (True, *now)
            known = self.peers.get(key)
            if known is not None and known[1] == sig:
                if switch:
                    got[key] = known[0]
                else:
                    res.peer_ability[port] = known[0]
                return

            def answer(ans: bytes | None) -> None:
                res.queries += 1
                # a far end that does not answer is not the read end's switch's fault (never counted
                # against it): its end stays unknown; a CA is asked again only when the read end's link
                # changes, a switch next sweep (it answers its own requests, or they count against it)
                ability = _UNKNOWN
                if ans is not None:
                    try:
                        ability = codec.decode_port_link(ans)[3]
                    except codec.MadError:
                        pass
                if switch:
                    if ans is not None:
                        self.peers[key] = (ability, sig)
                    got[key] = ability
                else:
                    self.peers[key] = (ability, sig)
                    res.peer_ability[port] = ability
            self.peer_reads += 1
            asks.append((Request(guid, key[0], _tmpl(codec.encode_port_info, key[1])), answer))

        fell_back: set[tuple[str, int]] = set()

        def fallback(res: SwitchResult, rd_port: int, guid: str, lid: int, port: int) -> None:
            """The other end's own PortInfo: where the read end went unanswered (that end then takes this
            one's state), or read the link down (each end keeps its own: a cable moved away from the read
            end reads down there and up at its new port, never down at both; where this read goes
            unanswered, the other end takes the read end's state, as a mirror)."""
            other = out[guid]
            down = rd_port in res.link_up

            def answer(ans: bytes | None) -> None:
                other.queries += 1
                try:
                    if ans is None:
                        other.unanswered += 1
                        raise codec.MadError("unanswered")
                    up, width, speed, ability = codec.decode_port_link(ans)
                except codec.MadError:
                    other.failed.add("port state")
                    if down:
                        other.link_up[port] = False
                        other.link[port] = (*res.link[rd_port][:2], got.get((lid, port), _UNKNOWN))
                    return
                other.link_up[port] = up
                other.link[port] = (width, speed, ability)
                if not down:        # the unanswered end: the link's state as read at this end (its own ability unknown)
                    res.link_up[rd_port] = up
                    res.link[rd_port] = (width, speed, _UNKNOWN)
            self.fallback_reads += 1
            asks.append((Request(guid, lid, _tmpl(codec.encode_port_info, port)), answer))

        for t in targets:
            res = out[t.guid]
            for port, lid, rport in t.peers:
                far_end(res, port, t.guid, (lid, rport), False)
            for port, guid, lid, rport in t.mirrors:
                if port in res.link_up:
                    far_end(res, port, guid, (lid, rport), True)
                    if not res.link_up[port] and guid in out:      # read down: the other end read too
                        fell_back.add((t.guid, port))
                        fallback(res, port, guid, lid, rport)
                elif guid in out:
                    fell_back.add((t.guid, port))
                    fallback(res, port, guid, lid, rport)
        if asks:
            for (_req, answer), ans in zip(asks, self.run([a[0] for a in asks], deadline, None)):
                answer(ans)
        for t in targets:                           # 5. the mirrors' other ends
            res = out[t.guid]
            for port, guid, lid, rport in t.mirrors:
                up = res.link_up.get(port)
                other = out.get(guid)
                if up is None or other is None or (t.guid, port) in fell_back:
                    continue
                width, speed, _own = res.link[port]
                other.link_up[rport] = up
                other.link[rport] = (width, speed, got.get((lid, rport), _UNKNOWN))
