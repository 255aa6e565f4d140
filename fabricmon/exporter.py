"""Render a Snapshot as Prometheus metric families (a prometheus_client custom collector).

The exposition text is rendered once per snapshot and cached, so a scrape only copies bytes:
it is never blocked by a slow command and costs the same however many ports there are.
"""

from __future__ import annotations

import platform
import re
from collections.abc import Iterator

from prometheus_client.core import (
    CounterMetricFamily, GaugeMetricFamily, HistogramMetricFamily, Metric,
)
from prometheus_client.exposition import generate_latest
from prometheus_client.registry import CollectorRegistry
from prometheus_client.utils import floatToGoString

from fabricmon import __version__, ibspec
from fabricmon.checks import degraded_link
from fabricmon.collector import POLL_BUCKETS, Snapshot

PORT_LABELS = ["device", "port"]


def _port_families(snap: Snapshot) -> Iterator[Metric]:
    info = GaugeMetricFamily("fabricmon_ib_port_info", "Port identity; join on device,port with group_left.",
                             labels=["device", "port", "port_guid", "link_layer", "netdev", "hca_type",
                                     "firmware_version"])
    up = GaugeMetricFamily("fabricmon_ib_port_up", "1 if the port is ACTIVE and LinkUp, else 0.",
                           labels=PORT_LABELS)
    state = GaugeMetricFamily("fabricmon_ib_port_state_id",
                              "PortState: 1 DOWN, 2 INIT, 3 ARMED, 4 ACTIVE, 5 ACTIVE_DEFER.", labels=PORT_LABELS)
    phys = GaugeMetricFamily("fabricmon_ib_port_physical_state_id",
                             "PortPhysicalState: 2 Polling, 3 Disabled, 5 LinkUp, 6 LinkErrorRecovery, 7 Phy Test.",
                             labels=PORT_LABELS)
    rate = GaugeMetricFamily("fabricmon_ib_port_rate_bytes_per_second",
                             "Active data rate (lanes x nominal lane rate; 0 when the port is down).",
                             labels=PORT_LABELS)
    width = GaugeMetricFamily("fabricmon_ib_port_link_width_lanes", "Active link width in lanes.",
                              labels=PORT_LABELS)
    supported = GaugeMetricFamily("fabricmon_ib_port_supported_link_width_lanes",
                                  "Width both ends could run at, when above the active width (iblinkinfo).",
                                  labels=PORT_LABELS)
    expected = GaugeMetricFamily("fabricmon_ib_port_expected_rate_bytes_per_second",
                                 "Expected data rate from the config's expected_links.", labels=PORT_LABELS)
    degraded = GaugeMetricFamily("fabricmon_ib_port_degraded",
                                 "1 while the port is degraded for this reason (down, width, speed).",
                                 labels=["device", "port", "reason"])
    sat = GaugeMetricFamily("fabricmon_ib_port_saturated",
                            "1 when the counter sits at its maximum (rates unknown).",
                            labels=["device", "port", "counter"])
    counters = {c.name: CounterMetricFamily(f"fabricmon_ib_port_{c.name}", c.help, labels=PORT_LABELS)
                for c in ibspec.COUNTERS}
    hw = CounterMetricFamily("fabricmon_ib_port_hw_counters",
                             "mlx5 hw_counters of the port, by counter name.",
                             labels=["device", "port", "counter"])
    for key, p in sorted(snap.ports.items()):
        d = snap.devices.get(p.device)
        lv = [p.device, str(p.port)]
        info.add_metric([p.device, str(p.port), p.port_guid, p.link_layer, d.netdev if d else "",
                         d.hca_type if d else "", d.firmware_version if d else ""], 1)
        up.add_metric(lv, 1 if p.up else 0)
        if p.state_id is not None:
            state.add_metric(lv, p.state_id)
        if p.phys_state_id is not None:
            phys.add_metric(lv, p.phys_state_id)
        if p.rate_gbps is not None:
            rate.add_metric(lv, p.rate_gbps * 1e9 / 8)
        if p.width is not None:
            width.add_metric(lv, p.width if p.up else 0)
        if p.could_be_width:
            supported.add_metric(lv, p.could_be_width)
        v = snap.verdicts.get(key)
        if v is not None:
            if v.expected_rate_gbps is not None:
                expected.add_metric(lv, v.expected_rate_gbps * 1e9 / 8)
            for reason in degraded_link.REASONS:
                degraded.add_metric([*lv, reason], 1 if v.degraded[reason] else 0)
        for name, is_sat in snap.saturation.get(key, {}).items():
            if name in p.counters:
                sat.add_metric([*lv, name], 1 if is_sat else 0)
        for name, value in p.counters.items():
            spec = ibspec.COUNTER_BY_NAME[name]
            counters[name].add_metric(lv, value * spec.scale)
        for name, value in sorted(p.hw_counters.items()):
            hw.add_metric([*lv, name], value)
    yield from (info, up, state, phys, rate, width, supported, expected, degraded, sat)
    yield from counters.values()
    yield hw


