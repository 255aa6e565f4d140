"""The fabric map's layout and drawing on fabrics of several shapes: a 2-level fat tree with a
polarised leaf, a down, a degraded and an erroring link; the director core (generated, and the
real 400-switch HDR capture); a lone switch, an unreached switch and a shard. The SVG is read
as XML through the data attributes the issue promises."""

from __future__ import annotations

import re
import xml.etree.ElementTree as ET

import pytest

from fabric_snap import fabric_snapshot, island_fabric, switch_guid
from fabricmon.model.fabric import in_shard
from fabricmon.pages import Pages, fabric_map
from fabricmon.pages.html import esc
from fabricmon.pages.fabric_layout import (
    MAX_ROW, NO_RATE, RATE_CLASSES, UTIL_SCALE, chassis, group_row, layout, rate_width, short_name, util_colour,
)
from fabricmon.sim.fabric import director_netfile, fat_tree_netfile

SPINES = {"spine01": switch_guid(0), "spine02": switch_guid(1)}
LEAVES = {f"leaf0{i}": switch_guid(1 + i) for i in range(1, 5)}
# leaves: hosts on ports 1-4, uplinks 5, 6 to spine01 and 7, 8 to spine02
TRAFFIC = {
    "leaf01": {5: 0.5, 6: 0.5, 7: 0.5, 8: 0.5},
    "leaf02": {5: 0.85, 6: 0.35, 7: 0.35, 8: 0.35},       # one hot uplink: polarised
    "leaf03": {5: 0.45, 6: 0.5, 7: 0.55, 8: 0.5},
    "leaf04": {5: 0.3, 6: 0.3, 7: 0.3, 8: 0.3},
}


def topology() -> str:
    text = fat_tree_netfile(spines=2, leaves=4, hosts_per_leaf=4, uplinks_per_spine=2)
    # leaf04 port 7 <-> spine02 port 7 trains at 1X (both ends)
    text = text.replace('[7]\t"leaf04"[7]\t# "leaf04" lid 0 4xHDR', '[7]\t"leaf04"[7]\t# "leaf04" lid 0 1xHDR')
    text = text.replace('[7]\t"spine02"[7]\t# "spine02" lid 0 4xHDR', '[7]\t"spine02"[7]\t# "spine02" lid 0 1xHDR')
    assert text.count("1xHDR") == 2
    return text


@pytest.fixture(scope="module")
def fat_tree():
    # leaf03 port 6 gets symbol errors (above 4X HDR's 1e-12 budget, 720 an hour), leaf04 port 8 is unplugged at the last discovery
    return fabric_snapshot(topology(), TRAFFIC, errors={("leaf03", 6): 1000}, drop=[("leaf04", 8)])


def svg_of(snap, expand=()) -> ET.Element:
    return ET.fromstring(fabric_map.svg(layout(snap.fabric, snap.findings, expand), snap.fabric))


def by_attr(root: ET.Element, attr: str) -> dict[str, ET.Element]:
    return {e.get(attr): e for e in root.iter() if e.get(attr) is not None}


def link(a: str, pa: int, b: str, pb: int) -> str:
    return f"{a}:{pa}-{b}:{pb}"


def test_rows_by_level_every_switch_and_every_cable_drawn_once(fat_tree) -> None:
    lay = layout(fat_tree.fabric, fat_tree.findings)
    assert [r.level for r in lay.rows] == [2, 1]            # spines on top
    root = svg_of(fat_tree)
    switches = [e for e in root.iter() if e.get("data-switch") is not None]
    assert sorted(e.get("data-switch") for e in switches) == sorted([*SPINES, *LEAVES])
    assert all(e.get("data-guid") and e.get("data-state") in ("ok", "warning", "critical") for e in switches)
    ys = {e.get("data-switch"): float(e.find("{*}rect").get("y")) for e in switches}
    assert max(ys[s] for s in SPINES) < min(ys[s] for s in LEAVES)
    links = by_attr(root, "data-link")
    assert len(links) == 16 and not lay.bundles            # 4 leaves x 4 uplinks, each drawn once
    for key in links:                                      # the lower end (the leaf) first
        assert key.split("-")[0].split(":")[0] in LEAVES.values()
    # a host count under each leaf, none under a spine
    texts = [t.text for t in root.iter() if t.tag.endswith("}text")]
    assert texts.count("4 hosts") == 4 and len([t for t in texts if t and t.endswith("hosts")]) == 4


