"""The design against the live fabric (model.design, parsers.design, checks.fabric_design): a fat
tree's discovery saved as its design (both forms), then the same fabric changed as issue 37 says
(two host cables swapped on a leaf, a host moved to another leaf, an uplink removed, a spine
replaced by one with another GUID and the same name, a cable retrained at 1X): each change exactly
one discrepancy naming both ends as designed and as found, the unchanged fabric none. The real
captures saved as their own design: none. The simulator runs the same (tests/sim/test_design_sim.py)."""

from __future__ import annotations

import lzma
import re

import pytest

from fabric_snap import ibnetdiscover_text, ports_report_topology, switch_guid
from helpers import FIXTURES

from fabricmon.checks import OK, WARNING, fabric_design
from fabricmon.model import design as dm
from fabricmon.model.fabric import build_topology
from fabricmon.parsers.design import detect, parse_design
from fabricmon.parsers.errors import ParseError
from fabricmon.parsers.ibnetdiscover import parse_ibnetdiscover
from fabricmon.sim.fabric import fat_tree_netfile

NEW_SPINE = "00000000dead0002"          # spine02's replacement
SPINE02 = switch_guid(1)


def fat_tree() -> str:
    return fat_tree_netfile(spines=2, leaves=4, hosts_per_leaf=2, uplinks_per_spine=2, aggregation_nodes=True)


def _sub(text: str, old: str, new: str) -> str:
    assert text.count(old) == 1, old
    return text.replace(old, new)


def changed(net: str, spine_guid: bool = True) -> str:
    """The fat tree as found after years of repairs (a netfile in ibsim's name form): node01's and
    node02's cables swapped at leaf01, node03 moved from leaf02[1] to leaf03[7], the uplink
    leaf04[3] - spine01[7] removed, and (spine_guid) spine02 given the GUID NEW_SPINE."""
    net = _sub(net, '[1]\t"node01 mlx5_0"[1]\t# "node01 mlx5_0"', '[1]\t"node02 mlx5_0"[1]\t# "node02 mlx5_0"X')
    net = _sub(net, '[2]\t"node02 mlx5_0"[1]\t# "node02 mlx5_0"', '[2]\t"node01 mlx5_0"[1]\t# "node01 mlx5_0"')
    net = net.replace('# "node02 mlx5_0"X', '# "node02 mlx5_0"')
    net = _sub(net, 'Hca\t1 "node01 mlx5_0"\n[1]\t"leaf01"[1]', 'Hca\t1 "node01 mlx5_0"\n[1]\t"leaf01"[2]X')
    net = _sub(net, 'Hca\t1 "node02 mlx5_0"\n[1]\t"leaf01"[2]', 'Hca\t1 "node02 mlx5_0"\n[1]\t"leaf01"[1]')
    net = net.replace('"leaf01"[2]X', '"leaf01"[2]')
    net = _sub(net, '[1]\t"node03 mlx5_0"[1]\t# "node03 mlx5_0" lid 0 4xHDR\n', "")
    net = _sub(net, '[6]\t"spine02"[6]\t# "spine02" lid 0 4xHDR\n[9]\t"H-00000000ab000004"',
               '[6]\t"spine02"[6]\t# "spine02" lid 0 4xHDR\n[7]\t"node03 mlx5_0"[1]\t# "node03 mlx5_0" lid 0 4xHDR\n'
               '[9]\t"H-00000000ab000004"')
    net = _sub(net, 'Hca\t1 "node03 mlx5_0"\n[1]\t"leaf02"[1]', 'Hca\t1 "node03 mlx5_0"\n[1]\t"leaf03"[7]')
    net = _sub(net, '[3]\t"spine01"[7]\t# "spine01" lid 0 4xHDR\n', "")
    net = _sub(net, '[7]\t"leaf04"[3]\t# "leaf04" lid 0 4xHDR\n', "")
    if spine_guid:      # every switch's GUID as ibsim numbers them (it counts on from a given one), spine02's new
        switches = re.findall(r'^Switch\t\d+ "([^"]+)"', net, re.M)
        for i, name in enumerate(switches):
            guid = NEW_SPINE if name == "spine02" else switch_guid(i)
            net = _sub(net, f'Switch\t9 "{name}"', f'switchguid=0x{guid}\nSwitch\t9 "{name}"')
    return net


