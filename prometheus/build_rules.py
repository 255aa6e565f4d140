#!/usr/bin/env python3
"""Generate fabricmon/deploy/prometheus/fabricmon.rules.yml (shipped in the wheel), fabricmon's Prometheus alerting and recording rules
for the per-node daemon (`fabricmon run`) and the fabric collector (`fabricmon fabric run`).

    python prometheus/build_rules.py                      # rewrite the committed rules file
    python prometheus/build_rules.py --check              # exit 1 if the committed file is stale
    python prometheus/build_rules.py --runbook-base URL   # point runbook_url at your copy of the docs

It also copies docs/runbooks.md into the package (fabricmon/pages/runbooks.md), which the daemons serve at
/runbooks: every runbook_url defaults to http://<instance>/runbooks#<alert>, the daemon that raised it.
A site sets another base, and its scrape selectors, when it prints the rules:
`fabricmon install --print rules DIR --runbook-base URL --selector 'job="..."' --fabric-selector '...'`
(fabricmon/deploy/rules.py rewrites the shipped file; the shipped file is valid as it is).
    python prometheus/build_rules.py --map-scheme https   # map_url for collectors serving HTTPS

Two kinds of alert:
- verdict alerts reuse what the daemon already judged (`fabricmon_check_status`, 0 OK, 1 WARNING,
  2 CRITICAL): the daemon's thresholds (fabricmon.yml `checks.*`, `roce.*`) stay the only ones,
  and an alert's severity is the daemon's status;
- trend alerts take rate()/increase() on the raw `_total` counters over windows longer than the
  daemon keeps, so they survive daemon restarts and see slow, sustained problems.

Every Prometheus-side threshold and every `for:` is in THRESHOLDS and FOR below.
Monitoring-mixins conventions: CamelCase names prefixed `Fabricmon`, `severity` critical (pages)
or warning, annotations summary / description / runbook_url; a fabric alert about a switch also
carries map_url, the collector's fabric map opened on that switch (`/#select=switch:<guid>`).
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import yaml

HERE = Path(__file__).resolve().parent
OUT = HERE.parent / "fabricmon" / "deploy" / "prometheus" / "fabricmon.rules.yml"
RUNBOOKS = HERE.parent / "docs" / "runbooks.md"
RUNBOOKS_COPY = HERE.parent / "fabricmon" / "pages" / "runbooks.md"      # shipped in the wheel, served at /runbooks
# runbook_url: the daemon that raised the alert serves the runbooks (fabricmon/pages/runbooks.py)
INSTANCE = "{{ $labels.instance }}"
DEFAULT_RUNBOOK_BASE = "SCHEME://" + INSTANCE + "/runbooks"

# The job names the README's scrape config uses, and the selectors every expression carries: the node
# daemons' (SELECTOR) and the fabric collectors' (FABRIC_SELECTOR, every shard). Both export
# fabricmon_check_status (the collector for its own findings, by switch GUID), so every selector names
# its job. `fabricmon install --print rules DIR --selector ... --fabric-selector ...` rewrites them
# (fabricmon/deploy/rules.py), so the rules fit an existing Prometheus without an edit.
JOB = "fabricmon"
FABRIC_JOB = "fabricmon-fabric"
SELECTOR = f'job="{JOB}"'
FABRIC_SELECTOR = f'job="{FABRIC_JOB}"'
N, F_ = SELECTOR, FABRIC_SELECTOR
# The fast state path (docs/latency.md): the same targets scraped for the `state` counter set alone every few
# seconds (`collect[]=state`, fabricmon/deploy/prometheus/prometheus.yml), which the port-down alerts read beside
# the default jobs (a site without these jobs loses nothing but the speed); evaluated every STATE_INTERVAL
STATE_JOB = "fabricmon-state"
FABRIC_STATE_JOB = "fabricmon-fabric-state"
STATE_SELECTOR = f'job="{STATE_JOB}"'
FABRIC_STATE_SELECTOR = f'job="{FABRIC_STATE_JOB}"'
STATE_INTERVAL = "2s"

# ---- every threshold and `for:` of the rules, in one place ------------------------------------
THRESHOLDS = {
    # Only what no daemon judges: every verdict (symbol errors, flaps, PFC storms, ...) is judged by the
    # node daemon or the fabric collector with the thresholds of fabricmon.yml, and the alerts fire on
    # those verdicts (fabricmon_check_status, fabricmon_fabric_check_status), never on raw counters again.
    # fatal QP errors (req_transport_retries_exceeded): any increase within this window (no daemon check)
    "qp_fatal_window": "15m",
    # a source is "erroring" when its errors rose within this window ...
    "source_errors_window": "15m",
    # ... and the snapshot is stale when older than this (seconds; 20x the default 15 s poll)
    "snapshot_stale_seconds": 300,
    # no sweep that read every switch of the shard within this long (seconds; 60x the 15 s sweep)
    "fabric_sweep_stale_seconds": 900,
    # which end of a host link to blame (docs/ber.md#which-end): receive + symbol errors in the last hour at which
    # an end counts as erring, and the window
    "blame_errors": 10,
    "blame_window": "1h",
}
FOR = {
    # a port down pages after this: longer than a link takes to retrain (a few seconds), so a flap that comes back
    # does not page (FabricmonLinkFlapping does when it repeats); with the state job (3 s), the state group's
    # evaluation (2 s) and the critical route's group_wait (2 s) a pulled cable pages within 20 s (docs/latency.md)
    "port_down": "10s",
    "inventory": "5m",            # fewer ports than expected_links say, or a learned port gone
    "port_degraded": "5m",
    "verdict": "5m",              # any other daemon verdict must hold this long
    "gpu": "15m",                 # GPUDirect / affinity: configuration, not transient
    "counter_saturated": "15m",
    "qp_fatal": "0m",
    "phy_ber": "10m",
    "pcie": "5m",
    "vitals": "5m",
    "cable": "5m",
    "blame": "15m",               # the verdict of both ends over their last hour must hold                # a moved module's history holds as long as it is in the port               # a fan or PSU read every 2 min: two reads, then the page                 # a PCIe link trains once: the verdict holds until the device is reseated             # the check needs its own 12-minute window; a verdict that holds 10 min more
    "kernel": "0m",               # a kernel log event: the finding holds (fatal: until reboot), no need to wait
    "source_failing": "15m",
    "source_errors": "30m",
    "snapshot_stale": "5m",
    "down": "10m",
    "absent": "10m",
    # fabric
    "ecmp_imbalance": "10m",      # on top of the collector's own consecutive_sweeps
    # a switch port down (a ticket): longer than FabricmonFabricSwitchUnresponsive's 3m, so that a dead switch's parent
    # mutes its peers' ports before they fire (docs/alerting.md); the state branch only makes its input fresher
    "fabric_port_down": "5m",
    "fabric_port_degraded": "10m",
    "fabric_errors": "15m",
    "fabric_flap": "0m",
    "fabric_sweep_failing": "5m",
    "fabric_sweep_stale": "5m",
    "fabric_down": "5m",
    "fabric_absent": "10m",
    "routing_imbalance": "15m",
    "missing_uplinks": "10m",
    "no_master_sm": "2m",
    "sm_unknown": "15m",
    "sm_hung": "5m",
    "fabric_pfc_storm": "5m",
    "uplink_capacity": "15m",     # a port set to the wrong width or speed: configuration, not an incident
    "design": "15m",              # the fabric against its design: a recabling in progress is not an incident
    "switch_unresponsive": "3m",  # shorter than fabric_port_down (5m): the parent is there before its children
    "slurm_topology_drift": "15m",  # the file is read every 5 min; an edit in progress is not an alert
    # optics (node and switch): light changes over hours, a blip is not an alert
    "optics_critical": "5m",
    "optics_warning": "15m",
    # NCCL: a slow job on a path the fabric collector flags (two 30 s dumps slow, and the fabric verdict's own `for`)
    "nccl_slow_path": "1m",
    "nccl_ras_peer": "2m",        # RAS queried at most every 30 s: four answers
    "nccl_ras_stalled": "2m",     # the check already needs two answers alike; two minutes more of them
    # remediation (docs/remediation.md): a tripped breaker is the incident itself (many failed at once): no wait;
    # a step that keeps failing is retried with backoff by the daemon: a ticket once it has failed a while
    "remediation_breaker": "0m",
    "remediation_failing": "10m",
}
# Windows of the recording rules the dashboard reads.
RECORD_WINDOW = "5m"
RECORD_LONG_WINDOW = "1h"
# -----------------------------------------------------------------------------------------------

PORT = "instance, job, device, port"
RoCE_LOSS_COUNTERS = "out_of_sequence|packet_seq_err|local_ack_timeout_err|implied_nak_seq_err"
WHERE = "{{ $labels.instance }} {{ $labels.device }} port {{ $labels.port }}"


def value_of(expr: str, fmt: str = "humanize") -> str:
    """A template that runs `expr` and prints its first value, or "unknown". In `expr`, %[1]s .. %[4]s are
    the alert's instance, job, device and port labels (port_sel and netdev_sel write them)."""
    return ("{{ with printf \"" + expr + "\" $labels.instance $labels.job $labels.device $labels.port | query }}"
            "{{ . | first | value | " + fmt + " }}{{ else }}unknown{{ end }}")


def port_sel(metric: str, extra: str = "") -> str:
    return metric + "{instance='%[1]s',job='%[2]s',device='%[3]s',port='%[4]s'" + extra + "}"


def netdev_sel(metric: str, extra: str = "") -> str:
    # RoCE series carry device and netdev, not port: a port-level alert matches every netdev of the device
    return metric + "{instance='%[1]s',job='%[2]s',device='%[3]s'" + extra + "}"


INT = 'printf "%.0f"'
STORM_ERRORS = netdev_sel("fabricmon_roce_pause_storm_events_total", ",level='error'")


def increase(metric: str, window: str) -> str:
    return f"sum(increase({port_sel(metric)}[{window}]))"