def test_the_polarised_leaf_and_its_hot_uplink_are_marked_a_balanced_leaf_is_not(fat_tree) -> None:
    root = svg_of(fat_tree)
    sw = {e.get("data-switch"): e for e in root.iter() if e.get("data-switch") is not None}
    assert sw["leaf02"].get("data-state") == "warning" and sw["leaf01"].get("data-state") == "ok"
    links = by_attr(root, "data-link")
    hot = links[link(LEAVES["leaf02"], 5, SPINES["spine01"], 3)]
    assert hot.get("data-hot") == "1" and hot.get("data-state") == "warning"
    assert hot.get("stroke") == UTIL_SCALE[-1][1]          # 85 %: the top of the scale
    assert float(hot.get("data-util")) == pytest.approx(0.85, abs=0.01)
    for p in (6, 7, 8):                                    # its cold uplinks: not hot
        cold = links[next(k for k in links if k.startswith(f"{LEAVES['leaf02']}:{p}-"))]
        assert cold.get("data-hot") is None and cold.get("stroke") == util_colour(0.35)
    for k, e in links.items():                             # leaf01: balanced, every uplink ok
        if k.startswith(LEAVES["leaf01"]):
            assert e.get("data-state") == "ok" and e.get("data-hot") is None and e.get("stroke") == util_colour(0.5)
    # the hot marker sits on the hot link, and the tooltip names both ends and the rate
    assert "leaf02 [5] <-> spine01 [3]" in hot.find("{*}title").text
    assert "170.0 Gb/s" in hot.find("{*}title").text


def test_down_degraded_and_erroring_links(fat_tree) -> None:
    root = svg_of(fat_tree)
    links = by_attr(root, "data-link")
    down = links[link(LEAVES["leaf04"], 8, SPINES["spine02"], 8)]
    assert down.get("data-down") == "1" and down.get("stroke-dasharray") and down.get("data-state") == "critical"
    deg = links[link(LEAVES["leaf04"], 7, SPINES["spine02"], 7)]
    assert deg.get("data-degraded") == "1" and deg.get("data-state") == "critical"   # degraded_severity
    assert float(deg.get("stroke-width")) < float(links[link(LEAVES["leaf04"], 5, SPINES["spine01"], 7)]
                                                  .get("stroke-width"))              # 1X: a thinner class
    marks = [m for m in root.iter() if m.get("data-mark") == "degraded"]
    assert len(marks) == 1 and "1X" in "".join(marks[0].itertext())
    err = links[link(LEAVES["leaf03"], 6, SPINES["spine01"], 6)]
    assert err.get("data-errors") == "1" and err.get("data-state") in ("warning", "critical")
    assert sum(1 for e in root.iter() if e.get("class") == "outline") == 1
    states = {e.get("data-switch"): e.get("data-state") for e in root.iter() if e.get("data-switch") is not None}
    assert states["leaf04"] == "critical" and states["spine02"] == "critical" and states["leaf03"] != "ok"


def test_colour_scale_and_rate_classes_are_fixed() -> None:
    assert util_colour(None) == NO_RATE
    assert [util_colour(u) for u in (0.0, 0.05, 0.3, 0.5, 0.7, 0.95, 1.2)] == [c for _, c, _ in UTIL_SCALE] + \
        [UTIL_SCALE[-1][1]]
    assert rate_width(25) < rate_width(100) < rate_width(200) < rate_width(400) < rate_width(800)
    assert rate_width(None) == RATE_CLASSES[0][1]
    legend = fabric_map.legend()
    for _, colour, label in UTIL_SCALE:
        assert colour in legend and esc(label) in legend


