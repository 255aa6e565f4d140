"""RoCE checks on constructed records: each condition, its thresholds, and its OK cases."""

from __future__ import annotations

import pytest

from fabricmon.checks import CRITICAL, OK, WARNING
from fabricmon.checks import roce
from fabricmon.model.roce import RoceView, record_roce_counters, roce_mtu as kernel_roce_mtu
from fabricmon.config import from_dict
from fabricmon.model.history import CounterHistory, CounterIntake
from fabricmon.parsers.ethtool import curate_roce_stats
from fabricmon.parsers.mlnx_qos import QosConfig
from fabricmon.parsers.ethtool import NetdevStats
from fabricmon.parsers.mlnx_qos import QosResult
from fabricmon.model.roce import NetdevInfo
from fabricmon.model.roce import RoceTarget, roce_targets

T = RoceTarget("mlx5_2", 1, "eth2")


def qos(pfc=(3,), trust="dscp", dscp2prio=None) -> QosResult:
    return QosResult(QosConfig(dcbx_mode="os", trust=trust,
                               dscp2prio=dscp2prio if dscp2prio is not None else {26: 3, 0: 0},
                               pfc_enabled=tuple(p in pfc for p in range(8)), pfc_buffer=None,
                               buffer_sizes=(), cable_len=7, traffic_classes=()))


def stats(**counters: int) -> NetdevStats:
    return NetdevStats(curate_roce_stats(counters), len(counters))


def view(**kw) -> RoceView:
    kw.setdefault("qos", qos())
    kw.setdefault("stats", stats(rx_prio3_pause=0, tx_prio3_pause=0))
    kw.setdefault("netdev", NetdevInfo(9000, 400000, "up"))
    return RoceView(target=T, **kw)


def cfg(**roce_cfg):
    return from_dict({"roce": roce_cfg}).roce


def history_of(v0: RoceView, v1: RoceView, dt: float = 60.0) -> tuple[CounterHistory, float]:
    h = CounterHistory(horizon=86400)
    intake = CounterIntake(h)
    record_roce_counters([v0], intake, 1000.0, 1000.0)
    record_roce_counters([v1], intake, 1000.0 + dt, 1000.0 + dt)
    return h, 1000.0 + dt


# --- configuration checks --------------------------------------------------------------------

def test_pfc_disabled_on_rdma_priority_is_critical():
    f = roce.check_pfc(view(qos=qos(pfc=())), cfg())
    assert f.status == CRITICAL and f.check == "roce_pfc" and (f.device, f.port) == ("mlx5_2", 1)
    assert "PFC is disabled on lossless priority 3" in f.message
    assert "mlnx_qos -i eth2 --pfc 0,0,0,1,0,0,0,0" in f.message
    assert roce.check_pfc(view(), cfg()).status == OK


def test_pfc_follows_the_configured_priorities():
    c = cfg(priority=5, lossless_priorities=[2, 5])
    f = roce.check_pfc(view(qos=qos(pfc=(5,))), c)
    assert f.status == CRITICAL and "lossless priority 2 " in f.message and "--pfc 0,0,1,0,0,1,0,0" in f.message
    assert roce.check_pfc(view(qos=qos(pfc=(2, 5))), c).status == OK
    lossy = cfg(lossless_priorities=[])
    assert roce.check_pfc(view(qos=qos(pfc=())), lossy) is None      # lossy RoCE: PFC is not judged (no status)


def test_pfc_without_dcb_or_without_mlnx_qos():
    f = roce.check_pfc(view(qos=QosResult(None, dcb_supported=False)), cfg())
    assert f.status == WARNING and "no DCB support" in f.message and "lossless_priorities: []" in f.message
    # no mlnx_qos reading: not judged, never an OK "not checked" (the source's own state says why)
    assert roce.check_pfc(view(qos=None, qos_note="mlnx_qos is not installed (sources.mlnx_qos.enabled: auto)"),
                          cfg()) is None
    assert roce.check_pfc_lossy(view(qos=QosResult(None, False)), cfg()).status == OK     # no DCB: no PFC at all
    assert roce.check_trust(view(qos=QosResult(None, False)), cfg()) is None             # no trust state to judge