# ---- verdict alerts: one per daemon check (fabricmon_check_status{check=...}) -------------------
# name, check, severities (the daemon statuses it pages on), FOR key, summary, description (port checks
# get "<instance> <device> port <port>: " in front)
VERDICTS = [
    ("FabricmonExpectedPortsMissing", "expected_inventory", "critical", "inventory",
     "Fewer RDMA ports than expected.",
     "{{ $labels.instance }}: {{ $labels.device }}{{ if $labels.port }} port {{ $labels.port }}{{ end }}:"
     " an RDMA port this node must have is"
     " missing (the daemon's expected_inventory check: an expected_links entry of fabricmon.yml, or a port"
     " learned as healthy on this node that is gone): an adapter died, its driver did not load, or it was"
     " removed. `fabricmon check` on the node names what is missing; after planned maintenance run"
     " `fabricmon inventory accept` there."),
    ("FabricmonSymbolErrors", "symbol_errors", "critical warning", "verdict",
     "Symbol errors above the bit-error budget.",
     "symbol errors rose by " + value_of(increase("fabricmon_ib_port_symbol_errors_total", "1h"), INT)
     + " in the last hour (the daemon's symbol_errors check): physical-layer bit errors; clean or reseat"
       " the connectors, or replace the cable or transceiver."),
    ("FabricmonPortBitErrorRatio", "phy_ber", "critical warning", "phy_ber",
     "Bit error ratio above the link's budget.",
     "raw (pre-FEC) bit error ratio "
     + value_of("max(" + port_sel("fabricmon_port_bit_error_ratio", ",kind='raw',window='short'") + ")", 'printf "%.1e"')
     + ", effective (post-FEC) "
     + value_of("max(" + port_sel("fabricmon_port_bit_error_ratio", ",kind='effective',window='short'") + ")",
                'printf "%.1e"')
     + " over the short window, against the budget of the link's speed, FEC mode and medium (the daemon's phy_ber"
       " check, status {{ $value }}; `fabricmon check -v` names the budget, the window and the part): over the raw"
       " budget only, the FEC still corrects everything and a repair can be planned; over the effective or symbol"
       " budget, frames are lost."),
    ("FabricmonLinkFlapping", "link_flap", "critical warning", "verdict",
     "InfiniBand link is flapping.",
     "the link went down " + value_of(increase("fabricmon_ib_port_link_downed_total", "12h"), INT)
     + " time(s) in the last 12 hours (LinkDownedCounter): cable, transceiver or switch port."),
    ("FabricmonLinkErrorRecovery", "link_error_recovery", "critical warning", "verdict",
     "InfiniBand link keeps retraining.",
     value_of(increase("fabricmon_ib_port_link_error_recovery_total", "1h"), INT)
     + " link error recoveries in the last hour: a marginal cable or transceiver, often before a flap."),
    ("FabricmonLinkIntegrityErrors", "link_integrity", "critical warning", "verdict",
     "Local link integrity or buffer overrun errors.",
     "LocalLinkIntegrity + ExcessiveBufferOverrun rose by "
     + value_of(f"sum(increase({port_sel('fabricmon_ib_port_local_link_integrity_errors_total')}[1h])) + "
                f"sum(increase({port_sel('fabricmon_ib_port_excessive_buffer_overrun_errors_total')}[1h]))", INT)
     + " in the last hour: a bad cable, or VL credit trouble."),
    ("FabricmonReceiveErrors", "receive_errors", "critical warning", "verdict",
     "InfiniBand receive errors.",
     "PortRcvErrors + PortRcvRemotePhysicalErrors rose by "
     + value_of(f"sum(increase({port_sel('fabricmon_ib_port_receive_errors_total')}[1h])) + "
                f"sum(increase({port_sel('fabricmon_ib_port_receive_remote_physical_errors_total')}[1h]))", INT)
     + " in the last hour: the cable, or the port at the other end."),
    ("FabricmonTransmitDiscards", "transmit_discards", "critical warning", "verdict",
     "InfiniBand transmit discards.",
     value_of(increase("fabricmon_ib_port_transmit_discards_total", "1h"), INT)
     + " packets discarded on transmit in the last hour: congestion or a down path."),
    ("FabricmonRocePfcDisabled", "roce_pfc", "critical warning", "verdict",
     "PFC is off on the RDMA priority.",
     "PFC does not protect the RDMA priority (the daemon's roce_pfc check, status {{ $value }}):"
     " RoCE packets are dropped instead of paused under congestion. `fabricmon check -v` prints the"
     " mlnx_qos --pfc vector to set."),
    ("FabricmonRocePfcOnLossyPriority", "roce_pfc_lossy", "warning", "verdict",
     "PFC is enabled on a priority that should be lossy.",
     "PFC is on for a priority outside roce.lossless_priorities: pauses spread congestion to other"
     " traffic and risk PFC deadlock."),
    ("FabricmonRoceTrustMismatch", "roce_trust", "warning", "verdict",
     "RoCE priority trust state is wrong.",
     "the netdev's trust state (pcp/dscp) or DSCP map does not match roce.trust: RDMA traffic misses"
     " the lossless priority."),
    ("FabricmonRoceMtuLow", "roce_mtu", "warning", "verdict",
     "RoCE MTU below the expected.",
     "the active RoCE MTU is " + value_of(netdev_sel("fabricmon_roce_mtu_bytes"), INT)
     + " bytes, below roce.mtu: raise the netdev MTU (9000) here and on the switch port."),
    ("FabricmonRocePauseRateHigh", "roce_pause_rate", "critical warning", "verdict",
     "High PFC pause frame rate.",
     "up to " + value_of(f"max(rate({netdev_sel('fabricmon_roce_pause_frames_total')}[5m]))")
     + " pause frames/s on one priority and direction (the daemon's roce_pause_rate check)."),
    ("FabricmonRocePausedTimeHigh", "roce_pause_duration", "critical warning", "verdict",
     "A RoCE priority spends much of its time paused.",
     "paused " + value_of(f"max(rate({netdev_sel('fabricmon_roce_pause_duration_seconds_total')}[5m]))",
                          "humanizePercentage")
     + " of the time on one priority and direction (the daemon's roce_pause_duration check)."),
    ("FabricmonRocePauseStorm", "roce_pause_storm", "critical warning", "verdict",
     "PFC pause storm on a RoCE NIC.",
     "pause-storm events (the daemon's roce_pause_storm check, status {{ $value }}; error events"
     " in the last hour: " + value_of(f"sum(increase({STORM_ERRORS}[1h]))", INT)
     + "): the NIC's receive path is stuck and the storm guard may be dropping packets."),
    ("FabricmonRoceLosslessDrops", "roce_lossless_drops", "critical warning", "verdict",
     "Packet loss on a lossless RoCE priority.",
     "drops or out-of-sequence packets where PFC should prevent loss (the daemon's roce_lossless_drops"
     " check, status {{ $value }})."),
    ("FabricmonRoceCnpIgnored", "roce_cnp_ignored", "warning", "verdict",
     "RoCE congestion notifications are ignored (DCQCN off).",
     value_of(f"sum(increase({netdev_sel('fabricmon_roce_cnp_ignored_total')}[1h]))", INT)
     + " CNPs ignored in the last hour: DCQCN is off on the reaction point."),
    ("FabricmonNicKernelEvent", "kernel_log", "critical warning", "kernel",
     "The kernel log reports a NIC failure.",
     "{{ $labels.instance }} {{ $labels.device }}{{ if $labels.port }} port {{ $labels.port }}{{ end }}: the driver"
     " logged a {{ $labels.class }} event (fatal: drain the node; degraded: schedule a repair); `fabricmon check`"
     " names the event, its last line, the cabled switch port and the fix."),
    ("FabricmonPcieLinkDegraded", "pcie_link", "critical warning", "pcie",
     "A NIC's or GPU's PCIe link runs below what it and its slot support.",
     "{{ $labels.instance }} {{ $labels.device }}: its PCIe link gives "
     + value_of("max(8 * " + netdev_sel("fabricmon_pcie_link_bandwidth_bytes_per_second", ",link='current'") + ") / 1e9",
                INT)
     + " Gb/s where it and its slot support "
     + value_of("max(8 * " + netdev_sel("fabricmon_pcie_link_bandwidth_bytes_per_second", ",link='expected'") + ") / 1e9",
                INT)
     + " Gb/s (the daemon's pcie_link check: critical, it trained below both; warning, the slot supports less than"
       " the device): a NIC capped so caps its ports while every InfiniBand counter reads clean; reseat it, check"
       " the slot, riser and BIOS link speed."),
    ("FabricmonPcieErrors", "pcie_aer", "critical warning", "pcie",
     "PCIe AER errors on a NIC or GPU.",
     "{{ $labels.instance }} {{ $labels.device }}: AER counted "
     + value_of("sum(" + netdev_sel("fabricmon_pcie_aer_errors_total", ",severity='fatal'") + ")", INT)
     + " fatal, "
     + value_of("sum(" + netdev_sel("fabricmon_pcie_aer_errors_total", ",severity='nonfatal'") + ")", INT)
     + " non-fatal and "
     + value_of("sum(" + netdev_sel("fabricmon_pcie_aer_errors_total", ",severity='correctable'") + ")", INT)
     + " correctable errors since boot, at the device and the port above it (the daemon's pcie_aer check:"
       " critical, a fatal error; warning, non-fatal ones or correctable ones rising): reseat the device, check the"
       " slot and riser."),
    ("FabricmonCableHistory", "cable_history", "warning", "cable",
     "A module or cable with a bad history elsewhere is in this port.",
     "the module in it (serial {{ with printf \"max by (serial) (" + port_sel("fabricmon_cable_module_info")
     + ")\" $labels.instance $labels.job $labels.device $labels.port | query }}{{ . | first | label \"serial\" }}"
       "{{ else }}unknown{{ end }}) had trouble in another port before (the daemon's cable_history check): it was moved during"
       " troubleshooting and carries its fault with it; `fabricmon check -v` names where and when; replace it."),
    ("FabricmonGpuDirectRdmaUnavailable", "gpudirect_rdma", "critical", "gpu",
     "GPUDirect RDMA is unavailable.",
     "{{ $labels.instance }}: the node has NVIDIA GPUs and RDMA NICs but no GPUDirect RDMA path"
     " (nvidia-peermem, nv_peer_mem or DMA-BUF): NCCL stages through host memory, 30-60% slower."),
    ("FabricmonGpuNicAffinity", "gpu_nic_affinity", "warning", "gpu",
     "GPU's nearest RDMA NIC is too far away.",
     "{{ $labels.instance }} {{ $labels.device }}: its nearest usable RDMA NIC is beyond a PCIe switch"
     " (PHB, NODE or SYS), so NCCL skips GPUDirect RDMA for it (20-40% less bandwidth)."),
    ("FabricmonGpuNicSharing", "gpu_nic_sharing", "warning", "gpu",
     "GPUs share a NIC while a nearby NIC is idle.",
     "{{ $labels.instance }} {{ $labels.device }} shares its RDMA NIC with another GPU while a NIC"
     " close to it carries no GPU."),
    ("FabricmonNcclIbHcaMisconfigured", "nccl_ib_hca", "warning", "gpu",
     "NCCL_IB_HCA steers a GPU away from its nearest NIC.",
     "{{ $labels.instance }} {{ $labels.device }}: NCCL_IB_HCA leaves it only distant NICs, matches no"
     " RDMA device, or does not parse."),
]
STATUS = {"critical": 2, "warning": 1}
PORT_DESC_CHECKS = {"symbol_errors", "phy_ber", "cable_history", "link_flap", "link_error_recovery", "link_integrity", "receive_errors",
                    "transmit_discards", "roce_pfc", "roce_pfc_lossy", "roce_trust", "roce_mtu",
                    "roce_pause_rate", "roce_pause_duration", "roce_pause_storm", "roce_lossless_drops",
                    "roce_cnp_ignored"}


