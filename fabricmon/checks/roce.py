"""RoCE lossless health: PFC, trust, MTU (configuration) and pauses, pause storms, loss and
DCQCN (rates from counter deltas).

Evaluated per RoCE netdev (an RDMA device port whose link_layer is Ethernet); an InfiniBand
port is never judged here. Every check yields one Finding per netdev, OK included.

Counter samples live in the collector's CounterHistory under the port's key, so that they
survive `fabricmon check` runs with a state file and are pruned with the port:
  (device, port, "ethtool:<netdev>:<ethtool name>")  e.g. "ethtool:eth2:rx_prio3_pause"
  (device, port, "hw:<hw_counters name>")             e.g. "hw:rp_cnp_ignored"
A counter that goes down (driver reload, 32-bit wrap of rx_out_of_buffer or an hw_counter)
counts as a reset: that interval contributes 0, never a negative rate.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from fabricmon.checks import CRITICAL, OK, WARNING, Finding
from fabricmon.model.history import CounterHistory
from fabricmon.checks.shape import Outcome, outcome_of, report
from fabricmon.model.roce import HW_LOSS, ROCE_HEADER_BYTES, RoceTarget, RoceView, eth_key, ethtool_counters, hw_key
from fabricmon.schema import ConfigError, Context, Schema, choice, custom, listing, number

if TYPE_CHECKING:
    from fabricmon.checks.node_inputs import NodeInputs

# --- settings: the `roce` section (fabricmon.schema), composed by fabricmon/config/__init__.py -------------

ROCE_MTUS = (256, 512, 1024, 2048, 4096)


@dataclass(frozen=True, slots=True)
class RoceConfig:
    """RoCE lossless expectations (docs/roce-gpudirect.md)."""
    priority: int = 3                              # the priority that carries RDMA traffic
    lossless_priorities: tuple[int, ...] = (3,)    # PFC must be on exactly for these
    trust: str | None = "dscp"                     # expected trust state; None: not checked
    mtu: int = 4096                                # expected active RoCE (IB) MTU in bytes
    pause_window: float = 300.0                    # pause rates/fractions are averaged over this
    pause_rate_warning: float | None = 1000.0      # pause frames/s (one priority, one direction)
    pause_rate_critical: float | None = None
    pause_fraction_warning: float | None = 0.1     # fraction of time paused
    pause_fraction_critical: float | None = 0.5
    storm_window: float = 3600.0                   # a pause-storm event within it is a finding
    drop_window: float = 3600.0                    # loss on a lossless priority
    drop_warning: float | None = 1.0
    drop_critical: float | None = None
    cnp_window: float = 3600.0                     # rp_cnp_ignored rising: DCQCN off
    cnp_ignored_warning: float | None = 1.0

    def windows(self) -> tuple[float, ...]:
        return (self.pause_window, self.storm_window, self.drop_window, self.cnp_window)


def _priority(value: Any, key: str, ctx: Context | None = None) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or not 0 <= value <= 7:
        raise ConfigError(key, f"expected a priority 0-7, got {value!r}")
    return value


def _roce_check(values: dict[str, Any], m: Mapping[str, Any], key: str, ctx: Context) -> None:
    prio = values["priority"]
    if "lossless_priorities" not in m:
        values["lossless_priorities"] = (prio,)
    lossless = tuple(sorted(set(values["lossless_priorities"])))
    if lossless and prio not in lossless:
        raise ConfigError(f"{key}.lossless_priorities",
                          f"must include roce.priority ({prio}), or be [] for lossy RoCE; "
                          f"got {list(m['lossless_priorities'])!r}")
    values["lossless_priorities"] = lossless


_D_ROCE = RoceConfig()
ROCE: Schema[RoceConfig] = Schema(fields=(
    custom("priority", _D_ROCE.priority, "the priority that carries RDMA traffic", _priority, "priority 0-7"),
    listing("lossless_priorities", _D_ROCE.lossless_priorities, "PFC must be on exactly for these; `[]`: lossy RoCE",
            _priority,
            "priorities 0-7", default_doc="`[roce.priority]`"),
    choice("trust", _D_ROCE.trust, "expected trust state; `null`: not checked", ("dscp", "pcp", None),
           reason="expected dscp, pcp or null (not checked)"),
    choice("mtu", _D_ROCE.mtu, "expected active RoCE (IB) MTU in bytes, not the netdev MTU", ROCE_MTUS,
           reason=f"expected the RoCE (IB) MTU, one of {', '.join(map(str, ROCE_MTUS))} (not the netdev MTU)"),
    number("pause_window", _D_ROCE.pause_window, "seconds pause rates and fractions are averaged over", lo=1),
    number("pause_rate_warning", _D_ROCE.pause_rate_warning, "pause frames/s (one priority, one direction)",
           lo=0, null=True),
    number("pause_rate_critical", _D_ROCE.pause_rate_critical, "pause frames/s", lo=0, null=True),
    number("pause_fraction_warning", _D_ROCE.pause_fraction_warning, "fraction of time paused", lo=0, hi=1,
           null=True, hi_reason="a fraction of time must be"),
    number("pause_fraction_critical", _D_ROCE.pause_fraction_critical, "fraction of time paused", lo=0, hi=1,
           null=True, hi_reason="a fraction of time must be"),
    number("storm_window", _D_ROCE.storm_window, "seconds: a pause-storm event within it is a finding", lo=1),
    number("drop_window", _D_ROCE.drop_window, "seconds: loss on a lossless priority within it", lo=1),
    number("drop_warning", _D_ROCE.drop_warning, "drops within the window", lo=0, null=True),
    number("drop_critical", _D_ROCE.drop_critical, "drops within the window", lo=0, null=True),
    number("cnp_window", _D_ROCE.cnp_window, "seconds: `rp_cnp_ignored` rising within it (DCQCN off)", lo=1),
    number("cnp_ignored_warning", _D_ROCE.cnp_ignored_warning, "ignored CNPs within the window", lo=0, null=True),
), check=_roce_check, build=lambda v, key, ctx: RoceConfig(**v),
   doc="RoCE lossless expectations ([roce-gpudirect.md](roce-gpudirect.md#configuration)).")


PFC = "roce_pfc"
PFC_LOSSY = "roce_pfc_lossy"
TRUST = "roce_trust"
MTU = "roce_mtu"
PAUSE_RATE = "roce_pause_rate"
PAUSE_DURATION = "roce_pause_duration"
PAUSE_STORM = "roce_pause_storm"
DROPS = "roce_lossless_drops"
CNP_IGNORED = "roce_cnp_ignored"
CHECKS = (PFC, PFC_LOSSY, TRUST, MTU, PAUSE_RATE, PAUSE_DURATION, PAUSE_STORM, DROPS, CNP_IGNORED)




def _fmt_window(seconds: float) -> str:
    if seconds >= 3600 and seconds % 3600 == 0:
        return f"{int(seconds // 3600)}h"
    if seconds >= 60:
        return f"{seconds / 60:.0f}m"
    return f"{seconds:.0f}s"


def _pfc_vector(lossless: tuple[int, ...]) -> str:
    return ",".join("1" if p in lossless else "0" for p in range(8))


def check_pfc(v: RoceView, rc: RoceConfig) -> Finding | None:
    """None (here and in every check below): not judged, no status (no fresh reading of this netdev, a
    rate without its second sample, or a setting that turns the judgement off): never an OK."""
    t = v.target
    if not rc.lossless_priorities:
        return None         # lossy RoCE configured (roce.lossless_priorities: []): PFC is not required
    if v.qos is None:
        return None
    if not v.qos.dcb_supported or v.qos.qos is None:
        return Finding(PFC, t.device, t.port, WARNING,
                       f"{t.label()}: the netdev has no DCB support (mlnx_qos: ETS features are not "
                       f"supported), so PFC cannot protect priority {rc.priority} and RoCE on it is lossy: "
                       f"use a port/function with DCB, or set roce.lossless_priorities: [] if lossy RoCE "
                       f"is intended")
    off = [p for p in rc.lossless_priorities if not v.qos.qos.pfc_enabled[p]]
    if off:
        which = ",".join(map(str, off))
        return Finding(PFC, t.device, t.port, CRITICAL,
                       f"{t.label()}: PFC is disabled on lossless priority {which} (RDMA priority "
                       f"{rc.priority}): RoCE packets are dropped instead of paused under congestion "
                       f"(retransmits, huge all-reduce variance); enable it on the host "
                       f"(`mlnx_qos -i {t.netdev} --pfc {_pfc_vector(rc.lossless_priorities)}`) and on the "
                       f"switch port")
    on = ",".join(map(str, rc.lossless_priorities))
    return Finding(PFC, t.device, t.port, OK, f"{t.label()}: PFC enabled on lossless priority {on}")


def check_pfc_lossy(v: RoceView, rc: RoceConfig) -> Finding | None:
    t = v.target
    if v.qos is None:
        return None
    if v.qos.qos is None:
        return Finding(PFC_LOSSY, t.device, t.port, OK, f"{t.label()}: no DCB, no PFC on any priority")
    extra = [p for p in v.qos.qos.pfc_priorities() if p not in rc.lossless_priorities]
    if extra:
        return Finding(PFC_LOSSY, t.device, t.port, WARNING,
                       f"{t.label()}: PFC is enabled on priority {','.join(map(str, extra))}, which should "
                       f"be lossy (roce.lossless_priorities: {list(rc.lossless_priorities)}): pauses there "
                       f"spread congestion to other traffic and risk head-of-line blocking and PFC deadlock; "
                       f"set `mlnx_qos -i {t.netdev} --pfc {_pfc_vector(rc.lossless_priorities)}` and match "
                       f"the switch")
    return Finding(PFC_LOSSY, t.device, t.port, OK, f"{t.label()}: no PFC on lossy priorities")


def check_trust(v: RoceView, rc: RoceConfig) -> Finding | None:
    t = v.target
    if rc.trust is None or v.qos is None:
        return None         # roce.trust: null turns it off; or no mlnx_qos reading of this netdev
    q = v.qos.qos
    if q is None:
        return None         # no DCB: there is no trust state to judge (roce_pfc says the netdev has no DCB)
    if q.trust != rc.trust:
        how = ("DSCP-marked RDMA traffic is classified by VLAN PCP instead (priority 0 when untagged)"
               if rc.trust == "dscp" else "traffic is classified by DSCP instead of the VLAN PCP")
        return Finding(TRUST, t.device, t.port, WARNING,
                       f"{t.label()}: priority trust state is {q.trust or 'unknown'}, expected {rc.trust}: "
                       f"{how}, so it misses lossless priority {rc.priority}; set "
                       f"`mlnx_qos -i {t.netdev} --trust {rc.trust}` (or set roce.trust)")
    if q.trust == "dscp" and q.dscp2prio and rc.priority not in q.dscp2prio.values():
        return Finding(TRUST, t.device, t.port, WARNING,
                       f"{t.label()}: trust is dscp but no DSCP value maps to RDMA priority {rc.priority}: "
                       f"map the RoCE DSCP (commonly 26) to it: `mlnx_qos -i {t.netdev} --dscp2prio set,26,"
                       f"{rc.priority}`")
    return Finding(TRUST, t.device, t.port, OK, f"{t.label()}: trust state {q.trust}")


def check_mtu(v: RoceView, rc: RoceConfig) -> Finding | None:
    t, want = v.target, rc.mtu
    if v.netdev is None or v.netdev.mtu is None:
        return None
    have = v.roce_mtu or 0
    if have < want:
        need = want + ROCE_HEADER_BYTES
        return Finding(MTU, t.device, t.port, WARNING,
                       f"{t.label()}: netdev MTU {v.netdev.mtu} gives a RoCE MTU of {have}, below the "
                       f"expected {want} (roce.mtu): RDMA messages go out in more, smaller packets; set the "
                       f"MTU to at least {need} (9000 is usual) on the netdev "
                       f"(`ip link set {t.netdev} mtu 9000`) and on every switch port on the path")
    return Finding(MTU, t.device, t.port, OK, f"{t.label()}: RoCE MTU {have} (netdev MTU {v.netdev.mtu})")


def _status(value: float, warning: float | None, critical: float | None) -> tuple[int, float | None]:
    if critical is not None and value >= critical:
        return CRITICAL, critical
    if warning is not None and value >= warning:
        return WARNING, warning
    return OK, None


_PAUSE_CAUSE = {
    "rx": "the switch is pausing this NIC: congestion further in the fabric (incast, a slow receiver "
          "elsewhere); check ECN/DCQCN (roce_cnp_ignored) and the switch buffers",
    "tx": "this NIC is pausing the switch: the host cannot drain its receive buffers (PCIe, IOMMU/ATS, "
          "a slow receiver); check rx_out_of_buffer and the PCIe link",
}


def _worst_rate(v: RoceView, history: CounterHistory, counters: Mapping[tuple[int, str], int], suffix: str,
                window: float, now: float, scale: float = 1.0) -> tuple[float, int, str, float] | None:
    """The highest per-second increase (times scale) among the per-priority, per-direction
    counters `<direction>_prio<N>_<suffix>` over the window: (rate, priority, direction, seconds)."""
    worst = None
    for (prio, d) in sorted(counters):
        inc, cov = history.increase(eth_key(v.target, f"{d}_prio{prio}_{suffix}"), window, now)
        if cov > 0 and (worst is None or inc * scale / cov > worst[0]):
            worst = (inc * scale / cov, prio, d, cov)
    return worst


def _never_counted(counters: Mapping[Any, int]) -> bool:
    """Every one of these counters reads 0: nothing counted since they were cleared (a judgement a first
    sample can make; a count above 0 needs a second sample to say when)."""
    return bool(counters) and not any(counters.values())


def check_pause_rate(v: RoceView, history: CounterHistory, rc: RoceConfig, now: float) -> Finding | None:
    t = v.target
    if (s := v.ethtool) is None or not s.pause:
        return None         # no ethtool reading, or no per-priority pause counters (roce_pfc judges PFC)
    worst = _worst_rate(v, history, s.pause, "pause", rc.pause_window, now)
    if worst is None:
        if _never_counted(s.pause):
            return Finding(PAUSE_RATE, t.device, t.port, OK,
                           f"{t.label()}: no pause frames since the counters were cleared")
        return None         # the rate needs a second sample
    rate, prio, d, cov = worst
    status, limit = _status(rate, rc.pause_rate_warning, rc.pause_rate_critical)
    if status == OK:
        return Finding(PAUSE_RATE, t.device, t.port, OK,
                       f"{t.label()}: at most {rate:.3g} pause frames/s ({d}, priority {prio}) over the last "
                       f"{_fmt_window(cov)}")
    return Finding(PAUSE_RATE, t.device, t.port, status,
                   f"{t.label()}: {rate:.0f} {d} pause frames/s on priority {prio} over the last "
                   f"{_fmt_window(cov)} (threshold {limit:g}/s): {_PAUSE_CAUSE[d]}")


def check_pause_duration(v: RoceView, history: CounterHistory, rc: RoceConfig, now: float) -> Finding | None:
    t = v.target
    if (s := v.ethtool) is None or not s.pause_duration_us:
        return None
    worst = _worst_rate(v, history, s.pause_duration_us, "pause_duration", rc.pause_window, now,
                        scale=1e-6)     # microseconds paused per second -> fraction of time
    if worst is None:
        if _never_counted(s.pause_duration_us):
            return Finding(PAUSE_DURATION, t.device, t.port, OK,
                           f"{t.label()}: never paused since the counters were cleared")
        return None
    frac, prio, d, cov = worst
    status, limit = _status(frac, rc.pause_fraction_warning, rc.pause_fraction_critical)
    if status == OK:
        return Finding(PAUSE_DURATION, t.device, t.port, OK,
                       f"{t.label()}: paused {frac:.1%} of the time at most ({d}, priority {prio}) over the "
                       f"last {_fmt_window(cov)}")
    return Finding(PAUSE_DURATION, t.device, t.port, status,
                   f"{t.label()}: {d} priority {prio} was paused {frac:.0%} of the time over the last "
                   f"{_fmt_window(cov)} (threshold {limit:.0%}): {_PAUSE_CAUSE[d]}")


def check_pause_storm(v: RoceView, history: CounterHistory, rc: RoceConfig, now: float) -> Finding | None:
    t = v.target
    if (s := v.ethtool) is None or not s.pause_storm:
        return None
    storm = s.pause_storm
    incs, covered = {}, 0.0
    for level in storm:
        inc, cov = history.increase(eth_key(t, f"tx_pause_storm_{level}_events"), rc.storm_window, now)
        incs[level] = inc
        covered = max(covered, cov)
    action = ("the NIC kept sending pauses (its receive path is stuck: a hung host, PCIe errors, a "
              "full receive ring) and the storm guard stopped them, so packets are dropped now; check the "
              "host (dmesg, PCIe AER) and the switch's PFC watchdog log")
    if incs.get("error"):
        return Finding(PAUSE_STORM, t.device, t.port, CRITICAL,
                       f"{t.label()}: {incs['error']} pause-storm error event(s) in the last "
                       f"{_fmt_window(covered)}: {action}")
    if incs.get("warning"):
        return Finding(PAUSE_STORM, t.device, t.port, WARNING,
                       f"{t.label()}: {incs['warning']} pause-storm warning event(s) in the last "
                       f"{_fmt_window(covered)}: the NIC has been sending pauses for too long; {action}")
    lifetime = ", ".join(f"{storm[lv]} {lv}" for lv in ("error", "warning") if storm.get(lv))
    if lifetime and covered == 0:
        return Finding(PAUSE_STORM, t.device, t.port, WARNING,
                       f"{t.label()}: pause-storm events since the counters were cleared: {lifetime} (when "
                       f"is unknown until the next sample); a storm means {action}")
    if lifetime:
        return Finding(PAUSE_STORM, t.device, t.port, OK,
                       f"{t.label()}: no pause-storm event in the last {_fmt_window(covered)} ({lifetime} "
                       f"since the counters were cleared)")
    return Finding(PAUSE_STORM, t.device, t.port, OK, f"{t.label()}: no pause-storm event")


def check_drops(v: RoceView, history: CounterHistory, rc: RoceConfig, now: float) -> Finding | None:
    t = v.target
    if not rc.lossless_priorities:
        return None         # lossy RoCE configured: loss is not judged
    names: list[tuple[str, tuple[str, int, str]]] = []
    errors = v.ethtool.errors if v.ethtool is not None else {}
    if "rx_discards_phy" in errors:
        names.append(("rx_discards_phy", eth_key(t, "rx_discards_phy")))
    for p in rc.lossless_priorities:
        if f"rx_prio{p}_discards" in errors:
            names.append((f"rx_prio{p}_discards", eth_key(t, f"rx_prio{p}_discards")))
    for name in HW_LOSS:
        if name in v.hw:
            names.append((name, hw_key(t, name)))
    if not names:
        return None
    total, covered, rose = 0, 0.0, []
    for name, key in names:
        inc, cov = history.increase(key, rc.drop_window, now)
        covered = max(covered, cov)
        total += inc
        if inc:
            rose.append(f"{name} +{inc}")
    if not covered:
        values = {n: (errors[n] if n in errors else v.hw[n]) for n, _ in names}
        if _never_counted(values):
            return Finding(DROPS, t.device, t.port, OK, f"{t.label()}: no lost packets since the counters were cleared")
        return None         # counted before the first sample: the rate needs a second one
    status, limit = _status(total, rc.drop_warning, rc.drop_critical)
    if status == OK:
        return Finding(DROPS, t.device, t.port, OK,
                       f"{t.label()}: {total} lost packets in the last {_fmt_window(covered)}")
    prios = ",".join(map(str, rc.lossless_priorities))
    return Finding(DROPS, t.device, t.port, status,
                   f"{t.label()}: loss on lossless priority {prios}: {', '.join(rose)} in the last "
                   f"{_fmt_window(covered)} (threshold {limit:g}): PFC is not protecting the RDMA traffic; "
                   f"check roce_pfc/roce_trust here and PFC and buffer settings on the switch, and that RDMA "
                   f"traffic is marked for priority {rc.priority}")


def check_cnp_ignored(v: RoceView, history: CounterHistory, rc: RoceConfig, now: float) -> Finding | None:
    t = v.target
    if "rp_cnp_ignored" not in v.hw:
        return None         # not exposed by this device
    inc, cov = history.increase(hw_key(t, "rp_cnp_ignored"), rc.cnp_window, now)
    if not cov:
        if not v.hw["rp_cnp_ignored"]:
            return Finding(CNP_IGNORED, t.device, t.port, OK, f"{t.label()}: no ignored CNPs since the counters "
                           "were cleared")
        return None
    status, _ = _status(inc, rc.cnp_ignored_warning, None)
    if status == OK:
        return Finding(CNP_IGNORED, t.device, t.port, OK,
                       f"{t.label()}: {inc} ignored CNPs in the last {_fmt_window(cov)}")
    return Finding(CNP_IGNORED, t.device, t.port, status,
                   f"{t.label()}: rp_cnp_ignored rose by {inc} in the last {_fmt_window(cov)}: congestion "
                   f"notifications arrive but are ignored, so DCQCN is off on this reaction point and "
                   f"congestion turns into pauses and drops; enable it "
                   f"(`echo 1 > /sys/class/net/{t.netdev}/ecn/roce_rp/enable/{rc.priority}`, and roce_np "
                   f"on the receivers)")


def evaluate(views: list[RoceView], history: CounterHistory, rc: RoceConfig, now: float) -> list[Finding]:
    """Every check's finding of every netdev it could judge (none for one it could not: no status)."""
    findings: list[Finding] = []
    for v in views:
        found = [check_pfc(v, rc), check_pfc_lossy(v, rc), check_trust(v, rc),
                 check_mtu(v, rc),
                 check_pause_rate(v, history, rc, now), check_pause_duration(v, history, rc, now),
                 check_pause_storm(v, history, rc, now), check_drops(v, history, rc, now),
                 check_cnp_ignored(v, history, rc, now)]
        findings += [f for f in found if f is not None]
    return findings


# what each roce_* check reads: the DCB settings (mlnx_qos), the netdev (MTU), the ethtool statistics, the
# mlx5 hw_counters; a check runs only while its records are fresh (a netdev the record lacks: no status)
_NEEDS = {PFC: ("MlnxQosData",), PFC_LOSSY: ("MlnxQosData",), TRUST: ("MlnxQosData",), MTU: ("NetdevData",),
          PAUSE_RATE: ("EthtoolData",), PAUSE_DURATION: ("EthtoolData",), PAUSE_STORM: ("EthtoolData",),
          CNP_IGNORED: ("HwCountersData",)}


class Roce:
    """The roce_* checks (checks.shape) on every RoCE port's view, its counters' history included; each name
    runs on its fresh records (roce_lossless_drops on the ethtool statistics or the hw_counters)."""
    reports = tuple(report(c, "roce", *_NEEDS[c]) if c in _NEEDS else
                    report(c, "roce", any_of=("EthtoolData", "HwCountersData")) for c in CHECKS)
    state = None

    def __init__(self, settings: RoceConfig):
        self.settings = settings

    def run(self, inputs: NodeInputs) -> Outcome:
        return outcome_of(evaluate(list(inputs.views), inputs.history, self.settings, inputs.now))