def test_names_groups_and_chassis() -> None:
    assert chassis("MF0;sat11-0101-0901-01ib1-A:MCS8500/L05/U1") == "MF0;sat11-0101-0901-01ib1-A:MCS8500"
    assert chassis("leaf01") is None
    assert short_name("MF0;sw-abc") == "sw-abc"
    assert len(short_name("x" * 50, 18)) == 18
    names = {f"{i:016x}": f"core/L{i:02d}" for i in range(1, 41)} | {f"{100 + i:016x}": f"edge{i:03d}" for i in range(60)}
    groups = group_row(list(names), names, 2)
    members = [m for _, _, ms in groups for m in ms]
    assert sorted(members) == sorted(names) and len(members) == len(set(members))
    core = [ms for _, label, ms in groups if any(names[m].startswith("core/") for m in ms)]
    assert len(core) == 1 and len(core[0]) == 40           # the chassis stays together
    assert len(groups) <= MAX_ROW
    assert groups == group_row(list(reversed(list(names))), names, 2)     # stable ids, whatever the order


def test_generated_director_core_levels() -> None:
    snap = fabric_snapshot(director_netfile(leaves=6, lines=4, spines=2), sweeps=2)
    lay = layout(snap.fabric, snap.findings)
    assert [r.level for r in lay.rows] == [3, 2, 1]
    rows = {r.level: r.y for r in lay.rows}
    for b in lay.switches.values():
        assert b.y >= rows[b.level] and b.y < rows[b.level] + 60
        assert b.level == (3 if "/S" in b.name else 2 if "/L" in b.name else 1)


def test_a_management_island_is_drawn_beside_the_tree_on_three_levels() -> None:
    """Issue 52 item 2: the island's host-less leaf and its spine at the ends of their rows (the pods
    first), on the tree's three levels; the summary says 3 levels; nothing found."""
    snap = fabric_snapshot(island_fabric(), sweeps=2)
    lay = layout(snap.fabric, snap.findings)
    assert [(r.level, r.label) for r in lay.rows] == [(3, "cores"), (2, "spines"), (1, "leaves")]
    row = {lv: [b.name for b in sorted((b for b in lay.switches.values() if b.level == lv), key=lambda b: b.x)]
           for lv in (1, 2)}
    assert row[1][-1] == "mgmt-leaf3" and row[2][-1] == "mgmt-spine"
    assert row[1][:2] == ["mgmt-leaf1", "mgmt-leaf2"] and row[1][2:10] == [f"p{p}l{i}" for p in (1, 2) for i in range(1, 5)]
    assert " switches on 3 levels " in fabric_map._summary(snap.fabric, lay)
    assert [f.line() for f in snap.findings if f.status] == []


def test_real_400_switch_director_collapses_into_groups_and_expands(director) -> None:
    snap = director
    sec = snap.fabric
    lay = layout(sec, snap.findings)
    assert [r.level for r in lay.rows] == [3, 2, 1]
    assert lay.groups and all(len(g.members) > 1 for g in lay.groups)
    for lv in (1, 2, 3):                                   # every row fits: MAX_ROW items at most
        items = {g.id for g in lay.groups if g.level == lv} | {b.guid for b in lay.drawn() if b.level == lv}
        assert len(items) <= MAX_ROW
    root = svg_of(snap)
    cells = [e for e in root.iter() if e.get("data-switch") is not None]
    assert sorted(e.get("data-guid") for e in cells) == sorted(sec.switches)        # every switch, once
    # a chassis's line chips share one group
    chassis_groups = {chassis(sec.switches[m].name) for g in lay.groups if g.level == 2 for m in g.members}
    assert all(len({chassis(sec.switches[m].name) for m in g.members}) == 1 for g in lay.groups if g.level == 2)
    assert len(chassis_groups) == len([g for g in lay.groups if g.level == 2])
    # every cable is in exactly one bundle or drawn on its own (none inside a group are lost
    # from the count: a bundle between two groups carries them)
    cables = {tuple(sorted([(g, p), (lk.remote_guid, lk.remote_port)]))
              for (g, p), fp in sec.ports.items() if (lk := fp.link) is not None and lk.remote_type == "Switch"}
    in_bundles = sum(len(b.links) for b in lay.bundles)
    assert in_bundles + len(lay.links) <= len(cables) and in_bundles > 0.9 * len(cables)
    # expanding a group draws its members as switches, with their own links; the rest stay collapsed
    g = next(g for g in lay.groups if g.level == 1)
    root2 = svg_of(snap, expand=[g.id])
    boxes = {e.get("data-guid") for e in root2.iter() if e.get("data-switch") is not None and e.tag.endswith("g")}
    assert set(g.members) <= boxes
    assert {e.get("data-guid") for e in root2.iter() if e.get("data-switch") is not None} == set(sec.switches)
    assert g.id in {e.get("data-group") for e in root2.iter() if e.get("data-expanded") == "1"}