def anchor(name: str) -> str:
    """The runbook heading is the alert name itself, so its GitHub anchor is the lower-cased name."""
    return name.lower()


# alerts whose expression keeps no instance label either (an aggregate over a job's targets)
NO_INSTANCE = {"FabricmonFabricShardAbsent"}


def runbook_url(name: str, expr: str, base: str) -> str:
    """base#<alert>; an absent() alert has no instance, so by default it links to the runbooks of any
    fabricmon target that is up (a node daemon or a collector)."""
    url = f"{base}#{anchor(name)}"
    if INSTANCE in base and (expr.startswith("absent(") or name in NO_INSTANCE):
        live = ("{{ with query `up{%s} == 1 or up{%s} == 1` }}{{ (index . 0).Labels.instance }}{{ else }}"
                "no-fabricmon-target-is-up{{ end }}" % (SELECTOR, FABRIC_SELECTOR))
        url = url.replace(INSTANCE, live)
    return url


def alert(name, expr, severity, for_, summary, description, base) -> dict:
    rule = {"alert": name, "expr": expr}
    if for_ != "0m":
        rule["for"] = for_
    rule["labels"] = {"severity": severity}
    rule["annotations"] = {"summary": summary, "description": description,
                           "runbook_url": runbook_url(name, expr, base)}
    return rule


# What a node port is cabled to (the daemon learns it: fabricmon_ib_port_peer_info), as the labels the
# fabric alerts name a switch port with: `switch` (its node description) and `switch_port`. Alertmanager
# groups by `switch` and mutes a node's port alert under its switch's alert (docs/alerting.md); a port
# whose peer is not known keeps its alert, without those labels.
PEER = ('label_replace(label_replace(fabricmon_ib_port_peer_info{%s}, "switch", "$1", "peer", "(.+)"),'
        ' "switch_port", "$1", "peer_port", "(.+)")')


def with_peer(expr: str, selector: str = SELECTOR) -> str:
    return (f"(\n    {expr}\n  )\n  * on ({PORT}) group_left (switch, switch_port) {PEER % selector}\n"
            f"or on ({PORT})\n  (\n    {expr}\n  )")


def port_down(status: int, selector: str) -> str:
    """A node port down, as its daemon judged it (degraded_link at `status`), from one job's series."""
    return with_peer(f'fabricmon_check_status{{{selector},check="degraded_link"}} == {status}\n'
                     f'    and on ({PORT}) fabricmon_ib_port_degraded{{{selector},reason="down"}} == 1', selector)


def node_alerts(base: str) -> list[dict]:
    T, out = THRESHOLDS, []
    down = f'fabricmon_ib_port_degraded{{{N},reason="down"}} == 1'
    for sev, st in STATUS.items():
        out.append(alert(
            "FabricmonPortDown",
            # the default job's series, or the state job's (scraped every few seconds: the fast path)
            f"(\n{port_down(st, N)}\n)\nor\n(\n{port_down(st, STATE_SELECTOR)}\n)",
            sev, FOR["port_down"], "RDMA port is down.",
            f"{WHERE} is down: PortState "
            + value_of(port_sel("fabricmon_ib_port_state_id"), INT)
            + " (1 DOWN, 2 INIT, 3 ARMED), PhysState "
            + value_of(port_sel("fabricmon_ib_port_physical_state_id"), INT)
            + " (2 Polling, 3 Disabled).", base))
    for sev, st in STATUS.items():
        out.append(alert(
            "FabricmonPortDegraded",
            with_peer(f'fabricmon_check_status{{{N},check="degraded_link"}} == {st}\n'
                      f"    unless on ({PORT}) {down}"),
            sev, FOR["port_degraded"], "RDMA port runs below its expected width or speed.",
            f"{WHERE} runs at "
            + value_of("8 * " + port_sel("fabricmon_ib_port_rate_bytes_per_second") + " / 1e9",
                       INT)
            + " Gb/s over "
            + value_of(port_sel("fabricmon_ib_port_link_width_lanes"), INT)
            + " lane(s); expected "
            + value_of("8 * " + port_sel("fabricmon_ib_port_expected_rate_bytes_per_second") + " / 1e9",
                       INT)
            + " Gb/s (or what both ends could do).", base))
    for name, check, sevs, for_key, summary, desc in VERDICTS:
        for sev in sevs.split():
            d = f"{WHERE}: {desc}" if check in PORT_DESC_CHECKS else desc
            e = f'fabricmon_check_status{{{N},check="{check}"}} == {STATUS[sev]}'
            out.append(alert(name, with_peer(e) if check in PORT_DESC_CHECKS else e,
                             sev, FOR[for_key], summary, d, base))
    out.append(alert(
        "FabricmonCounterSaturated", f"fabricmon_ib_port_saturated{{{N}}} == 1", "warning", FOR["counter_saturated"],
        "An InfiniBand error counter is saturated.",
        f"{WHERE}: counter {{{{ $labels.counter }}}} sits at its maximum, so its rate is unknown and"
        " new errors are invisible; find the cause, then clear it in a maintenance window.", base))
    # ---- no daemon judges these: QP fatal errors (any increase); every other counter has its check ----
    out.append(alert(
        "FabricmonQpTransportRetriesExceeded",
        f"increase(fabricmon_ib_port_hw_counters_total{{{N},counter=\"req_transport_retries_exceeded\"}}"
        f"[{T['qp_fatal_window']}]) > 0",
        "warning", FOR["qp_fatal"], "RDMA queue pairs failed after exhausting retries.",
        f"{WHERE}: {{{{ $value | printf \"%.0f\" }}}} queue pair(s) hit the transport retry limit in"
        f" {T['qp_fatal_window']}: the jobs using them got a fatal NCCL/verbs error.", base))
    return out


def self_alerts(base: str) -> list[dict]:
    T = THRESHOLDS
    return [
        alert("FabricmonDown", f'up{{{N}}} == 0', "warning", FOR["down"],
              "fabricmon cannot be scraped.",
              "{{ $labels.instance }} (job {{ $labels.job }}) has not answered scrapes for "
              f"{FOR['down']}: nothing on this node's fabric health is known.", base),
        alert("FabricmonAbsent", f'absent(up{{{N}}})', "critical", FOR["absent"],
              "No fabricmon target is scraped at all.",
              f'Prometheus has no target matching {{{N}}}: the whole fabric is unmonitored and every'
              " fabricmon alert is silent.", base),
        alert("FabricmonSourceFailing",
              f'fabricmon_source_up{{{N}}} == 0\n'
              "  and on (instance, job, source) fabricmon_source_enabled == 1",
              "warning", FOR["source_failing"], "A fabricmon source produces no data.",
              "{{ $labels.instance }}: source {{ $labels.source }} is enabled but its last run produced"
              " no data: the checks that need it cannot judge.", base),
        alert("FabricmonSourceErrors",
              f'sum by (instance, job, source) (increase(fabricmon_source_errors_total{{{N}}}'
              f"[{T['source_errors_window']}]))"
              " > 0\n  and on (instance, job, source) fabricmon_source_up == 1",
              "warning", FOR["source_errors"], "A fabricmon source keeps failing.",
              "{{ $labels.instance }}: source {{ $labels.source }} had {{ $value | printf \"%.0f\" }} errors"
              f" in {T['source_errors_window']}, continuously for {FOR['source_errors']}"
              " (fabricmon_source_errors_total{kind=...} says which kind).", base),
        alert("FabricmonSnapshotStale",
              f"time() - (fabricmon_snapshot_timestamp_seconds{{{N}}} or fabricmon_snapshot_timestamp_seconds{{{F_}}})"
              f" > {T['snapshot_stale_seconds']}",
              "warning", FOR["snapshot_stale"], "fabricmon serves an old snapshot.",
              "{{ $labels.instance }}: the snapshot is {{ $value | humanizeDuration }} old: the poll loop is"
              " stuck, so the values served are frozen.", base),
    ]


# ---- the fabric collector (job FABRIC_JOB, one target per shard) -------------------------------
SW = "{{ $labels.instance }}: {{ $labels.switch }} ({{ $labels.switch_guid }})"
SWPORT = SW + " port {{ $labels.port }}"
FPORT = "instance, job, switch_guid, port"
# a switch port's name and its remote end, joined from the _info series (topology stays out of the counters)
WITH_NAMES = ("\n  * on (instance, job, switch_guid) group_left (switch) fabricmon_fabric_switch_info"
              "\n  * on (instance, job, switch_guid, port) group_left (role, remote_guid, remote_name, remote_port)"
              " fabricmon_fabric_link_info")


def named(cond: str) -> str:
    """The condition with the switch's name and the port's remote end as labels (the value stays the condition's),
    and the port also as `switch_port`, the label a node's alert names the switch port it is cabled to with."""
    return f'label_replace(\n(\n  {cond}\n){WITH_NAMES},\n"switch_port", "$1", "port", "(.+)")'


