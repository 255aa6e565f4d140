#!/usr/bin/env python3
"""Generate fabricmon/deploy/grafana/fabricmon-node.json (the per-node daemon) and fabricmon-fabric.json (the
fabric collector), fabricmon's Grafana dashboards (shipped in the wheel).

    python grafana/build_dashboards.py           # rewrite the committed JSON
    python grafana/build_dashboards.py --check   # exit 1 if the committed JSON is stale

Plain Python and json, no dependency. Rates come from the recording rules of
fabricmon/deploy/prometheus/fabricmon.rules.yml (`instance_device_port:...:rate5m`), so load those rules too; the
other panels read fabricmon's own series. Every panel's queries are evaluated against a real
Prometheus scraping fabricmon in tests/ship/test_dashboards.py.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
OUT = HERE.parent / "fabricmon" / "deploy" / "grafana" / "fabricmon-node.json"
FABRIC_OUT = OUT.parent / "fabricmon-fabric.json"
DS = {"type": "prometheus", "uid": "${datasource}"}

# selectors the template variables feed
NODE = 'job=~"$job", instance=~"$instance"'
PORT = NODE + ', device=~"$device"'


class Layout:
    """Panels placed left to right, 24 columns wide, ids in order."""

    def __init__(self):
        self.panels: list[dict] = []
        self.x = self.y = 0
        self.row_h = 0

    def row(self, title: str) -> None:
        self._newline()
        self.panels.append({"type": "row", "title": title, "collapsed": False, "id": len(self.panels) + 1,
                            "gridPos": {"h": 1, "w": 24, "x": 0, "y": self.y}, "panels": []})
        self.y += 1

    def _newline(self) -> None:
        if self.x:
            self.y += self.row_h
            self.x, self.row_h = 0, 0

    def add(self, panel: dict, w: int, h: int) -> None:
        if self.x + w > 24:
            self._newline()
        panel["id"] = len(self.panels) + 1
        panel["gridPos"] = {"h": h, "w": w, "x": self.x, "y": self.y}
        self.panels.append(panel)
        self.x += w
        self.row_h = max(self.row_h, h)


def target(expr: str, legend: str = "", ref: str = "A", table: bool = False) -> dict:
    t = {"datasource": DS, "expr": expr, "legendFormat": legend or "__auto", "refId": ref}
    if table:
        t.update({"format": "table", "instant": True, "range": False})
    return t


def timeseries(title: str, desc: str, targets: list[dict], unit: str = "short", stack: bool = False,
               minimum: float | None = 0, maxi: float | None = None) -> dict:
    defaults = {"unit": unit, "custom": {"drawStyle": "line", "lineWidth": 1, "fillOpacity": 10,
                                         "showPoints": "never", "spanNulls": True,
                                         "stacking": {"mode": "normal" if stack else "none"}}}
    if minimum is not None:
        defaults["min"] = minimum
    if maxi is not None:
        defaults["max"] = maxi
    return {"type": "timeseries", "title": title, "description": desc, "datasource": DS, "targets": targets,
            "fieldConfig": {"defaults": defaults, "overrides": []},
            "options": {"legend": {"displayMode": "table", "placement": "bottom", "calcs": ["lastNotNull", "max"]},
                        "tooltip": {"mode": "multi", "sort": "desc"}}}


STATUS_MAPPING = [{"type": "value", "options": {
    "0": {"text": "OK", "color": "green", "index": 0},
    "1": {"text": "WARNING", "color": "orange", "index": 1},
    "2": {"text": "CRITICAL", "color": "red", "index": 2},
    # fabricmon_health_status only: nothing to check on the node (what `fabricmon check` exits 3 for)
    "3": {"text": "UNKNOWN", "color": "text", "index": 3}}}]
UP_MAPPING = [{"type": "value", "options": {
    "0": {"text": "DOWN", "color": "red", "index": 0},
    "1": {"text": "UP", "color": "green", "index": 1}}}]


def stat(title: str, desc: str, targets: list[dict], mappings=None, unit: str = "short",
         thresholds: list[tuple[str, float | None]] | None = None) -> dict:
    steps = [{"color": c, "value": v} for c, v in (thresholds or [("green", None)])]
    return {"type": "stat", "title": title, "description": desc, "datasource": DS, "targets": targets,
            "fieldConfig": {"defaults": {"unit": unit, "mappings": mappings or [],
                                         "thresholds": {"mode": "absolute", "steps": steps},
                                         "color": {"mode": "thresholds"}}, "overrides": []},
            "options": {"reduceOptions": {"calcs": ["lastNotNull"], "fields": "", "values": False},
                        "colorMode": "background", "graphMode": "none", "textMode": "auto"}}


def table(title: str, desc: str, targets: list[dict], mappings=None, hide: tuple[str, ...] = ("Time",)) -> dict:
    return {"type": "table", "title": title, "description": desc, "datasource": DS, "targets": targets,
            "fieldConfig": {"defaults": {"mappings": mappings or [],
                                         "custom": {"cellOptions": {"type": "color-background"}},
                                         "thresholds": {"mode": "absolute", "steps": [{"color": "transparent",
                                                                                        "value": None}]}},
                            "overrides": []},
            "options": {"showHeader": True, "cellHeight": "sm"},
            "transformations": [{"id": "organize", "options": {"excludeByName": {h: True for h in hide},
                                                                "renameByName": {"Value": "value"}}}]}


def timeline(title: str, desc: str, targets: list[dict], mappings) -> dict:
    return {"type": "state-timeline", "title": title, "description": desc, "datasource": DS, "targets": targets,
            "fieldConfig": {"defaults": {"mappings": mappings, "color": {"mode": "thresholds"},
                                         "thresholds": {"mode": "absolute", "steps": [{"color": "green",
                                                                                        "value": None}]}},
                            "overrides": []},
            "options": {"showValue": "never", "mergeValues": True, "rowHeight": 0.8}}


def node_dashboard() -> dict:
    L = Layout()
    rec = "instance_device_port:fabricmon_ib_port_{}:rate5m"

    L.row("Overview")
    L.add(stat("Node health", "Worst check status on the node (fabricmon_health_status).",
               [target(f"max by (instance) (fabricmon_health_status{{{NODE}}})", "{{instance}}")],
               STATUS_MAPPING, thresholds=[("green", None), ("orange", 1), ("red", 2)]), 6, 4)
    L.add(stat("Ports up", "Ports ACTIVE and LinkUp, of all ports.",
               [target(f"sum(fabricmon_ib_port_up{{{PORT}}})", "up"),
                target(f"count(fabricmon_ib_port_up{{{PORT}}})", "ports", "B")]), 6, 4)
    L.add(stat("Ports degraded or down", "Ports below their expected width/speed, or down.",
               [target(f"count(max by (instance, device, port) (fabricmon_ib_port_degraded{{{PORT}}}) == 1) or vector(0)")],
               thresholds=[("green", None), ("red", 1)]), 6, 4)
    L.add(stat("fabricmon targets up", "Scrapes that succeed (up) of all fabricmon targets.",
               [target(f"sum(up{{{NODE}}})", "up"), target(f"count(up{{{NODE}}})", "targets", "B")]), 6, 4)
    L.add(table("Failing checks", "Every check that is not OK, with the daemon's status. `fabricmon check -v` "
                "on the node prints the message and the fix.",
                [target(f"fabricmon_check_status{{{NODE}}} > 0", table=True)], STATUS_MAPPING,
                hide=("Time", "__name__", "job")), 24, 7)

    L.row("Ports and links")
    L.add(table("Ports", "State, active and expected rate of every port (bytes/s; x8 for bits).",
                [target(f"fabricmon_ib_port_up{{{PORT}}}", "up", "A", table=True),
                 target(f"fabricmon_ib_port_rate_bytes_per_second{{{PORT}}}", "rate", "B", table=True),
                 target(f"fabricmon_ib_port_expected_rate_bytes_per_second{{{PORT}}}", "expected", "C", table=True),
                 target(f"fabricmon_ib_port_link_width_lanes{{{PORT}}}", "lanes", "D", table=True),
                 target(f"fabricmon_ib_port_info{{{PORT}}}", "info", "E", table=True)],
                hide=("Time", "__name__", "job")), 24, 8)
    L.add(timeseries("Link rate against expected", "Active data rate and the rate expected from "
                     "expected_links; a gap is a degraded port.",
                     [target(f"fabricmon_ib_port_rate_bytes_per_second{{{PORT}}}", "{{instance}} {{device}}/{{port}}"),
                      target(f"fabricmon_ib_port_expected_rate_bytes_per_second{{{PORT}}}",
                             "{{instance}} {{device}}/{{port}} expected", "B")], "Bps"), 12, 8)
    L.add(timeline("Port up / degraded", "1 while the port is ACTIVE and LinkUp; degraded reasons below.",
                   [target(f"fabricmon_ib_port_up{{{PORT}}}", "{{instance}} {{device}}/{{port}}")], UP_MAPPING), 12, 8)
    L.add(timeseries("Transmit throughput", "Bytes/s sent (recording rule over 5m).",
                     [target(f"{rec.format('transmit_bytes')}{{{PORT}}}", "{{instance}} {{device}}/{{port}}")],
                     "Bps"), 12, 8)
    L.add(timeseries("Receive throughput", "Bytes/s received (recording rule over 5m).",
                     [target(f"{rec.format('receive_bytes')}{{{PORT}}}", "{{instance}} {{device}}/{{port}}")],
                     "Bps"), 12, 8)
    L.add(timeseries("Link utilisation", "Throughput / active link rate, per direction.",
                     [target(f"instance_device_port:fabricmon_ib_port_transmit_utilisation:ratio_rate5m{{{PORT}}}",
                             "{{instance}} {{device}}/{{port}} tx"),
                      target(f"instance_device_port:fabricmon_ib_port_receive_utilisation:ratio_rate5m{{{PORT}}}",
                             "{{instance}} {{device}}/{{port}} rx", "B")], "percentunit", maxi=1), 12, 8)
    L.add(timeseries("Degraded reasons", "1 while the port is degraded for this reason (down, width, speed).",
                     [target(f"fabricmon_ib_port_degraded{{{PORT}}}", "{{instance}} {{device}}/{{port}} {{reason}}")],
                     maxi=1), 12, 8)

    L.row("Link errors")
    L.add(timeseries("Symbol errors", "Symbol errors per second; IBTA's 1e-12 BER budget is about 120/hour "
                     "(0.033/s).", [target(f"{rec.format('symbol_errors')}{{{PORT}}}",
                                           "{{instance}} {{device}}/{{port}}")], "short"), 8, 8)
    L.add(timeseries("Receive errors", "PortRcvErrors and PortRcvRemotePhysicalErrors per second.",
                     [target(f"{rec.format('receive_errors')}{{{PORT}}}", "{{instance}} {{device}}/{{port}} rcv"),
                      target(f"{rec.format('receive_remote_physical_errors')}{{{PORT}}}",
                             "{{instance}} {{device}}/{{port}} remote physical", "B")]), 8, 8)
    L.add(timeseries("Link error recoveries and discards", "LinkErrorRecovery and PortXmitDiscards per second.",
                     [target(f"{rec.format('link_error_recovery')}{{{PORT}}}",
                             "{{instance}} {{device}}/{{port}} recovery"),
                      target(f"{rec.format('transmit_discards')}{{{PORT}}}",
                             "{{instance}} {{device}}/{{port}} xmit discards", "B")]), 8, 8)
    L.add(timeseries("Link flaps (last hour)", "LinkDowned increase over the last hour: any flap is serious.",
                     [target(f"instance_device_port:fabricmon_ib_port_link_downed:increase1h{{{PORT}}}",
                             "{{instance}} {{device}}/{{port}}")]), 8, 8)
    L.add(timeseries("Transmit wait", "PortXmitWait ticks per second: the port had data but no credits "
                     "(congestion).", [target(f"{rec.format('transmit_wait')}{{{PORT}}}",
                                              "{{instance}} {{device}}/{{port}}")]), 8, 8)
    L.add(table("Saturated counters", "Error counters at their maximum (value 1): their rate is unknown.",
                [target(f"sum by (instance, device, port) (fabricmon_ib_port_saturated{{{PORT}}})", table=True)],
                hide=("Time",)), 8, 8)

    L.row("RoCE lossless Ethernet")
    L.add(table("PFC and trust", "PFC enabled per priority (1) and the trust state of each RoCE netdev.",
                [target(f"fabricmon_roce_pfc_enabled{{{PORT}}} == 1", "pfc", "A", table=True),
                 target(f"fabricmon_roce_trust_info{{{PORT}}}", "trust", "B", table=True)],
                hide=("Time", "__name__", "job")), 8, 8)
    L.add(timeseries("Pause frames", "PFC pause frames per second by priority and direction (rx: the switch "
                     "pauses us; tx: we pause the switch).",
                     [target(f"instance_device_netdev:fabricmon_roce_pause_frames:rate5m{{{PORT}}}",
                             "{{instance}} {{netdev}} prio{{priority}} {{direction}}")]), 8, 8)
    L.add(timeseries("Time paused", "Fraction of time paused by priority and direction.",
                     [target(f"instance_device_netdev:fabricmon_roce_pause_duration:ratio_rate5m{{{PORT}}}",
                             "{{instance}} {{netdev}} prio{{priority}} {{direction}}")], "percentunit"), 8, 8)
    L.add(timeseries("Pause storm events (last hour)", "tx_pause_storm warning/error events: the NIC's storm "
                     "guard fired.",
                     [target(f"increase(fabricmon_roce_pause_storm_events_total{{{PORT}}}[1h])",
                             "{{instance}} {{netdev}} {{level}}")]), 8, 8)
    L.add(timeseries("Drops and PHY errors", "ethtool drop and error counters of the RoCE netdevs, per second.",
                     [target(f"instance_device_netdev:fabricmon_netdev_errors:rate5m{{{PORT}}}",
                             "{{instance}} {{netdev}} {{counter}}")]), 8, 8)
    L.add(timeseries("Transport loss signals", "out_of_sequence, packet_seq_err, local_ack_timeout_err, "
                     "implied_nak_seq_err per second (retransmissions).",
                     [target(f"instance_device_port:fabricmon_roce_loss_signals:rate5m{{{PORT}}}",
                             "{{instance}} {{device}}/{{port}}")]), 8, 8)
    L.add(timeseries("Congestion notifications (DCQCN)", "CNPs sent, handled and ignored per second; ignored "
                     "CNPs mean DCQCN is off.",
                     [target(f"rate(fabricmon_roce_cnp_sent_total{{{PORT}}}[$__rate_interval])",
                             "{{instance}} {{netdev}} sent"),
                      target(f"rate(fabricmon_roce_cnp_handled_total{{{PORT}}}[$__rate_interval])",
                             "{{instance}} {{netdev}} handled", "B"),
                      target(f"rate(fabricmon_roce_cnp_ignored_total{{{PORT}}}[$__rate_interval])",
                             "{{instance}} {{netdev}} ignored", "C")]), 12, 8)
    L.add(table("MTU and speed", "Active RoCE MTU, netdev MTU, netdev speed (bytes/s) and operstate.",
                [target(f"fabricmon_roce_mtu_bytes{{{PORT}}}", "roce mtu", "A", table=True),
                 target(f"fabricmon_netdev_mtu_bytes{{{PORT}}}", "mtu", "B", table=True),
                 target(f"fabricmon_netdev_speed_bytes_per_second{{{PORT}}}", "speed", "C", table=True),
                 target(f"fabricmon_netdev_up{{{PORT}}}", "up", "D", table=True)],
                hide=("Time", "job")), 12, 8)

    L.row("Optics")
    L.add(table("Weakest receivers", "The 10 lanes with the least receive power (ethtool -m), and their margin "
                "above the module's own low warning threshold (docs/optics.md).",
                [target(f"bottomk(10, fabricmon_optics_rx_power_dbm{{{PORT}}})", "dBm", "A", table=True),
                 target(f"fabricmon_optics_rx_power_dbm{{{PORT}}} - on (instance, job, device, port, netdev) "
                        f'group_left fabricmon_optics_threshold{{{PORT}, quantity="rx_power_dbm", level="low_warning"}}',
                        "margin dB", "B", table=True)],
                hide=("Time", "job", "__name__")), 8, 8)
    L.add(timeseries("Receive power per lane", "Receive power of each transceiver lane in dBm: a lane falling "
                     "below its siblings is a dirty connector, all lanes falling together a dimming module or fibre.",
                     [target(f"fabricmon_optics_rx_power_dbm{{{PORT}}}", "{{instance}} {{netdev}} lane {{lane}}")],
                     "dBm"), 8, 8)
    L.add(timeseries("Transceiver temperature", "Module temperature of each RDMA netdev's transceiver.",
                     [target(f"fabricmon_optics_temperature_celsius{{{PORT}}}", "{{instance}} {{netdev}}")],
                     "celsius"), 8, 8)

    L.row("GPUDirect RDMA and GPU-NIC affinity")
    L.add(table("GPUDirect RDMA paths", "Which GPUDirect RDMA method is available (1) on each node: peermem, "
                "nv_peer_mem, dmabuf.",
                [target(f"fabricmon_gpudirect_rdma_path_available{{{NODE}}}", table=True)],
                UP_MAPPING, hide=("Time", "__name__", "job")), 8, 8)
    L.add(table("GPU to nearest NIC", "Each GPU's paired RDMA NIC and the PCI path class; NCCL uses "
                "GPUDirect RDMA only at PIX/PXB.",
                [target(f"fabricmon_gpu_nearest_nic_info{{{NODE}}}", table=True)],
                hide=("Time", "__name__", "job", "Value")), 8, 8)
    L.add(table("GPU checks", "gpudirect_rdma, gpu_nic_affinity, gpu_nic_sharing and nccl_ib_hca verdicts.",
                [target(f'fabricmon_check_status{{{NODE}, check=~"gpudirect_rdma|gpu_nic_affinity|gpu_nic_sharing|nccl_ib_hca"}}',
                        table=True)], STATUS_MAPPING, hide=("Time", "__name__", "job", "port")), 8, 8)
    L.add(timeseries("GPUs with GPUDirect-capable affinity", "GPUs whose nearest NIC is at PXB or closer, of all "
                     "GPUs with a known path.",
                     [target(f"sum by (instance) (fabricmon_gpu_nic_affinity_ok{{{NODE}}})", "{{instance}} ok"),
                      target(f"count by (instance) (fabricmon_gpu_nic_affinity_ok{{{NODE}}})", "{{instance}} GPUs",
                             "B")]), 24, 6)

    L.row("fabricmon")
    L.add(timeline("Sources up", "1 when the source's last run produced data.",
                   [target(f"fabricmon_source_up{{{NODE}}}", "{{instance}} {{source}}")], UP_MAPPING), 12, 8)
    L.add(timeseries("Source errors", "Source errors per second by kind.",
                     [target(f"sum by (instance, source, kind) (rate(fabricmon_source_errors_total{{{NODE}}}"
                             "[$__rate_interval]))", "{{instance}} {{source}} {{kind}}")]), 12, 8)
    L.add(timeseries("Snapshot age", "Seconds since the served snapshot was built; it grows without bound when "
                     "the poll loop is stuck.",
                     [target(f"time() - fabricmon_snapshot_timestamp_seconds{{{NODE}}}", "{{instance}}")], "s"), 8, 8)
    L.add(timeseries("Snapshot build time", "99th percentile and mean time to build a snapshot (one poll).",
                     [target("histogram_quantile(0.99, sum by (instance, le) (rate("
                             f"fabricmon_snapshot_build_duration_seconds_bucket{{{NODE}}}[$__rate_interval])))",
                             "{{instance}} p99"),
                      target(f"fabricmon_snapshot_build_duration_seconds_sum{{{NODE}}} / "
                             f"fabricmon_snapshot_build_duration_seconds_count{{{NODE}}}", "{{instance}} mean",
                             "B")], "s"), 8, 8)
    L.add(timeseries("Source run time", "Duration of each source's last run.",
                     [target(f"fabricmon_source_duration_seconds{{{NODE}}}", "{{instance}} {{source}}")], "s"), 8, 8)
    L.add(table("Versions", "fabricmon and Python versions per node.",
                [target(f"fabricmon_build_info{{{NODE}}}", table=True)],
                hide=("Time", "__name__", "Value")), 24, 5)

    def var(name, label, query, **kw):
        v = {"name": name, "label": label, "type": "query", "datasource": DS,
             "query": {"query": query, "refId": f"{name}-var"}, "definition": query, "refresh": 2,
             "multi": True, "includeAll": True, "allValue": ".*", "sort": 1,
             "current": {"selected": True, "text": ["All"], "value": ["$__all"]}}
        v.update(kw)
        return v

    return {
        "title": "fabricmon / Node",
        "uid": "fabricmon-node",
        "description": "Per-node InfiniBand/RoCE fabric health from fabricmon: ports against their expected "
                       "rate, link errors and flaps, RoCE PFC and pauses, GPUDirect RDMA and GPU-NIC affinity, "
                       "and fabricmon's own health. Generated by grafana/build_dashboards.py.",
        "tags": ["fabricmon", "infiniband", "roce", "gpu"],
        "editable": True,
        "graphTooltip": 1,
        "time": {"from": "now-6h", "to": "now"},
        "refresh": "1m",
        "schemaVersion": 39,
        "version": 1,
        "links": [],
        "annotations": {"list": []},
        "templating": {"list": [
            {"name": "datasource", "label": "Data source", "type": "datasource", "query": "prometheus",
             "current": {}, "hide": 0, "refresh": 1, "regex": ""},
            var("job", "Job", "label_values(fabricmon_build_info, job)"),
            var("instance", "Instance", 'label_values(fabricmon_build_info{job=~"$job"}, instance)'),
            var("device", "Device", 'label_values(fabricmon_ib_port_info{job=~"$job", instance=~"$instance"}, device)'),
        ]},
        "panels": L.panels,
    }


# ---- the fabric collector's dashboard ------------------------------------------------------------
FAB = 'job=~"$job", instance=~"$instance"'
SWITCH = FAB + ', switch=~"$switch"'
# series keyed by switch_guid only get the switch's name (and level) from the _info series, filtered by $switch
NAMES = f" * on (instance, job, switch_guid) group_left (switch, level) fabricmon_fabric_switch_info{{{SWITCH}}}"
REMOTE = (f" * on (instance, job, switch_guid, port) group_left (role, remote_name, remote_port)"
          f" fabricmon_fabric_link_info{{{FAB}}}")


def heatmap(title: str, desc: str, targets: list[dict]) -> dict:
    return {"type": "heatmap", "title": title, "description": desc, "datasource": DS, "targets": targets,
            "fieldConfig": {"defaults": {}, "overrides": []},
            "options": {"calculate": False, "yAxis": {"axisPlacement": "left"}, "rowsFrame": {"layout": "auto"},
                        "color": {"mode": "scheme", "scheme": "Oranges", "fill": "dark-orange", "min": 1,
                                  "max": 3, "steps": 64, "exponent": 0.5, "reverse": False},
                        "cellGap": 1, "showValue": "never", "tooltip": {"show": True, "yHistogram": False},
                        "legend": {"show": True}}}


OPTICS_ROW = "Optics (Ethernet switches)"
NCCL_ROW = "Slow jobs and the links on their paths"
# The node daemons' NCCL paths joined to the collector's host link of their NIC (docs/nccl.md): the HCA's
# node GUID is the link's remote_guid (without 0x), the HCA port its remote_port; the switch port becomes
# switch_port_fabric. Only links of the selected collectors and switches.
HOST_LINKS = ('label_replace(label_replace(label_replace(\n  fabricmon_fabric_link_info{%s, role="host"}'
              ' and on (instance, job, switch_guid) fabricmon_fabric_switch_info{%s},\n'
              '  "node_guid", "0x$1", "remote_guid", "(.+)"), "switch_port_fabric", "$1", "port", "(.+)"),'
              ' "port", "$1", "remote_port", "(.+)")')


def nccl_at(metric: str) -> str:
    """A node's per-path NCCL series with the switch port its NIC is cabled to, as the collector names it."""
    return (f"{metric}\n  * on (node_guid, port) group_left (switch_guid, switch_port_fabric)\n  "
            + HOST_LINKS % (FAB, SWITCH))


