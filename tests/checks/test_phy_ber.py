"""phy_ber through the node model: mlxlink's and ethtool's physical counters, sampled every minute, judged
against the budget table over the 12- and 125-minute windows. A planted degradation (raw BER rising, the
effective BER clean) is a WARNING naming the budget, the window and the part, while symbol_errors says
nothing; effective errors make it CRITICAL; a port without a second sample, or no budget row, has no status."""

from __future__ import annotations

import dataclasses

import pytest

from fabricmon.checks.phy_ber import PhyBerConfig, SCHEMA, judge
from fabricmon.config import from_dict
from fabricmon.exporter.render import render
from fabricmon.model.ber import BerPort, FecData, FecStats, MlxlinkData, PhyCounters
from fabricmon.model.ber_budget import DEFAULT_BUDGETS, find
from fabricmon.model.history import CounterHistory
from fabricmon.model.node_records import EthtoolData, NetdevStats, RoceNetdevStats
from fabricmon.model.ports import DeviceView, Inventory, PortView
from fabricmon.model.snapshot import BuildStats, Snapshot, SourceState
from fabricmon.parsers.mlxlink import parse_mlxlink
from fabricmon.pipeline.node import NodeModel
from fabricmon.schema import ConfigError
from helpers import FIXTURES, exposition_samples

NDR = (FIXTURES / "mlxlink" / "ndr_ib_optical.txt").read_text()
T0 = 1_800_000_000.0
RATE = 400e9


def inventory() -> Inventory:
    inv = Inventory()
    inv.devices["mlx5_0"] = DeviceView("mlx5_0", hca_type="MT4129", pci_path="/sys/devices/pci0000:00/0000:1a:00.0")
    inv.ports[("mlx5_0", 1)] = PortView("mlx5_0", 1, "InfiniBand", 4, 5, 4, "NDR", 400.0, peer="leaf03", peer_port=7)
    inv.devices["mlx5_2"] = DeviceView("mlx5_2", hca_type="MT4129", netdev="ens2f0np0")
    inv.ports[("mlx5_2", 1)] = PortView("mlx5_2", 1, "Ethernet", 4, 5, 4, "NDR", 400.0)
    return inv


class Node:
    """The node model fed a minute at a time: mlxlink for mlx5_0 (raw errors per lane, effective, symbol),
    ethtool -S and --show-fec for the RoCE port mlx5_2."""

    def __init__(self) -> None:
        self.t = T0
        self.model = NodeModel(from_dict({}), clock=lambda: self.t)
        self.model.inventory = lambda _states: inventory()
        self.raw = 75055.0
        self.eff = 0
        self.sym = 0
        self.bits = 10 ** 15
        self.corr = 5000.0

    def step(self, raw_ber: float, eff_per_min: int = 0, sym_per_min: int = 0, eth_raw_ber: float = 1e-7):
        self.t += 60.0
        self.raw += raw_ber * RATE * 60
        self.eff += eff_per_min
        self.sym += sym_per_min
        self.bits += int(RATE * 60)
        self.corr += eth_raw_ber * RATE * 60
        lanes = [int(self.raw / 4)] * 4
        text = NDR.replace("18233,20117,17651,19054", ",".join(map(str, lanes)))
        text = text.replace("Effective Physical Errors          : 0", f"Effective Physical Errors          : {self.eff}")
        text = text.replace("Symbol Errors                      : 0", f"Symbol Errors                      : {self.sym}")
        mlx = MlxlinkData({("mlx5_0", 1): parse_mlxlink(text, "mlx5_0", 1)})
        eth = EthtoolData({"ens2f0np0": NetdevStats(RoceNetdevStats(), 600, PhyCounters(
            {"corrected_bits": int(self.corr), "effective_errors": 0, "received_bits": self.bits}))})
        fec = FecData({"ens2f0np0": FecStats("ens2f0np0", ("Auto", "RS"), "RS", "rs")})
        states = {n: SourceState(n, True, 60.0, 30.0, records=type(d), up=True, ran=True, data=d, data_time=self.t)
                  for n, d in (("mlxlink", mlx), ("ethtool", eth), ("fec", fec))}
        sections, findings = self.model.build(states)
        return states, sections, {(f.check, f.device): f for f in findings}


