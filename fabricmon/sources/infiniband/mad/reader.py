"""What one sweep reads from each switch over the MAD engine, in as few round trips as the data allows.

Per switch (the topology's LID; one engine, one pass for the whole fabric or a shard's switches):
1. PerfMgt ClassPortInfo, once per switch and cached across sweeps: whether the switch supports
   AllPortSelect (bit 8) and the extended counters (bit 9). Until a switch answers it, both are
   assumed (a switch without them answers those Gets with an error status: no data, never zeros).
2. In one engine run: PortCountersExtended of every port (64-bit data and packet counters; the
   32-bit PortCounters per port where the switch lacks the extended ones), the PortCounters
   aggregate (PortSelect 255) where AllPortSelect is supported, and PortInfo (SMP) of every port
   whose link state is asked for.
3. PortCounters of each port of the switches whose aggregate shows a non-zero error counter or
   PortXmitWait: error counters are sums (saturating), so an aggregate of zero proves every port's
   are zero, as infiniband-diags' ibqueryerrors reasons.
4. PortInfo of the far end of each host link (the CA port, LID-routed to its own LID): what it
   may train at (its enabled widths and speeds), read once and kept, and read again only when the
   switch end's link changed (came up, trained at another width or speed, or its own enabled set
   changed): a fabric costs one MAD per host port once, then none while nothing changes. A CA
   that does not answer leaves its end unknown; it is not counted against its switch.

Unreached is not down: a PortInfo that went unanswered leaves that port out of `link_up`; a switch
whose error aggregate went unanswered has `errors_ok` False (its error counters are not reported
this sweep, never as zero)."""

from __future__ import annotations

import functools
import threading
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field

from fabricmon import gc_pause
from fabricmon.host.mad import Request
from fabricmon.model.compact import COUNTER_NAMES, PortCounters
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
def _tmpl(encode, *args) -> bytes:
    """One request's MAD, TID 0 (the engine writes the TID into its own copy): shared by every switch."""
    return bytes(encode(*args, 0))


def _plan(t: "SwitchTarget", cap: int) -> tuple[list[Request], bool, bool]:
    """A switch's requests of step 2, in this order: the counters of ports 1..nports
    (PortCountersExtended, or PortCounters without the extended ones), the PortCounters aggregate
    where AllPortSelect is supported, the PortInfo of each of its state_ports. With whether it reads
    the extended counters and the aggregate."""
    ext = bool(cap & codec.CAP_EXT_WIDTH)
    agg = bool(cap & codec.CAP_ALL_PORT_SELECT)
    enc = codec.encode_port_counters_ext if ext else codec.encode_port_counters
    reqs = [Request(t.guid, t.lid, _tmpl(enc, p)) for p in range(1, t.nports + 1)]
    if agg:
        reqs.append(Request(t.guid, t.lid, _tmpl(codec.encode_port_counters, codec.ALL_PORTS)))
    reqs += [Request(t.guid, t.lid, _tmpl(codec.encode_port_info, p)) for p in t.state_ports]
    return reqs, ext, agg


@dataclass(slots=True)
class SwitchTarget:
    guid: str
    lid: int
    nports: int
    state_ports: tuple[int, ...] = ()    # ports whose PortInfo (link state) this sweep reads
    # host links: (switch port, the CA port's LID, the CA port's number), whose far end's PortInfo
    # (what it may train at) is read when not known yet or when the switch end's link changed
    peers: tuple[tuple[int, int, int], ...] = ()


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


