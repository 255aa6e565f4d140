"""sources.optics: `ethtool -m` of every RDMA port's netdev, through the HostIO; a netdev without a
readable module is "no data", a failing or hung ethtool is an error; and the node pipeline turns
the readings into metrics and optics findings."""

from __future__ import annotations

import json
import math
import shutil

import pytest

from fabricmon.config import from_dict
from fabricmon.exporter.render import render
from fabricmon.host import LiveIO
from fabricmon.host.runner import CommandResult
from fabricmon.model.ports import DeviceView, Inventory, PortView
from fabricmon.pipeline.node import NodeModel
from fabricmon.stores.optics_baseline import BaselineStore
from fabricmon.pipeline.source import Inputs
from fabricmon.model.snapshot import SourceState
from fabricmon.model.optics import OpticsData
from fabricmon.sources.optics import OpticsSource
from helpers import FIXTURES, FakeIO, unavailable

QSFP = (FIXTURES / "ethtool_module" / "qsfp28_sr4_mellanox.txt").read_text()
SFP = (FIXTURES / "ethtool_module" / "sfp_1000base_sx_jdsu.txt").read_text()


def inventory(netdevs: dict[str, tuple[str, str]]) -> Inventory:
    """device -> (netdev, link layer), one port each, all up."""
    inv = Inventory()
    for dev, (nd, layer) in netdevs.items():
        inv.devices[dev] = DeviceView(device=dev, netdev=nd)
        inv.ports[(dev, 1)] = PortView(device=dev, port=1, link_layer=layer, state_id=4, phys_state_id=5,
                                       width=4, generation="EDR", rate_gbps=100.0)
    return inv


INV = inventory({"mlx5_0": ("ens1f0np0", "Ethernet"), "mlx5_1": ("ib0", "InfiniBand"),
                 "mlx5_2": ("ens2f0np0", "Ethernet"), "mlx5_3": ("ens3f0np0", "Ethernet")})


def collect(commands, inv=INV):
    return OpticsSource(from_dict({}).sources["optics"]).collect(FakeIO(commands), Inputs(deadline=math.inf, inventory=inv))


def test_reads_roce_and_ipoib_netdevs_and_tells_no_data_from_errors() -> None:
    out = collect({
        ("ethtool", "-m", "ens1f0np0"): (0, QSFP, ""),
        ("ethtool", "-m", "ib0"): (0, SFP, ""),
        ("ethtool", "-m", "ens2f0np0"): (1, "", "netlink error: Operation not supported\n"),
        ("ethtool", "-m", "ens3f0np0"): (1, "", "Cannot get Module EEPROM data: Input/output error\n"),
    })
    assert out.errors == []
    mods = out.data.modules
    assert mods["ens1f0np0"].module.module_class == "QSFP" and (mods["ens1f0np0"].device, mods["ens1f0np0"].port) == ("mlx5_0", 1)
    assert mods["ib0"].module.module_class == "SFP" and mods["ib0"].device == "mlx5_1"
    assert mods["ens2f0np0"].module is None and "Operation not supported" in mods["ens2f0np0"].note
    assert mods["ens3f0np0"].module is None and "Input/output error" in mods["ens3f0np0"].note


def test_failures_are_errors_and_a_missing_tool_is_not() -> None:
    out = collect({("ethtool", "-m", "ens1f0np0"): CommandResult(("ethtool", "-m", "ens1f0np0"), None, "", "",
                                                                   10.0, "timeout"),
                   ("ethtool", "-m", "ib0"): (0, "garbage\n", ""),
                   ("ethtool", "-m", "ens2f0np0"): (2, "", "ethtool: bad command line argument(s)\n")},
                  inventory({"mlx5_0": ("ens1f0np0", "Ethernet"), "mlx5_1": ("ib0", "InfiniBand"),
                             "mlx5_2": ("ens2f0np0", "Ethernet")}))
    kinds = sorted(k for k, _ in out.errors)
    assert kinds == ["exit_code", "timeout"]
    assert out.data.modules["ib0"].module is None and "not decoded" in out.data.modules["ib0"].note
    out = collect({})
    assert out.data.tool_missing and out.errors == []


def test_real_ethtool_on_a_netdev_without_a_module_is_no_data() -> None:
    if shutil.which("ethtool") is None:
        unavailable("ethtool is not installed")
    inv = inventory({"lo_dev": ("lo", "Ethernet")})
    out = OpticsSource(from_dict({}).sources["optics"]).collect(LiveIO(), Inputs(deadline=math.inf, inventory=inv))
    assert out.errors == [], out.errors
    rec = out.data.modules["lo"]
    assert rec.module is None and rec.note


def parse(text: str) -> dict[tuple[str, ...], float]:
    """Exposition -> {(name, label values in the catalogue's label order...): value}."""
    from fabricmon.exporter.catalogue import BY_NAME
    out = {}
    for line in text.splitlines():
        if line.startswith("#") or not line:
            continue
        head, value = line.rsplit(" ", 1)
        name, _, rest = head.partition("{")
        labels = dict(kv.split("=", 1) for kv in rest.rstrip("}").split('",') if kv) if rest else {}
        labels = {k: v.strip('"') for k, v in labels.items()}
        m = BY_NAME.get(name)
        order = m.labels if m is not None else sorted(labels)
        out[(name, *(labels.get(k, "") for k in order))] = float(value)
    return out


def states(data: OpticsData) -> dict[str, SourceState]:
    st = SourceState("optics", True, 60.0, 10.0, records=OpticsData, up=True, ran=True, data=data, data_time=1.0)
    return {"optics": st}


