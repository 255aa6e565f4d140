"""Tests for fabricmon.parsers.pci_topology (our own DGX-H100-like layouts)."""
import pytest

from fabricmon.parsers.errors import ParseError
from fabricmon.model.pci import PATH_CLASSES, classify_path, gpudirect_capable, rank
from fabricmon.parsers.pci_topology import normalize_bus_id, parse_numa_node, pci_chain

# Socket 0, host bridge pci0000:15: root port 15:01.0 -> switch (up 16:00.0,
# downstreams 17:00.0..17:03.0). GPU under 17:01.0, NIC under 17:02.0.
HB = "/sys/devices/pci0000:15/0000:15:01.0/0000:16:00.0"
GPU0 = pci_chain(f"{HB}/0000:17:01.0/0000:19:00.0")
NIC0 = pci_chain(f"{HB}/0000:17:02.0/0000:1a:00.0")
# NIC behind a second-level switch (up 1b:00.0, down 1c:00.0) under 17:03.0.
NIC_NESTED = pci_chain(f"{HB}/0000:17:03.0/0000:1b:00.0/0000:1c:00.0/0000:1d:00.0")
# NIC on another root port of the same host bridge, no switch.
NIC_OTHER_RP = pci_chain("/sys/devices/pci0000:15/0000:15:05.0/0000:20:00.0")
# Another host bridge (same or other socket).
NIC_OTHER_HB = pci_chain(
    "/sys/devices/pci0000:37/0000:37:01.0/0000:38:00.0/0000:39:02.0/0000:3c:00.0"
)


def test_pci_chain_basic():
    assert pci_chain(
        "/sys/devices/pci0000:17/0000:17:00.0/0000:18:00.0/0000:19:01.0/0000:1a:00.0"
    ) == ("pci0000:17", "0000:17:00.0", "0000:18:00.0", "0000:19:01.0", "0000:1a:00.0")


def test_pci_chain_prefix_root_case_and_trailing_components():
    path = "/tmp/x/sys/devices/PCI0000:9A/0000:9A:01.0/0000:9B:00.0/net/ib0/"
    assert pci_chain(path) == ("pci0000:9a", "0000:9a:01.0", "0000:9b:00.0")


def test_pci_chain_hyperv_style_domain_per_device():
    path = "/sys/devices/LNXSYSTM:00/LNXSYBUS:00/ACPI0004:00/VMBUS:00/abc-def/pci0101:00/0101:00:00.0"
    assert pci_chain(path) == ("pci0101:00", "0101:00:00.0")


def test_pci_chain_vmd_uses_innermost_host_bridge():
    path = "/sys/devices/pci0000:00/0000:00:0e.0/pci10000:e0/10000:e0:1d.0/10000:e1:00.0"
    assert pci_chain(path) == ("pci10000:e0", "10000:e0:1d.0", "10000:e1:00.0")


@pytest.mark.parametrize(
    "bad",
    ["", "/sys/class/infiniband/mlx5_0", "/sys/devices/virtual/net/lo", "/sys/devices/pci0000:15"],
)
def test_pci_chain_rejects_paths_without_pci_device(bad):
    with pytest.raises(ParseError):
        pci_chain(bad)


def test_parse_error_is_value_error():
    assert issubclass(ParseError, ValueError)


@pytest.mark.parametrize(
    "raw, want",
    [
        ("00000000:1B:00.0", "0000:1b:00.0"),
        ("00000001:C3:00.1\n", "0001:c3:00.1"),
        ("0000:1b:00.0", "0000:1b:00.0"),
        ("1b:00.0", "0000:1b:00.0"),
        ("00010000:E1:00.0", "10000:e1:00.0"),
    ],
)
def test_normalize_bus_id(raw, want):
    assert normalize_bus_id(raw) == want


@pytest.mark.parametrize("bad", ["", "GPU-1234", "0000:1b:00", "0000:1b:00.8", "0000:zz:00.0"])
def test_normalize_bus_id_rejects_garbage(bad):
    with pytest.raises(ParseError):
        normalize_bus_id(bad)