def live(net: str, narrow: bool = False):
    """The topology a discovery of `net` gives (GUIDs as ibsim numbers them; spine02's as the netfile's
    switchguid line says); `narrow`: leaf02[3] - spine01[3] at 1X."""
    text = ibnetdiscover_text(net)
    if "switchguid=0x" in net:
        text = text.replace(SPINE02, NEW_SPINE)
    if narrow:
        text = text.replace('[3]\t"S-0000000000200000"[3]\t\t# "spine01" lid 0 4xHDR',
                            '[3]\t"S-0000000000200000"[3]\t\t# "spine01" lid 0 1xHDR')
    return build_topology(parse_ibnetdiscover(text))


def saved(fmt: str) -> dm.Design:
    topo = live(fat_tree())
    text = dm.design_csv(topo) if fmt == "csv" else dm.design_ibnetdiscover(topo, "test")
    assert detect(text) == fmt
    return parse_design(text)


@pytest.mark.parametrize("fmt", ["ibnetdiscover", "csv"])
def test_unchanged_fabric_is_no_discrepancy(fmt: str) -> None:
    design = saved(fmt)
    assert len(design.cables) == 24          # 8 hosts + 16 uplinks; the SHARP Aggregation Nodes are no cables
    assert dm.compare(design, live(fat_tree())) == []


@pytest.mark.parametrize("fmt", ["ibnetdiscover", "csv"])
def test_every_change_is_one_discrepancy_naming_both_ends(fmt: str) -> None:
    found = dm.compare(saved(fmt), live(changed(fat_tree()), narrow=True))
    by = {d.kind: d for d in found}
    assert sorted(d.kind for d in found) == ["below_design", "missing_cable", "miswired", "replaced", "swapped"], found
    assert by["swapped"].message == (
        'cables swapped: designed "leaf01"[1] <-> "node01 mlx5_0"[1] and "leaf01"[2] <-> "node02 mlx5_0"[1], found '
        '"leaf01"[1] <-> "node02 mlx5_0"[1] and "leaf01"[2] <-> "node01 mlx5_0"[1]: swap the cables at "leaf01"[1] '
        'and "leaf01"[2] back')
    assert by["swapped"].switch == switch_guid(2) and by["swapped"].port == 1
    assert by["miswired"].message == (
        'cable miswired to the wrong switch: designed "node03 mlx5_0"[1] <-> "leaf02"[1], found "node03 mlx5_0"[1] '
        '<-> "leaf03"[7]: move it from "leaf03"[7] to "leaf02"[1]')
    assert (by["miswired"].switch, by["miswired"].port) == (switch_guid(4), 7)
    assert by["missing_cable"].message == ('cable missing: designed "spine01"[7] <-> "leaf04"[3], found none '
                                           '("spine01"[7] has no cable; "leaf04"[3] has no cable)')
    assert by["replaced"].message == (f"switch spine02 was replaced: designed with GUID 0x{SPINE02}, found with "
                                      f"0x{NEW_SPINE} (a normal repair: the design now follows the new GUID)")
    assert by["below_design"].message == ('cable "spine01"[3] <-> "leaf02"[3] runs at 1X HDR, designed 4X HDR '
                                          '(width 1X of 4X)')
    findings = fabric_design.evaluate(found, "/etc/fabricmon/design.net")
    assert [f.status for f in findings if f.status == OK] == [OK]                # replaced: information
    assert all(f.status == WARNING for f in findings if "replaced" not in f.message)
    assert all(f.message.endswith("(design /etc/fabricmon/design.net)") for f in findings)


def test_csv_without_guids_matches_by_name() -> None:
    """A hand-written plan (names only, UFM's NDT header) sees every change but the replaced spine."""
    rows = ["StartDevice,StartPort,EndDevice,EndPort,LinkType"]
    for line in dm.design_csv(live(fat_tree())).splitlines()[1:]:
        a, ap, b, bp, *_ = line.split(",")
        rows.append(f"{a},Port {ap},{b},{bp},Copper")
    found = dm.compare(parse_design("\n".join(rows)), live(changed(fat_tree())))
    assert sorted(d.kind for d in found) == ["missing_cable", "miswired", "swapped"], found