def _device_families(snap: Snapshot) -> Iterator[Metric]:
    info = GaugeMetricFamily("fabricmon_ib_device_info", "HCA identity.",
                             labels=["device", "hca_type", "firmware_version", "board_id", "node_guid", "netdev"])
    numa = GaugeMetricFamily("fabricmon_ib_device_numa_node", "NUMA node of the HCA's PCI function (absent if unknown).",
                             labels=["device"])
    for name, d in sorted(snap.devices.items()):
        info.add_metric([name, d.hca_type, d.firmware_version, d.board_id, d.node_guid, d.netdev], 1)
        if d.numa_node is not None:
            numa.add_metric([name], d.numa_node)
    yield info
    yield numa


def _check_families(snap: Snapshot) -> Iterator[Metric]:
    status = GaugeMetricFamily("fabricmon_check_status",
                               "Check result per port: 0 OK, 1 WARNING, 2 CRITICAL.",
                               labels=["check", "device", "port"])
    for f in snap.findings:
        status.add_metric([f.check, f.device, "" if f.port is None else str(f.port)], f.status)
    yield status
    yield GaugeMetricFamily("fabricmon_health_status", "Worst check status on this node: 0 OK, 1 WARNING, 2 CRITICAL.",
                            value=snap.status)


def _self_families(snap: Snapshot) -> Iterator[Metric]:
    up = GaugeMetricFamily("fabricmon_source_up", "1 if the source's last run produced data.", labels=["source"])
    dur = GaugeMetricFamily("fabricmon_source_duration_seconds", "Duration of the source's last run.",
                            labels=["source"])
    last = GaugeMetricFamily("fabricmon_source_last_success_timestamp_seconds",
                             "Time of the source's last run without any error.", labels=["source"])
    errs = CounterMetricFamily("fabricmon_source_errors", "Source errors by kind.", labels=["source", "kind"])
    enabled = GaugeMetricFamily("fabricmon_source_enabled", "1 if the source is enabled.", labels=["source"])
    for name, s in sorted(snap.sources.items()):
        enabled.add_metric([name], 1 if s.enabled else 0)
        if not s.enabled:
            continue
        up.add_metric([name], 1 if s.up else 0)
        dur.add_metric([name], s.duration)
        last.add_metric([name], s.last_success)
        for kind, n in sorted(s.errors_total.items()):
            errs.add_metric([name, kind], n)
    yield from (enabled, up, dur, last, errs)
    # the collector's bucket counts are already cumulative (a poll counts in every bucket above it)
    buckets = [("+Inf" if bound == float("inf") else repr(bound), n)
               for bound, n in zip(POLL_BUCKETS, snap.poll_buckets)]
    yield HistogramMetricFamily("fabricmon_snapshot_build_duration_seconds",
                                "Duration of snapshot builds (poll cycles).", buckets=buckets, sum_value=snap.poll_sum)
    yield GaugeMetricFamily("fabricmon_snapshot_timestamp_seconds", "Time the last snapshot was built.",
                            value=snap.time)
    build = GaugeMetricFamily("fabricmon_build_info", "fabricmon build information.",
                              labels=["version", "python_version"])
    build.add_metric([__version__, platform.python_version()], 1)
    yield build


def _nonempty(*families: Metric) -> Iterator[Metric]:
    return (f for f in families if f.samples)


