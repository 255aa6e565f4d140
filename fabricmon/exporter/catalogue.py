"""Every metric fabricmon exports, declared as data: name, type, help, labels, and the one
function that pairs a snapshot's values with those labels.

One rule for "absent": a sample whose value is None is not emitted (a counter that could not
be read has no sample), and a family with no sample is not emitted. Port-level state (`up`,
`info`, `degraded`) is always present for every known port, so a port never vanishes.
"""

from __future__ import annotations

import platform
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass

from fabricmon import __version__
from fabricmon.model import ibspec
from fabricmon.checks import degraded_link
from fabricmon.exporter.counter_sets import DEFAULT
from fabricmon.model.finding import class_of
from fabricmon.model.health import health_status
from fabricmon.model.fabric import EcmpGroup, FabricPort, FabricSection, RouteBalance
from fabricmon.model.compact import COUNTER_NAMES, PortCounters
from fabricmon.model.gpu import AffinityResult, GpuInfo
from fabricmon.model.jobs import JobsSection
from fabricmon.model.nccl import NcclPath, NcclSection
from fabricmon.model.ber import KINDS, BerPort
from fabricmon.model.cable_ledger import CablePort
from fabricmon.model.optics import LaneDiag, ModuleDiag, NodeModule
from fabricmon.model.pcie import AER_SEVERITIES, PcieDevice, PcieLink
from fabricmon.model.vitals import Vital
from fabricmon.model.ports import PortView
from fabricmon.model.remediation import ACTIONS, DRAIN, ISOLATE, MODE_VALUE, RemediationSection
from fabricmon.model.roce import NetdevInfo, RoceView, roce_mtu
from fabricmon.model.snapshot import BUILD_BUCKETS, Snapshot, SourceState

Labels = tuple[str, ...]
Sample = tuple[Labels, "float | None"]
Bucket = tuple[str, Labels, float]          # a histogram's (suffix, labels, value): _bucket{le}, _count, _sum
_NO_COUNTERS: tuple[None, ...] = (None,) * len(COUNTER_NAMES)


class PortTable:
    """A section's switch ports in the section's order, for one render: what every switch port family reads
    (exporter/render.py walks the ports once per render for all of them), with each port's counters as one
    packed row (`raws`, made once and shared by every counter family)."""

    __slots__ = ("fab", "ports", "_raws")

    def __init__(self, fab: FabricSection) -> None:
        self.fab = fab
        self.ports: list[FabricPort] = list(fab.ports.values())
        self._raws: list[tuple[int | None, ...]] | None = None

    def raws(self) -> list[tuple[int | None, ...]]:
        """Each port's counters in COUNTER_NAMES order (None: not read); none at all for a port never cabled and
        down (nothing it counts moves: it exports no counters)."""
        if self._raws is None:
            none: tuple[int | None, ...] = _NO_COUNTERS
            out: list[tuple[int | None, ...]] = []
            append = out.append
            for p in self.ports:
                c = p.counters
                if not p.up and p.role == "unconnected":
                    append(none)
                elif type(c) is PortCounters:
                    append(c.raw)
                else:
                    append(tuple(c.get(n) for n in COUNTER_NAMES))
            self._raws = out
        return self._raws


# a switch port family's values, one per port of a PortTable in its order (None: no sample): the renderer
# compares them with its last render's and formats only what moved (exporter/render.py)
PortColumn = Callable[[PortTable], "list[float | None]"]


@dataclass(frozen=True, slots=True)
class Metric:
    name: str                   # for counters, without the _total suffix the exposition adds
    type: str                   # "gauge", "counter" or "histogram"
    help: str
    labels: tuple[str, ...]
    samples: Callable[[Snapshot], Iterable[Sample]]
    # histograms only: its series, (suffix, labels, value) each (samples then yields nothing)
    buckets: Callable[[Snapshot], Iterable[Bucket]] | None = None
    counter_set: str = DEFAULT  # the counter set (fabricmon/exporter/counter_sets.py) a scrape selects it by
    # a switch port family (labels SW_PORT, one sample per fabric port in the section's order, None: none):
    # what `samples` yields, as a column of values, for the renderer's one walk over the ports
    port_column: PortColumn | None = None
    # further sets a scrape selects it by (the `state` set's port state and what the port-down alerts join it
    # with, which the default set carries too: a fast scrape job asks for `state` alone, docs/latency.md)
    also: tuple[str, ...] = ()

    def selected(self, sets: frozenset[str]) -> bool:
        """Whether a scrape of the counter sets `sets` carries this family."""
        return self.counter_set in sets or (bool(self.also) and not sets.isdisjoint(self.also))

    @property
    def exposed_name(self) -> str:
        return self.name + "_total" if self.type == "counter" else self.name


PORT = ("device", "port")
ND = ("device", "netdev")


_PORT_LABELS: dict[tuple[str, int], Labels] = {}


def _port_labels(key: tuple[str, int]) -> Labels:
    """(device, "port") for a port key, built once per port (bounded by the ports ever seen)."""
    lv = _PORT_LABELS.get(key)
    if lv is None:
        if len(_PORT_LABELS) > 100_000:
            _PORT_LABELS.clear()
        lv = _PORT_LABELS[key] = (key[0], str(key[1]))
    return lv


# The last snapshot's ports with their labels: every per-port family of a render walks the same list.
_PORTS_OF: tuple[object, list[tuple[Labels, PortView]]] = (None, [])


def _ports(snap: Snapshot) -> list[tuple[Labels, PortView]]:
    global _PORTS_OF
    ib, ports = _PORTS_OF
    if ib is not snap.ib:
        ports = [(_port_labels(key), p) for key, p in snap.ib.ports.items()]
        _PORTS_OF = (snap.ib, ports)
    return ports


def _port_gauge(get: Callable[[PortView], float | None]) -> Callable[[Snapshot], Iterator[Sample]]:
    def samples(snap: Snapshot) -> Iterator[Sample]:
        for lv, p in _ports(snap):
            yield lv, get(p)
    return samples


def _port_info(snap: Snapshot) -> Iterator[Sample]:
    for (dev, port), p in snap.ib.ports.items():
        d = snap.ib.devices.get(dev)
        yield (dev, str(port), p.port_guid, p.link_layer, d.netdev if d else "", d.hca_type if d else "",
               d.firmware_version if d else ""), 1


def _port_peer(snap: Snapshot) -> Iterator[Sample]:
    for (dev, port), p in snap.ib.ports.items():
        if p.peer and p.peer_port is not None:
            yield (dev, str(port), p.peer, str(p.peer_port)), 1


def _expected_rate(snap: Snapshot) -> Iterator[Sample]:
    for lv, p in _ports(snap):
        v = snap.ib.verdicts.get(p.key)
        if v is not None and v.expected_rate_gbps is not None:
            yield lv, v.expected_rate_gbps * 1e9 / 8


def _degraded(snap: Snapshot) -> Iterator[Sample]:
    for lv, p in _ports(snap):
        v = snap.ib.verdicts.get(p.key)
        if v is not None:
            for reason in degraded_link.REASONS:
                yield (*lv, reason), 1 if v.degraded[reason] else 0


def _saturated(snap: Snapshot) -> Iterator[Sample]:
    for lv, p in _ports(snap):
        for name, is_sat in snap.ib.saturation.get(p.key, {}).items():
            if name in p.counters:
                yield (*lv, name), 1 if is_sat else 0


def _counter(spec: ibspec.CounterSpec) -> Callable[[Snapshot], Iterator[Sample]]:
    name, scale = spec.name, spec.scale

    def samples(snap: Snapshot) -> Iterator[Sample]:
        for lv, p in _ports(snap):
            v = p.counters.get(name)
            if v is not None:
                yield lv, v * scale
    return samples


def _hw_counters(snap: Snapshot) -> Iterator[Sample]:
    for lv, p in _ports(snap):
        for name, value in sorted(p.hw_counters.items()):
            yield (*lv, name), value


def _device_info(snap: Snapshot) -> Iterator[Sample]:
    for name, d in sorted(snap.ib.devices.items()):
        yield (name, d.hca_type, d.firmware_version, d.board_id, d.node_guid, d.netdev), 1


def _device_numa(snap: Snapshot) -> Iterator[Sample]:
    for name, d in sorted(snap.ib.devices.items()):
        yield (name,), d.numa_node


_CLASS_RANK = {"watch": 0, "degraded": 1, "fatal": 2}


def _check_status(snap: Snapshot) -> Iterator[Sample]:
    """One series per (check, device, port): the worst of its findings (a check may give one port several,
    the kernel log one per event), with that finding's class (the more serious class on a tie)."""
    fab = snap.fabric
    switches = fab.switches if fab is not None else {}
    worst: dict[tuple[str, str, str], tuple[int, int, str]] = {}
    for f in snap.findings:
        if f.port is None:
            port = ""
        elif fab is not None and f.device in switches:  # a fabric switch port: the label every fabric series uses
            port = fab.port_label(f.device, f.port)
        else:
            port = str(f.port)
        klass = class_of(f)
        key = (f.check, f.device, port)
        have = worst.get(key)
        mine = (f.status, _CLASS_RANK.get(klass, 0), klass)
        if have is None or mine[:2] > have[:2]:
            worst[key] = mine
    for (check, device, port), (status, _, klass) in worst.items():
        yield (check, device, port, klass), status


# --- the kernel log -----------------------------------------------------------------------------

def _kernel_events(snap: Snapshot) -> Iterator[Sample]:
    k = snap.kernel
    if k is None:
        return
    for a in k.events:
        yield (a.device, "" if a.port is None else str(a.port), a.event.event, a.klass), a.event.count


def _kernel_lines(snap: Snapshot) -> Iterator[Sample]:
    k = snap.kernel
    if k is None or k.data is None or not k.data.via:
        return          # no kernel log here (a replayed bundle)
    d = k.data
    yield ("unmatched",), d.lines - d.matched
    yield ("attributed",), d.matched - k.unattributed
    yield ("unattributed",), k.unattributed


def _kernel_lost(snap: Snapshot) -> Iterator[Sample]:
    k = snap.kernel
    if k is not None and k.data is not None and k.data.via:
        yield (), k.data.lost


def _restricted(snap: Snapshot) -> Iterator[Sample]:
    k = snap.kernel
    if k is not None:
        for dev in sorted(k.restricted):
            yield (dev,), 1


# --- NCCL's measurements (docs/nccl.md) ------------------------------------------------------
NCCL_PATH = ("job_id", "comm", "operation", "message_size", "algo_proto", "n_nodes", "gpu", "uuid", "device", "port",
             "node_guid", "switch", "switch_port")


def _nccl_paths(value: Callable[[NcclPath], float | None]) -> Callable[[Snapshot], Iterator[Sample]]:
    return _nccl_judged(lambda sec, p: value(p))