REMOTE = ' ({{ $labels.role }} link to "{{ $labels.remote_name }}"[{{ $labels.remote_port }}])'


def fabric_value_of(expr: str, fmt: str = "humanize") -> str:
    """value_of for switch series: %[1]s .. %[4]s are the alert's instance, job, switch_guid and port."""
    return ("{{ with printf \"" + expr + "\" $labels.instance $labels.job $labels.switch_guid $labels.port | query }}"
            "{{ . | first | value | " + fmt + " }}{{ else }}unknown{{ end }}")


def fsel(metric: str, extra: str = "", port: bool = True) -> str:
    return (metric + "{instance='%[1]s',job='%[2]s',switch_guid='%[3]s'" + (",port='%[4]s'" if port else "")
            + extra + "}")


def map_url(scheme: str) -> str:
    """The fabric map of the collector that raised the alert, opened on the switch (the page
    reads the selection from the URL fragment)."""
    return scheme + "://{{ $labels.instance }}/#select=switch:{{ $labels.switch_guid }}"


# The jobs an alert about a switch can hurt (docs/jobs.md): those the collector's own finding on
# that switch and port names (fabricmon_fabric_finding_job_info, port '' for a whole-switch
# finding); else, for an alert the collector has no finding for (a Prometheus-side trend), every
# job whose traffic can cross the switch (fabricmon_fabric_job_switch_info). Joined with
# fabricmon_slurm_job_info for the user and job name.
JOB_NAMES = " * on (instance, job, job_id) group_left (user, job_name) fabricmon_slurm_job_info"
FINDING_JOBS = ("fabricmon_fabric_finding_job_info{instance='%[1]s',job='%[2]s',switch_guid='%[3]s',port='%[4]s'}"
                + JOB_NAMES)
SWITCH_JOBS = "fabricmon_fabric_job_switch_info{instance='%[1]s',job='%[2]s',switch_guid='%[3]s'}" + JOB_NAMES
_JOB_LIST = ('{{ range $i, $s := sortByLabel "job_id" . }}{{ if $i }}, {{ end }}{{ $s.Labels.job_id }}'
             ' ({{ $s.Labels.user }}/{{ $s.Labels.job_name }}){{ end }}')
JOBS_ANNOTATION = (
    '{{ with printf "' + FINDING_JOBS + '" $labels.instance $labels.job $labels.switch_guid (or $labels.port "") | query }}'
    + _JOB_LIST + '{{ else }}{{ with printf "' + SWITCH_JOBS + '" $labels.instance $labels.job $labels.switch_guid | query }}'
    'on or through this switch: ' + _JOB_LIST + '{{ else }}none known{{ end }}{{ end }}')


def with_map_urls(rules: list[dict], scheme: str) -> list[dict]:
    """Adds map_url (the map opened on the switch) and jobs (the Slurm jobs it can hurt) to every
    alert whose labels name a switch (its description uses switch_guid)."""
    for r in rules:
        if "$labels.switch_guid" in r["annotations"]["description"]:
            r["annotations"]["map_url"] = map_url(scheme)
            r["annotations"]["jobs"] = JOBS_ANNOTATION
    return rules


def fsel_(metric: str, extra: str = "") -> str:
    """A fabric collector series with the fabric selector (extra: more matchers, comma first)."""
    return f"{metric}{{{FABRIC_SELECTOR}{extra}}}"


# One end of a switch-to-switch link speaks for the cable: the lower switch's `up` port. The upper
# switch's `down` port of the same cable is left out of the port alerts (both ends are one incident);
# when the lower switch itself is gone, FabricmonFabricSwitchUnresponsive speaks for all its links.
ONE_END = "\n  unless on (instance, job, switch_guid, port) " + 'fabricmon_fabric_link_info{%s,role="down"}'
# either end of a link fabricmon's remediation disabled (docs/remediation.md)
ISOLATED = "\n  unless on (instance, job, switch_guid, port) " + 'fabricmon_remediation_port_isolated{%s,mode="act"}'


def port_finding(checks: str, status: int) -> str:
    """The collector's own finding on a switch port (fabricmon_check_status, device = the switch GUID), at
    one status, with the switch's name and the port's remote end as labels."""
    return named(f'max without (device) (label_replace(\n    fabricmon_check_status{{{FABRIC_SELECTOR},check=~"{checks}"}}'
                 f' == {status},\n    "switch_guid", "$1", "device", "(.+)"\n  ))')


# A switch is down when every switch-to-switch link its peers have to it is down (at least two: a leaf
# whose one uplink is pulled is a cable, not a dead switch), whether or not the switch itself is still
# in the topology. Labelled as the switch (switch_guid, switch) and as the peer of every port that
# faces it (remote_guid): Alertmanager mutes both kinds of children under it.
def switch_down() -> str:
    F = FABRIC_SELECTOR
    links = f'fabricmon_fabric_link_info{{{F},role=~"up|down"}}'
    dead = (f"(\n    min by (instance, job, remote_guid, remote_name) (\n"
            f'      fabricmon_fabric_port_degraded{{{F},reason="down"}}\n'
            f"      * on (instance, job, switch_guid, port) group_left (remote_guid, remote_name) {links}\n"
            f"    ) == 1\n"
            f"  )\n  and on (instance, job, remote_guid) (count by (instance, job, remote_guid) ({links}) >= 2)")
    return ('max by (instance, job, switch_guid, switch, remote_guid) (label_replace(label_replace(\n  '
            + dead + ',\n  "switch_guid", "$1", "remote_guid", "(.+)"), "switch", "$1", "remote_name", "(.+)"))')


def unresponsive(status: int) -> str:
    return ('label_replace(max by (instance, job, switch_guid, switch) (\n  '
            + fsel_("fabricmon_fabric_check_status", ',check="unresponsive"') + f" == {status}\n"
            '), "remote_guid", "$1", "switch_guid", "(.+)")')


def switch_parent(severity: str) -> str:
    if severity == "critical":
        return switch_down() + "\nor\n" + unresponsive(2)
    return unresponsive(1) + "\nunless on (job, switch_guid)\n" + switch_down()


def missing_uplinks(status: int) -> str:
    """The uplinks verdict, once per switch the missing uplinks lead to (remote_guid, so that a dead
    spine mutes every leaf's verdict about it), or once when none of them is known."""
    F = FABRIC_SELECTOR
    verdict = fsel_("fabricmon_fabric_check_status", ',check="uplinks"') + f" == {status}"
    towards = (f'count by (instance, job, switch_guid, remote_guid) (\n    (fabricmon_fabric_port_degraded{{{F},reason="down"}} == 1)\n'
               f'    * on (instance, job, switch_guid, port) group_left (remote_guid) fabricmon_fabric_link_info{{{F},role="up"}}\n  )')
    return (f"({verdict})\n  * on (instance, job, switch_guid) group_right (check, switch) clamp_max({towards}, 1)\n"
            f"or on (instance, job, switch_guid)\n  {verdict}")


# What a parent hides: the ports down with it, the hosts cabled to it (their node daemons' learned
# peers), the Slurm jobs on those hosts (the collector's own jobs annotation adds the jobs crossing it).
HIDES = ("It hides: "
         "{{ with printf \"count(fabricmon_fabric_link_info{job='%[2]s',remote_guid='%[3]s'} * on (instance, job,"
         " switch_guid, port) group_left () (fabricmon_fabric_port_degraded{job='%[2]s',reason='down'} == 1))\""
         " $labels.instance $labels.job $labels.switch_guid | query }}{{ . | first | value | printf \"%.0f\" }}"
         "{{ else }}0{{ end }} switch port(s) facing it, down; "
         "{{ with printf \"fabricmon_ib_port_peer_info{peer='%s'}\" $labels.switch | query }}"
         "{{ len . }} host port(s) cabled to it ({{ range $i, $s := sortByLabel \"instance\" . }}{{ if $i }}, {{ end }}"
         "{{ $s.Labels.instance }} {{ $s.Labels.device }}{{ end }}){{ else }}no host port a node daemon knows"
         " cabled to it{{ end }}; "
         "{{ with printf \"fabricmon_slurm_job_info and on (instance) fabricmon_ib_port_peer_info{peer='%s'}\""
         " $labels.switch | query }}Slurm jobs on those hosts: {{ range $i, $s := sortByLabel \"job_id\" . }}"
         "{{ if $i }}, {{ end }}{{ $s.Labels.job_id }} ({{ $s.Labels.user }}/{{ $s.Labels.job_name }}){{ end }}"
         "{{ else }}no Slurm job known on them{{ end }}. Their own alerts are muted under this one"
         " (the shipped Alertmanager inhibit_rules).")


def shard_absent() -> str:
    """The shards reporting (each counted once, whatever its replicas and instances) below the shards the fabric
    is swept in; or none of a fabric's shards seen in the last day reporting now (0). Grouped by what is left of
    the target labels: the job and a site's own (a rail's `fabric` label), never the shard's instance."""
    F = FABRIC_SELECTOR
    present = f"max without (instance, replica) (fabricmon_fabric_shard_info{{{F}}})"
    shards = f"max without (instance, replica) (fabricmon_fabric_shards{{{F}}})"
    return (f"count without (shard, shards) (\n  {present}\n) < {shards}\nor\n"
            f"0 * (\n  max without (instance, replica) (max_over_time(fabricmon_fabric_shards{{{F}}}[1d]))\n"
            f"  unless {shards}\n)")


def fabric_port_down(one_end: str) -> str:
    """A cabled switch port down: the default job's verdict, or the state job's newest read of the port (the fast
    path: the SM's reports make it seconds old, docs/latency.md), given the same reason label."""
    verdict = named(fsel_("fabricmon_fabric_port_degraded", ',reason="down"') + " == 1" + one_end
                    + ISOLATED % FABRIC_SELECTOR)
    fs = FABRIC_STATE_SELECTOR
    # the state job's series and the default job's isolation share the collector (instance), not the job
    read = named('label_replace(\n    fabricmon_fabric_port_up{' + fs + '} == 0, "reason", "down", "", ""\n  )'
                 '\n  and on (instance, job, switch_guid, port) fabricmon_fabric_link_info{' + fs + ',role!="unconnected"}'
                 + ONE_END % fs + ISOLATED.replace("instance, job,", "instance,") % FABRIC_SELECTOR)
    return f"(\n{verdict}\n)\nor\n(\n{read}\n)"