def test_nodes_missing_and_extra() -> None:
    design = saved("ibnetdiscover")
    text = ibnetdiscover_text(fat_tree().replace("node08 mlx5_0", "node09 mlx5_0"))   # node08 gone, node09 there
    found = dm.compare(design, build_topology(parse_ibnetdiscover(text.replace("0000000000100007", "00000000000beef8"))))
    assert sorted(d.kind for d in found) == ["extra_node", "missing_node"], found
    by = {d.kind: d for d in found}
    assert by["missing_node"].message.startswith('host node08 mlx5_0 (0x') and \
        by["missing_node"].message.endswith('is designed with 1 cable (to "leaf04"[2]) and not found in the fabric')
    assert by["extra_node"].message.startswith("host node09 mlx5_0 (0x") and \
        by["extra_node"].message.endswith('is not in the design: found with 1 cable (to "leaf04"[2])')


def test_default_names_match_by_guid() -> None:
    """Hosts with the firmware's description (`localhost HCA-1`, `MT4129 ...`) and switches with NVIDIA's
    default name are matched by GUID: one moved is a miswire, named by GUID."""
    net = fat_tree_netfile(spines=2, leaves=2, hosts_per_leaf=2, uplinks_per_spine=2)
    net = net.replace('"node01 mlx5_0"', '"localhost HCA-1"').replace('"node02 mlx5_0"', '"localhost HCA-1 "')
    net = net.replace('"spine01"', '"MF0;switch-1a2b3c:MQM8700/U1"').replace('"spine02"', '"MF0;switch-4d5e6f:MQM8700/U1"')
    design = dm.design_from_discovery(parse_ibnetdiscover(ibnetdiscover_text(net)))
    assert dm.compare(design, build_topology(parse_ibnetdiscover(ibnetdiscover_text(net)))) == []
    text = ibnetdiscover_text(net)      # the two spines' names exchanged: still matched by GUID, nothing to say
    text = text.replace("switch-1a2b3c", "switch-XXXX").replace("switch-4d5e6f", "switch-1a2b3c").replace(
        "switch-XXXX", "switch-4d5e6f")
    assert dm.compare(design, build_topology(parse_ibnetdiscover(text))) == []


@pytest.mark.parametrize("name, cables", [("topograph-ndr-40sw.ibnetdiscover.xz", 1074),    # 40 SHARP ANs: no cables
                                           ("hwloc-avakas-qdr.ports.xz", 569), ("hwloc-plafrim2-subnet1.ports.xz", 23)])
def test_real_capture_saved_as_its_own_design_is_no_discrepancy(name: str, cables: int) -> None:
    """Real fabrics' odd names, switch-internal CAs, unconnected ports and hosts with the firmware's
    description: the capture as its design, and the design saved from it in both forms, match it."""
    text = lzma.open(FIXTURES / "ibnetdiscover" / "real" / name, "rt").read()
    if name.endswith(".ports.xz"):
        text = ports_report_topology(text)
    topo = build_topology(parse_ibnetdiscover(text))
    for design in (parse_design(text), parse_design(dm.design_ibnetdiscover(topo)), parse_design(dm.design_csv(topo))):
        assert len(design.cables) == cables
        assert dm.compare(design, topo) == []


@pytest.mark.parametrize("text, error", [
    ("", "empty design"),
    ("start_device,start_port,end_device\nleaf01,1,node01\n", "line 1: the header 'start_device,start_port,end_device' "
                                                             "lacks end_port"),
    ("start_device,start_port,end_device,end_port\nleaf01,x,node01,1\n", "line 2: start_port 'x' is not a port"),
    ("# plan\nstart_device,start_port,end_device,end_port,speed\nleaf01,1,node01,1,HDR\nleaf01,2,node02,1,FAST\n",
     "line 4: speed 'FAST' is not an InfiniBand speed"),
    ("start_device,start_port,end_device,end_port\nleaf01,1,node01,1\nleaf01,1,node02,1\n",
     "line 3: leaf01[1] is already cabled on line 2"),
    ("start_device,start_port,end_device,end_port,width\nleaf01,1,node01,1,3X\n", "line 2: width '3X' is not a link width"),
    ("start_device,start_port,end_device,end_port\n", "line 1: a header and no cable"),
    ("Switch 9 \"S-0000000000200000\" # \"spine01\" enhanced port 0 lid 1 lmc 0\n", "the ibnetdiscover design holds no cable"),
])
def test_bad_design_is_one_error_naming_the_line(text: str, error: str) -> None:
    with pytest.raises(ParseError, match="^" + re.escape(error)):
        parse_design(text)