def test_pfc_on_lossy_priorities_warns():
    f = roce.check_pfc_lossy(view(qos=qos(pfc=(0, 3, 4))), cfg())
    assert f.status == WARNING and f.check == "roce_pfc_lossy"
    assert "PFC is enabled on priority 0,4, which should be lossy" in f.message
    assert roce.check_pfc_lossy(view(), cfg()).status == OK
    f = roce.check_pfc_lossy(view(qos=qos(pfc=(3,))), cfg(lossless_priorities=[]))
    assert f.status == WARNING and "--pfc 0,0,0,0,0,0,0,0" in f.message


def test_trust_mode():
    f = roce.check_trust(view(qos=qos(trust="pcp")), cfg())
    assert f.status == WARNING and "trust state is pcp, expected dscp" in f.message
    assert "mlnx_qos -i eth2 --trust dscp" in f.message
    assert roce.check_trust(view(qos=qos(trust="pcp")), cfg(trust="pcp")).status == OK
    assert roce.check_trust(view(qos=qos(trust="pcp")), cfg(trust=None)) is None      # roce.trust: null: not judged
    f = roce.check_trust(view(qos=qos(dscp2prio={26: 0, 46: 5})), cfg())
    assert f.status == WARNING and "no DSCP value maps to RDMA priority 3" in f.message
    assert roce.check_trust(view(qos=qos(dscp2prio={})), cfg()).status == OK     # map not printed


@pytest.mark.parametrize("netdev_mtu, roce_mtu", [
    (9000, 4096), (4200, 4096), (4192, 4096), (4191, 2048), (1500, 1024), (1120, 1024), (1119, 512),
    (400, 256), (300, 0),
])
def test_roce_mtu_from_netdev_mtu(netdev_mtu, roce_mtu):
    assert kernel_roce_mtu(netdev_mtu) == roce_mtu


def test_mtu_below_expected():
    f = roce.check_mtu(view(netdev=NetdevInfo(1500, None, "up")), cfg())
    assert f.status == WARNING and "RoCE MTU of 1024, below the expected 4096" in f.message
    assert "at least 4192" in f.message and "ip link set eth2 mtu 9000" in f.message
    assert roce.check_mtu(view(netdev=NetdevInfo(1500, None, "up")), cfg(mtu=1024)).status == OK
    assert roce.check_mtu(view(), cfg()).status == OK
    assert roce.check_mtu(view(netdev=None), cfg()) is None          # the MTU was not read: not judged


# --- rate checks ---------------------------------------------------------------------------

def test_sustained_pause_rate():
    v0 = view(stats=stats(rx_prio3_pause=100, tx_prio3_pause=100))
    v1 = view(stats=stats(rx_prio3_pause=100 + 90_000, tx_prio3_pause=160))
    h, now = history_of(v0, v1)
    f = roce.check_pause_rate(v1, h, cfg(), now)
    assert f.status == WARNING and "1500 rx pause frames/s on priority 3" in f.message
    assert "the switch is pausing this NIC" in f.message
    assert roce.check_pause_rate(v1, h, cfg(pause_rate_critical=1200), now).status == CRITICAL
    assert roce.check_pause_rate(v1, h, cfg(pause_rate_warning=2000), now).status == OK
    # a single sample has no rate yet: not judged while the counters read pauses; OK when they never counted
    h1 = CounterHistory()
    record_roce_counters([v0], CounterIntake(h1), 1000.0, 1000.0)
    assert roce.check_pause_rate(v0, h1, cfg(), 1000.0) is None
    quiet = view(stats=stats(rx_prio3_pause=0, tx_prio3_pause=0))
    h2 = CounterHistory()
    record_roce_counters([quiet], CounterIntake(h2), 1000.0, 1000.0)
    f = roce.check_pause_rate(quiet, h2, cfg(), 1000.0)
    assert f.status == OK and "no pause frames since the counters were cleared" in f.message