def test_a_lone_switch_an_unreached_switch_and_a_shard() -> None:
    text = fat_tree_netfile(spines=1, leaves=2, hosts_per_leaf=2)
    # an extra switch cabled to nothing with a CA: level 0, drawn in a last row
    text += '\nSwitch\t8 "orphan01"\n'
    snap = fabric_snapshot(text, sweeps=2)
    lay = layout(snap.fabric, snap.findings)
    assert [r.level for r in lay.rows] == [2, 1, 0] and lay.rows[-1].label == "unreached"
    lone = fabric_snapshot('Switch\t8 "solo"\n[1]\t"n1 mlx5_0"[1]\t# "n1 mlx5_0" lid 0 4xHDR\n\n'
                           'Hca\t1 "n1 mlx5_0"\n[1]\t"solo"[1]\t# "solo" lid 0 4xHDR\n', sweeps=1)
    root = svg_of(lone)
    assert [e.get("data-switch") for e in root.iter() if e.get("data-switch")] == ["solo"]
    # a shard draws its own switches; cables to the other shards are counted, not drawn
    snap = fabric_snapshot(topology(), TRAFFIC, sweeps=2)
    sec = snap.fabric
    keep = {g for g in sec.switches if in_shard(g, 0, 2)}
    assert 0 < len(keep) < len(sec.switches)
    sec.switches = {g: sw for g, sw in sec.switches.items() if g in keep}
    sec.ports = {k: p for k, p in sec.ports.items() if k[0] in keep}
    lay = layout(sec, snap.findings)
    assert set(lay.switches) == keep
    assert all(ln.a.guid in keep and ln.b.guid in keep for ln in lay.links)
    assert lay.off_shard > 0


def test_hostile_node_descriptions_are_escaped() -> None:
    text = topology().replace('"leaf01"', '"<script>alert(1)</script>&leaf"')
    snap = fabric_snapshot(text, sweeps=2)
    html = fabric_map.page(snap, {})
    assert "<script>alert" not in html and "&lt;script&gt;alert(1)&lt;/script&gt;&amp;leaf" in html
    ET.fromstring(fabric_map.svg(layout(snap.fabric, snap.findings), snap.fabric))      # still well-formed


def test_switch_details_part_and_the_page_parts(fat_tree) -> None:
    pages = Pages(fat_tree)
    detail = pages.get("switch", {"guid": LEAVES["leaf02"]}).decode()
    rows = re.findall(r'<tr data-port="(\d+)" data-state="(\w+)"', detail)
    assert [int(p) for p, _ in rows] == list(range(1, 9))   # hosts and uplinks
    assert "spine01 [3]" in detail and "170.0 Gb/s" in detail and "85 %" in detail
    assert ("5", "warning") in rows and "hot port of an imbalanced ECMP group" in detail
    down = pages.get("switch", {"guid": "0x" + LEAVES["leaf04"]}).decode()
    assert re.search(r'<tr data-port="8" data-state="critical">.*?DOWN.*?link is down', down)
    errs = pages.get("switch", {"guid": LEAVES["leaf03"]}).decode()
    row6 = re.search(r'<tr data-port="6" data-state="(\w+)">(.*?)</tr>', errs)
    assert row6[1] != "ok" and "symbol_errors 1000" in row6[2] and "transmit_bytes" not in errs
    assert "symbol_errors rose by 1000" in row6[2]
    assert pages.get("switch", {"guid": "00000000deadbeef"}) is None
    assert pages.get("nonsense", {}) is None
    live = pages.get("live", {}).decode()
    assert live.startswith('<div id="meta" hidden') and 'data-state="critical"' in live.split(">", 1)[0]
    assert 'data-findings="' in live and "ecmp" in live
    page = pages.get("page", {}).decode()
    assert page.startswith("<!doctype html>") and 'src="/static/page.js"' in page and "http" not in \
        page.replace("http-equiv", "").replace("http://www.w3.org/2000/svg", "")        # nothing external
    assert pages.get("page", {}) is pages.get("page", {})   # rendered once per snapshot