def fabric_alerts(base: str) -> list[dict]:
    T, F = THRESHOLDS, FABRIC_SELECTOR
    one_end = ONE_END % F
    out = [
        alert("FabricmonEcmpImbalance", f"fabricmon_ecmp_imbalanced{{{F}}} == 1", "warning", FOR["ecmp_imbalance"],
              "ECMP traffic is unbalanced across a switch's uplinks.",
              SW + " {{ $labels.direction }} ports: the hottest carries "
              + fabric_value_of(fsel("fabricmon_ecmp_imbalance_ratio", ",direction='%[4]s'", port=False), 'printf "%.2f"')
                .replace("$labels.port", "$labels.direction")
              + "x the mean (CV "
              + fabric_value_of(fsel("fabricmon_ecmp_imbalance_cv", ",direction='%[4]s'", port=False), 'printf "%.2f"')
                .replace("$labels.port", "$labels.direction")
              + ", mean utilisation "
              + fabric_value_of(fsel("fabricmon_ecmp_utilisation_ratio", ",direction='%[4]s'", port=False),
                                "humanizePercentage").replace("$labels.port", "$labels.direction")
              + "), judged by the collector over consecutive sweeps: check ECMP hashing / adaptive routing"
                " on this switch; the collector's finding names the hottest and coldest ports.", base),
        # a link fabricmon isolated is down on purpose: FabricmonRemediation* and `fabricmon actions` report it
        alert("FabricmonFabricPortDown", fabric_port_down(one_end),
              "warning", FOR["fabric_port_down"], "A cabled switch port is down.",
              SWPORT + REMOTE + " was cabled at an earlier discovery and is down now"
              " (the collector's degraded_link verdict, or its newest read of the port): the fabric lost this"
              " link's bandwidth and ECMP spreads over fewer paths.", base),
        alert("FabricmonFabricPortDegraded",
              named(fsel_("fabricmon_fabric_port_degraded", ',reason=~"width|speed"') + " == 1" + one_end),
              "warning", FOR["fabric_port_degraded"], "A switch link runs below the width or speed of its class.",
              SWPORT + REMOTE + " runs at "
              + fabric_value_of("8 * " + fsel("fabricmon_fabric_port_rate_bytes_per_second") + " / 1e9",
                                'printf "%.0f"')
              + " Gb/s, below the norm of its link class ({{ $labels.reason }}): reseat or replace the cable or"
                " transceiver. The collector leaves it out of its ECMP group.", base),
    ]
    # the collector's counter verdicts on switch ports (fabric.yml checks.*: the node daemon's thresholds)
    for name, checks, summary, what in (
            ("FabricmonFabricSymbolErrors", "symbol_errors", "Switch port symbol errors above the configured budget.",
             "symbol errors above the budget of fabricmon.yml (checks.symbol_errors): a cable or transceiver going bad."),
            ("FabricmonFabricReceiveErrors", "receive_errors", "Switch port receive errors.",
             "PortRcvErrors + PortRcvRemotePhysicalErrors above checks.receive_errors: the cable, or the port at"
             " the other end."),
            ("FabricmonFabricLinkFlapping", "link_flap", "A switch link goes down and comes back.",
             "LinkDownedCounter rose past checks.link_flap: every flap kills the RDMA connections over the link."),
            ("FabricmonFabricPortErrors", "link_error_recovery|link_integrity|transmit_discards",
             "Switch port link errors.",
             "the collector's {{ $labels.check }} check (link error recoveries, local link integrity or buffer"
             " overruns, transmit discards) is over its fabricmon.yml threshold: a marginal cable or congestion.")):
        for sev, st in STATUS.items():
            out.append(alert(name, port_finding(checks, st), sev, FOR["fabric_errors"], summary,
                             SWPORT + REMOTE + ": " + what + " The collector's map (map_url) shows the finding"
                             " with its count.", base))
    for sev, st in STATUS.items():
        out.append(alert("FabricmonFabricPfcStorm", fsel_("fabricmon_fabric_check_status", ',check="pfc_storm"')
                         + f" == {st}", sev, FOR["fabric_pfc_storm"],
                         "A switch sends or receives a storm of PFC pause frames.",
                         SW + ": the collector's pfc_storm check (fabric.pfc_storm.rate pause frames/s at a"
                         " port, for fabric.pfc_storm.sweeps sweeps): lossless traffic on that priority"
                         " stalls and the pauses spread upstream; the map names the port. Check the peer's RoCE"
                         " counters and PFC watchdog.", base))
        if st == 1:             # uplink_capacity is a warning or nothing
            out.append(alert("FabricmonFabricUplinkNarrow", fsel_("fabricmon_fabric_check_status",
                                                                  ',check="uplink_capacity"') + f" == {st}", sev,
                             FOR["uplink_capacity"], "A switch uplink runs narrower or slower than the rest of its group.",
                             SW + ": the collector's uplink_capacity check: an uplink runs at a lower width or speed "
                             "than the other members of its uplink group, as both ends are set, so hashing still gives "
                             "it an equal share and its flows run slower; the finding names the port and the capacity "
                             "lost. Set both ends back to the group's width and speed.", base))
        out.append(alert("FabricmonMissingUplinks", missing_uplinks(st), sev, FOR["missing_uplinks"],
                         "A switch has fewer uplinks than its peers.",
                         SW + ": " + fabric_value_of(fsel("fabricmon_fabric_switch_uplinks", port=False), 'printf "%.0f"')
                         + " uplinks up, expected "
                         + fabric_value_of(fsel("fabricmon_fabric_switch_uplinks_expected", port=False), 'printf "%.0f"')
                         + " (the collector's uplinks check; critical from fabric.uplinks_critical_fraction of them"
                           " missing){{ with $labels.remote_guid }}, down towards {{ . }}{{ end }}: this switch's"
                           " traffic shares fewer paths.", base))
    # the parent: a switch that is down (every link to it down, seen from its peers) or does not answer
    out[:0] = [alert("FabricmonFabricSwitchUnresponsive", switch_parent("critical"), "critical",
                     FOR["switch_unresponsive"], "A switch is down or does not answer the fabric collector.",
                     SW + " is down (every link its peers have to it is down) or does not answer the collector"
                     " (the unresponsive check, OpenSM's rule: no answer in 5 of the last 7 sweeps). " + HIDES, base),
               alert("FabricmonFabricSwitchUnresponsive", switch_parent("warning"), "warning",
                     FOR["switch_unresponsive"], "A switch does not answer the fabric collector.",
                     SW + ": no answer in most of the collector's recent sweeps (the unresponsive check, OpenSM's"
                     " rule: 5 of the last 7), while its links are up: its management path drops queries, or it is"
                     " rebooting. Its ports keep their last known state and none is reported down for it. " + HIDES,
                     base)]
    out += [
        alert("FabricmonFabricSweepFailing",
              fsel_("fabricmon_source_up", ',source=~"sweep|discovery"') + " == 0\n"
              "  and on (instance, job, source) fabricmon_source_enabled == 1",
              "critical", FOR["fabric_sweep_failing"], "The fabric collector cannot read the fabric.",
              "{{ $labels.instance }}: the collector's {{ $labels.source }} produced no data in its last run:"
              " every switch port of this shard is unmonitored (fabricmon_source_errors_total says which kind).",
              base),
        alert("FabricmonFabricSweepStale",
              "time() - " + fsel_("fabricmon_source_last_success_timestamp_seconds", ',source="sweep"')
              + f" > {T['fabric_sweep_stale_seconds']}",
              "warning", FOR["fabric_sweep_stale"], "No complete fabric sweep for a long time.",
              "{{ $labels.instance }}: the last sweep that read every switch without an error is "
              "{{ $value | humanizeDuration }} old: some switches return no counters"
              " (fabricmon_source_errors_total{source=\"sweep\", kind=\"read\"}) or sweeps time out.", base),
        # a shard's replicas (the `replica` target label, docs/scale.md) are one collector: down when none answers
        alert("FabricmonFabricCollectorDown", f"max without (replica) (up{{{F}}}) == 0", "critical", FOR["fabric_down"],
              "The fabric collector cannot be scraped.",
              "{{ $labels.instance }} (job {{ $labels.job }}) has not answered scrapes for "
              f"{FOR['fabric_down']} (none of its replicas, where it has several): its shard of the fabric (switch"
              " ports, ECMP balance) is unmonitored.", base),
        # fewer shards report than the fabric is swept in (a shard's targets gone from service discovery, or never
        # scraped), or every shard of a fabric seen in the last day is gone: its switches go unwatched, and silent
        alert("FabricmonFabricShardAbsent", shard_absent(), "critical", FOR["fabric_down"],
              "A shard of the fabric reports nothing.",
              "{{ $value }} of {{ with printf \"max without (instance, replica) (max_over_time(fabricmon_fabric_shards"
              "{job='%s'}[1d]))\" $labels.job | query }}{{ . | first | value }}{{ else }}its{{ end }} shards of job"
              " {{ $labels.job }} report fabricmon_fabric_shard_info: the switches of the others are unmonitored (not"
              " down: their alerts are silent, never resolved). Shards seen in the last day and absent now:"
              " {{ range printf \"max without (instance, replica) (max_over_time(fabricmon_fabric_shard_info{job='%s'}"
              "[1d])) unless max without (instance, replica) (fabricmon_fabric_shard_info{job='%s'})\" $labels.job"
              " $labels.job | query | sortByLabel \"shard\" }}{{ .Labels.shard }} {{ end }}(of {{ $labels.job }})."
              " Start the shard's"
              " collectors, or put their targets back.", base),
        alert("FabricmonFabricCollectorAbsent", f"absent(up{{{F}}})", "critical", FOR["fabric_absent"],
              "No fabric collector is scraped at all.",
              f"Prometheus has no target matching {{{F}}}: no switch port, ECMP group or subnet manager is watched.",
              base),
        # ---- the design (docs/design.md) ----
        alert("FabricmonFabricDesignDiscrepancy", fsel_("fabricmon_fabric_check_status", ',check="design"') + " == 1",
              "warning", FOR["design"], "A switch's cabling differs from the fabric's design.",
              SW + ": the collector's design check: at this switch the live fabric differs from its design"
              " (fabric.sources.design): a cable missing, miswired, swapped or not in the design, a switch or host"
              " missing or not in it, or a cable below its designed width or speed. Each is one design finding"
              " naming both ends as designed and as found; the map (map_url) lists them at their ports"
              " (a replaced switch is no alert).", base),
        # ---- routing, the subnet manager ----
        alert("FabricmonRoutingImbalance", fsel_("fabricmon_fabric_routing_imbalanced") + " == 1", "warning",
              FOR["routing_imbalance"], "A switch's forwarding table routes unevenly over its up ports.",
              SW + ": its up ports carry unequal numbers of destination LIDs (most/least "
              + fabric_value_of(fsel("fabricmon_fabric_route_imbalance_ratio", port=False), 'printf "%.2f"')
              + "), so ECMP cannot balance whatever the traffic: check the subnet manager's routing engine"
                " (ftree/updn) and its log, then re-route.", base),
        alert("FabricmonNoMasterSubnetManager", fsel_("fabricmon_fabric_check_status", ',check="sm"') + " == 2",
              "critical", FOR["no_master_sm"], "No master subnet manager answers on the fabric.",
              "{{ $labels.instance }}: the collector's sm check: no subnet manager answers as master (sminfo),"
              " or more than one does: new links and nodes are not brought up, and a fabric change is not"
              " re-routed. Start or fail over opensm.", base),
        alert("FabricmonSubnetManagerUnknown",
              f"up{{{F}}} == 1\n  unless on (instance, job) fabricmon_fabric_sm_master_present",
              "warning", FOR["sm_unknown"], "The fabric collector does not report the subnet manager.",
              "{{ $labels.instance }}: the fabric collector is scraped but exports no"
              " fabricmon_fabric_sm_master_present: its subnet manager source is off or failing, so a lost master"
              " SM would go unnoticed.", base),
        alert("FabricmonSubnetManagerHung", fsel_("fabricmon_fabric_check_status", ',check="sm"') + " == 1",
              "warning", FOR["sm_hung"], "The master subnet manager looks hung.",
              "{{ $labels.instance }}: the collector's sm check is not OK: the master SM answers but its activity"
              " count no longer moves (or it keeps changing hands). Check the opensm log and its host.", base),
        # ---- the scheduler's topology (docs/slurm-topology.md): a warning, never a page ----
        alert("FabricmonSlurmTopologyDrift", fsel_("fabricmon_fabric_check_status", ',check="slurm_topology"')
              + " == 1", "warning", FOR["slurm_topology_drift"],
              "Slurm's topology file does not match the fabric's cabling.",
              "{{ $labels.instance }}: the collector's slurm_topology check: the topology.conf Slurm places jobs by"
              " (fabric.sources.slurm_topology.path) lists nodes under a switch they are not cabled to, misses nodes"
              " of the rail, or names switches the fabric lacks, so"
              " jobs Slurm believes compact span more leaves. The finding names the first drifts; `fabricmon"
              " topology slurm --check <file>` lists every line to change.", base),
    ]
    return out