def test_pause_duration_fraction():
    v0 = view(stats=stats(rx_prio3_pause_duration=0, tx_prio3_pause_duration=0))
    v1 = view(stats=stats(rx_prio3_pause_duration=9_000_000, tx_prio3_pause_duration=1_000))
    h, now = history_of(v0, v1)                   # 9 s paused in 60 s: 15%
    f = roce.check_pause_duration(v1, h, cfg(), now)
    assert f.status == WARNING and f.check == "roce_pause_duration"
    assert "rx priority 3 was paused 15% of the time" in f.message
    assert roce.check_pause_duration(v1, h, cfg(pause_fraction_critical=0.12), now).status == CRITICAL
    assert roce.check_pause_duration(v1, h, cfg(pause_fraction_warning=0.2), now).status == OK


def test_pause_storm_events():
    base = dict(tx_pause_storm_warning_events=3, tx_pause_storm_error_events=1)
    v0 = view(stats=stats(**base))
    v_warn = view(stats=stats(tx_pause_storm_warning_events=4, tx_pause_storm_error_events=1))
    h, now = history_of(v0, v_warn)
    f = roce.check_pause_storm(v_warn, h, cfg(), now)
    assert f.status == WARNING and "1 pause-storm warning event(s)" in f.message
    v_err = view(stats=stats(tx_pause_storm_warning_events=3, tx_pause_storm_error_events=2))
    h, now = history_of(v0, v_err)
    f = roce.check_pause_storm(v_err, h, cfg(), now)
    assert f.status == CRITICAL and "1 pause-storm error event(s)" in f.message
    h, now = history_of(v0, v0)                     # old events only: OK, and say how many
    f = roce.check_pause_storm(v0, h, cfg(), now)
    assert f.status == OK and "1 error, 3 warning since the counters were cleared" in f.message
    h1 = CounterHistory()                           # first sample with events: unknown when
    record_roce_counters([v0], CounterIntake(h1), 1.0, 1.0)
    assert roce.check_pause_storm(v0, h1, cfg(), 1.0).status == WARNING
    quiet = view(stats=stats(tx_pause_storm_warning_events=0, tx_pause_storm_error_events=0))
    assert roce.check_pause_storm(quiet, CounterHistory(), cfg(), 1.0).status == OK


def test_loss_on_lossless_priority():
    v0 = view(stats=stats(rx_discards_phy=10, rx_prio3_discards=0, rx_prio0_discards=0),
              hw={"out_of_sequence": 5, "local_ack_timeout_err": 1})
    v1 = view(stats=stats(rx_discards_phy=10, rx_prio3_discards=7, rx_prio0_discards=999),
              hw={"out_of_sequence": 5, "local_ack_timeout_err": 3})
    h, now = history_of(v0, v1)
    f = roce.check_drops(v1, h, cfg(), now)
    assert f.status == WARNING and f.check == "roce_lossless_drops"
    assert "rx_prio3_discards +7" in f.message and "local_ack_timeout_err +2" in f.message
    assert "rx_prio0_discards" not in f.message                 # priority 0 is lossy
    assert roce.check_drops(v1, h, cfg(drop_critical=9), now).status == CRITICAL
    assert roce.check_drops(v1, h, cfg(drop_warning=100), now).status == OK
    assert roce.check_drops(v1, h, cfg(lossless_priorities=[]), now) is None     # lossy RoCE: loss not judged
    h, now = history_of(v0, v0)
    assert roce.check_drops(v0, h, cfg(), now).status == OK
    h1 = CounterHistory()                           # one sample: a count before it is not judged ...
    record_roce_counters([v0], CounterIntake(h1), 1.0, 1.0)
    assert roce.check_drops(v0, h1, cfg(), 1.0) is None
    clean = view(stats=stats(rx_discards_phy=0, rx_prio3_discards=0), hw={"out_of_sequence": 0})
    h1 = CounterHistory()                           # ... counters that never counted are
    record_roce_counters([clean], CounterIntake(h1), 1.0, 1.0)
    assert "no lost packets since the counters were cleared" in roce.check_drops(clean, h1, cfg(), 1.0).message