def test_before_the_first_discovery_the_page_says_so() -> None:
    from fabricmon.model.fabric import FabricSection
    from fabricmon.model.snapshot import BuildStats, Snapshot
    snap = Snapshot(time=1.0, findings=[], sources={}, builds=BuildStats(), fabric=FabricSection())
    assert 'data-empty="1"' in Pages(snap).get("live", {}).decode()


def test_a_polarised_leaf_marks_every_hot_uplink() -> None:
    """Traffic polarised onto one spine (two uplinks at 80 %, two idle): both busy uplinks are
    hot (over ecmp_ratio x the mean), the idle ones are not."""
    snap = fabric_snapshot(topology(), {**TRAFFIC, "leaf03": {5: 0.8, 6: 0.8, 7: 0.0, 8: 0.0}})
    g = next(g for g in snap.fabric.groups if g.switch == "leaf03")
    assert g.imbalanced and g.hot == [5, 6]
    links = by_attr(svg_of(snap), "data-link")
    hot = sorted(int(k.split("-")[0].split(":")[1]) for k, e in links.items()
                 if k.startswith(LEAVES["leaf03"]) and e.get("data-hot") == "1")
    assert hot == [5, 6]
    idle = [e for k, e in links.items() if k.startswith(LEAVES["leaf03"]) and e.get("data-hot") is None]
    assert len(idle) == 2 and all(e.get("stroke") == util_colour(0.0) for e in idle)


def test_a_page_that_fails_to_render_is_a_500_and_metrics_keep_answering(fat_tree, monkeypatch) -> None:
    import urllib.error
    import urllib.request

    from fabricmon.serve.server import Exposition, MetricsServer

    def broken(snap, query):
        raise KeyError("a bug in the map")

    monkeypatch.setitem(fabric_map.PARTS, "live", broken)
    expo = Exposition()
    expo.set(b"# metrics\n", 1.0)
    expo.pages = Pages(fat_tree)
    srv = MetricsServer("127.0.0.1", 0, expo)
    srv.start()
    try:
        with pytest.raises(urllib.error.HTTPError) as e:
            urllib.request.urlopen(f"http://127.0.0.1:{srv.port}/?part=live")
        assert e.value.code == 500 and b"/metrics is unaffected" in e.value.read()
        with urllib.request.urlopen(f"http://127.0.0.1:{srv.port}/metrics") as r:
            assert r.read() == b"# metrics\n"
        with urllib.request.urlopen(f"http://127.0.0.1:{srv.port}/?part=switch&guid={LEAVES['leaf01']}") as r:
            assert r.status == 200
    finally:
        srv.stop()