def test_a_rising_raw_ber_is_a_warning_naming_budget_window_and_part_before_any_symbol_error() -> None:
    node = Node()
    _, _, first = node.step(3e-10)
    assert ("phy_ber", "mlx5_0") not in first        # one sample: a rate needs two (no status)
    for _ in range(20):
        _, sections, by = node.step(3e-10)
    ok = by[("phy_ber", "mlx5_0")]
    assert ok.status == 0 and "within the NDR rs544_plr optical 7nm" in ok.message
    assert by[("phy_ber", "mlx5_2")].status == 0      # the RoCE port: ethtool's corrected bits at 1e-7 over its rx bits
    # the cable dims: the raw BER climbs a decade every 15 minutes, the FEC still corrects everything
    warned_at, ber = None, 3e-10
    for minute in range(120):
        ber = min(ber * 10 ** (1 / 15), 8e-6)
        _, sections, by = node.step(ber)
        f = by[("phy_ber", "mlx5_0")]
        assert f.status != 2, f.message
        if f.status == 1 and warned_at is None:
            warned_at, warning = minute, f
    assert warned_at is not None
    msg = warning.message
    assert "pre-FEC (raw) bit error ratio" in msg and "breaks the warning level 5e-06" in msg
    assert "NDR rs544_plr optical 7nm" in msg and "UFM PDR Field_BER_Thresholds.csv V06" in msg
    assert "over the 12 min window" in msg and "post-FEC (effective) and symbol within budget" in msg
    assert "the far end's transceiver (leaf03 port 7)" in msg and "FEC still corrects every error" in msg
    assert warning.klass == "degraded"          # a repair to schedule, never a drain: the FEC still corrects
    # before any symbol error: symbol_errors is silent (no IB counters at all here) and the symbol BER is 0
    assert by[("phy_ber", "mlx5_0")].status == 1 and node.sym == 0
    v = sections["ber"].verdicts[("mlx5_0", 1)]
    assert v.ratios[("raw", "short")] > 5e-6 and v.ratios[("effective", "short")] == 0
    assert v.ratios[("raw", "long")] < v.ratios[("raw", "short")]       # rising: the long window trails


def test_effective_errors_are_critical_and_say_frames_are_lost() -> None:
    node = Node()
    for _ in range(15):
        node.step(3e-10)
    _, _, by = node.step(3e-10, eff_per_min=5000)
    f = by[("phy_ber", "mlx5_0")]
    assert f.status == 2 and "post-FEC (effective) bit error ratio" in f.message and "error level 1e-11" in f.message
    assert "frames are being lost" in f.message


def test_a_burst_that_left_the_short_window_is_still_judged_over_the_long_one() -> None:
    # symbol BER at NDR (error 1e-14): 2.9 errors a 12-minute window, 14.4 a 60-minute one (long_window: 3600)
    node = Node()
    node.model = NodeModel(from_dict({"checks": {"phy_ber": {"long_window": 3600}}}), clock=lambda: node.t)
    node.model.inventory = lambda _states: inventory()
    for _ in range(10):
        node.step(3e-10)
    _, _, by = node.step(3e-10, sym_per_min=20)            # a burst of 20 symbol errors
    assert by[("phy_ber", "mlx5_0")].status == 2 and "over the 12 min window" in by[("phy_ber", "mlx5_0")].message
    for _ in range(20):
        _, sections, by = node.step(3e-10)                  # 20 minutes later: out of the short window
    f = by[("phy_ber", "mlx5_0")]
    assert f.status == 2 and "symbol bit error ratio" in f.message and "over the 60 min window" in f.message
    assert "12 min window" not in f.message
    assert sections["ber"].verdicts[("mlx5_0", 1)].ratios[("symbol", "short")] == 0