def fabric_records() -> list[dict]:
    w = RECORD_WINDOW
    r = []

    def rec(name, expr, labels=None):
        r.append({"record": name, "expr": expr, **({"labels": labels} if labels else {})})

    for d in ("transmit", "receive"):
        rec(f"switch_port:fabricmon_fabric_port_{d}_bytes:rate{w}",
            f"rate(fabricmon_fabric_port_{d}_bytes_total[{w}])")
        rec(f"switch_port:fabricmon_fabric_port_{d}_utilisation:ratio_rate{w}",
            f"switch_port:fabricmon_fabric_port_{d}_bytes:rate{w}\n"
            f"  / on ({FPORT}) (fabricmon_fabric_port_rate_bytes_per_second > 0)")
    # every up port's transmit utilisation with its switch's name and level: the per-leaf panels group it
    rec(f"switch_port:fabricmon_fabric_uplink_utilisation:ratio_rate{w}",
        f"switch_port:fabricmon_fabric_port_transmit_utilisation:ratio_rate{w}\n"
        f'  * on ({FPORT}) group_left () fabricmon_fabric_link_info{{role="up"}}\n'
        "  * on (instance, job, switch_guid) group_left (switch, level) fabricmon_fabric_switch_info")
    rec(f"switch:fabricmon_fabric_uplink_utilisation:max_ratio_rate{w}",
        f"max by (instance, job, switch_guid, switch, level) (switch_port:fabricmon_fabric_uplink_utilisation:ratio_rate{w})")
    rec(f"switch:fabricmon_fabric_uplink_utilisation:avg_ratio_rate{w}",
        f"avg by (instance, job, switch_guid, switch, level) (switch_port:fabricmon_fabric_uplink_utilisation:ratio_rate{w})")
    # one record per error counter with a `counter` label, then per port and per switch (hot spots)
    for c in ("symbol_errors", "link_error_recovery", "link_downed", "receive_errors",
              "receive_remote_physical_errors", "transmit_discards", "local_link_integrity_errors",
              "excessive_buffer_overrun_errors"):
        # one record name, told apart by a static `counter` label (promtool's duplicate-rule lint: the same
        # name with the same static labels, as label_replace in the expression had, is a duplicate)
        rec(f"switch_port_counter:fabricmon_fabric_port_errors:rate{w}",
            f"rate(fabricmon_fabric_port_{c}_total[{w}])", {"counter": c})
    rec(f"switch_port:fabricmon_fabric_port_errors:rate{w}",
        f"sum by ({FPORT}) (switch_port_counter:fabricmon_fabric_port_errors:rate{w})")
    rec(f"switch:fabricmon_fabric_port_errors:rate{w}",
        f"sum by (instance, job, switch_guid) (switch_port:fabricmon_fabric_port_errors:rate{w})")
    rec(f"switch_port:fabricmon_fabric_port_transmit_wait:rate{w}",
        f"rate(fabricmon_fabric_port_transmit_wait_total[{w}])")
    return r


def records() -> list[dict]:
    w, lw = RECORD_WINDOW, RECORD_LONG_WINDOW
    r = []

    def rec(name, expr):
        r.append({"record": name, "expr": expr})

    for d in ("transmit", "receive"):
        rec(f"instance_device_port:fabricmon_ib_port_{d}_bytes:rate{w}",
            f"rate(fabricmon_ib_port_{d}_bytes_total[{w}])")
        rec(f"instance_device_port:fabricmon_ib_port_{d}_utilisation:ratio_rate{w}",
            f"instance_device_port:fabricmon_ib_port_{d}_bytes:rate{w}\n"
            f"  / on ({PORT}) (fabricmon_ib_port_rate_bytes_per_second > 0)")
    for c in ("symbol_errors", "receive_errors", "receive_remote_physical_errors", "transmit_discards",
              "link_error_recovery", "transmit_wait"):
        rec(f"instance_device_port:fabricmon_ib_port_{c}:rate{w}", f"rate(fabricmon_ib_port_{c}_total[{w}])")
    rec(f"instance_device_port:fabricmon_ib_port_link_downed:increase{lw}",
        f"increase(fabricmon_ib_port_link_downed_total[{lw}])")
    rec(f"instance_device_netdev:fabricmon_roce_pause_frames:rate{w}",
        f"rate(fabricmon_roce_pause_frames_total[{w}])")
    rec(f"instance_device_netdev:fabricmon_roce_pause_duration:ratio_rate{w}",
        f"rate(fabricmon_roce_pause_duration_seconds_total[{w}])")
    rec(f"instance_device_netdev:fabricmon_netdev_errors:rate{w}",
        f"rate(fabricmon_netdev_errors_total[{w}])")
    rec(f"instance_device_port:fabricmon_roce_loss_signals:rate{w}",
        f"sum by ({PORT}) (rate(fabricmon_ib_port_hw_counters_total{{counter=~\"{RoCE_LOSS_COUNTERS}\"}}[{w}]))")
    return r


# ---- optics (docs/optics.md): verdict alerts on the daemons' and collectors' optics checks ----------
# (thresholds, lane spread, dimming are fabricmon.yml's checks.optics and the modules' own: never re-judged here)
# name, check, severities, summary, description (after "<where>: ")
OPTICS_CHECKS = (
    ("FabricmonOpticsThreshold", "optics_thresholds", "critical warning",
     "A transceiver reading is beyond its module's threshold.",
     "a transceiver reading (receive or transmit power, laser bias, temperature or voltage) is beyond the"
     " module's own {level} threshold (the daemon's optics_thresholds check); weakest lane receives "),
    ("FabricmonOpticsLaneImbalance", "optics_lane_imbalance", "warning",
     "One transceiver lane receives far less light than its siblings.",
     "one lane receives checks.optics.lane_spread_db or more below its sibling lanes (a dirty or damaged"
     " connector or fibre); weakest lane receives "),
    ("FabricmonOpticsDimming", "optics_dimming", "warning",
     "A transceiver's received light fell below its learned baseline.",
     "received light fell checks.optics.dimming_db or more below the lane's learned baseline, before any"
     " threshold; weakest lane receives "),
    ("FabricmonOpticsNoLight", "optics_no_light", "warning",
     "An up port's transceiver reports no light.",
     "a lane reports no light while the port is up, which is impossible: the module's diagnostics or the"
     " port mapping are wrong; weakest lane receives "),
)
OPTICS_FABRIC_CHECKS = "|".join(c for _, c, *_ in OPTICS_CHECKS)


def optics_node_alerts(base: str) -> list[dict]:
    """The node daemon's optics verdicts (ethtool -m), per port, with the switch port it is cabled to."""
    out = []
    weakest = value_of("min(" + port_sel("fabricmon_optics_rx_power_dbm") + ")", 'printf "%.2f"') + " dBm"
    for name, check, sevs, summary, desc in OPTICS_CHECKS:
        for sev in sevs.split():
            e = f'fabricmon_check_status{{{N},check="{check}"}} == {STATUS[sev]}'
            out.append(alert(name, with_peer(e), sev, FOR[f"optics_{sev}"], summary,
                             f"{WHERE}: " + desc.replace("{level}", "alarm" if sev == "critical" else "warning")
                             + f"{weakest} (the finding names the lane, the reading and the threshold).", base))
    return out