def nccl_row(L: Layout) -> None:
    slow_at = nccl_at("(fabricmon_nccl_slow == 1)")
    L.row(NCCL_ROW)
    L.add(table("Slow NCCL paths and their cables", "Jobs whose NCCL collectives run below their baseline or "
                "line-rate fraction (the node daemons' nccl_slow_collective), with the GPU, NIC and HCA port "
                "their traffic leaves by and the switch port it is cabled to (switch_guid, switch_port_fabric).",
                [target(slow_at, table=True)], hide=("Time", "Value", "__name__", "algo_proto", "n_nodes")), 24, 7)
    L.add(timeseries("Bus bandwidth / job baseline", "Each job's NCCL bus bandwidth over its own baseline "
                     "(learned over its first minutes), the lowest of its paths per node and GPU; below "
                     "checks.nccl_slow_collective.baseline_fraction (0.8) it is slow.",
                     [target("min by (job_id, instance, gpu, device, switch_guid, switch_port_fabric) (\n"
                             + nccl_at("fabricmon_nccl_baseline_ratio") + ")",
                             "job {{job_id}} {{instance}} GPU {{gpu}}")], "percentunit"), 12, 8)
    L.add(timeseries("Bus bandwidth / line rate", "Each job's NCCL bus bandwidth over the data rate of the NIC "
                     "port it leaves by; the seeds' target for large all-reduce messages is 0.8.",
                     [target("min by (job_id, instance, gpu, device, switch_guid, switch_port_fabric) (\n"
                             + nccl_at("fabricmon_nccl_line_rate_ratio") + ")",
                             "job {{job_id}} {{instance}} GPU {{gpu}}")], "percentunit"), 12, 8)
    L.add(table("Fabric verdicts on slow jobs' paths", "The collector's findings (WARNING, CRITICAL) on the switch "
                "ports slow jobs are cabled to, and imbalanced ECMP groups or skewed forwarding tables of their "
                "leaves: what FabricmonNcclSlowOnFlaggedPath pages for.",
                [target(f'label_replace(fabricmon_check_status{{{FAB}}} >= 1, "switch_guid", "$1", "device", "(.+)")\n'
                        '  and on (switch_guid, port)\n  label_replace(' + slow_at
                        + ', "port", "$1", "switch_port_fabric", "(.+)")', "port", "A", table=True),
                 target(f"(fabricmon_ecmp_imbalanced{{{SWITCH}}} == 1 or fabricmon_fabric_routing_imbalanced{{{SWITCH}}}"
                        " == 1)\n  and on (switch_guid) " + slow_at, "leaf", "B", table=True)],
                hide=("Time", "__name__", "job", "class")), 24, 7)