class FabricReader:
    """Reads switches through `run` (a HostIO's mad_run); keeps each switch's PerfMgt capability mask
    between sweeps."""

    def __init__(self, run: Callable[[Sequence[Request], float], list[bytes | None]]) -> None:
        self.run = run
        self.caps: dict[str, int] = {}
        self._plans: dict[tuple, tuple[list[Request], bool, bool]] = {}     # switch -> its sweep's requests
        # (CA LID, CA port) -> (its ability, the switch end's (up, width, speed, ability) when it was read)
        self.peers: dict[tuple[int, int], tuple[LinkAbility, tuple]] = {}
        self.peer_reads = 0                 # far-end PortInfo MADs sent (bench/mad_sweep.py reports it)
        self._lock = threading.Lock()       # one read at a time on the one port (two pipelines in a process)

    def read(self, targets: list[SwitchTarget], deadline: float, error_names: tuple[str, ...]) -> dict[str, SwitchResult]:
        # no cyclic garbage collection while the MADs fly (fabricmon.gc_pause): a read allocates tens of
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
            reqs = [Request(t.guid, t.lid, _tmpl(codec.encode_class_port_info)) for t in ask]
            for t, ans in zip(ask, self.run(reqs, deadline)):
                out[t.guid].queries += 1
                try:
                    if ans is None:
                        raise codec.MadError("unanswered")
                    self.caps[t.guid] = codec.decode_class_port_info(ans)
                except codec.MadError:
                    out[t.guid].unanswered += ans is None
        # 2. counters, aggregates and link state in one run: each switch's requests in a plan kept
        # across sweeps (the same Get()s every sweep while its capabilities and cabled ports stay)
        reqs: list[Request] = []
        spans = []
        drill: list[SwitchTarget] = []
        plans, used = self._plans, []
        for t in targets:
            # no ClassPortInfo answer yet: assume both (asked again next sweep); a switch without them
            # answers those requests with an error status, which reads as no data, never as zeros
            cap = self.caps.get(t.guid, ASSUMED_CAPS)
            key = (t.guid, t.lid, t.nports, cap, t.state_ports)
            used.append(key)
            plan = plans.get(key)
            if plan is None:
                plan = plans[key] = _plan(t, cap)
            ext, agg = plan[1], plan[2]
            if not agg and ext:                   # no aggregate: every port's PortCounters
                drill.append(t)
            spans.append((t, len(reqs), ext, agg))
            reqs.extend(plan[0])
        if len(plans) > 2 * len(targets) + 64:            # drop the plans of switches gone or changed
            self._plans = {k: plans[k] for k in used}
        answers = self.run(reqs, deadline) if reqs else []
        per_port_errors: dict[str, dict[int, dict[str, int]]] = {}
        agg_seen: set[str] = set()
        dec_pce, dec_pc, dec_link, MadError = codec.port_counters_ext_values, codec.decode_port_counters, codec.decode_port_link, codec.MadError
        traffic: dict[str, dict[int, tuple[int | None, ...]]] = {}      # switch -> port -> PCE_NAMES' values
        for t, at, ext, agg in spans:
            res = out[t.guid]
            nports, nstate = t.nports, len(t.state_ports)
            chunk = answers[at:at + nports + agg + nstate]
            res.queries += len(chunk)
            ports = traffic[t.guid] = {}
            bad = 0
            for p, ans in enumerate(chunk[:nports], 1):      # the counters of every port
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
                    up, *rest = dec_link(ans)
                    link_up[p] = up
                    link[p] = tuple(rest)
                except MadError:
                    res.failed.add("port state")
        # 3. per-port error counters where the aggregate is not zero
        if drill:
            reqs = [Request(t.guid, t.lid, _tmpl(codec.encode_port_counters, p)) for t in drill for p in range(1, t.nports + 1)]
            keys = [(t, p) for t in drill for p in range(1, t.nports + 1)]
            bad: set[str] = set()
            for (t, p), ans in zip(keys, self.run(reqs, deadline)):
                out[t.guid].queries += 1
                try:
                    if ans is None:
                        out[t.guid].unanswered += 1
                        raise codec.MadError("unanswered")
                    _sel, vals = codec.decode_port_counters(ans)
                    per_port_errors.setdefault(t.guid, {})[p] = {k: vals[k] for k in error_names}
                except codec.MadError:
                    bad.add(t.guid)
                    out[t.guid].failed.add("counters")
            for g in bad:
                per_port_errors.pop(g, None)
        self._read_peers(targets, out, deadline)
        drilled = {t.guid for t in drill}
        unread = (None,) * len(_HEAD)
        zeros = tuple(0 if n in error_names else None for n in _HEAD)
        for t in targets:
            res = out[t.guid]
            ports = traffic.get(t.guid, {})
            if t.guid in per_port_errors and (t.guid in drilled or self.caps.get(t.guid, ASSUMED_CAPS) & codec.CAP_ALL_PORT_SELECT == 0):
                errs = per_port_errors[t.guid]
                res.errors_ok = all(p in errs for p in ports)
                if res.errors_ok:
                    res.ports = {p: PortCounters(tuple(errs[p].get(n) for n in _HEAD) + vals + _TAIL)
                                 for p, vals in ports.items()}
                    continue
            elif t.guid in agg_seen and t.guid not in drilled:
                res.errors_ok = True
                res.ports = {p: PortCounters(zeros + vals + _TAIL) for p, vals in ports.items()}
                continue
            res.ports = {p: PortCounters(unread + vals + _TAIL) for p, vals in ports.items()}
        return out

    def _read_peers(self, targets: list[SwitchTarget], out: dict[str, SwitchResult], deadline: float) -> None:
        """4. The far ends of the host links (module doc): each CA port's PortInfo where it is not
        known yet or the switch end's link changed since it was read; the others from what was read
        before. An unanswered or failed read leaves that end unknown (and is counted)."""
        ask: list[tuple[SwitchTarget, int, tuple[int, int], tuple]] = []
        for t in targets:
            res = out[t.guid]
            for port, lid, rport in t.peers:
                now = res.link.get(port)
                if now is None or not res.link_up.get(port):
                    continue                        # not read up this sweep: nothing to judge
                sig = (True, *now)
                known = self.peers.get((lid, rport))
                if known is not None and known[1] == sig:
                    res.peer_ability[port] = known[0]
                else:
                    ask.append((t, port, (lid, rport), sig))
        if not ask:
            return
        reqs = [Request(t.guid, key[0], _tmpl(codec.encode_port_info, key[1])) for t, _p, key, _s in ask]
        self.peer_reads += len(reqs)
        for (t, port, key, sig), ans in zip(ask, self.run(reqs, deadline)):
            out[t.guid].queries += 1
            # a CA that does not answer is not its switch's fault (never counted against it): its end
            # stays unknown, and is asked again only when the switch end's link changes
            ability = _UNKNOWN
            if ans is not None:
                try:
                    ability = codec.decode_port_link(ans)[3]
                except codec.MadError:
                    pass
            self.peers[key] = (ability, sig)
            out[t.guid].peer_ability[port] = ability