def test_node_pipeline_exports_per_lane_readings_and_a_planted_low_lane_is_a_finding(tmp_path) -> None:
    low = QSFP.replace("Rcvr signal avg optical power(Channel 2)  : 0.9798 mW / -0.09 dBm",
                       "Rcvr signal avg optical power(Channel 2)  : 0.2951 mW / -5.30 dBm")
    data = collect({("ethtool", "-m", "ens1f0np0"): (0, low, ""), ("ethtool", "-m", "ib0"): (0, SFP, ""),
                    ("ethtool", "-m", "ens2f0np0"): (1, "", "netlink error: Operation not supported\n"),
                    ("ethtool", "-m", "ens3f0np0"): (0, QSFP, "")}).data
    model = NodeModel(from_dict({}), optics_baseline=BaselineStore(str(tmp_path / "optics_baseline.json")))
    model.inventory = lambda _states: INV        # the port inventory (all four ports up), as sysfs would give it
    st = states(data)
    sections, findings = model.build(st)
    by = {(f.check, f.device): f for f in findings}
    li = by[("optics_lane_imbalance", "mlx5_0")]
    assert li.status == 1 and "lane 2 receives -5.30 dBm" in li.message and "ens1f0np0" in li.message
    assert by[("optics_lane_imbalance", "mlx5_3")].status == 0
    assert ("optics_thresholds", "mlx5_2") not in by       # no data is neither OK nor a failure
    from fabricmon.model.snapshot import BuildStats, Snapshot
    snap = Snapshot(time=2.0, findings=findings, sources=st, builds=BuildStats(), **sections)
    samples = parse(render(snap).decode())
    assert samples[("fabricmon_optics_rx_power_dbm", "mlx5_0", "1", "ens1f0np0", "2")] == pytest.approx(-5.30, abs=0.005)
    assert samples[("fabricmon_optics_rx_power_watts", "mlx5_3", "1", "ens3f0np0", "3")] == pytest.approx(0.001134)
    assert samples[("fabricmon_optics_tx_bias_amperes", "mlx5_1", "1", "ib0", "1")] == pytest.approx(0.021348)
    assert samples[("fabricmon_optics_temperature_celsius", "mlx5_3", "1", "ens3f0np0")] == 30.56
    assert samples[("fabricmon_optics_diagnostics", "mlx5_2", "1", "ens2f0np0")] == 0
    assert samples[("fabricmon_optics_threshold", "mlx5_3", "1", "ens3f0np0", "rx_power_dbm", "low_alarm")] == -13.31
    assert samples[("fabricmon_optics_threshold", "mlx5_3", "1", "ens3f0np0", "tx_bias_amperes", "high_alarm")] == \
        pytest.approx(0.0085)
    assert samples[("fabricmon_check_status", "optics_lane_imbalance", "mlx5_0", "1", "degraded")] == 1
    # every lane of both module types is exported: 4 + 1 + 4 lanes
    assert sum(1 for k in samples if k[0] == "fabricmon_optics_rx_power_dbm") == 9
    # the healthy lanes were learned and written beside the inventory
    model.optics_baseline.flush(force=True)
    doc = json.loads((tmp_path / "optics_baseline.json").read_text())
    assert doc["lanes"]["node:mlx5_3:1:ens3f0np0#1"]["rx_dbm"] == -0.12


def test_two_netdevs_of_one_port_give_one_finding_per_check() -> None:
    inv = Inventory()
    inv.devices["mlx5_0"] = DeviceView(device="mlx5_0", netdev="eth0,eth1")
    inv.ports[("mlx5_0", 1)] = PortView(device="mlx5_0", port=1, link_layer="Ethernet", state_id=4, phys_state_id=5)
    data = collect({("ethtool", "-m", "eth0"): (0, QSFP, ""), ("ethtool", "-m", "eth1"): (0, QSFP, "")}, inv).data
    assert sorted(data.modules) == ["eth0", "eth1"]
    model = NodeModel(from_dict({}))
    model.inventory = lambda _states: inv
    _, findings = model.build(states(data))
    keys = [(f.check, f.device, f.port) for f in findings if f.check.startswith("optics_")]
    # one each of the checks that could judge (dimming has no baseline yet: no status)
    assert len(keys) == 3 and len(set(keys)) == 3 and "optics_dimming" not in {k[0] for k in keys}


def test_an_ipoib_ports_finding_names_the_switch_port_opposite() -> None:
    from fabricmon.parsers.iblinkinfo import LinkData, LinkInfo
    low = QSFP.replace("Rcvr signal avg optical power(Channel 3)  : 1.1340 mW / 0.55 dBm",
                       "Rcvr signal avg optical power(Channel 3)  : 0.0350 mW / -14.56 dBm")
    inv = inventory({"mlx5_1": ("ib0", "InfiniBand")})
    data = collect({("ethtool", "-m", "ib0"): (0, low, "")}, inv).data
    links = LinkData({("mlx5_1", 1): LinkInfo(1, 1, 4, 25.78125, "EDR", 4, 5, 7, 17, "leaf03 (Quantum)", None, None)})
    st = states(data)
    st["iblinkinfo"] = SourceState("iblinkinfo", True, 60.0, 10.0, records=LinkData, up=True, ran=True, data=links,
                                   data_time=1.0)
    model = NodeModel(from_dict({}))
    model.inventory = lambda _states: inv
    _, findings = model.build(st)
    (f,) = [f for f in findings if f.check == "optics_thresholds"]
    assert f.status == 2 and "lane 3 receive power -14.56 dBm" in f.message
    assert "the other end: leaf03 (Quantum) port 17" in f.message
