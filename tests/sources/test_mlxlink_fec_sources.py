"""sources.mlxlink and sources.fec through the HostIO: the argv each runs, the recorded outputs replayed
(tests/fixtures/mlxlink, tests/fixtures/ethtool_fec), a restricted function never asked, failures as errors,
"not supported" as no data, a missing tool quietly off."""

from __future__ import annotations

import math

from fabricmon.config import from_dict
from fabricmon.host.runner import CommandResult
from fabricmon.model.ports import DeviceView, Inventory, PortView
from fabricmon.pipeline.source import Inputs
from fabricmon.sources.fec import FecSource
from fabricmon.sources.mlxlink import MlxlinkSource, pci_address
from helpers import FIXTURES, FakeIO

NDR = (FIXTURES / "mlxlink" / "ndr_ib_optical.txt").read_text()
ROCE = (FIXTURES / "mlxlink" / "roce_100g_dac.txt").read_text()


def inventory() -> Inventory:
    inv = Inventory()
    for i, (layer, nd) in enumerate((("InfiniBand", ""), ("Ethernet", "ens1f0np0"), ("InfiniBand", ""))):
        dev = f"mlx5_{i}"
        inv.devices[dev] = DeviceView(dev, netdev=nd, pci_path=f"/sys/devices/pci0000:00/0000:1{i}:00.0")
        inv.ports[(dev, 1)] = PortView(dev, 1, layer, 4, 5)
    inv.devices["mlx5_2"].counters_restricted = "reading /sys/.../counters/symbol_error failed: Invalid argument"
    inv.devices["mlx5_9"] = DeviceView("mlx5_9")            # no PCI path: never guessed
    inv.ports[("mlx5_9", 1)] = PortView("mlx5_9", 1, "InfiniBand", 4, 5)
    return inv


def run(source, commands, inv=None, config=None):
    io = FakeIO(commands)
    src = source(from_dict(config or {}).sources[source.spec.name])
    return src.collect(io, Inputs(deadline=math.inf, inventory=inv or inventory())), io


def test_mlxlink_asks_each_port_by_pci_address_and_never_a_restricted_function() -> None:
    out, io = run(MlxlinkSource, {
        ("mlxlink", "-d", "0000:10:00.0", "-p", "1", "-m", "-c"): (0, NDR, ""),
        ("mlxlink", "-d", "0000:11:00.0", "-p", "1", "-m", "-c"): (0, ROCE, ""),
    })
    assert out.errors == []
    assert sorted(io.ran) == [("mlxlink", "-d", "0000:10:00.0", "-p", "1", "-m", "-c"),
                              ("mlxlink", "-d", "0000:11:00.0", "-p", "1", "-m", "-c")]
    assert not any("0000:12:00.0" in a for argv in io.ran for a in argv)     # mlx5_2 is restricted: never asked
    d = out.data
    assert "kernel log" in d.skipped["mlx5_2"] and "PCI address" in d.skipped["mlx5_9"]
    assert d.ports[("mlx5_0", 1)].fec == "rs544_plr" and d.ports[("mlx5_1", 1)].fec == "rs528"


def test_mlxlink_excluded_devices_are_not_asked_either() -> None:
    _, io = run(MlxlinkSource, {}, config={"exclude_devices": ["mlx5_0"]})
    assert not any("0000:10:00.0" in argv for argv in io.ran)


def test_mlxlink_failures_are_errors_and_a_missing_tool_is_not() -> None:
    out, _ = run(MlxlinkSource, {
        ("mlxlink", "-d", "0000:10:00.0", "-p", "1", "-m", "-c"): (1, "", "-E- Failed to open device\n"),
        ("mlxlink", "-d", "0000:11:00.0", "-p", "1", "-m", "-c"):
            CommandResult(("mlxlink",), None, "", "", 30.0, "timeout"),
    })
    assert sorted(k for k, _ in out.errors) == ["exit_code", "timeout"]
    out, _ = run(MlxlinkSource, {("mlxlink", "-d", "0000:10:00.0", "-p", "1", "-m", "-c"): (0, "garbage\n", "")})
    assert [k for k, _ in out.errors] == ["parse"]
    out, _ = run(MlxlinkSource, {})
    assert out.data.tool_missing and out.errors == []


def test_mlxlink_options_change_the_argv() -> None:
    _, io = run(MlxlinkSource, {}, config={"sources": {"mlxlink": {"module": False, "show_fec": True}}})
    assert ("mlxlink", "-d", "0000:10:00.0", "-p", "1", "-c", "--show_fec") in io.ran


def test_pci_address() -> None:
    assert pci_address("/sys/devices/pci0000:00/0000:00:01.0/0000:1a:00.0") == "0000:1a:00.0"
    assert pci_address("/sys/devices/virtual/foo") is None and pci_address(None) is None


def test_fec_reads_roce_netdevs_and_tells_no_data_from_errors() -> None:
    inv = Inventory()
    for dev, nd in (("mlx5_0", "ens1f0np0"), ("mlx5_1", "ens2f0np0"), ("mlx5_2", "ens3f0np0")):
        inv.devices[dev] = DeviceView(dev, netdev=nd)
        inv.ports[(dev, 1)] = PortView(dev, 1, "Ethernet", 4, 5)
    out, io = run(FecSource, {
        ("ethtool", "-I", "--show-fec", "ens1f0np0"): (0, (FIXTURES / "ethtool_fec" / "mlx5_rs_totals.txt").read_text(), ""),
        ("ethtool", "-I", "--show-fec", "ens2f0np0"): (1, "", "netlink error: Operation not supported\n"),
        ("ethtool", "-I", "--show-fec", "ens3f0np0"): (0, "nonsense\n", ""),
    }, inv)
    assert [k for k, _ in out.errors] == ["parse"]
    assert out.data.netdevs["ens1f0np0"].counters.get("fec_corrected_blocks") == 7301229
    assert "not supported" in out.data.notes["ens2f0np0"]


def test_mlxlink_denied_says_it_needs_root() -> None:
    out, _ = run(MlxlinkSource, {("mlxlink", "-d", "0000:10:00.0", "-p", "1", "-m", "-c"):
                                 (1, "", "-E- Failed to open the device: Permission denied\n")})
    (kind, msg), = [e for e in out.errors if "0000:10:00.0" in e[1]]
    assert kind == "exit_code" and "runs as root only" in msg