def _nccl_judged(value: Callable[[NcclSection, NcclPath], float | None]) -> Callable[[Snapshot], Iterator[Sample]]:
    """A per-path series whose value needs the section (the learned baselines, the slow paths)."""
    def fn(snap: Snapshot) -> Iterator[Sample]:
        if snap.nccl is None:
            return
        for p in snap.nccl.paths:
            v = value(snap.nccl, p)
            if v is None:
                continue
            m = p.measure
            yield (m.job, m.comm, m.operation, m.message_size, m.algo_proto, str(m.n_nodes),
                   "" if p.gpu_index is None else str(p.gpu_index), p.gpu_uuid, p.device,
                   "" if p.port is None else str(p.port), p.node_guid, p.switch,
                   "" if p.switch_port is None else str(p.switch_port)), v
    return fn


def _nccl_files(snap: Snapshot) -> Iterator[Sample]:
    n = snap.nccl
    if n is not None:
        yield ("read",), n.files - n.file_errors
        yield ("not_taken",), n.file_errors


def _nccl_expired(snap: Snapshot) -> Iterator[Sample]:
    if snap.nccl is not None:
        yield (), snap.nccl.expired


def _nccl_unjoined(snap: Snapshot) -> Iterator[Sample]:
    if snap.nccl is not None:
        yield (), snap.nccl.unjoined


def _ras_missing(snap: Snapshot) -> Iterator[Sample]:
    r = snap.ras
    if r is None or r.refused:
        return
    counts: dict[tuple[str, str, str], int] = {}
    for c in r.comms:
        gone = [p for p in c.missing if p.unresponsive or p.dead]
        for p in gone:
            k = (c.hash, p.host, "dead" if p.dead else "unresponsive")
            counts[k] = counts.get(k, 0) + 1
        if c.unreachable > len(gone):       # counted by RAS, not named (more than its report names)
            counts[(c.hash, "unknown", "unresponsive")] = (counts.get((c.hash, "unknown", "unresponsive"), 0)
                                                           + c.unreachable - len(gone))
    yield from sorted(counts.items())


def _ras_odd_ranks(snap: Snapshot) -> Iterator[Sample]:
    r = snap.ras
    if r is None or r.refused:
        return
    for c in r.comms:
        for m in c.mismatches:
            yield (c.hash, m.collective), sum(n for _, n in m.groups[1:])


def _ras_refused(snap: Snapshot) -> Iterator[Sample]:
    r = snap.ras
    if r is not None and r.refused:
        yield (r.version or "unknown",), 1


# --- RoCE -----------------------------------------------------------------------------------

def _roce(fn: Callable[[Labels, RoceView], Iterable[Sample]]) -> Callable[[Snapshot], Iterator[Sample]]:
    def samples(snap: Snapshot) -> Iterator[Sample]:
        for v in snap.roce.views:
            yield from fn((v.target.device, v.target.netdev), v)
    return samples


def _pfc(lv: Labels, v: RoceView) -> Iterator[Sample]:
    q = v.qos.qos if v.qos is not None else None
    if q is not None:
        for prio, on in enumerate(q.pfc_enabled):
            yield (*lv, str(prio)), 1 if on else 0


def _trust(lv: Labels, v: RoceView) -> Iterator[Sample]:
    q = v.qos.qos if v.qos is not None else None
    if q is not None and q.trust:
        yield (*lv, q.trust), 1


def _per_prio(attr: str, scale: float = 1.0) -> Callable[[Labels, RoceView], Iterator[Sample]]:
    def fn(lv: Labels, v: RoceView) -> Iterator[Sample]:
        s = v.ethtool
        if s is not None:
            for (prio, d), n in sorted(getattr(s, attr).items()):
                yield (*lv, str(prio), d), n * scale
    return fn


def _storm(lv: Labels, v: RoceView) -> Iterator[Sample]:
    s = v.ethtool
    if s is not None:
        for level, n in sorted(s.pause_storm.items()):
            yield (*lv, level), n


def _netdev_errors(lv: Labels, v: RoceView) -> Iterator[Sample]:
    s = v.ethtool
    if s is not None:
        for name, n in sorted(s.errors.items()):
            yield (*lv, name), n


def _hw(name: str) -> Callable[[Labels, RoceView], Iterator[Sample]]:
    def fn(lv: Labels, v: RoceView) -> Iterator[Sample]:
        yield lv, v.hw.get(name)
    return fn


def _netdev(get: Callable[[NetdevInfo], float | None]) -> Callable[[Labels, RoceView], Iterator[Sample]]:
    def fn(lv: Labels, v: RoceView) -> Iterator[Sample]:
        if v.netdev is not None:
            yield lv, get(v.netdev)
    return fn


def _speed(nd: NetdevInfo) -> float | None:
    mbps = nd.speed_mbps
    return None if mbps is None else mbps * 1e6 / 8


# --- GPU --------------------------------------------------------------------------------------

def _gdr(snap: Snapshot) -> Iterator[Sample]:
    gd = snap.gpu.gpudirect
    if gd is not None and gd.has_gpus:       # a node without NVIDIA GPUs exports no GPUDirect series
        for method, ok in gd.methods.items():
            yield (method,), 1 if ok else 0


def _gpus(fn: Callable[[AffinityResult, GpuInfo], Iterable[Sample]]) -> Callable[[Snapshot], Iterator[Sample]]:
    def samples(snap: Snapshot) -> Iterator[Sample]:
        aff = snap.gpu.affinity
        if aff is not None:
            for g in aff.gpus:
                yield from fn(aff, g)
    return samples


def _gpu_info(aff: AffinityResult, g: GpuInfo) -> Iterator[Sample]:
    yield (str(g.index), g.uuid, g.bus_id), 1


def _gpu_numa(aff: AffinityResult, g: GpuInfo) -> Iterator[Sample]:
    yield (str(g.index),), g.numa_node


def _gpu_paths(aff: AffinityResult, g: GpuInfo) -> Iterator[Sample]:
    for (gi, dev), cls in sorted(aff.paths.items()):
        if gi == g.index:
            yield (str(g.index), g.bus_id, dev, cls), 1


def _gpu_nearest(aff: AffinityResult, g: GpuInfo) -> Iterator[Sample]:
    if g.index in aff.assigned:
        dev = aff.assigned[g.index]
        yield (str(g.index), dev, aff.paths[(g.index, dev)]), 1


def _gpu_ok(aff: AffinityResult, g: GpuInfo) -> Iterator[Sample]:
    verdict = aff.affinity_ok(g.index)
    yield (str(g.index),), None if verdict is None else (1 if verdict else 0)


# --- the fabric collector (snap.fabric is None on a node: no samples there) -------------------

SW_PORT = ("switch_guid", "port")


def _fabric(fn: Callable[[FabricSection], Iterable[Sample]]) -> Callable[[Snapshot], Iterator[Sample]]:
    def samples(snap: Snapshot) -> Iterator[Sample]:
        if snap.fabric is not None:
            yield from fn(snap.fabric)
    return samples


def _port_samples(column: PortColumn) -> Callable[[Snapshot], Iterator[Sample]]:
    def fn(fab: FabricSection) -> Iterator[Sample]:
        table = PortTable(fab)
        for p, v in zip(table.ports, column(table)):
            yield (p.guid, p.label), v
    return _fabric(fn)


def _port_metric(name: str, type_: str, help_: str, column: PortColumn, counter_set: str = DEFAULT) -> Metric:
    """A switch port family: one sample per fabric port (labels switch_guid, port)."""
    return Metric(name, type_, help_, SW_PORT, _port_samples(column), counter_set=counter_set, port_column=column)


def _fab_ports(get: Callable[[FabricPort], float | None]) -> PortColumn:
    return lambda table: [get(p) for p in table.ports]


def _fab_optics_lane(get: Callable[[LaneDiag], float | None]) -> Callable[[Snapshot], Iterator[Sample]]:
    def fn(fab: FabricSection) -> Iterator[Sample]:
        for (guid, port), m in sorted(fab.optics.items()):
            label = fab.port_label(guid, port)
            for n, ln in sorted(m.lanes.items()):
                yield (guid, label, str(n) if n else ""), get(ln)
    return _fabric(fn)


def _fab_optics_port(get: Callable[[ModuleDiag], float | None]) -> Callable[[Snapshot], Iterator[Sample]]:
    def fn(fab: FabricSection) -> Iterator[Sample]:
        for (guid, port), m in sorted(fab.optics.items()):
            yield (guid, fab.port_label(guid, port)), get(m)
    return _fabric(fn)


def _fab_optics_thresholds(fab: FabricSection) -> Iterator[Sample]:
    for (guid, port), m in sorted(fab.optics.items()):
        label = fab.port_label(guid, port)
        for (q, lane), lim in sorted(m.lane_limits.items()):
            name, scale = _OPT_QUANTITY[q]
            for level in ("high_alarm", "high_warning", "low_warning", "low_alarm"):
                v = getattr(lim, level)
                if v is not None and v == v and abs(v) != float("inf"):
                    yield (guid, label, str(lane) if lane else "", name, level), v * scale


def _fab_switch_info(fab: FabricSection) -> Iterator[Sample]:
    for guid, sw in fab.switches.items():
        yield (guid, sw.name, str(fab.levels.get(guid, 0))), 1


def _fab_sharp(fab: FabricSection) -> Iterator[Sample]:
    for guid, ports in fab.aggregation_nodes.items():
        yield (guid, fab.switches[guid].name), len(ports)


def _fab_link_info(fab: FabricSection) -> Iterator[Sample]:
    for (guid, _), p in fab.ports.items():
        lk = p.link
        if lk is None:
            yield (guid, p.label, p.role, "", "", ""), 1
        else:
            yield (guid, p.label, p.role, lk.remote_guid, lk.remote_port_label, lk.remote_name), 1


def _fab_degraded(fab: FabricSection) -> Iterator[Sample]:
    """reason down on every cabled port (0 or 1: the switch-down rule takes the min over a switch's links);
    width and speed only while the port is degraded for them (two always-0 series a healthy port less)."""
    for (guid, _), p in fab.ports.items():
        if p.link is not None and p.state_read:
            d = p.degraded
            yield (guid, p.label, "down"), 1 if d.get("down") else 0
            if d.get("width"):
                yield (guid, p.label, "width"), 1
            if d.get("speed"):
                yield (guid, p.label, "speed"), 1


def _fab_counter(spec: ibspec.CounterSpec) -> PortColumn:
    name, scale = spec.name, spec.scale
    at = COUNTER_NAMES.index(name)

    def column(table: PortTable) -> list[float | None]:
        k = table.fab.counter_scale.get(name, scale)      # Ethernet octets count bytes, not 4-octet words
        col: list[float | None] = [r[at] for r in table.raws()]
        return col if k == 1 else [None if v is None else v * k for v in col]
    return column