def test_budget_lookup_and_lenience_when_the_medium_or_adapter_is_unknown() -> None:
    b = find(DEFAULT_BUDGETS, "IB", "NDR", "rs544_plr", "copper", "7nm")
    assert (b.raw_warning, b.raw_error, b.symbol_error) == (5e-7, 1e-6, 1e-14)
    b = find(DEFAULT_BUDGETS, "IB", "NDR", "rs544_plr", "unknown", "7nm")
    assert b.raw_error == 1e-5 and "most lenient" in b.source          # optical's, not the DAC's
    b = find(DEFAULT_BUDGETS, "IB", "HDR", "rs544_plr", "copper", "")
    assert b.raw_error == 1e-5                                          # 16nm's, not 7nm's 1e-7
    assert find(DEFAULT_BUDGETS, "IB", "XDR", "rs544_plr", "optical", "7nm") is None
    assert find(DEFAULT_BUDGETS, "Ethernet", "eth_pam4", "rs544", "optical", "7nm").raw_error == 2.4e-4


def test_site_budget_rows_win_and_bad_rows_are_errors_naming_the_key() -> None:
    cfg = from_dict({"checks": {"phy_ber": {"budgets": [{"protocol": "IB", "speed": "XDR", "raw_warning": 1e-6,
                                                          "raw_error": 1e-5}]}}}).checks.phy_ber
    assert find(cfg.table(), "IB", "XDR", "rs544_plr", "optical", "7nm").raw_error == 1e-5
    for bad, where in (({"budgets": [{"raw_warning": 2}]}, "budgets[0].raw_warning"),
                       ({"budgets": [{"speed": "NDR", "raw_warning": 1e-5, "raw_error": 1e-6}]}, "raw_warning"),
                       ({"budgets": [{"colour": "red"}]}, "budgets[0].colour"),
                       ({"short_window": 9000}, "short_window"), ({"budgets": "NDR"}, "budgets")):
        with pytest.raises(ConfigError) as e:
            from_dict({"checks": {"phy_ber": bad}})
        assert where in e.value.key


def test_no_budget_row_and_no_rate_mean_no_status() -> None:
    h = CounterHistory()
    p = BerPort("mlx5_0", 1, "mlx5_0 port 1", "mlxlink", PhyCounters({"raw_errors": 0}), "IB", "XDR", 800.0,
                "rs544_plr", "optical", "7nm")
    for i in range(3):
        h.add(("mlx5_0", 1, "ber:mlxlink:raw_errors"), T0 + 60 * i, 1000 * i)
    assert judge(p, h, PhyBerConfig(), T0 + 120)[0] is None
    assert judge(dataclasses.replace(p, speed="NDR", rate_gbps=None), h, PhyBerConfig(), T0 + 120)[0] is None
    f, _ = judge(dataclasses.replace(p, speed="NDR"), h, PhyBerConfig(), T0 + 120)
    assert f is not None and f.status == 0


def test_metrics_of_the_ber_section() -> None:
    node = Node()
    for _ in range(15):
        states, sections, by = node.step(3e-10)
    snap = Snapshot(time=node.t, findings=list(by.values()), sources=states, builds=BuildStats(), **sections)
    s = exposition_samples(render(snap).decode())
    assert s[("fabricmon_port_phy_raw_errors_total", (("device", "mlx5_0"), ("port", "1"), ("source", "mlxlink")))] > 0
    assert s[("fabricmon_port_bit_error_ratio", (("device", "mlx5_0"), ("kind", "raw"), ("port", "1"),
                                                 ("window", "short")))] == pytest.approx(3e-10, rel=0.1)
    assert s[("fabricmon_port_ber_budget", (("device", "mlx5_0"), ("kind", "raw"), ("level", "warning"),
                                            ("port", "1")))] == 5e-6
    info = [k for k in s if k[0] == "fabricmon_port_fec_info"]
    assert any(("fec", "rs544_plr") in k[1] and ("medium", "optical") in k[1] for k in info)
    assert s[("fabricmon_check_status", (("check", "phy_ber"), ("class", "watch"), ("device", "mlx5_0"),
                                          ("port", "1")))] == 0


def test_docs_print_the_budget_table_as_the_data_holds_it() -> None:
    from pathlib import Path

    from fabricmon.model.ber_budget import markdown
    doc = (Path(__file__).resolve().parents[2] / "docs" / "ber.md").read_text()
    start = doc.index("<!-- budget-table:")
    start = doc.index("\n", start) + 1
    end = doc.index("<!-- end budget-table -->")
    assert doc[start:end] == markdown(), "docs/ber.md's budget table differs from fabricmon/model/ber_budget.py"