def test_nvml_bus_id_matches_sysfs_chain_end():
    assert normalize_bus_id("00000000:19:00.0") == GPU0[-1]


def test_pix_sibling_downstream_ports_of_one_switch():
    assert classify_path(GPU0, NIC0, 0, 0) == "PIX"
    assert classify_path(NIC0, GPU0, 0, 0) == "PIX"


def test_pix_same_downstream_port_multifunction():
    nic_f1 = pci_chain(f"{HB}/0000:17:02.0/0000:1a:00.1")
    assert classify_path(NIC0, nic_f1, 0, 0) == "PIX"


def test_pxb_nic_under_nested_second_level_switch():
    assert classify_path(GPU0, NIC_NESTED, 0, 0) == "PXB"


def test_pix_both_under_the_nested_switch():
    gpu = pci_chain(f"{HB}/0000:17:03.0/0000:1b:00.0/0000:1c:01.0/0000:1e:00.0")
    assert classify_path(gpu, NIC_NESTED, 0, 0) == "PIX"


def test_pxb_under_two_different_nested_switches():
    a = pci_chain(f"{HB}/0000:17:00.0/0000:30:00.0/0000:31:00.0/0000:32:00.0")
    assert classify_path(a, NIC_NESTED, 0, 0) == "PXB"


def test_phb_other_root_port_same_host_bridge():
    assert classify_path(GPU0, NIC_OTHER_RP, 0, 0) == "PHB"


def test_phb_devices_directly_below_root_ports():
    a = pci_chain("/sys/devices/pci0000:15/0000:15:01.0/0000:16:00.0")
    b = pci_chain("/sys/devices/pci0000:15/0000:15:03.0/0000:18:00.0")
    assert classify_path(a, b, 0, 0) == "PHB"


def test_phb_shared_root_port_without_switch():
    a = pci_chain("/sys/devices/pci0000:15/0000:15:01.0/0000:16:00.0")
    b = pci_chain("/sys/devices/pci0000:15/0000:15:01.0/0000:16:00.1")
    assert classify_path(a, b, 0, 0) == "PHB"


def test_node_other_host_bridge_same_numa():
    assert classify_path(GPU0, NIC_OTHER_HB, 0, 0) == "NODE"


def test_sys_other_host_bridge_other_numa():
    assert classify_path(GPU0, NIC_OTHER_HB, 0, 1) == "SYS"


@pytest.mark.parametrize("g, n", [(None, 0), (0, None), (-1, 1), (None, None), (-1, -1)])
def test_unknown_numa_on_different_host_bridges(g, n):
    assert classify_path(GPU0, NIC_OTHER_HB, g, n) == "UNKNOWN"


def test_numa_ignored_under_one_host_bridge():
    assert classify_path(GPU0, NIC0, None, None) == "PIX"
    assert classify_path(GPU0, NIC_OTHER_RP, -1, 3) == "PHB"


def test_classify_rejects_bad_chains():
    with pytest.raises(ValueError):
        classify_path(("pci0000:15",), NIC0, 0, 0)
    with pytest.raises(ValueError):
        classify_path((), NIC0, 0, 0)


def test_rank_order_and_gpudirect():
    assert [rank(p) for p in PATH_CLASSES] == [0, 1, 2, 3, 4, 5]
    assert sorted(["SYS", "UNKNOWN", "PIX", "NODE", "PHB", "PXB"], key=rank) == list(PATH_CLASSES)
    assert [gpudirect_capable(p) for p in PATH_CLASSES] == [True, True, False, False, False, False]
    with pytest.raises(ValueError):
        rank("NV12")


@pytest.mark.parametrize("text, want", [("0\n", 0), ("1", 1), (" 7 \n", 7), ("-1\n", None), ("-1", None)])
def test_parse_numa_node(text, want):
    assert parse_numa_node(text) == want


@pytest.mark.parametrize("bad", ["", "\n", "node0", "-2", "1.0", "1_0", "N/A"])
def test_parse_numa_node_garbage(bad):
    with pytest.raises(ParseError):
        parse_numa_node(bad)