# The switch port counters outside the default set (fabricmon/exporter/counter_sets.py): what no shipped rule or
# dashboard reads. The node daemon's own ports (a handful) export every counter. A switch port never cabled
# (role unconnected) exports its counters only while up (an Ethernet port without an LLDP neighbour): down
# and without a link, nothing it counts can move.
FABRIC_COUNTER_SETS = {
    "transmit_packets": "packets", "receive_packets": "packets",
    "transmit_unicast_packets": "unicast", "receive_unicast_packets": "unicast",
    "transmit_multicast_packets": "multicast", "receive_multicast_packets": "multicast",
    "receive_switch_relay_errors": "extra_errors", "transmit_constraint_errors": "extra_errors",
    "receive_constraint_errors": "extra_errors", "vl15_dropped": "extra_errors", "receive_discards": "extra_errors",
}


def _fab_pause(fab: FabricSection) -> Iterator[Sample]:
    for (guid, _), p in fab.ports.items():
        if p.pause:                 # (InfiniBand ports have none: no sort per port)
            for (prio, direction), v in sorted(p.pause.items()):
                yield (guid, p.label, "all" if prio < 0 else str(prio), direction), v


def _fab_groups(get: Callable[[EcmpGroup], float | None]) -> Callable[[Snapshot], Iterator[Sample]]:
    def fn(fab: FabricSection) -> Iterator[Sample]:
        for g in fab.groups:
            yield (g.guid, g.switch, g.direction), get(g)
    return _fabric(fn)


def _fab_routes(fab: FabricSection) -> Iterator[Sample]:
    for guid, rb in fab.routes.items():
        for port, n in sorted(rb.routes.items()):
            yield (guid, fab.port_label(guid, port)), n


def _fab_per_switch(get: Callable[[FabricSection, str], float | None]) -> Callable[[Snapshot], Iterator[Sample]]:
    def fn(fab: FabricSection) -> Iterator[Sample]:
        for guid, sw in fab.switches.items():
            yield (guid, sw.name), get(fab, guid)
    return _fabric(fn)


def _fab_route(get: Callable[[RouteBalance], float | None]) -> Callable[[FabricSection, str], float | None]:
    def fn(fab: FabricSection, guid: str) -> float | None:
        rb = fab.routes.get(guid)
        return None if rb is None else get(rb)
    return fn


def _fab_check_status(fab: FabricSection) -> Iterator[Sample]:
    for (check, guid), status in sorted(fab.check_status.items()):
        sw = fab.switches.get(guid)
        yield (check, guid, sw.name if sw is not None else ""), status


def _fab_sm_info(fab: FabricSection) -> Iterator[Sample]:
    seen = set()
    for sm in fab.sms or ():
        if sm.guid not in seen:
            seen.add(sm.guid)
            yield (sm.guid, str(sm.lid), str(sm.priority), sm.state), 1


def _fab_sm_master(fab: FabricSection) -> Iterator[Sample]:
    if fab.sms is not None:
        yield (), 1 if any(sm.state == "MASTER" for sm in fab.sms) else 0


# --- jobs (model.jobs.JobsSection: a node's jobs, or the fabric's running jobs) ----------------

def _jobs(fn: Callable[[JobsSection], Iterable[Sample]]) -> Callable[[Snapshot], Iterator[Sample]]:
    def samples(snap: Snapshot) -> Iterator[Sample]:
        if snap.jobs is not None:
            yield from fn(snap.jobs)
    return samples


def _job_info(jobs: JobsSection) -> Iterator[Sample]:
    for jid, j in sorted(jobs.jobs.items(), key=lambda kv: (len(kv[0]), kv[0])):
        yield (jid, j.user, j.name), 1


def _job_switches(jobs: JobsSection) -> Iterator[Sample]:
    for jid, guids in sorted(jobs.switches.items(), key=lambda kv: (len(kv[0]), kv[0])):
        for g in guids:
            yield (jid, g), 1


def _finding_jobs(jobs: JobsSection) -> Iterator[Sample]:
    for (guid, port), ids in sorted(jobs.finding_jobs.items(), key=lambda kv: (kv[0][0], kv[0][1] or 0)):
        for jid in ids:
            yield (guid, "" if port is None else str(port), jid), 1


def _placement(attr: str) -> Callable[[Snapshot], Iterator[Sample]]:
    """One placement number (model.placement.Placement) per running job with a node on the rail."""
    def fn(jobs: JobsSection) -> Iterator[Sample]:
        for jid, p in sorted(jobs.placement.items(), key=lambda kv: (len(kv[0]), kv[0])):
            if p.nodes:
                yield (jid,), len(p.leaves) if attr == "leaves" else getattr(p, attr)
    return _jobs(fn)


# --- fabricmon itself -------------------------------------------------------------------------

def _sources(get: Callable[[SourceState], float | None], enabled_only: bool = True) -> Callable[[Snapshot], Iterator[Sample]]:
    """Per-source self-metrics; those of a run (up, duration) only once the source has run."""
    def samples(snap: Snapshot) -> Iterator[Sample]:
        for name, s in sorted(snap.sources.items()):
            if not enabled_only or (s.enabled and s.ran):
                yield (name,), get(s)
    return samples


def _source_errors(snap: Snapshot) -> Iterator[Sample]:
    for name, s in sorted(snap.sources.items()):
        if s.enabled:
            for kind, n in sorted(s.errors_total.items()):
                yield (name, kind), n


def _build_histogram(snap: Snapshot) -> Iterator[Bucket]:
    b = snap.builds
    for bound, n in zip(BUILD_BUCKETS, b.buckets):     # the counts are already cumulative
        yield "_bucket", ("+Inf" if bound == float("inf") else repr(bound),), n
    yield "_count", (), b.count
    yield "_sum", (), b.total


def _build_info(snap: Snapshot) -> Iterator[Sample]:
    yield (__version__, platform.python_version()), 1


OPT_PORT = ("device", "port", "netdev")
OPT_LANE = ("device", "port", "netdev", "lane")
# threshold series: the quantity as its reading's metric names it, in that metric's unit
_OPT_QUANTITY = {"rx_power": ("rx_power_dbm", 1.0), "tx_power": ("tx_power_dbm", 1.0),
                 "tx_bias": ("tx_bias_amperes", 1e-3), "temperature": ("temperature_celsius", 1.0),
                 "voltage": ("voltage_volts", 1.0)}


def _optics(fn: Callable[[Labels, NodeModule], Iterable[Sample]]) -> Callable[[Snapshot], Iterator[Sample]]:
    def samples(snap: Snapshot) -> Iterator[Sample]:
        if snap.optics is None:
            return
        for m in snap.optics.modules:
            yield from fn((m.device, str(m.port), m.netdev), m)
    return samples


def _opt_diag(lv: Labels, m: NodeModule) -> Iterator[Sample]:
    yield lv, 1 if m.module is not None and m.module.has_readings else 0


def _opt_info(lv: Labels, m: NodeModule) -> Iterator[Sample]:
    d = m.module
    if d is not None:
        yield (*lv, d.module_class, d.identifier, d.vendor, d.part_number, d.serial), 1


def _opt_port(get: Callable[[ModuleDiag], float | None]) -> Callable[[Labels, NodeModule], Iterator[Sample]]:
    def fn(lv: Labels, m: NodeModule) -> Iterator[Sample]:
        if m.module is not None:
            yield lv, get(m.module)
    return fn


def _opt_lane(get: Callable[[LaneDiag], float | None]) -> Callable[[Labels, NodeModule], Iterator[Sample]]:
    def fn(lv: Labels, m: NodeModule) -> Iterator[Sample]:
        if m.module is not None:
            for n, ln in sorted(m.module.lanes.items()):
                yield (*lv, str(n)), get(ln)
    return fn


def _opt_thresholds(lv: Labels, m: NodeModule) -> Iterator[Sample]:
    if m.module is None:
        return
    for q, lim in sorted(m.module.limits.items()):
        name, scale = _OPT_QUANTITY[q]
        for level in ("high_alarm", "high_warning", "low_warning", "low_alarm"):
            v = getattr(lim, level)
            if v is not None:
                yield (*lv, name, level), v * scale


# --- physical-layer BER (docs/ber.md) ---------------------------------------------------------------
BER_PORT = ("device", "port", "source")


def _ber(fn: Callable[[Snapshot, BerPort], Iterable[Sample]]) -> Callable[[Snapshot], Iterator[Sample]]:
    def samples(snap: Snapshot) -> Iterator[Sample]:
        if snap.ber is None:
            return
        for p in snap.ber.ports:
            yield from fn(snap, p)
    return samples


def _ber_counter(name: str, scale: float = 1.0) -> Callable[[Snapshot], Iterator[Sample]]:
    def fn(snap: Snapshot, p: BerPort) -> Iterator[Sample]:
        v = p.counters.get(name)
        if v is not None:
            yield (p.device, str(p.port), p.source), v * scale
    return _ber(fn)


def _ber_info(snap: Snapshot, p: BerPort) -> Iterator[Sample]:
    yield (p.device, str(p.port), p.source, p.fec, p.medium, p.speed), 1


def _ber_lanes(snap: Snapshot, p: BerPort) -> Iterator[Sample]:
    for lane, v in sorted(p.counters.lanes().items()):
        yield (p.device, str(p.port), p.source, str(lane)), v


def _ber_bins(snap: Snapshot, p: BerPort) -> Iterator[Sample]:
    for (lo, hi), v in p.counters.bins().items():
        yield (p.device, str(p.port), p.source, str(lo), str(hi)), v


def _ber_ratio(snap: Snapshot, p: BerPort) -> Iterator[Sample]:
    v = snap.ber.verdicts.get(p.key) if snap.ber is not None else None
    if v is not None:
        for (kind, window), ratio in sorted(v.ratios.items()):
            yield (p.device, str(p.port), kind, window), ratio


def _ber_budget(snap: Snapshot, p: BerPort) -> Iterator[Sample]:
    v = snap.ber.verdicts.get(p.key) if snap.ber is not None else None
    b = getattr(v, "budget", None)
    if b is not None:
        for kind in KINDS:
            warn, err = b.levels(kind)
            for level, value in (("warning", warn), ("error", err)):
                if value is not None:
                    yield (p.device, str(p.port), kind, level), value


def _ber_since_clear(snap: Snapshot, p: BerPort) -> Iterator[Sample]:
    for kind, v in sorted(p.since_clear.items()):
        yield (p.device, str(p.port), kind), v


# --- PCIe links and AER (docs/pcie.md) ----------------------------------------------------------------
PCI = ("device", "address")


def _pcie(fn: Callable[[Snapshot, PcieDevice], Iterable[Sample]]) -> Callable[[Snapshot], Iterator[Sample]]:
    def samples(snap: Snapshot) -> Iterator[Sample]:
        if snap.pcie is None:
            return
        for d in snap.pcie.devices:
            yield from fn(snap, d)
    return samples


def _pcie_links(snap: Snapshot, d: PcieDevice) -> Iterator[tuple[str, PcieLink]]:
    yield "current", d.current
    yield "maximum", d.maximum
    if d.slot is not None:
        yield "slot", d.slot
    want = snap.pcie.expected.get(d.address) if snap.pcie is not None else None
    if want is not None:
        yield "expected", want


def _pcie_speed(snap: Snapshot, d: PcieDevice) -> Iterator[Sample]:
    for name, ln in _pcie_links(snap, d):
        if ln.gts is not None:
            yield (d.name, d.address, name), ln.gts * 1e9