def test_an_ethernet_finding_names_its_port_alike_in_the_table_and_its_text() -> None:
    """A PFC storm on a RoCE leaf's host port (ifIndex 1001, ifName Ethernet0): the findings table's port
    column says Ethernet0, as the finding's text and its series (port="Ethernet0") do, not the ifIndex."""
    from fabricmon.config import from_dict
    from fabricmon.model.fabric import DiscoveryData, Link, SwitchNode, SweepData
    from fabricmon.model.snapshot import BuildStats, Snapshot, SourceState
    from fabricmon.pipeline.fabric import FabricModel

    def state(records: type, data: object, t: float) -> SourceState:
        return SourceState(name=records.__name__, enabled=True, interval=1, timeout=1, records=records, up=True,
                           ran=True, data=data, data_time=t)
    leaf = SwitchNode("leaf-chassis", "rocel04", 2, None, kind="ethernet",
                      port_names={1001: "Ethernet0", 1002: "Ethernet4"})
    leaf.links[1001] = Link(1001, "rocenode07", 0, "Host", "rocenode07", None, None, rate_mbps=100000,
                            remote_port_name="eth0")
    leaf.links[1002] = Link(1002, "spine-chassis", 7, "Switch", "rspine01", None, None, rate_mbps=100000,
                            remote_port_name="Ethernet0")
    spine = SwitchNode("spine-chassis", "rspine01", 1, None, kind="ethernet", port_names={7: "Ethernet0"})
    spine.links[7] = Link(7, "leaf-chassis", 1002, "Switch", "rocel04", None, None, rate_mbps=100000,
                          remote_port_name="Ethernet4")
    disc = state(DiscoveryData, DiscoveryData(switches={leaf.guid: leaf, spine.guid: spine},
                                              cas={"rocenode07": "rocenode07"}, links_are_up=False), 0.0)
    model = FabricModel(from_dict({}, check_paths=False))      # fabric.pfc_storm: 1000/s for 2 sweeps
    for t in (1.0, 2.0, 3.0):
        sweep = SweepData(ports={(leaf.guid, p): {"transmit_bytes": 1} for p in (1001, 1002)},
                          pause={(leaf.guid, 1001): {(3, "rx"): int(4000 * t)}}, scale={"transmit_bytes": 1},
                          switches={leaf.guid, spine.guid})
        states = {"discovery": disc, "sweep": state(SweepData, sweep, t)}
        sec, findings = model.build(states)
    storm = [f for f in findings if f.check == "pfc_storm"]
    assert len(storm) == 1 and " host port Ethernet0 priority 3 " in storm[0].message, storm
    snap = Snapshot(time=3.0, findings=findings, sources=states, builds=BuildStats(), fabric=sec["fabric"])
    row = re.search(r'<tr data-finding="pfc_storm"[^>]*>(.*?)</tr>', fabric_map.page(snap, {}))
    assert row, "no pfc_storm row in the findings table"
    cells = re.findall(r"<td[^>]*>(.*?)</td>", row[1])
    assert cells[2:4] == ["rocel04", "Ethernet0"], cells
    assert f"{cells[2]} host port {cells[3]} " in cells[4]


def test_the_map_is_titled_by_the_fabric_s_name_and_the_demo_names_its_fabrics() -> None:
    """fabric.name titles the map (the collector's host then in the header); without it, the host. The
    demo's two collectors carry their fabric's name and not node01's slurm.node_name (their maps were both
    titled `node01`, the GPU node the demo's daemon reports as)."""
    import dataclasses

    from fabric_snap import ibnetdiscover_text
    from fabricmon.config import from_dict
    from fabricmon.model.fabric import DiscoveryData
    from fabricmon.model.snapshot import BuildStats, Snapshot, SourceState
    from fabricmon.parsers.ibnetdiscover import parse_ibnetdiscover
    from fabricmon.pipeline.fabric import FabricModel
    from fabricmon.sim import demo

    def header(snap: Snapshot) -> tuple[str, str]:
        page = fabric_map.page(snap, {})
        title = re.search(r"<title>(.*?)</title>", page)[1]
        return title, re.search(r'<span class="sub">(.*?) · fabricmon ', page)[1]

    ib = from_dict(demo.collector_config("/nonexistent", 0, {"name": demo.IB_FABRIC}), check_paths=False)
    assert ib.slurm.node_name is None and ib.fabric.name == "demo InfiniBand fabric"
    roce = demo.collector_config("/nonexistent", 0, {"name": demo.ROCE_FABRIC, "kind": "ethernet"})
    assert "slurm" not in roce and demo.ROCE_FABRIC != demo.IB_FABRIC
    disc = parse_ibnetdiscover(ibnetdiscover_text(fat_tree_netfile(spines=2, leaves=4, hosts_per_leaf=2)))
    states = {"discovery": SourceState(name="DiscoveryData", enabled=True, interval=1, timeout=1, records=DiscoveryData,
                                       up=True, ran=True, data=disc, data_time=1.0)}
    sec, findings = FabricModel(ib, clock=lambda: 1.0).build(states)
    snap = Snapshot(time=1.0, findings=findings, sources=states, builds=BuildStats(), fabric=sec["fabric"], host="mgmt01")
    assert header(snap) == ("fabricmon fabric map · demo InfiniBand fabric", "demo InfiniBand fabric · collector on mgmt01")
    unnamed = dataclasses.replace(snap, fabric=FabricModel(from_dict({}, check_paths=False)).build(states)[0]["fabric"])
    assert header(unnamed) == ("fabricmon fabric map · mgmt01", "mgmt01")