def _roce_families(snap: Snapshot) -> Iterator[Metric]:
    """RoCE lossless health per netdev (docs/roce-gpu.md); only families with samples."""
    nd_labels = ["device", "netdev"]
    pfc = GaugeMetricFamily("fabricmon_roce_pfc_enabled", "1 if PFC is enabled on the priority (mlnx_qos).",
                            labels=["device", "netdev", "priority"])
    trust = GaugeMetricFamily("fabricmon_roce_trust_info", "Priority trust state (pcp, dscp) of the netdev.",
                              labels=["device", "netdev", "trust"])
    pl = ["device", "netdev", "priority", "direction"]
    frames = CounterMetricFamily("fabricmon_roce_pause_frames", "PFC pause frames by priority and direction "
                                 "(ethtool rx/tx_prioN_pause).", labels=pl)
    dur = CounterMetricFamily("fabricmon_roce_pause_duration_seconds", "Time paused by priority and direction "
                              "(ethtool rx/tx_prioN_pause_duration, microseconds converted to seconds).", labels=pl)
    trans = CounterMetricFamily("fabricmon_roce_pause_transitions", "Transitions into the paused state "
                                "(ethtool rx/tx_prioN_pause_transition).", labels=pl)
    storm = CounterMetricFamily("fabricmon_roce_pause_storm_events", "Pause-storm guard events (ethtool "
                                "tx_pause_storm_warning/error_events).", labels=["device", "netdev", "level"])
    mtu = GaugeMetricFamily("fabricmon_roce_mtu_bytes", "Active RoCE (IB) MTU derived from the netdev MTU "
                            "as the kernel does (netdev MTU - 96, rounded down to 256..4096).", labels=nd_labels)
    hw = {
        "np_cnp_sent": CounterMetricFamily("fabricmon_roce_cnp_sent", "CNPs sent as notification point "
                                           "(hw_counters np_cnp_sent).", labels=nd_labels),
        "rp_cnp_handled": CounterMetricFamily("fabricmon_roce_cnp_handled", "CNPs handled as reaction point "
                                              "(hw_counters rp_cnp_handled).", labels=nd_labels),
        "rp_cnp_ignored": CounterMetricFamily("fabricmon_roce_cnp_ignored", "CNPs ignored as reaction point: "
                                              "rising means DCQCN is off (hw_counters rp_cnp_ignored).",
                                              labels=nd_labels),
        "np_ecn_marked_roce_packets": CounterMetricFamily(
            "fabricmon_roce_ecn_marked_packets", "ECN-marked RoCE packets received "
            "(hw_counters np_ecn_marked_roce_packets).", labels=nd_labels),
    }
    errs = CounterMetricFamily("fabricmon_netdev_errors", "Drop and PHY error counters of the RoCE netdev "
                               "(ethtool -S, curated), by ethtool counter name.",
                               labels=["device", "netdev", "counter"])
    nmtu = GaugeMetricFamily("fabricmon_netdev_mtu_bytes", "MTU of the RoCE netdev.", labels=nd_labels)
    speed = GaugeMetricFamily("fabricmon_netdev_speed_bytes_per_second", "Link speed of the RoCE netdev "
                              "(absent while down).", labels=nd_labels)
    up = GaugeMetricFamily("fabricmon_netdev_up", "1 if the RoCE netdev's operstate is up.", labels=nd_labels)
    for v in snap.extra.get("roce") or []:
        lv = [v.target.device, v.target.netdev]
        q = v.qos.qos if v.qos is not None else None
        if q is not None:
            for prio, on in enumerate(q.pfc_enabled):
                pfc.add_metric([*lv, str(prio)], 1 if on else 0)
            if q.trust:
                trust.add_metric([*lv, q.trust], 1)
        s = v.stats.stats if v.stats is not None else None
        if s is not None:
            for (prio, d), n in sorted(s.pause.items()):
                frames.add_metric([*lv, str(prio), d], n)
            for (prio, d), n in sorted(s.pause_duration_us.items()):
                dur.add_metric([*lv, str(prio), d], n / 1e6)
            for (prio, d), n in sorted(s.pause_transitions.items()):
                trans.add_metric([*lv, str(prio), d], n)
            for level, n in sorted(s.pause_storm.items()):
                storm.add_metric([*lv, level], n)
            for name, n in sorted(s.errors.items()):
                errs.add_metric([*lv, name], n)
        for name, fam in hw.items():
            if name in v.hw:
                fam.add_metric(lv, v.hw[name])
        if v.netdev is not None:
            if v.roce_mtu is not None:
                mtu.add_metric(lv, v.roce_mtu)
            if v.netdev.mtu is not None:
                nmtu.add_metric(lv, v.netdev.mtu)
            if v.netdev.speed_mbps is not None:
                speed.add_metric(lv, v.netdev.speed_mbps * 1e6 / 8)
            if v.netdev.operstate is not None:
                up.add_metric(lv, 1 if v.netdev.operstate == "up" else 0)
    yield from _nonempty(pfc, trust, frames, dur, trans, storm, mtu, *hw.values(), errs, nmtu, speed, up)