def _pcie_width(snap: Snapshot, d: PcieDevice) -> Iterator[Sample]:
    for name, ln in _pcie_links(snap, d):
        if ln.width is not None:
            yield (d.name, d.address, name), ln.width


def _pcie_bandwidth(snap: Snapshot, d: PcieDevice) -> Iterator[Sample]:
    for name, ln in _pcie_links(snap, d):
        bw = ln.gbps
        if bw is not None and name in ("current", "expected"):
            yield (d.name, d.address, name), bw * 1e9 / 8


def _pcie_info(snap: Snapshot, d: PcieDevice) -> Iterator[Sample]:
    yield (d.name, d.address, d.kind, d.slot_address), 1


def _pcie_aer(snap: Snapshot, d: PcieDevice) -> Iterator[Sample]:
    for where, counts in (("device", d.aer), ("slot", d.slot_aer)):
        for sev in AER_SEVERITIES:
            c = counts.get(sev)
            if c is not None and c.total is not None:
                yield (d.name, d.address, where, sev), c.total


def _pcie_aer_types(snap: Snapshot, d: PcieDevice) -> Iterator[Sample]:
    for where, counts in (("device", d.aer), ("slot", d.slot_aer)):
        for sev in AER_SEVERITIES:
            c = counts.get(sev)
            for err, v in sorted(c.errors.items()) if c is not None else ():
                yield (d.name, d.address, where, sev, err), v


# --- switch vitals (docs/vitals.md) ---------------------------------------------------------------------
VITAL = ("switch_guid", "part", "kind", "source")


def _vitals(fn: Callable[[str, Vital], Iterable[Sample]]) -> Callable[[Snapshot], Iterator[Sample]]:
    def samples(snap: Snapshot) -> Iterator[Sample]:
        fab = snap.fabric
        if fab is None:
            return
        for g, parts in sorted(fab.vitals.items()):
            for v in parts:
                yield from fn(g, v)
    return samples


def _vital_info(g: str, v: Vital) -> Iterator[Sample]:
    yield (g, v.part, v.kind, v.source, v.state), 1


def _vital_status(g: str, v: Vital) -> Iterator[Sample]:
    if v.status is not None:
        yield (g, v.part, v.kind, v.source), v.status


def _vital_value(unit: str) -> Callable[[str, Vital], Iterator[Sample]]:
    def fn(g: str, v: Vital) -> Iterator[Sample]:
        if v.unit == unit and v.value is not None:
            yield (g, v.part, v.source), v.value
    return fn


# --- the cable ledger (docs/cables.md) --------------------------------------------------------------------
def _cables(get: Callable[[CablePort], float | None], info: bool = False) -> Callable[[Snapshot], Iterator[Sample]]:
    def samples(snap: Snapshot) -> Iterator[Sample]:
        if snap.cables is None:
            return
        for c in snap.cables.ports:
            lv: Labels = (c.device, str(c.port), c.serial, c.vendor, c.part_number) if info else (c.device, str(c.port))
            yield lv, get(c)
    return samples


G, C = "gauge", "counter"


def _remediation(fn: Callable[[RemediationSection], Iterable[Sample]]) -> Callable[[Snapshot], Iterator[Sample]]:
    """Remediation's samples (the daemon's Remediator; none for `once`, `check` or a replay)."""
    def samples(snap: Snapshot) -> Iterator[Sample]:
        return iter(()) if snap.remediation is None else iter(fn(snap.remediation))
    return samples


def _rem_held(fn: Callable[[RemediationSection], Iterable[Sample]]) -> Callable[[Snapshot], Iterator[Sample]]:
    """Remediation's state, from the lease's holder only: a collector that does not hold it decides and does
    nothing, so it has nothing to say (no zeros: in a store that deduplicates a pair's series, the holder's
    samples are the only ones)."""
    def samples(snap: Snapshot) -> Iterator[Sample]:
        rem = snap.remediation
        return iter(()) if rem is None or not rem.held else iter(fn(rem))
    return samples


def _rem_in_effect(kind: str) -> Callable[[RemediationSection], Iterable[Sample]]:
    def samples(rem: RemediationSection) -> Iterable[Sample]:
        if kind == ISOLATE and rem.scope == "node":
            return []
        n = {m: 0 for m in ("act", "dry_run")}
        for a in rem.actions:
            if a.kind == kind and a.in_effect:
                n[a.mode] = n.get(a.mode, 0) + 1
        return [((m,), v) for m, v in sorted(n.items())]
    return samples


def _rem_isolated(rem: RemediationSection) -> Iterable[Sample]:
    """Both ends of each link in effect: the end set and its peer (whose name is the section's business: empty)."""
    out: list[Sample] = []
    for a in rem.actions:
        if a.kind == ISOLATE and a.in_effect:
            out.append(((a.guid, a.switch, str(a.port), a.mode, a.id, "set"), 1))
            if a.peer:
                g, _, p = a.peer.rpartition(":")
                out.append(((g, "", p, a.mode, a.id, "peer"), 1))
    return out


def _rem_breaker(get: Callable[[int, int, bool], float]) -> Callable[[RemediationSection], Iterable[Sample]]:
    return lambda rem: [((k,), get(b.cap, b.used, b.tripped)) for k, b in sorted(rem.breakers.items())]


def _rem_open(pred: Callable[[str, str], bool]) -> Callable[[RemediationSection], Iterable[Sample]]:
    def samples(rem: RemediationSection) -> Iterable[Sample]:
        kinds = (DRAIN,) if rem.scope == "node" else ACTIONS
        return [((k,), sum(1 for a in rem.actions if a.kind == k and a.open and pred(a.state, a.error)))
                for k in kinds]
    return samples