def optics_fabric_alerts(base: str) -> list[dict]:
    """The fabric collector's optics verdicts (ENTITY-SENSOR-MIB), per switch port, with its remote end."""
    return [alert("FabricmonFabricOptics", port_finding(OPTICS_FABRIC_CHECKS, st), sev, FOR[f"optics_{sev}"],
                  "A switch's transceiver is beyond its thresholds, dimming or unbalanced.",
                  SWPORT + REMOTE + ": the collector's {{ $labels.check }} check is " + sev.upper()
                  + " on this port's transceiver; its finding (the map, map_url) names the lane, the reading,"
                  " the threshold and the LLDP neighbour at the other end.", base)
            for sev, st in STATUS.items()]


# ---- switch vitals (docs/vitals.md): the collector's switch_vitals verdict, per switch -------------------
def vitals_alerts(base: str) -> list[dict]:
    """A switch's failed fan or power supply, or a sensor beyond the switch's own threshold."""
    out = []
    for sev, st in STATUS.items():
        expr = ('max without (device) (label_replace(\n    fabricmon_check_status{%s,check="switch_vitals"} == %d,\n'
                '    "switch_guid", "$1", "device", "(.+)"\n  ))\n  * on (instance, job, switch_guid) group_left (switch)'
                ' fabricmon_fabric_switch_info' % (FABRIC_SELECTOR, st))
        out.append(alert("FabricmonFabricSwitchVitals", expr, sev, FOR["vitals"],
                         "A switch's fan, power supply or temperature is failing.",
                         SW + ": " + fabric_value_of("count(" + fsel("fabricmon_fabric_switch_vital_status", "",
                                                                      port=False) + " >= %d)" % st, INT)
                         + " part(s) at " + sev + " (the collector's switch_vitals check): a fan or power supply"
                           " the switch reports failed, or a temperature beyond the switch's own threshold; its"
                           " finding (the map, map_url) names each part and its state.", base))
    return out


# ---- which end of a host link to blame (docs/ber.md#which-end) ----------------------------------------------
# The node daemon reads the host port (fabricmon_ib_port_*, its CA's node_guid in fabricmon_ib_device_info), the
# fabric collector the switch port (fabricmon_fabric_port_*) and what it is cabled to (fabricmon_fabric_link_info:
# role host, remote_guid the CA's node GUID, remote_port its port): both ends' receive and symbol errors, keyed by
# the host port (node_guid, port), then one verdict per link: errors received only at the switch point at the
# host's transmitter or module, only at the host at the switch port's, at both ends at the cable.
HOST_END = "node_guid_port:fabricmon_link_host_receive_errors:increase1h"
SWITCH_END = "node_guid_port:fabricmon_link_switch_receive_errors:increase1h"
BLAME = "node_guid_port:fabricmon_link_error_blame:info"
BLAMES = (("host_tx", "the host's transmitter or module"), ("switch_tx", "the switch port's transmitter or module"),
          ("cable", "the cable"))


def blame_records() -> list[dict]:
    w, t = THRESHOLDS["blame_window"], THRESHOLDS["blame_errors"]
    host = (f"sum by (instance, device, port, node_guid) (\n"
            f"  (\n    sum by (instance, job, device, port) (increase(fabricmon_ib_port_receive_errors_total{{{N}}}[{w}]))\n"
            f"    + sum by (instance, job, device, port) (increase(fabricmon_ib_port_symbol_errors_total{{{N}}}[{w}]))\n"
            f"  )\n  * on (instance, job, device) group_left (node_guid)\n"
            f'  label_replace(fabricmon_ib_device_info{{{N}}}, "node_guid", "$1", "node_guid", "(?:0x)?(.+)")\n)')
    sw = (f'sum by (switch_guid, switch, switch_port, remote_name, node_guid, port) (\n'
          f'  label_replace(label_replace(label_replace(\n'
          f"    (\n      sum by (instance, job, switch_guid, port) (increase(fabricmon_fabric_port_receive_errors_total{{{F_}}}[{w}]))\n"
          f"      + sum by (instance, job, switch_guid, port) (increase(fabricmon_fabric_port_symbol_errors_total{{{F_}}}[{w}]))\n"
          f"    )\n    * on (instance, job, switch_guid, port) group_left (remote_guid, remote_port, remote_name)\n"
          f'    fabricmon_fabric_link_info{{{F_},role="host"}}\n'
          f"    * on (instance, job, switch_guid) group_left (switch) fabricmon_fabric_switch_info{{{F_}}},\n"
          f'  "switch_port", "$1", "port", "(.+)"), "port", "$1", "remote_port", "(.+)"), "node_guid", "$1", "remote_guid", "(.+)")\n)')
    out = [{"record": HOST_END, "expr": host}, {"record": SWITCH_END, "expr": sw}]
    cond = {"host_tx": f"({SWITCH_END} >= {t}) and on (node_guid, port) ({HOST_END} < {t})",
            "switch_tx": f"({SWITCH_END} < {t}) and on (node_guid, port) ({HOST_END} >= {t})",
            "cable": f"({SWITCH_END} >= {t}) and on (node_guid, port) ({HOST_END} >= {t})"}
    for blame, _ in BLAMES:
        out.append({"record": BLAME, "expr": (
            f"(({cond[blame]}) * 0 + 1)\n  * on (node_guid, port) group_left (instance, device) ({HOST_END} * 0 + 1)"),
            "labels": {"blame": blame}})
    return out


def blame_alerts(base: str) -> list[dict]:
    what = "".join(f'{{{{ if eq $labels.blame "{b}" }}}}{text}{{{{ end }}}}' for b, text in BLAMES)
    return [alert("FabricmonLinkErrorsBlame", f"{BLAME} == 1", "warning", FOR["blame"],
                  "A host link errs: which part to replace.",
                  "{{ $labels.instance }} {{ $labels.device }} port {{ $labels.port }} (node GUID {{ $labels.node_guid }}),"
                  " cabled to {{ $labels.switch }} port {{ $labels.switch_port }}: receive and symbol errors over"
                  f" the last {THRESHOLDS['blame_window']} ({THRESHOLDS['blame_errors']} or more counts as erring)"
                  " {{ if eq $labels.blame \"cable\" }}at both ends{{ else if eq $labels.blame \"host_tx\" }}only at the"
                  " switch port{{ else }}only at the host{{ end }}: replace " + what + ".", base)]


# ---- NCCL: a slow job on a flagged path (docs/nccl.md#the-alert) ----------------------------------
# The collector's verdicts that make a link "erroring or degraded" (its port findings, fabric.yml checks.*)
NCCL_PATH_CHECKS = "symbol_errors|receive_errors|link_flap|link_error_recovery|link_integrity|transmit_discards"
# The node's slow path, with the cabled switch port as the collector names it: its link table's host
# link whose remote end is the NIC (remote_guid without the node's 0x, remote_port the HCA port).
NCCL_SLOW_AT = (
    "(fabricmon_nccl_slow{%s} == 1)\n"
    "    * on (node_guid, port) group_left (switch_guid, switch_port_fabric, fabric_instance)\n"
    '    label_replace(label_replace(label_replace(label_replace(fabricmon_fabric_link_info{%s,role="host"},\n'
    '      "node_guid", "0x$1", "remote_guid", "(.+)"), "switch_port_fabric", "$1", "port", "(.+)"),\n'
    '      "port", "$1", "remote_port", "(.+)"), "fabric_instance", "$1", "instance", "(.+)")')


def nccl_slow_on_flagged_path() -> str:
    """A slow NCCL path whose cabled switch port carries a fabric verdict (errors; width or speed below its
    class), or whose leaf does (an imbalanced ECMP group, a skewed forwarding table, an erroring uplink)."""
    N, F = SELECTOR, FABRIC_SELECTOR
    slow = NCCL_SLOW_AT % (N, F)
    port_verdict = (
        f'label_replace(label_replace(fabricmon_check_status{{{F},check=~"{NCCL_PATH_CHECKS}"}} >= 1,\n'
        '      "switch_guid", "$1", "device", "(.+)"), "switch_port_fabric", "$1", "port", "(.+)")\n'
        f'    or label_replace(fabricmon_fabric_port_degraded{{{F},reason=~"width|speed"}} == 1,\n'
        '      "switch_port_fabric", "$1", "port", "(.+)")')
    leaf_verdict = (
        f"fabricmon_ecmp_imbalanced{{{F}}} == 1\n    or fabricmon_fabric_routing_imbalanced{{{F}}} == 1\n"
        f'    or (label_replace(fabricmon_check_status{{{F},check=~"{NCCL_PATH_CHECKS}"}} >= 1,'
        ' "switch_guid", "$1", "device", "(.+)")\n'
        f'      and on (switch_guid, port) fabricmon_fabric_link_info{{{F},role="up"}})')
    return (f"(\n  {slow}\n) and on (switch_guid, switch_port_fabric) (\n    {port_verdict}\n  )\n"
            f"or\n(\n  {slow}\n) and on (switch_guid) (\n    {leaf_verdict}\n  )")


def _nccl_value(metric: str, fmt: str) -> str:
    sel = ("{instance='%s',uuid='%s',job_id='%s',comm='%s',operation='%s',message_size='%s'}")
    return ('{{ with printf "' + metric + sel + '" $labels.instance $labels.uuid $labels.job_id $labels.comm'
            ' $labels.operation $labels.message_size | query }}{{ . | first | value | ' + fmt
            + ' }}{{ else }}unknown{{ end }}')