def test_wrong_port_of_the_right_switch_and_an_extra_cable() -> None:
    design = saved("ibnetdiscover")
    net = _sub(fat_tree(), '[3]\t"spine01"[1]\t# "spine01" lid 0 4xHDR', '[7]\t"spine01"[1]\t# "spine01" lid 0 4xHDR')
    net = _sub(net, '[1]\t"leaf01"[3]\t# "leaf01"', '[1]\t"leaf01"[7]\t# "leaf01"')
    net = _sub(net, '[6]\t"spine02"[8]\t# "spine02" lid 0 4xHDR\n[9]\t"H-00000000ab000005"',     # leaf04[8] - leaf03[8]
               '[6]\t"spine02"[8]\t# "spine02" lid 0 4xHDR\n[8]\t"leaf03"[8]\t# "leaf03" lid 0 4xHDR\n'
               '[9]\t"H-00000000ab000005"')
    net = _sub(net, '[6]\t"spine02"[6]\t# "spine02" lid 0 4xHDR\n[9]\t"H-00000000ab000004"',
               '[6]\t"spine02"[6]\t# "spine02" lid 0 4xHDR\n[8]\t"leaf04"[8]\t# "leaf04" lid 0 4xHDR\n'
               '[9]\t"H-00000000ab000004"')
    found = dm.compare(design, live(net))
    assert [d.message for d in found] == [
        'cable miswired in the wrong port of the right switch: designed "spine01"[1] <-> "leaf01"[3], found '
        '"spine01"[1] <-> "leaf01"[7]: move it from "leaf01"[7] to "leaf01"[3]',
        'cable not in the design: found "leaf03"[8] <-> "leaf04"[8]; designed "leaf03"[8] unconnected; "leaf04"[8] '
        'unconnected']
    assert [d.kind for d in found] == ["miswired", "extra_cable"]


def test_a_host_whose_adapter_was_replaced() -> None:
    """node05's HCA swapped for another (same description, new GUID): information, its cable as designed."""
    text = ibnetdiscover_text(fat_tree()).replace("0000000000100004", "00000000000beef5")
    (d,) = dm.compare(saved("csv"), build_topology(parse_ibnetdiscover(text)))
    assert d.kind == "replaced" and d.switch == "" and d.message == (
        "host node05 mlx5_0 was replaced: designed with GUID 0x0000000000100004, found with 0x00000000000beef5 "
        "(a normal repair: the design now follows the new GUID)")
    (f,) = fabric_design.evaluate([d], "design.csv")
    assert f.status == OK


def test_a_host_named_only_by_the_node_name_map_is_saved_by_that_name() -> None:
    net = fat_tree_netfile(spines=2, leaves=2, hosts_per_leaf=2, uplinks_per_spine=2)
    net = net.replace('"node01 mlx5_0"', '"MT4129 ConnectX7   Mellanox Technologies"')
    d = parse_ibnetdiscover(ibnetdiscover_text(net))
    d.node_names = {"0000000000100000": "gpu-a01 mlx5_0"}          # the site's ib-node-name-map
    topo = build_topology(d)
    text = dm.design_csv(topo)
    assert "leaf01,1,gpu-a01,1,HDR,4X,0x0000000000200002,0x0000000000100000\n" in text
    assert dm.compare(parse_design(text), topo) == []
    # a names-only plan (no GUID columns) matches it by that name too
    names_only = "\n".join(",".join(row.split(",")[:4]) for row in text.splitlines())
    assert dm.compare(parse_design(names_only), topo) == []