CATALOGUE: tuple[Metric, ...] = (
    # InfiniBand ports (every RDMA port; link_layer says whether it is IB or RoCE)
    Metric("fabricmon_ib_port_info", G, "Port identity; join on device,port with group_left.",
           ("device", "port", "port_guid", "link_layer", "netdev", "hca_type", "firmware_version"), _port_info),
    Metric("fabricmon_ib_port_peer_info", G, "What the port is cabled to: the switch's node description (peer) "
           "and port, from iblinkinfo while the link is up, remembered in the learned inventory while it is down; "
           "the alerts carry them as switch and switch_port (Alertmanager inhibition and grouping).",
           ("device", "port", "peer", "peer_port"), _port_peer, also=("state",)),
    Metric("fabricmon_ib_port_up", G, "1 if the port is ACTIVE and LinkUp, else 0.", PORT,
           _port_gauge(lambda p: 1 if p.up else 0), also=("state",)),
    Metric("fabricmon_ib_port_state_id", G, "PortState: 1 DOWN, 2 INIT, 3 ARMED, 4 ACTIVE, 5 ACTIVE_DEFER.", PORT,
           _port_gauge(lambda p: p.state_id), also=("state",)),
    Metric("fabricmon_ib_port_physical_state_id", G,
           "PortPhysicalState: 2 Polling, 3 Disabled, 5 LinkUp, 6 LinkErrorRecovery, 7 Phy Test.", PORT,
           _port_gauge(lambda p: p.phys_state_id), also=("state",)),
    Metric("fabricmon_ib_port_rate_bytes_per_second", G,
           "Active data rate in bytes/s (lanes x nominal lane rate / 8; 0 when the port is down).", PORT,
           _port_gauge(lambda p: None if p.rate_gbps is None else p.rate_gbps * 1e9 / 8)),
    Metric("fabricmon_ib_port_link_width_lanes", G, "Active link width in lanes.", PORT,
           _port_gauge(lambda p: None if p.width is None else (p.width if p.up else 0))),
    Metric("fabricmon_ib_port_supported_link_width_lanes", G,
           "Width both ends could run at, when above the active width (iblinkinfo).", PORT,
           _port_gauge(lambda p: p.could_be_width or None)),
    Metric("fabricmon_ib_port_expected_rate_bytes_per_second", G,
           "Expected data rate in bytes/s from the config's expected_links.", PORT, _expected_rate),
    Metric("fabricmon_ib_port_degraded", G, "1 while the port is degraded for this reason (down, width, speed).",
           ("device", "port", "reason"), _degraded, also=("state",)),
    Metric("fabricmon_ib_port_saturated", G,
           "1 when the error counter sits at its maximum: its rate is unknown.", ("device", "port", "counter"),
           _saturated),
    *(Metric(f"fabricmon_ib_port_{c.name}", C, c.help, PORT, _counter(c)) for c in ibspec.COUNTERS),
    Metric("fabricmon_ib_port_hw_counters", C, "mlx5 hw_counters of the port, by counter name.",
           ("device", "port", "counter"), _hw_counters),
    Metric("fabricmon_ib_device_info", G, "HCA identity.",
           ("device", "hca_type", "firmware_version", "board_id", "node_guid", "netdev"), _device_info),
    Metric("fabricmon_ib_device_numa_node", G, "NUMA node of the HCA's PCI function (absent if unknown).",
           ("device",), _device_numa),
    # Findings
    Metric("fabricmon_check_status", G, "Check result per port: 0 OK, 1 WARNING, 2 CRITICAL; class: what an "
           "automation does (fatal: drain the node, degraded: schedule a repair, watch: nothing).",
           ("check", "device", "port", "class"), _check_status, also=("state",)),
    Metric("fabricmon_health_status", G, "The verdict, what fabricmon check (fabric once) exits with: 0 OK, "
           "1 WARNING (a check, or a failing source), 2 CRITICAL, 3 UNKNOWN (nothing to check: no "
           "InfiniBand or RoCE port, no expected_links, none seen before; a fabric collector that read no switch).",
           (), lambda snap: [((), health_status(snap))]),
    # RoCE
    Metric("fabricmon_roce_pfc_enabled", G, "1 if PFC is enabled on the priority (mlnx_qos).",
           ("device", "netdev", "priority"), _roce(_pfc)),
    Metric("fabricmon_roce_trust_info", G, "Priority trust state (pcp, dscp) of the netdev.",
           ("device", "netdev", "trust"), _roce(_trust)),
    Metric("fabricmon_roce_pause_frames", C, "PFC pause frames by priority and direction "
           "(ethtool rx/tx_prioN_pause).", ("device", "netdev", "priority", "direction"), _roce(_per_prio("pause"))),
    Metric("fabricmon_roce_pause_duration_seconds", C, "Time paused by priority and direction "
           "(ethtool rx/tx_prioN_pause_duration, microseconds converted to seconds).",
           ("device", "netdev", "priority", "direction"), _roce(_per_prio("pause_duration_us", 1e-6))),
    Metric("fabricmon_roce_pause_transitions", C, "Transitions into the paused state "
           "(ethtool rx/tx_prioN_pause_transition).", ("device", "netdev", "priority", "direction"),
           _roce(_per_prio("pause_transitions"))),
    Metric("fabricmon_roce_pause_storm_events", C, "Pause-storm guard events (ethtool "
           "tx_pause_storm_warning/error_events).", ("device", "netdev", "level"), _roce(_storm)),
    Metric("fabricmon_roce_mtu_bytes", G, "Active RoCE (IB) MTU derived from the netdev MTU "
           "as the kernel does (netdev MTU - 96, rounded down to 256..4096).", ND,
           _roce(_netdev(lambda nd: roce_mtu(nd.mtu)))),
    Metric("fabricmon_roce_cnp_sent", C, "CNPs sent as notification point (hw_counters np_cnp_sent).", ND,
           _roce(_hw("np_cnp_sent"))),
    Metric("fabricmon_roce_cnp_handled", C, "CNPs handled as reaction point (hw_counters rp_cnp_handled).", ND,
           _roce(_hw("rp_cnp_handled"))),
    Metric("fabricmon_roce_cnp_ignored", C, "CNPs ignored as reaction point: rising means DCQCN is off "
           "(hw_counters rp_cnp_ignored).", ND, _roce(_hw("rp_cnp_ignored"))),
    Metric("fabricmon_roce_ecn_marked_packets", C, "ECN-marked RoCE packets received "
           "(hw_counters np_ecn_marked_roce_packets).", ND, _roce(_hw("np_ecn_marked_roce_packets"))),
    Metric("fabricmon_netdev_errors", C, "Drop and PHY error counters of the RoCE netdev "
           "(ethtool -S, curated), by ethtool counter name.", ("device", "netdev", "counter"), _roce(_netdev_errors)),
    Metric("fabricmon_netdev_mtu_bytes", G, "MTU of the RoCE netdev.", ND, _roce(_netdev(lambda nd: nd.mtu))),
    Metric("fabricmon_netdev_speed_bytes_per_second", G, "Link speed of the RoCE netdev in bytes/s "
           "(absent while down).", ND, _roce(_netdev(_speed))),
    Metric("fabricmon_netdev_up", G, "1 if the RoCE netdev's operstate is up.", ND,
           _roce(_netdev(lambda nd: None if nd.operstate is None else (1 if nd.operstate == "up" else 0)))),
    # Transceivers of the RDMA ports' netdevs (ethtool -m; docs/optics.md)
    Metric("fabricmon_optics_diagnostics", G, "1 if the netdev's transceiver reports digital diagnostics, 0 when "
           "there is no data (no module, a copper cable without DOM, a NIC that cannot read it).", OPT_PORT,
           _optics(_opt_diag)),
    Metric("fabricmon_optics_module_info", G, "Transceiver identity: module class (SFP, QSFP, CMIS), SFF-8024 "
           "identifier, vendor, part and serial number.",
           (*OPT_PORT, "module_class", "identifier", "vendor", "part_number", "serial"), _optics(_opt_info)),
    Metric("fabricmon_optics_rx_power_dbm", G, "Receive power of the lane in dBm (floored at -40: below the "
           "register's 0.1 uW step).", OPT_LANE, _optics(_opt_lane(lambda ln: ln.rx_power_dbm))),
    Metric("fabricmon_optics_rx_power_watts", G, "Receive power of the lane in watts.", OPT_LANE,
           _optics(_opt_lane(lambda ln: None if ln.rx_power_mw is None else ln.rx_power_mw * 1e-3))),
    Metric("fabricmon_optics_tx_power_dbm", G, "Transmit power of the lane in dBm (floored at -40).", OPT_LANE,
           _optics(_opt_lane(lambda ln: ln.tx_power_dbm))),
    Metric("fabricmon_optics_tx_power_watts", G, "Transmit power of the lane in watts.", OPT_LANE,
           _optics(_opt_lane(lambda ln: None if ln.tx_power_mw is None else ln.tx_power_mw * 1e-3))),
    Metric("fabricmon_optics_tx_bias_amperes", G, "Laser bias current of the lane in amperes.", OPT_LANE,
           _optics(_opt_lane(lambda ln: None if ln.tx_bias_ma is None else ln.tx_bias_ma * 1e-3))),
    Metric("fabricmon_optics_temperature_celsius", G, "Transceiver temperature.", OPT_PORT,
           _optics(_opt_port(lambda d: d.temperature_c))),
    Metric("fabricmon_optics_voltage_volts", G, "Transceiver supply voltage.", OPT_PORT,
           _optics(_opt_port(lambda d: d.voltage_v))),
    Metric("fabricmon_optics_threshold", G, "The module's own alarm and warning thresholds, by the quantity they "
           "bound (rx_power_dbm, tx_power_dbm, tx_bias_amperes, temperature_celsius, voltage_volts: the unit of "
           "that reading's metric) and level (high_alarm, high_warning, low_warning, low_alarm).",
           (*OPT_PORT, "quantity", "level"), _optics(_opt_thresholds)),
    # Physical-layer errors and bit error ratios under FEC (mlxlink, ethtool -S, ethtool --show-fec; docs/ber.md)
    Metric("fabricmon_port_fec_info", G, "The port's FEC mode (rs544_plr, rs544, rs528, ll_plr, ll_rs, firecode, none, "
           "unknown), medium (copper, active_copper, optical, unknown) and speed class as the BER budget keys "
           "them, and which source's physical counters are exported for it.",
           (*BER_PORT, "fec", "medium", "speed"), _ber(_ber_info)),
    Metric("fabricmon_port_phy_raw_errors", C, "Bit errors before FEC correction, all lanes (mlxlink's Raw Physical "
           "Errors Per Lane summed, ethtool's rx_err_lane_<n>_phy summed).", BER_PORT, _ber_counter("raw_errors")),
    Metric("fabricmon_port_phy_corrected_errors", C, "Bit errors the FEC corrected (ethtool rx_corrected_bits_phy; "
           "ethtool --show-fec corrected_bits).", BER_PORT, _ber_counter("corrected_bits")),
    Metric("fabricmon_port_phy_effective_errors", C, "Errors the FEC did not correct (mlxlink Effective Physical "
           "Errors; ethtool rx_pcs_symbol_err_phy).", BER_PORT, _ber_counter("effective_errors")),
    Metric("fabricmon_port_phy_symbol_errors", C, "Symbol errors after FEC (mlxlink Symbol Errors on InfiniBand; "
           "ethtool rx_symbol_err_phy).", BER_PORT, _ber_counter("symbol_errors")),
    Metric("fabricmon_port_phy_received_bytes", C, "Bytes the physical layer received (ethtool rx_bits_phy / 8), the "
           "BER's denominator where the driver counts it.", BER_PORT, _ber_counter("received_bits", 1 / 8)),
    Metric("fabricmon_port_fec_corrected_blocks", C, "FEC codewords received with errors that were corrected "
           "(ethtool --show-fec).", BER_PORT, _ber_counter("fec_corrected_blocks")),
    Metric("fabricmon_port_fec_uncorrectable_blocks", C, "FEC codewords received with errors the FEC could not "
           "correct (ethtool --show-fec): frames lost.", BER_PORT, _ber_counter("fec_uncorrectable_blocks")),
    Metric("fabricmon_port_phy_lane_raw_errors", C, "Bit errors before FEC of one lane (mlxlink, ethtool "
           "rx_err_lane_<n>_phy); lanes 0-based as the tools number them.", (*BER_PORT, "lane"), _ber(_ber_lanes),
           counter_set="phy_lanes"),
    Metric("fabricmon_port_fec_histogram_codewords", C, "RS-FEC histogram: codewords received that needed between "
           "bin_low and bin_high symbols corrected (ethtool --show-fec, Linux 6.18).",
           (*BER_PORT, "bin_low", "bin_high"), _ber(_ber_bins), counter_set="fec_histogram"),
    Metric("fabricmon_port_bit_error_ratio", G, "Bit error ratio measured over the window (short 12 min, long 125 min "
           "by default: checks.phy_ber) by kind: raw (pre-FEC), effective (post-FEC), symbol; errors over the bits "
           "received in what the window covers.", ("device", "port", "kind", "window"), _ber(_ber_ratio)),
    Metric("fabricmon_port_ber_budget", G, "The bit error ratio budget that applies to the port (its speed, FEC mode, "
           "medium and adapter; docs/ber.md#the-budget-table) by kind and level (warning, error).",
           ("device", "port", "kind", "level"), _ber(_ber_budget)),
    Metric("fabricmon_port_ber_since_clear", G, "The bit error ratio the adapter's firmware computed since its "
           "counters were last cleared (mlxlink's Raw/Effective Physical BER, Symbol BER), by kind; not windowed.",
           ("device", "port", "kind"), _ber(_ber_since_clear)),
    # PCIe links of the RDMA functions and GPUs, and their AER counters (docs/pcie.md)
    Metric("fabricmon_pcie_device_info", G, "A PCI function fabricmon watches: kind nic (an RDMA device's function) or "
           "gpu, and the port above it (its slot).", (*PCI, "kind", "slot_address"), _pcie(_pcie_info)),
    Metric("fabricmon_pcie_link_speed_transfers_per_second", G, "PCIe link speed in transfers per second (32e9: "
           "Gen5), by link: current (trained), maximum (the function's), slot (the port above it), expected (the "
           "lesser of maximum and slot).", (*PCI, "link"), _pcie(_pcie_speed)),
    Metric("fabricmon_pcie_link_width_lanes", G, "PCIe link width in lanes, by link (current, maximum, slot, expected).",
           (*PCI, "link"), _pcie(_pcie_width)),
    Metric("fabricmon_pcie_link_bandwidth_bytes_per_second", G, "Usable PCIe bandwidth after line coding (the "
           "kernel's arithmetic: Gen4 x16 252 Gb/s), by link: current and expected.", (*PCI, "link"),
           _pcie(_pcie_bandwidth)),
    Metric("fabricmon_pcie_aer_errors", C, "AER errors counted since boot (TOTAL_ERR_COR, _NONFATAL, _FATAL of "
           "aer_dev_correctable, _nonfatal, _fatal), of the function (where=device) and of the port above it "
           "(where=slot), by severity.", (*PCI, "where", "severity"), _pcie(_pcie_aer)),
    Metric("fabricmon_pcie_aer_errors_by_type", C, "AER errors since boot by the kernel's name for each (RxErr, BadTLP, "
           "MalfTLP, ...).", (*PCI, "where", "severity", "error"), _pcie(_pcie_aer_types), counter_set="pcie_aer"),
    # The cable ledger: which module is in which port, reseats and swaps (docs/cables.md)
    Metric("fabricmon_cable_module_info", G, "The module (or cable) in the port now, by serial, vendor and part number, "
           "as the cable ledger keeps it (ethtool -m, mlxlink).", (*PORT, "serial", "vendor", "part_number"),
           _cables(lambda c: 1, info=True)),
    Metric("fabricmon_cable_insertions", C, "Modules the port has seen put in (a reseat of the same, or another), "
           "since the ledger first saw the port.", PORT, _cables(lambda c: c.insertions)),
    Metric("fabricmon_cable_swaps", C, "Modules with another serial than the one before, put in the port.", PORT,
           _cables(lambda c: c.swaps)),
    Metric("fabricmon_cable_troubles", G, "Troubles (findings not OK of the link and optics checks) the module in the "
           "port has had, in this port and any other it was in.", PORT, _cables(lambda c: c.troubles)),
    # The kernel log (docs/kernel-log.md)
    Metric("fabricmon_kernel_log_events", C, "Kernel log lines of a NIC event, per device (the RDMA device, or the "
           "PCI function/netdev the line names when it is none of this node's), port, event and class.",
           ("device", "port", "event", "class"), _kernel_events),
    Metric("fabricmon_kernel_log_lines", C, "Kernel log records read, by result: unmatched (no NIC event), "
           "attributed (an event of a monitored device), unattributed (an event naming no monitored device).",
           ("result",), _kernel_lines),
    Metric("fabricmon_kernel_log_lost_records", C, "Kernel log records overwritten in the ring buffer before "
           "fabricmon read them.", (), _kernel_lost),
    Metric("fabricmon_ib_device_counters_restricted", G, "1 for a device whose port counters are not read (a "
           "firmware-restricted function, or sources.sysfs.counters_exclude_devices); its state and rate still are.",
           ("device",), _restricted),
    # NCCL's own measurements (docs/nccl.md)
    Metric("fabricmon_nccl_bus_bandwidth_gbs", G, "NCCL's bus bandwidth (GB/s, the Inspector's mean over its dump "
           "window) of a network communicator (n_nodes > 1) per job, communicator, operation, message-size bucket "
           "and algo_proto, on the GPU of the file's UUID, with the NIC paired to it (device, port, its node_guid: "
           "the fabric collector's remote_guid) and the switch port it is cabled to.", NCCL_PATH,
           _nccl_paths(lambda p: p.measure.busbw_gbs)),
    Metric("fabricmon_nccl_exec_time_seconds", G, "NCCL's mean execution time of the operation (the Inspector's "
           "microseconds, in seconds), labelled as fabricmon_nccl_bus_bandwidth_gbs.", NCCL_PATH,
           _nccl_paths(lambda p: None if p.measure.exec_time_us is None else p.measure.exec_time_us / 1e6)),
    Metric("fabricmon_nccl_line_rate_ratio", G, "Bus bandwidth over the data rate of the NIC port it leaves by "
           "(rate / 8, GB/s): the seeds' target for large all-reduce messages is 0.8 or more. Absent where the "
           "port or its rate is unknown.", NCCL_PATH, _nccl_paths(lambda p: p.line_rate_ratio)),
    Metric("fabricmon_nccl_baseline_gbs", G, "The job's own bus bandwidth on this path, learned over its first "
           "checks.nccl_slow_collective.learn_seconds (the median of its dumps; kept across daemon restarts), "
           "labelled as fabricmon_nccl_bus_bandwidth_gbs. Absent while learning.", NCCL_PATH,
           _nccl_judged(lambda sec, p: sec.baseline_gbs.get(p.baseline_key))),
    Metric("fabricmon_nccl_baseline_ratio", G, "Bus bandwidth over the job's own baseline "
           "(fabricmon_nccl_baseline_gbs): below checks.nccl_slow_collective.baseline_fraction the path is slow. "
           "Joins the fabric collector's port series through fabricmon_fabric_link_info (node_guid, port; "
           "docs/nccl.md).", NCCL_PATH, _nccl_judged(NcclSection.baseline_ratio)),
    Metric("fabricmon_nccl_slow", G, "1 while the nccl_slow_collective check calls this path slow (below its "
           "baseline fraction, or a large collective below its line-rate fraction), else 0.", NCCL_PATH,
           _nccl_judged(lambda sec, p: 1 if p.baseline_key in sec.slow else 0)),
    Metric("fabricmon_nccl_ras_missing_ranks", G, "Ranks NCCL's RAS reports missing from a communicator (the "
           "nccl_ras source, opt-in), by communicator hash, the peer's host and its state (dead, unresponsive).",
           ("comm", "peer_host", "state"), _ras_missing),
    Metric("fabricmon_nccl_ras_ranks_off_count", G, "Ranks of a communicator not at the operation count most of "
           "its ranks are at, per collective, in NCCL RAS's last answer (one answer: often mid-flight; "
           "nccl_ras_stalled judges two).", ("comm", "collective"), _ras_odd_ranks),
    Metric("fabricmon_nccl_ras_refused", G, "1 while the NCCL answering RAS here is a version fabricmon does not "
           "read (before sources.nccl_ras.text_since, 2.27.3 by default; docs/nccl.md#ras).",
           ("version",), _ras_refused),
    Metric("fabricmon_nccl_inspector_files", G, "NCCL Inspector files of running jobs, by result: read (the last "
           "read taken), not_taken (being rewritten, garbage or too large: see the source's errors).", ("result",),
           _nccl_files),
    Metric("fabricmon_nccl_inspector_expired_files", C, "Inspector files left unread because not rewritten "
           "for sources.nccl_inspector.expire seconds (their job ended).", (), _nccl_expired),
    Metric("fabricmon_nccl_unjoined_measures", G, "Network measures whose file's GPU UUID matches no GPU NVML sees "
           "here (exported without NIC or switch port).", (), _nccl_unjoined),
    # GPUDirect RDMA and GPU-NIC affinity
    Metric("fabricmon_gpudirect_rdma_path_available", G,
           "1 if this GPUDirect RDMA method is available (peermem, nv_peer_mem, dmabuf).", ("method",), _gdr),
    Metric("fabricmon_gpu_info", G, "GPU identity from NVML; gpu is the NVML index.", ("gpu", "uuid", "gpu_bus_id"),
           _gpus(_gpu_info)),
    Metric("fabricmon_gpu_numa_node", G, "NUMA node of the GPU's PCI function (absent if unknown).", ("gpu",),
           _gpus(_gpu_numa)),
    Metric("fabricmon_gpu_nic_path_info", G, "PCI path class (PIX, PXB, PHB, NODE, SYS, UNKNOWN) of every GPU-RDMA "
           "device pair.", ("gpu", "gpu_bus_id", "device", "path"), _gpus(_gpu_paths)),
    Metric("fabricmon_gpu_nearest_nic_info", G, "The RDMA device the GPU is paired with (nearest, balanced across "
           "GPUs) and its path class.", ("gpu", "device", "path"), _gpus(_gpu_nearest)),
    Metric("fabricmon_gpu_nic_affinity_ok", G, "1 if the GPU's nearest RDMA NIC is at PXB or closer (NCCL uses "
           "GPUDirect RDMA), 0 if not; absent when unknown.", ("gpu",), _gpus(_gpu_ok)),
    # The fabric collector (`fabricmon fabric`)
    Metric("fabricmon_fabric_switch_info", G, "Switch identity; switch is the node description, level 1 are the "
           "leaves (the switches carrying hosts, docs/topology.md) and each further level is one hop farther.",
           ("switch_guid", "switch", "level"), _fabric(_fab_switch_info), also=("state",)),
    Metric("fabricmon_fabric_switch_sharp_aggregation_nodes", G, "SHARP Aggregation Nodes inside the switch (CAs "
           "whose SystemImageGUID is the switch's, or device 0xcf09): the switch can reduce in-network; absent "
           "for a switch without one. They are part of their switch, never hosts (their port's role is internal).",
           ("switch_guid", "switch"), _fabric(_fab_sharp)),
    Metric("fabricmon_fabric_link_info", G, "Switch port role (host, internal: a CA inside the switch, its SHARP "
           "Aggregation Node; up, down, unconnected; Ethernet also external: "
           "a bridge or router outside the fabric) and its remote end; join on switch_guid,port with group_left.",
           ("switch_guid", "port", "role", "remote_guid", "remote_port", "remote_name"), _fabric(_fab_link_info),
           also=("state",)),
    _port_metric("fabricmon_fabric_port_up", G, "1 if the switch port's link is up, else 0: its newest read (the sweep's "
           "PortInfo from the SM or the port, Ethernet's ifOperStatus on every port with or without an LLDP "
           "neighbour, or the InfiniBand discovery); a port that could not be read keeps its last known state, "
           "and one never read yet (an Ethernet switch no sweep has answered: LLDP says nothing of state) has none.",
           _fab_ports(lambda p: (1 if p.up else 0) if p.state_read else None), counter_set="state"),
    _port_metric("fabricmon_fabric_port_rate_bytes_per_second", G,
           "Link data rate in bytes/s (lanes x nominal lane rate / 8, or Ethernet's ifHighSpeed; 0 while down; "
           "absent when unconnected).",
           _fab_ports(lambda p: p.rate_bps)),
    Metric("fabricmon_fabric_port_degraded", G, "1 while the cabled switch port is degraded for this reason "
           "(down; width or speed below the norm of its link class); reason down is 0 or 1 on every cabled port "
           "whose state was read (fabricmon_fabric_port_up), "
           "width and speed are present only while 1.", ("switch_guid", "port", "reason"),
           _fabric(_fab_degraded)),
    _port_metric("fabricmon_fabric_port_transmit_rate_bytes_per_second", G,
                 "Transmit rate over the last two sweeps (PortXmitData deltas).",
                 _fab_ports(lambda p: p.tx_rate), counter_set="rates"),
    _port_metric("fabricmon_fabric_port_receive_rate_bytes_per_second", G,
                 "Receive rate over the last two sweeps (PortRcvData deltas).", _fab_ports(lambda p: p.rx_rate),
                 counter_set="rates"),
    *(_port_metric(f"fabricmon_fabric_port_{c.name}", C, c.help, _fab_counter(c),
                   counter_set=FABRIC_COUNTER_SETS.get(c.name, DEFAULT)) for c in ibspec.COUNTERS),
    Metric("fabricmon_fabric_port_pause_frames", C, "PFC pause frames at the switch port by priority (all: a MIB "
           "that counts per port only) and direction (tx: sent by the switch port, rx: received).",
           ("switch_guid", "port", "priority", "direction"), _fabric(_fab_pause)),
    Metric("fabricmon_ecmp_imbalance_ratio", G, "max/mean transmit rate of the switch's ECMP group (up ports; "
           "down ports on the top level), down and degraded links left out.", ("switch_guid", "switch", "direction"),
           _fab_groups(lambda g: g.ratio)),
    Metric("fabricmon_ecmp_imbalance_cv", G, "Coefficient of variation of the group's transmit rates.",
           ("switch_guid", "switch", "direction"), _fab_groups(lambda g: g.cv)),
    Metric("fabricmon_ecmp_utilisation_ratio", G, "Mean transmit rate of the group as a share of its link rate.",
           ("switch_guid", "switch", "direction"), _fab_groups(lambda g: g.utilisation)),
    Metric("fabricmon_ecmp_judged", G, "1 while the group's mean utilisation is at or above "
           "fabric.thresholds.utilisation_floor, so its imbalance ratio is judged; 0 below it (an idle group's "
           "ratio is noise: dashboards show the ratio only where this is 1).", ("switch_guid", "switch", "direction"),
           _fab_groups(lambda g: 1 if g.judged else 0)),
    Metric("fabricmon_ecmp_imbalanced", G, "1 when the group is over the imbalance threshold for the configured "
           "consecutive sweeps while above the utilisation floor.", ("switch_guid", "switch", "direction"),
           _fab_groups(lambda g: 1 if g.imbalanced else 0)),
    Metric("fabricmon_fabric_sweep_duration_seconds", G, "Duration of the last counter sweep.", (),
           _fabric(lambda fab: [((), fab.sweep_duration)])),
    Metric("fabricmon_fabric_switch_unresponsive", G, "1 while queries to the switch (MADs, SNMP walks) went "
           "unanswered in fabric.unresponsive_sweeps of its last fabric.unresponsive_window sweeps (its ports keep "
           "their last known state, none is taken as down), else 0.",
           ("switch_guid", "switch"), _fab_per_switch(lambda fab, g: 1 if fab.unresponsive.get(g) else 0),
           counter_set="state"),
    Metric("fabricmon_fabric_switch_last_read_timestamp_seconds", G, "Unix time of the last sweep in which every "
           "query to the switch was answered (absent: none yet).", ("switch_guid", "switch"),
           _fab_per_switch(lambda fab, g: fab.last_read.get(g)), counter_set="state"),
    Metric("fabricmon_fabric_link_state_method", G, "1 for how the last sweep read the switch ports' link state: "
           "sa (the subnet manager's PortInfoRecords), smp (PortInfo from each port: no SM, or its records did "
           "not cover the ports), none (not read: link state from the discovery only).", ("method",),
           _fabric(lambda fab: [((m,), 1 if (fab.link_state_method or "none") == m else 0)
                                for m in ("sa", "smp", "none")] if fab.switches else [])),
    Metric("fabricmon_fabric_sweep_method", G, "1 for how the last InfiniBand sweep read the switches: mad (the "
           "in-process MAD engine over a umad port), tools (infiniband-diags processes: no umad port could be opened "
           "by the collector, or fabric.sweep_method says so).", ("method",),
           _fabric(lambda fab: [((m,), 1 if fab.sweep_method == m else 0) for m in ("mad", "tools")]
                   if fab.switches and fab.sweep_method else [])),
    Metric("fabricmon_fabric_link_state_mode", G, "1 for where switch port state comes from now: events (the subnet "
           "manager accepted the collector's subscription to its reports, and each reported switch is re-read at "
           "once, docs/latency.md), sweep (each sweep only: no subscription in force, or the SM does not report a "
           "change the sweep saw; the collector's log and map say why). Absent without an events source (Ethernet).",
           ("mode",), _fabric(lambda fab: [((m,), 1 if fab.events.mode == m else 0) for m in ("events", "sweep")]
                              if fab.events is not None else [])),
    Metric("fabricmon_fabric_sm_reports", C, "Reports the subnet manager sent the collector, by trap number (128 "
           "link state change; 129-131 link integrity, buffer overrun, watchdog; 64/65 GID in/out of service).",
           ("trap",), _fabric(lambda fab: [((str(t),), float(n)) for t, n in
                                           sorted({**{t: 0 for t in fab.events.traps}, **fab.events.reports}.items())]
                              if fab.events is not None else [])),
    Metric("fabricmon_fabric_event_rereads", C, "Switches re-read (PortInfo of every port) on the subnet manager's "
           "reports.", (), _fabric(lambda fab: [((), float(fab.events.rereads))] if fab.events is not None else [])),
    Metric("fabricmon_fabric_event_reread_seconds", G, "Seconds from the last report's arrival to its switch's ports "
           "read (the snapshot is built and published after it).", (),
           _fabric(lambda fab: [((), fab.events.latency)] if fab.events is not None else [])),
    Metric("fabricmon_fabric_sm_subscription_timestamp_seconds", G, "Unix time the subnet manager last accepted the "
           "collector's subscription to its reports (absent: never).", (),
           _fabric(lambda fab: [((), fab.events.subscribed_at)] if fab.events is not None else [])),
    Metric("fabricmon_fabric_switches", G, "Switches this collector (shard) sweeps.", (),
           _fabric(lambda fab: [((), len(fab.switches))])),
    Metric("fabricmon_fabric_ports", G, "Switch ports this collector (shard) sweeps.", (),
           _fabric(lambda fab: [((), len(fab.ports))])),
    Metric("fabricmon_fabric_shard_info", G, "This collector's shard: switches whose GUID hash % shards == shard.",
           ("shard", "shards"), _fabric(lambda fab: [((str(fab.shard[0]), str(fab.shard[1])), 1)])),
    Metric("fabricmon_fabric_shards", G, "The shards its fabric is swept in (fabric.shard's n): as many shards, each "
           "with its replicas, must report fabricmon_fabric_shard_info (FabricmonFabricShardAbsent).", (),
           _fabric(lambda fab: [((), fab.shard[1])])),
    Metric("fabricmon_fabric_topology_changes", C, "Links or nodes that appeared or vanished between discoveries.",
           (), _fabric(lambda fab: [((), fab.topology_changes)])),
    Metric("fabricmon_fabric_route_imbalance_ratio", G, "max/mean of the remote destinations (CA LIDs not below the "
           "switch) its forwarding table routes through each active uplink.", ("switch_guid", "switch"),
           _fab_per_switch(_fab_route(lambda rb: rb.ratio))),
    Metric("fabricmon_fabric_routing_imbalanced", G, "1 when the switch's route imbalance is above "
           "fabric.routing_imbalance_threshold.", ("switch_guid", "switch"),
           _fab_per_switch(_fab_route(lambda rb: 1 if rb.imbalanced else 0))),
    Metric("fabricmon_fabric_port_routes", G, "Remote destinations (CA LIDs) the switch's forwarding table routes "
           "through this active uplink.", SW_PORT, _fabric(_fab_routes)),
    Metric("fabricmon_fabric_switch_uplinks", G, "Active uplinks (up ports) of the switch at the last discovery.",
           ("switch_guid", "switch"), _fab_per_switch(lambda fab, g: fab.uplinks.get(g, (None, None))[0])),
    Metric("fabricmon_fabric_switch_uplinks_expected", G, "The most common active-uplink count among its peers: "
           "the switches of its level sharing an upper switch with it (a switch without uplinks: its whole level); "
           "absent where no switch shares one (nothing to compare it with).", ("switch_guid", "switch"),
           _fab_per_switch(lambda fab, g: fab.uplinks.get(g, (None, None))[1])),
    Metric("fabricmon_fabric_check_status", G, "Fabric check result per switch (0 OK, 1 WARNING, 2 CRITICAL) of "
           "every check that ran, OK included, and absent for a check whose inputs were not read; check is the "
           "finding's own check: degraded_link, the counter checks (symbol_errors, link_flap, ...: each once a "
           "sweep read its counters; counter_saturation once one that can saturate), ecmp, uplinks, "
           "unresponsive, routing (once forwarding tables were read), pfc_storm (once pause frames were read), "
           "host_port_unconfigured (once a discovery read the CA ports' LIDs), "
           "or the fabric-wide sm and node_description (host CAs with the firmware's node description, present "
           "only then; switch_guid and switch empty).", ("check", "switch_guid", "switch"), _fabric(_fab_check_status)),
    Metric("fabricmon_fabric_sm_master_present", G, "1 if a subnet manager answers as master (sminfo), else 0.",
           (), _fabric(_fab_sm_master)),
    Metric("fabricmon_fabric_sm_info", G, "1 per subnet manager seen (the master, and every other port that "
           "claims to be an SM): GUID, LID, priority and state.", ("guid", "lid", "priority", "state"),
           _fabric(_fab_sm_info)),
    # Issue 10 named it fabricmon_fabric_sm_activity_count; promtool's lint rejects `_count` on anything but a
    # histogram or summary, and ActCount only grows while an SM lives: a counter (a failover reads as a reset).
    Metric("fabricmon_fabric_sm_activity", C, "The master SM's activity count (SMInfo ActCount): it keeps "
           "moving while the SM is alive (changes() == 0 over minutes: a hung SM).", (),
           _fabric(lambda fab: [((), fab.sm_activity)])),
    # jobs
    Metric("fabricmon_slurm_job_info", G, "1 per running Slurm job: on a node the jobs with a step on it, on the "
           "fabric collector every running job; user and job_name are empty until looked up.",
           ("job_id", "user", "job_name"), _jobs(_job_info)),
    Metric("fabricmon_slurm_jobs", G, "Running Slurm jobs seen (on a node: with a step on it; absent without a "
           "slurmd here).", (), _jobs(lambda j: [((), len(j.jobs))] if j.present else [])),
    Metric("fabricmon_slurm_job_lookup_failures", C, "Job lookups (user and name, once per job) that failed: "
           "slurmctld down or slow. Those jobs are shown by id until it answers.", (),
           _jobs(lambda j: [((), j.lookup_failures)] if j.scope == "node" and j.present else [])),
    Metric("fabricmon_fabric_job_switch_info", G, "1 per (running job, switch of this shard) the job's traffic can "
           "cross: its leaves, and for a multi-leaf job the higher switches between them. Join with "
           "fabricmon_fabric_check_status or fabricmon_ecmp_imbalanced on switch_guid.",
           ("job_id", "switch_guid"), _jobs(_job_switches)),
    Metric("fabricmon_fabric_finding_job_info", G, "1 per job a WARNING/CRITICAL fabric finding names, by the "
           "finding's switch and port (port empty for a whole-switch finding): what the alerts' jobs annotation "
           "lists.", ("switch_guid", "port", "job_id"), _jobs(_finding_jobs)),
    Metric("fabricmon_fabric_job_switch_dropped", G, "Running jobs whose switches are not exported as "
           "fabricmon_fabric_job_switch_info (the series would pass slurm.max_job_switch_series).", (), _jobs(lambda j: [((), j.dropped_series)] if j.scope == "fabric" else [])),
    Metric("fabricmon_fabric_job_hosts_unmapped", G, "Hosts of running jobs with no CA in the fabric topology "
           "(named differently, or on another fabric): their jobs are not placed on it.", (),
           _jobs(lambda j: [((), j.unmapped_hosts)] if j.scope == "fabric" else [])),
    # placement (model.placement, docs/slurm-topology.md#placement): per running job with a node on the rail
    Metric("fabricmon_slurm_job_leaves", G, "Leaf switches of the rail the running job's nodes are cabled to "
           "(fabric collector). Join on job_id with fabricmon_slurm_job_info for user and job_name.", ("job_id",),
           _placement("leaves")),
    Metric("fabricmon_slurm_job_leaves_needed", G, "The fewest leaf switches of the rail that could hold the "
           "running job's node count (its nodes packed into the largest leaves first).", ("job_id",),
           _placement("leaves_needed")),
    Metric("fabricmon_slurm_job_spines", G, "Switches of the level above the leaves needed to join the running "
           "job's leaves (0 on one leaf).", ("job_id",), _placement("spines")),
    Metric("fabricmon_slurm_job_spines_needed", G, "The fewest switches of the level above the leaves whose "
           "leaves could hold the running job's node count (0 when one leaf would do).", ("job_id",),
           _placement("spines_needed")),
    Metric("fabricmon_fabric_slurm_topology_drifted_nodes", G, "Nodes of the configured Slurm topology.conf "
           "(fabric.sources.slurm_topology) listed under a switch they are not cabled to, missing from it, or on no "
           "leaf of the rail; absent without a configured topology.conf (docs/slurm-topology.md).", (),
           _fabric(lambda f: [((), f.slurm_topology_drifted)] if f.slurm_topology_drifted is not None else [])),
    Metric("fabricmon_fabric_slurm_topology_drift", G, "Drifts of the configured Slurm topology.conf by kind: "
           "wrong_switch, missing_node, unknown_node, unknown_switch (a switch the fabric or the rail lacks).",
           ("kind",), _fabric(lambda f: [((k,), n) for k, n in f.slurm_topology_drift.items()])),
    Metric("fabricmon_fabric_design_loaded", G, "1 when a design file (fabric.sources.design) was read and the live "
           "fabric compared with it, 0 without one (docs/design.md).", (),
           _fabric(lambda f: [((), 1 if f.design_cables is not None else 0)])),
    Metric("fabricmon_fabric_design_cables", G, "Cables of the design file; absent without one.", (),
           _fabric(lambda f: [((), f.design_cables)] if f.design_cables is not None else [])),
    Metric("fabricmon_fabric_design_discrepancies", G, "Differences between the design and the live fabric by kind: "
           "swapped (pairs), miswired, missing_cable, extra_cable, missing_node, extra_node, replaced (same name, new "
           "GUID: a repair, no fault), below_design (a cable below its designed width or speed); absent without a "
           "design.", ("kind",), _fabric(lambda f: [((k,), n) for k, n in f.design_discrepancies.items()])),
    Metric("fabricmon_fabric_port_optics_rx_power_dbm", G, "Receive power of the switch port's transceiver lane in "
           "dBm (lane empty for a sensor of the whole port; ENTITY-SENSOR-MIB or CISCO-ENTITY-SENSOR-MIB).",
           ("switch_guid", "port", "lane"), _fab_optics_lane(lambda ln: ln.rx_power_dbm)),
    Metric("fabricmon_fabric_port_optics_tx_power_dbm", G, "Transmit power of the switch port's transceiver lane in dBm.",
           ("switch_guid", "port", "lane"), _fab_optics_lane(lambda ln: ln.tx_power_dbm)),
    Metric("fabricmon_fabric_port_optics_tx_bias_amperes", G, "Laser bias current of the switch port's transceiver "
           "lane.", ("switch_guid", "port", "lane"),
           _fab_optics_lane(lambda ln: None if ln.tx_bias_ma is None else ln.tx_bias_ma * 1e-3)),
    Metric("fabricmon_fabric_port_optics_temperature_celsius", G, "Temperature of the switch port's transceiver.",
           SW_PORT, _fab_optics_port(lambda m: m.temperature_c)),
    Metric("fabricmon_fabric_port_optics_voltage_volts", G, "Supply voltage of the switch port's transceiver.",
           SW_PORT, _fab_optics_port(lambda m: m.voltage_v)),
    Metric("fabricmon_fabric_port_optics_threshold", G, "The switch's own alarm and warning thresholds for the "
           "transceiver sensor, by the quantity they bound (rx_power_dbm, tx_power_dbm, tx_bias_amperes, "
           "temperature_celsius, voltage_volts) and level (high_alarm, high_warning, low_warning, low_alarm).",
           ("switch_guid", "port", "lane", "quantity", "level"), _fabric(_fab_optics_thresholds)),
    # Switch vitals: fans, power supplies, temperatures (SNMP: ENTITY-SENSOR-MIB, ENTITY-STATE-MIB, vendor tables;
    # docs/vitals.md)
    Metric("fabricmon_fabric_switch_vital_info", G, "Every fan, power supply, temperature sensor and module a switch "
           "reports, with its state as the switch says it (ok, nonoperational, running, on, failed, notPresent, ...) "
           "and the table it came from.", (*VITAL, "state"), _vitals(_vital_info)),
    Metric("fabricmon_fabric_switch_vital_status", G, "fabricmon's status of the part: 0 OK, 1 WARNING, 2 CRITICAL "
           "(absent where its state says nothing, e.g. an empty bay).", VITAL, _vitals(_vital_status)),
    Metric("fabricmon_fabric_switch_temperature_celsius", G, "A switch temperature sensor's reading.",
           ("switch_guid", "part", "source"), _vitals(_vital_value("celsius"))),
    Metric("fabricmon_fabric_switch_fan_speed_rpm", G, "A switch fan's speed in revolutions per minute (as node_exporter's "
           "hwmon fans).", ("switch_guid", "part", "source"), _vitals(_vital_value("rpm"))),
    Metric("fabricmon_fabric_switch_power_watts", G, "A switch power supply sensor's reading in watts.",
           ("switch_guid", "part", "source"), _vitals(_vital_value("watts"))),
    Metric("fabricmon_fabric_optics_unjoined_sensors", G, "Transceiver sensors of the switch whose name names no "
           "interface, or more than one: counted, never guessed (docs/optics.md).", ("switch_guid",),
           _fabric(lambda fab: (((g,), n) for g, n in sorted(fab.optics_unjoined.items())))),
    # remediation (docs/remediation.md)
    Metric("fabricmon_remediation_mode", G, "Each remediation action's mode: 0 off, 1 dry_run (decided, logged, "
           "counted, nothing touched), 2 act.", ("action",),
           _remediation(lambda rem: [((k,), MODE_VALUE[rem.modes.get(k, "off")]) for k in ACTIONS])),
    Metric("fabricmon_remediation_lease_held", G, "1 while this daemon holds remediation's lease (only the holder "
           "acts, and exports remediation's actions, caps and breakers; an HA pair's other collector shows 0, "
           "and nothing else of remediation but its modes).", (),
           _remediation(lambda rem: [((), 1 if rem.held else 0)])),
    Metric("fabricmon_remediation_actions", C, "Remediation's decisions and steps by action, mode and result (done, "
           "dry_run, refused, failed, returned, undone, released), since start.", ("action", "mode", "result"),
           _rem_held(lambda rem: [(k, v) for k, v in sorted(rem.counts.items())])),
    Metric("fabricmon_remediation_isolated_ports", G, "Fabric links fabricmon isolated now (in dry_run: would have).",
           ("mode",), _rem_held(_rem_in_effect(ISOLATE))),
    Metric("fabricmon_remediation_drained_nodes", G, "Nodes fabricmon drained now (in dry_run: would have).",
           ("mode",), _rem_held(_rem_in_effect(DRAIN))),
    Metric("fabricmon_remediation_port_isolated", G, "1 for each end of each link fabricmon isolated (`end`: set, the "
           "port it disabled; peer, the other end, which hardware takes down with it), with the action's id "
           "(`fabricmon actions`).", ("switch_guid", "switch", "port", "mode", "id", "end"),
           _rem_held(_rem_isolated)),
    Metric("fabricmon_remediation_waiting", G, "Open actions waiting for something first (a host port for its node "
           "to be idle).", ("action",), _rem_held(_rem_open(lambda st, err: st == "waiting"))),
    Metric("fabricmon_remediation_failing", G, "Open actions whose last try failed (an SMP Set unanswered, scontrol "
           "failed or timed out): retried with backoff, never assumed done.", ("action",),
           _rem_held(_rem_open(lambda st, err: bool(err) and st in ("todo", "returning")))),
    Metric("fabricmon_remediation_breaker_tripped", G, "1 when the action's circuit breaker refused a decision in "
           "the last round (more would be out of service than its cap allows).", ("action",),
           _rem_held(_rem_breaker(lambda cap, used, tripped: 1 if tripped else 0))),
    Metric("fabricmon_remediation_breaker_cap", G, "The most the circuit breaker lets be out of service at once "
           "(isolate_port: links, max(min_cap, max_fraction x cabled switch ports); drain_node: nodes of the "
           "node's smallest partition).", ("action",), _rem_held(_rem_breaker(lambda cap, used, tripped: cap))),
    Metric("fabricmon_remediation_breaker_out_of_service", G, "What the circuit breaker counts against its cap now "
           "(isolate_port: fabricmon's links and those found down by others; drain_node: nodes drained by fabricmon).",
           ("action",), _rem_held(_rem_breaker(lambda cap, used, tripped: used))),
    # fabricmon itself
    Metric("fabricmon_source_enabled", G, "1 if the source is enabled.", ("source",),
           _sources(lambda s: 1 if s.enabled else 0, enabled_only=False)),
    Metric("fabricmon_source_active", G, "1 if the source is in use: enabled, and its program (if any) is "
           "installed; an enabled: auto tool that is not installed is 0.", ("source",),
           _sources(lambda s: 1 if s.enabled and s.active else 0, enabled_only=False)),
    Metric("fabricmon_source_up", G, "1 if the source's last run produced data and it is still fresh (0 before a first "
           "run that read anything, and once its records are older than its staleness bound).", ("source",),
           _sources(lambda s: 1 if s.up else 0)),
    Metric("fabricmon_source_duration_seconds", G, "Duration of the source's last run.", ("source",),
           _sources(lambda s: s.duration)),
    Metric("fabricmon_source_last_success_timestamp_seconds", G, "Time of the source's last run without any error.",
           ("source",), _sources(lambda s: s.last_success)),
    Metric("fabricmon_source_runs", C, "Completed runs of the source.", ("source",),
           _sources(lambda s: s.runs if s.enabled else None, enabled_only=False)),
    Metric("fabricmon_source_errors", C, "Source errors by kind.", ("source", "kind"), _source_errors),
    Metric("fabricmon_snapshot_build_duration_seconds", "histogram",
           "Time to build a snapshot from the latest data of every source.", ("le",), lambda snap: (),
           buckets=_build_histogram),
    Metric("fabricmon_snapshot_timestamp_seconds", G, "Time the last snapshot was built.", (),
           lambda snap: [((), snap.time)]),
    Metric("fabricmon_snapshot_build_failures", C, "Snapshot builds that failed (a bug: the log has the traceback); "
           "a failed build is published at once as an UNKNOWN snapshot with the sources' states only.", (),
           lambda snap: [((), snap.builds.failures)]),
    Metric("fabricmon_http_errors", C, "HTTP clients that failed or were refused, by kind (disconnect, timeout, "
           "tls_handshake, bad_request, unauthorized, busy, evicted, refused), as of the last snapshot.", ("kind",),
           lambda snap: (((k,), v) for k, v in sorted(snap.http_errors.items()))),
    Metric("fabricmon_build_info", G, "fabricmon build information.", ("version", "python_version"), _build_info),
)

BY_NAME = {m.name: m for m in CATALOGUE}

__all__ = ["CATALOGUE", "BY_NAME", "FABRIC_COUNTER_SETS", "Metric"]