# The fabric verdicts on the path, as the description lists them (the switch GUID selects the
# collector's series: no node daemon exports a switch GUID as device).
NCCL_VERDICTS = (
    "{{ with printf \"fabricmon_check_status{device='%s',port='%s'} >= 1\" $labels.switch_guid"
    " $labels.switch_port_fabric | query }}{{ range . }}{{ .Labels.check }} on the cable's switch port; {{ end }}{{ end }}"
    "{{ with printf \"fabricmon_fabric_port_degraded{switch_guid='%s',port='%s',reason=~'width|speed'} == 1\""
    " $labels.switch_guid $labels.switch_port_fabric | query }}{{ range . }}the cable runs below its class"
    " ({{ .Labels.reason }}); {{ end }}{{ end }}"
    "{{ with printf \"fabricmon_ecmp_imbalanced{switch_guid='%s'} == 1\" $labels.switch_guid | query }}"
    "{{ range . }}the leaf's {{ .Labels.direction }} ECMP group is imbalanced; {{ end }}{{ end }}"
    "{{ with printf \"fabricmon_fabric_routing_imbalanced{switch_guid='%s'} == 1\" $labels.switch_guid | query }}"
    "the leaf's forwarding table routes unevenly over its uplinks; {{ end }}"
    "{{ with printf \"(fabricmon_check_status{device='%s',check=~'" + NCCL_PATH_CHECKS + "'} >= 1) unless on (port)"
    " label_replace(vector(1), 'port', '%s', '', '')\" $labels.switch_guid $labels.switch_port_fabric | query }}"
    "{{ range . }}{{ .Labels.check }} on the leaf's port {{ .Labels.port }}; {{ end }}{{ end }}")


def nccl_alerts(base: str, scheme: str) -> list[dict]:
    """The slow-job alert, with map_url: the map of the collector that flags the path (fabric_instance),
    opened on the cabled switch."""
    rule = alert(
        "FabricmonNcclSlowOnFlaggedPath", nccl_slow_on_flagged_path(), "critical", FOR["nccl_slow_path"],
        "A job's NCCL collectives run slow over a link the fabric collector flags.",
        "Slurm job {{ $labels.job_id }} runs slow on {{ $labels.instance }} GPU {{ $labels.gpu }}"
        " ({{ $labels.operation }} {{ $labels.message_size }}, communicator \"{{ $labels.comm }}\"): bus bandwidth "
        + _nccl_value("fabricmon_nccl_bus_bandwidth_gbs", 'printf "%.1f"') + " GB/s, "
        + _nccl_value("fabricmon_nccl_baseline_ratio", "humanizePercentage") + " of its baseline and "
        + _nccl_value("fabricmon_nccl_line_rate_ratio", "humanizePercentage") + " of the line rate."
        " Its traffic leaves by {{ $labels.device }} port {{ $labels.port }}, cabled to {{ $labels.switch }}"
        " ({{ $labels.switch_guid }}) port {{ $labels.switch_port_fabric }}, where the fabric collector finds: "
        + NCCL_VERDICTS + "repair that link (the fabric alert on it has the runbook), not the job.", base)
    rule["annotations"]["map_url"] = map_url(scheme).replace("$labels.instance", "$labels.fabric_instance")
    peers = ("{{ with printf \"fabricmon_nccl_ras_missing_ranks{instance='%s',comm='%s'}\" $labels.instance"
             " (reReplaceAll \"^comm:\" \"\" $labels.device) | query }}{{ range $i, $s := sortByLabel \"peer_host\" . }}"
             "{{ if $i }}, {{ end }}{{ $s.Value | printf \"%.0f\" }} on {{ $s.Labels.peer_host }}"
             " ({{ $s.Labels.state }}){{ end }}{{ else }}unknown{{ end }}")
    ras = alert("FabricmonNcclPeerMissing", f'fabricmon_check_status{{{SELECTOR},check="nccl_ras_peer"}} == 1', "warning",
                FOR["nccl_ras_peer"], "NCCL's RAS reports ranks of a communicator dead or unresponsive.",
                "{{ $labels.instance }}: NCCL communicator {{ $labels.device }} is missing ranks: " + peers
                + ". The job is hung or dying there; `fabricmon check -v` on this node names each rank's pid and"
                " GPU.", base)
    off = ("{{ with printf \"fabricmon_nccl_ras_ranks_off_count{instance='%s',comm='%s'}\" $labels.instance"
           " (reReplaceAll \"^comm:\" \"\" $labels.device) | query }}{{ range $i, $s := sortByLabel \"collective\" . }}"
           "{{ if $i }}, {{ end }}{{ $s.Value | printf \"%.0f\" }} off the common {{ $s.Labels.collective }} count"
           "{{ end }}{{ else }}unknown{{ end }}")
    stalled = alert("FabricmonNcclRanksStalled", f'fabricmon_check_status{{{SELECTOR},check="nccl_ras_stalled"}} == 1',
                    "warning", FOR["nccl_ras_stalled"],
                    "NCCL's RAS reports ranks of a communicator stopped at different operation counts.",
                    "{{ $labels.instance }}: NCCL communicator {{ $labels.device }} has ranks stuck at different "
                    "operation counts (" + off + "), the same in consecutive RAS answers: the job is hung at that "
                    "operation. `fabricmon check -v` on this node names the odd ranks' hosts, pids and GPUs.", base)
    return [rule, ras, stalled]


# ---- remediation (docs/remediation.md): the node daemons' drains and the collectors' isolations ------------
def _rem_value(metric: str) -> str:
    return ('{{ with printf "' + metric + "{instance='%s',action='%s'}\" $labels.instance $labels.action | query }}"
            "{{ . | first | value | printf \"%.0f\" }}{{ else }}?{{ end }}")


def remediation_alerts(base: str) -> list[dict]:
    """Remediation's own alerts, on the node daemons and the collectors alike (each says its action)."""
    both = "(%s{" + N + "} or %s{" + F_ + "})"
    return [
        alert("FabricmonRemediationBreakerTripped",
              both.replace("%s", "fabricmon_remediation_breaker_tripped") + " == 1", "critical",
              FOR["remediation_breaker"], "fabricmon's remediation circuit breaker tripped: it puts nothing more out of "
              "service.",
              "{{ $labels.instance }}: the {{ $labels.action }} circuit breaker refused to act: "
              + _rem_value("fabricmon_remediation_breaker_out_of_service") + " already out of service, the cap is "
              + _rem_value("fabricmon_remediation_breaker_cap") + ". More failed at once than the cap allows, so the"
              " rest were left in service and reported: look for their common cause (a switch, a power feed, a"
              " firmware rollout) before anything else; `fabricmon actions` on that host lists what was done and"
              " what was refused.", base),
        alert("FabricmonRemediationActionFailing",
              both.replace("%s", "fabricmon_remediation_failing") + " > 0", "warning", FOR["remediation_failing"],
              "A remediation step keeps failing (retried with backoff).",
              "{{ $labels.instance }}: {{ $value | printf \"%.0f\" }} {{ $labels.action }} action(s) could not be"
              f" carried out for {FOR['remediation_failing']} (an SMP Set unanswered, scontrol failing or timing"
              " out): the daemon retries with backoff and never assumes one done; `fabricmon actions` names each"
              " with its last error.", base),
    ]


def build(base: str | None = None, map_scheme: str = "http") -> str:
    base = base or DEFAULT_RUNBOOK_BASE.replace("SCHEME", map_scheme)
    # the port-down alerts read the state jobs too: their own group, evaluated every STATE_INTERVAL
    fast = ("FabricmonPortDown", "FabricmonFabricPortDown")
    node, fabric = node_alerts(base), with_map_urls(fabric_alerts(base), map_scheme)
    doc = {"groups": [
        {"name": "fabricmon.rules", "rules": records()},
        {"name": "fabricmon.state.alerts", "interval": STATE_INTERVAL,
         "rules": [r for r in node + fabric if r["alert"] in fast]},
        {"name": "fabricmon.node.alerts", "rules": [r for r in node if r["alert"] not in fast]},
        {"name": "fabricmon.self.alerts", "rules": self_alerts(base)},
        {"name": "fabricmon.fabric.rules", "rules": fabric_records()},
        {"name": "fabricmon.fabric.alerts", "rules": [r for r in fabric if r["alert"] not in fast]},
        {"name": "fabricmon.optics.alerts",
         "rules": optics_node_alerts(base) + with_map_urls(optics_fabric_alerts(base), map_scheme)},
        {"name": "fabricmon.vitals.alerts", "rules": with_map_urls(vitals_alerts(base), map_scheme)},
        {"name": "fabricmon.blame.rules", "rules": blame_records()},
        {"name": "fabricmon.blame.alerts", "rules": blame_alerts(base)},
        {"name": "fabricmon.nccl.alerts", "rules": nccl_alerts(base, map_scheme)},
        {"name": "fabricmon.remediation.alerts", "rules": remediation_alerts(base)},
    ]}

    class Dumper(yaml.SafeDumper):
        pass

    def text(dumper, data):
        style = "|" if "\n" in data else None
        return dumper.represent_scalar("tag:yaml.org,2002:str", data, style=style)

    Dumper.add_representer(str, text)
    head = ("# Generated by prometheus/build_rules.py: edit that file (its THRESHOLDS and FOR blocks), then run\n"
            "#   python prometheus/build_rules.py\n"
            "# Load with `rule_files: [/etc/prometheus/rules/fabricmon.rules.yml]`; scrape job names: "
            f"{JOB} (node daemons), {FABRIC_JOB} (fabric collectors), and for the port-down alerts' fast path "
            f"{STATE_JOB}, {FABRIC_STATE_JOB} (the same targets, collect[]=state).\n")
    return head + yaml.dump(doc, Dumper=Dumper, sort_keys=False, width=1_000_000, allow_unicode=True)


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--check", action="store_true", help="exit 1 if the committed file differs")
    p.add_argument("--runbook-base", default=None,
                   help="URL of the runbooks for runbook_url (default: the daemon's own /runbooks page)")
    p.add_argument("--map-scheme", default="http", choices=("http", "https"),
                   help="scheme of the fabric collectors' pages in map_url (https with server.tls)")
    p.add_argument("--output", default=str(OUT))
    a = p.parse_args()
    text = build(a.runbook_base, a.map_scheme)
    if a.check:
        same = Path(a.output).read_text() == text and RUNBOOKS_COPY.read_text() == RUNBOOKS.read_text()
        print("up to date" if same else f"{a.output} or {RUNBOOKS_COPY} is stale: run python prometheus/build_rules.py")
        return 0 if same else 1
    Path(a.output).write_text(text)
    RUNBOOKS_COPY.write_text(RUNBOOKS.read_text())
    return 0


if __name__ == "__main__":
    sys.exit(main())