def fabric_dashboard() -> dict:
    L = Layout()
    uplink = "switch:fabricmon_fabric_uplink_utilisation:{}_ratio_rate5m"

    L.row("Overview")
    L.add(stat("Switches by level", "Switches per level (1: leaves with CAs attached; each further level one "
               "hop farther from the CAs).",
               [target(f"count by (level) (fabricmon_fabric_switch_info{{{SWITCH}}})", "level {{level}}")]), 6, 4)
    L.add(stat("Switch ports swept", "Switch ports the collectors (all shards) sweep.",
               [target(f"sum(fabricmon_fabric_ports{{{FAB}}})", "ports")]), 4, 4)
    L.add(stat("Links down", "Cabled switch ports that are down.",
               [target(f'count(fabricmon_fabric_port_degraded{{{FAB}, reason="down"}} == 1) or vector(0)')],
               thresholds=[("green", None), ("red", 1)]), 4, 4)
    L.add(stat("Links degraded", "Switch links below the width or speed of their link class.",
               [target(f'count(fabricmon_fabric_port_degraded{{{FAB}, reason=~"width|speed"}} == 1) or vector(0)')],
               thresholds=[("green", None), ("orange", 1)]), 4, 4)
    L.add(stat("ECMP groups imbalanced", "Switches whose ECMP group the collector flags (fabricmon_ecmp_imbalanced).",
               [target(f"sum(fabricmon_ecmp_imbalanced{{{SWITCH}}}) or vector(0)")],
               thresholds=[("green", None), ("orange", 1)]), 3, 4)
    L.add(stat("Collectors up", "Fabric collector targets (shards) that answer scrapes, of all.",
               [target(f"sum(up{{{FAB}}})", "up"), target(f"count(up{{{FAB}}})", "targets", "B")]), 3, 4)

    L.row("Uplinks and ECMP balance")
    L.add(timeseries("Top uplink utilisation per leaf", "The hottest up port of each leaf (level 1), transmit "
                     "bytes / link rate over 5 min; the 10 highest leaves.",
                     [target(f'topk(10, {uplink.format("max")}{{{SWITCH}, level="1"}})', "{{switch}}")],
                     "percentunit", maxi=1), 12, 8)
    L.add(timeseries("Mean uplink utilisation per switch", "Mean transmit utilisation of each switch's up ports; "
                     "a gap to the top panel is imbalance.",
                     [target(f"{uplink.format('avg')}{{{SWITCH}}}", "{{switch}} (level {{level}})")],
                     "percentunit", maxi=1), 12, 8)
    # only the groups the collector judges: an idle group's max/mean (2.5-5 on an idle fabric) is noise, never flagged
    judged = f" and on (instance, job, switch_guid, direction) fabricmon_ecmp_judged{{{SWITCH}}} == 1"
    L.add(heatmap("ECMP imbalance (max/mean) per switch", "max/mean transmit rate of each switch's ECMP group "
                  "per sweep (1 is perfect balance; the collector flags above fabric.thresholds.ecmp_ratio, 1.2), "
                  "shown only while the group is busy enough to be judged (mean utilisation at or above "
                  "fabric.thresholds.utilisation_floor, 30 %): an idle group's ratio is noise.",
                  [target(f"fabricmon_ecmp_imbalance_ratio{{{SWITCH}}}{judged}", "{{switch}} {{direction}}")]), 12, 9)
    L.add(timeseries("ECMP coefficient of variation", "Coefficient of variation of each ECMP group's transmit "
                     "rates, beside max/mean, for the groups judged (as the heatmap).",
                     [target(f"fabricmon_ecmp_imbalance_cv{{{SWITCH}}}{judged}", "{{switch}} {{direction}}")]), 12, 9)
    # the recording rule over the default counter set's data counters (not the opt-in `rates` gauges)
    L.add(table("Uplinks", "Every up port: transmit utilisation over the last 5 minutes, with its remote end.",
                [target(f"switch_port:fabricmon_fabric_port_transmit_utilisation:ratio_rate5m{{{FAB}}}"
                        f' * on (instance, job, switch_guid, port) group_left (remote_name, remote_port)'
                        f' fabricmon_fabric_link_info{{{FAB}, role="up"}}' + NAMES, table=True)],
                hide=("Time", "job", "level")), 24, 8)

    L.row("Degraded and down links")
    L.add(table("Degraded and down links", "Switch ports that are down (reason down) or below their link class "
                "(width, speed), with the remote end.",
                [target(f"(fabricmon_fabric_port_degraded{{{FAB}}} == 1)" + REMOTE + NAMES, table=True)],
                hide=("Time", "job", "Value")), 16, 8)
    # the default set's state of a cabled port (fabricmon_fabric_port_up is in the opt-in `state` set)
    L.add(timeseries("Links up per level", "Cabled switch ports up (not degraded for reason down), per switch level.",
                     [target(f'count by (level) ((fabricmon_fabric_port_degraded{{{FAB}, reason="down"}} == 0){NAMES})',
                             "level {{level}}")]), 8, 8)

    L.row("Error hot spots")
    L.add(table("Error hot spots", "The 20 switch ports with the highest error rate (symbol, receive, remote "
                "physical, recovery, downed, integrity, overrun, discards per second over 5 min).",
                [target(f"topk(20, switch_port:fabricmon_fabric_port_errors:rate5m{{{FAB}}}{NAMES})", table=True)],
                hide=("Time", "job")), 12, 8)
    L.add(timeseries("Error rate by counter", "Fabric-wide error counters per second.",
                     [target(f"sum by (counter) (switch_port_counter:fabricmon_fabric_port_errors:rate5m{{{FAB}}})",
                             "{{counter}}")]), 12, 8)
    L.add(timeseries("Transmit wait per switch", "PortXmitWait ticks per second summed over each switch's ports "
                     "(data but no credits: congestion); the 10 highest.",
                     [target(f"topk(10, sum by (instance, job, switch_guid) "
                             f"(switch_port:fabricmon_fabric_port_transmit_wait:rate5m{{{FAB}}}){NAMES})",
                             "{{switch}}")]), 12, 8)
    L.add(timeseries("Errors per switch", "Error counters per second summed over each switch's ports; the 10 highest.",
                     [target(f"topk(10, switch:fabricmon_fabric_port_errors:rate5m{{{FAB}}}{NAMES})", "{{switch}}")]),
          12, 8)

    L.row(OPTICS_ROW)
    rx = f"fabricmon_fabric_port_optics_rx_power_dbm{{{FAB}}}"
    margin = (f"{rx} - on (instance, job, switch_guid, port, lane) group_left fabricmon_fabric_port_optics_threshold"
              f'{{{FAB}, quantity="rx_power_dbm", level="low_warning"}}')
    L.add(table("Dimmest receivers per switch", "The 3 transceiver lanes with the least receive power on each "
                "switch (ENTITY-SENSOR-MIB or CISCO-ENTITY-SENSOR-MIB, dBm), and the 3 smallest margins above the "
                "switch's own low warning threshold where the switch gives one (negative: under it). Ethernet "
                "switches only: the InfiniBand collector reads no transceivers (docs/optics.md).",
                [target(f"bottomk by (instance, job, switch_guid) (3, {rx}){NAMES}", "dBm", "A", table=True),
                 target(f"bottomk by (instance, job, switch_guid) (3, {margin}){NAMES}", "margin dB", "B",
                        table=True)],
                hide=("Time", "job", "__name__")), 12, 8)
    L.add(timeseries("Dimmest receiver per switch", "The least receive power of any transceiver lane on each "
                     "switch, in dBm: a line falling over days is a module, fibre or connector dimming before its "
                     "link fails (optics_dimming compares each port with its own learned baseline).",
                     [target(f"min by (instance, job, switch_guid) ({rx}){NAMES}", "{{switch}}")], "dBm",
                     minimum=None), 6, 8)
    L.add(timeseries("Transceiver temperature per switch", "The hottest transceiver of each switch.",
                     [target(f"max by (instance, job, switch_guid) (fabricmon_fabric_port_optics_temperature_celsius"
                             f"{{{FAB}}}){NAMES}", "{{switch}}")], "celsius"), 6, 8)

    L.row("Routing, uplinks and the subnet manager")
    L.add(stat("Master subnet manager", "1 when a subnet manager answers as master (sminfo); 0 pages "
               "(FabricmonNoMasterSubnetManager).",
               [target(f"min(fabricmon_fabric_sm_master_present{{{FAB}}})")], mappings=UP_MAPPING,
               thresholds=[("red", None), ("green", 1)]), 4, 5)
    L.add(table("Subnet managers", "Every subnet manager seen: GUID, LID, priority and state (more than one "
                "MASTER is a split brain).",
                [target(f"fabricmon_fabric_sm_info{{{FAB}}}", table=True)],
                hide=("Time", "__name__", "job", "Value")), 10, 5)
    L.add(timeseries("Subnet manager activity", "The master SM's activity count per second: flat while it claims "
                     "master means a hung SM.",
                     [target(f"rate(fabricmon_fabric_sm_activity_total{{{FAB}}}[$__rate_interval])",
                             "{{instance}}")]), 10, 5)
    L.add(timeseries("Route imbalance per switch", "max/mean of the remote destinations each switch's forwarding "
                     "table routes per active uplink (static; flagged above fabric.routing_imbalance_threshold, "
                     "1.5).",
                     [target(f"fabricmon_fabric_route_imbalance_ratio{{{SWITCH}}}", "{{switch}}")]), 12, 8)
    L.add(timeseries("Active uplinks against peers", "Each switch's active uplinks, and the most common count at "
                     "its level: a switch below its peers lost uplinks.",
                     [target(f"fabricmon_fabric_switch_uplinks{{{SWITCH}}}", "{{switch}}"),
                      target(f"fabricmon_fabric_switch_uplinks_expected{{{SWITCH}}}", "{{switch}} expected", "B")]),
          12, 8)
    L.add(table("Routes per uplink", "Remote destinations each switch routes through each active uplink, with "
                "the remote end.",
                [target(f"fabricmon_fabric_port_routes{{{FAB}}}" + REMOTE + NAMES, table=True)],
                hide=("Time", "job")), 12, 8)
    L.add(table("Fabric checks", "Every fabric check on every switch (0 OK, 1 WARNING, 2 CRITICAL), worst first; "
                "sm is fabric-wide.",
                [target(f"sort_desc(fabricmon_fabric_check_status{{{SWITCH}}})", table=True)],
                hide=("Time", "__name__", "job")), 12, 8)

    nccl_row(L)

    L.row("Fabric collector")
    L.add(timeseries("Sweep duration", "Duration of each shard's last counter sweep.",
                     [target(f"fabricmon_fabric_sweep_duration_seconds{{{FAB}}}", "{{instance}}")], "s"), 8, 8)
    L.add(timeseries("Sweep errors", "Sweep errors per second by kind (read: a switch without counters).",
                     [target(f"sum by (instance, kind) (rate(fabricmon_source_errors_total{{{FAB}, source=\"sweep\"}}"
                             "[$__rate_interval]))", "{{instance}} {{kind}}")]), 8, 8)
    L.add(timeline("Sources up", "discovery and sweep: 1 when the last run produced data.",
                   [target(f"fabricmon_source_up{{{FAB}}}", "{{instance}} {{source}}")], UP_MAPPING), 8, 8)
    L.add(table("Shards", "Each collector's shard and the switches and ports it sweeps.",
                [target(f"fabricmon_fabric_shard_info{{{FAB}}}", "shard", "A", table=True),
                 target(f"fabricmon_fabric_switches{{{FAB}}}", "switches", "B", table=True),
                 target(f"fabricmon_fabric_ports{{{FAB}}}", "ports", "C", table=True)],
                hide=("Time", "__name__", "job")), 24, 5)

    return {
        "title": "fabricmon / Fabric",
        "uid": "fabricmon-fabric",
        "description": "InfiniBand fabric health from fabricmon's fabric collector: switches by level, uplink "
                       "utilisation and ECMP balance, degraded and down links, error hot spots, the Ethernet "
                       "switches' dimmest transceivers, and the collector's own health. Generated by "
                       "grafana/build_dashboards.py.",
        "tags": ["fabricmon", "infiniband", "fabric"],
        "editable": True,
        "graphTooltip": 1,
        "time": {"from": "now-6h", "to": "now"},
        "refresh": "1m",
        "schemaVersion": 39,
        "version": 1,
        "links": [],
        "annotations": {"list": []},
        "templating": {"list": [
            {"name": "datasource", "label": "Data source", "type": "datasource", "query": "prometheus",
             "current": {}, "hide": 0, "refresh": 1, "regex": ""},
            _var("job", "Job", "label_values(fabricmon_fabric_shard_info, job)"),
            _var("instance", "Instance", 'label_values(fabricmon_fabric_shard_info{job=~"$job"}, instance)'),
            _var("switch", "Switch", 'label_values(fabricmon_fabric_switch_info{job=~"$job", instance=~"$instance"}, switch)'),
        ]},
        "panels": L.panels,
    }


def _var(name, label, query):
    return {"name": name, "label": label, "type": "query", "datasource": DS,
            "query": {"query": query, "refId": f"{name}-var"}, "definition": query, "refresh": 2,
            "multi": True, "includeAll": True, "allValue": ".*", "sort": 1,
            "current": {"selected": True, "text": ["All"], "value": ["$__all"]}}


def render(which: str = "node") -> str:
    board = fabric_dashboard() if which == "fabric" else node_dashboard()
    return json.dumps(board, indent=2, sort_keys=False) + "\n"


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--check", action="store_true", help="exit 1 if the committed JSON differs")
    a = p.parse_args()
    stale = 0
    for which, out in (("node", OUT), ("fabric", FABRIC_OUT)):
        text = render(which)
        if a.check:
            same = out.exists() and out.read_text() == text
            print(f"{out.name}: up to date" if same else f"{out} is stale: run python grafana/build_dashboards.py")
            stale |= not same
        else:
            out.write_text(text)
    return stale


if __name__ == "__main__":
    sys.exit(main())