def _gpu_families(snap: Snapshot) -> Iterator[Metric]:
    """GPUDirect RDMA paths and GPU-NIC affinity (docs/roce-gpu.md); only families with samples."""
    gdr = GaugeMetricFamily("fabricmon_gpudirect_rdma_path_available",
                            "1 if this GPUDirect RDMA method is available (peermem, nv_peer_mem, dmabuf).",
                            labels=["method"])
    gd = snap.extra.get("gpudirect")
    if gd is not None and gd.has_gpus:       # a node without NVIDIA GPUs exports no GPUDirect series
        for method, ok in gd.methods.items():
            gdr.add_metric([method], 1 if ok else 0)
    info = GaugeMetricFamily("fabricmon_gpu_info", "GPU identity from NVML; gpu is the NVML index.",
                             labels=["gpu", "uuid", "gpu_bus_id"])
    numa = GaugeMetricFamily("fabricmon_gpu_numa_node", "NUMA node of the GPU's PCI function (absent if unknown).",
                             labels=["gpu"])
    path = GaugeMetricFamily("fabricmon_gpu_nic_path_info", "PCI path class (PIX, PXB, PHB, NODE, SYS, UNKNOWN) "
                             "of every GPU-RDMA device pair.", labels=["gpu", "gpu_bus_id", "device", "path"])
    nearest = GaugeMetricFamily("fabricmon_gpu_nearest_nic_info", "The RDMA device the GPU is paired with "
                                "(nearest, balanced across GPUs) and its path class.", labels=["gpu", "device", "path"])
    ok = GaugeMetricFamily("fabricmon_gpu_nic_affinity_ok", "1 if the GPU's nearest RDMA NIC is at PXB or closer "
                           "(NCCL uses GPUDirect RDMA), 0 if not; absent when unknown.", labels=["gpu"])
    aff = snap.extra.get("affinity")
    if aff is not None:
        for g in aff.gpus:
            gl = str(g.index)
            info.add_metric([gl, g.uuid, g.bus_id], 1)
            if g.numa_node is not None:
                numa.add_metric([gl], g.numa_node)
            for (gi, dev), cls in sorted(aff.paths.items()):
                if gi == g.index:
                    path.add_metric([gl, g.bus_id, dev, cls], 1)
            if g.index in aff.assigned:
                dev = aff.assigned[g.index]
                nearest.add_metric([gl, dev, aff.paths[(g.index, dev)]], 1)
            verdict = aff.affinity_ok(g.index)
            if verdict is not None:
                ok.add_metric([gl], 1 if verdict else 0)
    yield from _nonempty(gdr, info, numa, path, nearest, ok)


class SnapshotCollector:
    """prometheus_client custom collector over one snapshot."""

    def __init__(self, snap: Snapshot, extra: list | None = None):
        self.snap = snap
        self.extra = extra or []

    def collect(self) -> Iterator[Metric]:
        yield from _port_families(self.snap)
        yield from _device_families(self.snap)
        yield from _check_families(self.snap)
        yield from _roce_families(self.snap)
        yield from _gpu_families(self.snap)
        for fn in self.extra:
            yield from fn(self.snap)
        yield from _self_families(self.snap)


_NEEDS_ESCAPE = re.compile(r'[\\"\n]')
_TYPE_NAMES = {"counter": "counter", "gauge": "gauge", "histogram": "histogram", "unknown": "untyped"}


def _label_value(v: str) -> str:
    if _NEEDS_ESCAPE.search(v):
        return v.replace("\\", "\\\\").replace("\n", "\\n").replace('"', '\\"')
    return v


def _value(v: float) -> str:
    if -1e6 < v < 1e6 and v == int(v):     # the common case: small integral values
        return f"{float(v)!r}"
    return floatToGoString(v)               # exponents, +Inf, NaN exactly as Prometheus writes them


def write_exposition(families) -> bytes:
    """The Prometheus text format (0.0.4) of metric families: the same text as
    prometheus_client's generate_latest, without its per-sample generality (about 2x faster).
    Label values are escaped; our metric and label names are fixed identifiers."""
    out: list[str] = []
    append = out.append
    cache: dict[tuple, str] = {}
    for m in families:
        name = m.name + "_total" if m.type == "counter" else m.name
        doc = m.documentation.replace("\\", "\\\\").replace("\n", "\\n")
        append(f"# HELP {name} {doc}\n# TYPE {name} {_TYPE_NAMES.get(m.type, 'untyped')}\n")
        for smp in m.samples:
            labels = smp.labels
            if labels:
                key = (tuple(labels), tuple(labels.values()))     # no sort on a cache hit
                lab = cache.get(key)
                if lab is None:
                    lab = cache[key] = "{" + ",".join(
                        f'{k}="{_label_value(v)}"' for k, v in sorted(labels.items())) + "}"
                append(f"{smp.name}{lab} {_value(smp.value)}\n")
            else:
                append(f"{smp.name} {_value(smp.value)}\n")
    return "".join(out).encode()


def render(snap: Snapshot, extra: list | None = None) -> bytes:
    """The Prometheus text exposition of a snapshot."""
    return write_exposition(SnapshotCollector(snap, extra).collect())


def render_reference(snap: Snapshot, extra: list | None = None) -> bytes:
    """The same exposition through prometheus_client's generate_latest (tests compare the two)."""
    registry = CollectorRegistry(auto_describe=False)
    registry.register(SnapshotCollector(snap, extra))
    return generate_latest(registry)