def test_out_of_sequence_alone_counts_as_loss():
    v0 = view(stats=None, stats_note="ethtool is not installed", hw={"out_of_sequence": 5})
    v1 = view(stats=None, stats_note="ethtool is not installed", hw={"out_of_sequence": 50})
    h, now = history_of(v0, v1)
    f = roce.check_drops(v1, h, cfg(), now)
    assert f.status == WARNING and "out_of_sequence +45" in f.message


def test_cnp_ignored_rising_means_dcqcn_off():
    v0 = view(hw={"rp_cnp_ignored": 100, "rp_cnp_handled": 0})
    v1 = view(hw={"rp_cnp_ignored": 180, "rp_cnp_handled": 0})
    h, now = history_of(v0, v1)
    f = roce.check_cnp_ignored(v1, h, cfg(), now)
    assert f.status == WARNING and "rp_cnp_ignored rose by 80" in f.message
    assert "/sys/class/net/eth2/ecn/roce_rp/enable/3" in f.message
    assert roce.check_cnp_ignored(v1, h, cfg(cnp_ignored_warning=None), now).status == OK
    h, now = history_of(v0, v0)
    assert roce.check_cnp_ignored(v0, h, cfg(), now).status == OK
    assert roce.check_cnp_ignored(view(hw={}), h, cfg(), now) is None        # not exposed: not judged


def test_counter_reset_is_not_a_negative_or_huge_rate():
    v0 = view(stats=stats(rx_prio3_pause=5_000_000), hw={"rp_cnp_ignored": 4_000_000_000})
    v1 = view(stats=stats(rx_prio3_pause=10), hw={"rp_cnp_ignored": 7})      # driver reload / 32-bit wrap
    h, now = history_of(v0, v1)
    assert roce.check_pause_rate(v1, h, cfg(), now).status == OK
    assert roce.check_cnp_ignored(v1, h, cfg(), now).status == OK


def test_no_ethtool_statistics():
    """No ethtool statistics (a driver without them, or no ethtool reading): no status, never an OK."""
    for v in (view(stats=NetdevStats(None)), view(stats=None, stats_note="ethtool failed")):
        for fn in (roce.check_pause_rate, roce.check_pause_duration, roce.check_pause_storm):
            assert fn(v, CounterHistory(), cfg(), 1.0) is None


def test_evaluate_yields_what_it_could_judge_of_every_netdev():
    """A netdev with every reading gets a finding of each check; one with none (no mlnx_qos, ethtool,
    netdev or hw_counters reading of it) gets none: no status is an OK it did not earn."""
    full = view(stats=stats(rx_prio3_pause=0, tx_prio3_pause=0, rx_prio3_pause_duration=0, rx_discards_phy=0,
                            tx_pause_storm_warning_events=0, tx_pause_storm_error_events=0),
                hw={"rp_cnp_ignored": 0, "out_of_sequence": 0})
    h, now = history_of(full, full)
    found = roce.evaluate([full, RoceView(target=RoceTarget("mlx5_3", 1, "eth3"))], h, cfg(), now)
    assert {f.check for f in found} == set(roce.CHECKS)
    assert {(f.device, f.port) for f in found} == {("mlx5_2", 1)}


def test_roce_targets_only_ethernet_ports():
    class D:
        def __init__(self, netdev): self.netdev = netdev

    class P:
        def __init__(self, ll): self.link_layer = ll
    devices = {"mlx5_0": D("ibp1s0"), "mlx5_1": D("ens1f0np0"), "mlx5_2": D("ens2f0np0,ens2f1np1"),
               "mlx5_3": D("")}
    ports = {("mlx5_0", 1): P("InfiniBand"), ("mlx5_1", 1): P("Ethernet"), ("mlx5_2", 1): P("Ethernet"),
             ("mlx5_2", 2): P("Ethernet"), ("mlx5_3", 1): P("Ethernet")}
    assert roce_targets(devices, ports) == [RoceTarget("mlx5_1", 1, "ens1f0np0"),
                                            RoceTarget("mlx5_2", 1, "ens2f0np0"),
                                            RoceTarget("mlx5_2", 2, "ens2f1np1"),
                                            RoceTarget("mlx5_3", 1, "")]      # netdev unknown: hw only
    assert RoceTarget("mlx5_3", 1, "").label() == "mlx5_3 (netdev unknown)"
