"""The fabric map in a real browser: headless Chromium against `fabricmon fabric run`'s daemon
on an ibsim fat tree (the real ibnetdiscover and ibqueryerrors), with simulated traffic that
polarises leaf02 onto one uplink. The page is read through its data attributes after its
scripts ran; a screenshot is kept as a test artefact."""

from __future__ import annotations

import re
import urllib.request

import pytest

from browser import dump_dom, elements, screenshot
from fabricmon.pages.fabric_layout import layout
from fabricmon.sim.fabric import fat_tree_netfile
from helpers import fabric_collector, sample_value, wait_for_scrape

pytestmark = pytest.mark.sim

SPINES = {"spine01": f"{0x200000:016x}", "spine02": f"{0x200001:016x}"}
LEAVES = {f"leaf0{i}": f"{0x200001 + i:016x}" for i in range(1, 5)}
# leaf uplinks: ports 3, 4 to spine01; 5, 6 to spine02
TRAFFIC = {
    "leaf01": {3: 0.5, 4: 0.5, 5: 0.5, 6: 0.5},
    "leaf02": {3: 0.9, 4: 0.3, 5: 0.3, 6: 0.3},
    "leaf03": {3: 0.45, 4: 0.5, 5: 0.55, 6: 0.5},
    "leaf04": {3: 0.4, 4: 0.4, 5: 0.4, 6: 0.4},
}


@pytest.fixture
def collector(sim_fabric, tmp_path):
    fab = sim_fabric(fat_tree_netfile(spines=2, leaves=4, hosts_per_leaf=2, uplinks_per_spine=2))
    fab.start_sm()                  # a master SM that keeps answering, as on a real fabric
    # the simulated traffic's rates jitter on a busy machine (the driver's counter writes and the
    # sweep's reads share it; CI failed once on leaf02 read below the default 0.3 utilisation floor
    # for one sweep): 2 s sweeps halve the jitter, and the floor, not what this page is about, is low;
    # a simulator that busy also answers a query later than the default 200 ms (one unanswered made a
    # source row beside the ecmp one): a second is what a loaded ibsim needs, not what the page is about
    with fabric_collector(fab, tmp_path, {"sweep_interval": 2.0, "discovery_interval": 5.0, "mad_timeout_ms": 1000,
                                          "thresholds": {"consecutive_sweeps": 2, "utilisation_floor": 0.1}},
                          TRAFFIC, journal=False) as d:
        wait_for_scrape(d.port, lambda s: sample_value(s, "fabricmon_ecmp_imbalanced", switch_guid=LEAVES["leaf02"],
                                                       switch="leaf02", direction="up") == 1, 40)
        yield d


def test_the_map_shows_the_polarised_leaf_and_its_hot_uplink(browser, collector) -> None:
    url = f"http://127.0.0.1:{collector.port}/"
    dom = dump_dom(url, budget_ms=6500)            # long enough for one refresh in place
    body = elements(dom, "data-page")[0]
    assert body["data-page"] == "fabric" and int(body.get("data-refreshes") or 0) >= 1
    switches = {e["data-switch"]: e for e in elements(dom, "data-switch")}
    assert set(switches) == {*SPINES, *LEAVES}     # every switch drawn
    assert {e["data-guid"] for e in switches.values()} == {*SPINES.values(), *LEAVES.values()}
    assert switches["leaf02"]["data-state"] == "warning"
    assert switches["leaf01"]["data-state"] == "ok" and switches["leaf04"]["data-state"] == "ok"
    links = {e["data-link"]: e for e in elements(dom, "data-link")}
    assert len(links) == 16                        # 4 leaves x 4 uplinks
    hot = [k for k, e in links.items() if e.get("data-hot") == "1"]
    assert len(hot) == 1 and hot[0].startswith(f"{LEAVES['leaf02']}:3-{SPINES['spine01']}:")
    assert links[hot[0]]["data-state"] == "warning"
    # utilisation as driven (relative: a busy machine slows the simulated traffic as a whole)
    util = {k: float(e["data-util"]) for k, e in links.items()}
    cold = [u for k, u in util.items() if k.startswith(LEAVES["leaf02"] + ":") and k != hot[0]]
    assert util[hot[0]] > 2 * max(cold)            # 0.9 against 0.3
    balanced = [u for k, u in util.items() if k.startswith(LEAVES["leaf01"] + ":")]
    # (1.45 measured under four busy loops: the driver's counter updates and the sweep's reads
    # jitter; still far from the 3x between leaf02's hot and cold uplinks)
    assert max(balanced) < 1.8 * min(balanced) and min(balanced) > 0.1
    for k, e in links.items():
        if k.startswith(LEAVES["leaf01"] + ":"):   # the balanced leaf: nothing marked
            assert e["data-state"] == "ok" and "data-hot" not in e
    # the findings table names the leaf and the fix
    rows = elements(dom, "data-finding")
    assert [r["data-finding"] for r in rows] == ["ecmp"]      # the SM answers: nothing else
    assert re.search(r"leaf02 uplinks: port 3 to .*check ECMP hashing", dom)
    # nothing is loaded from elsewhere
    assert not re.search(r'(src|href)="(https?:)?//', dom)
    png = screenshot(url, "fabric-map.png", size=(1400, 900))
    assert png.stat().st_size > 10_000


def test_a_link_to_a_switch_opens_with_its_details(browser, collector) -> None:
    guid = LEAVES["leaf02"]
    dom = dump_dom(f"http://127.0.0.1:{collector.port}/#select=switch:{guid}", budget_ms=3000)
    panel = elements(dom, "id")
    details = next(e for e in panel if e["id"] == "details")
    assert "hidden" not in details                 # the panel is open
    assert 'class="selected"' in dom or "selected" in next(e for e in elements(dom, "data-guid")
                                                             if e["data-guid"] == guid).get("class", "")
    ports = elements(dom, "data-switch-ports")
    assert ports and ports[0]["data-switch-ports"] == guid       # the port table was fetched into it
    assert re.search(r'<tr data-port="3" data-state="warning">.*?spine01 \[.*?hot port of an imbalanced ECMP group', dom)
    assert re.search(r'<tr data-port="4" data-state="ok">.*?spine01 \[', dom)
    # the same part over plain HTTP, and the static files with the strict headers
    with urllib.request.urlopen(f"http://127.0.0.1:{collector.port}/?part=switch&guid={guid}") as r:
        assert r.status == 200 and "spine01" in r.read().decode()
        assert "script-src 'self'" in r.headers["Content-Security-Policy"]
    with urllib.request.urlopen(f"http://127.0.0.1:{collector.port}/static/page.js") as r:
        assert r.headers["Content-Type"].startswith("text/javascript")


def test_the_director_map_collapses_and_a_group_expands_in_the_browser(browser, served, director) -> None:
    """The real 400-switch director fabric (records from the capture, no simulator): every
    switch is on the first picture, in groups; `#expand=<group>` draws that group's switches
    one by one (page.js asks the server for the expanded view)."""
    srv, publish = served
    snap = director
    publish(snap)
    url = f"http://127.0.0.1:{srv.port}/"
    dom = dump_dom(url, budget_ms=2000)
    cells = elements(dom, "data-switch")
    assert len(cells) == 400 and {e["_tag"] for e in cells} == {"rect", "g"}
    groups = {e["data-group"]: e for e in elements(dom, "data-group")}
    assert len(groups) >= 10 and all(e["data-expanded"] == "0" for e in groups.values())
    g = next(gr for gr in layout(snap.fabric, snap.findings).groups if gr.level == 1)
    dom = dump_dom(url + "#expand=" + g.id, budget_ms=3000)
    boxes = {e["data-guid"] for e in elements(dom, "data-switch") if e["_tag"] == "g"}
    assert set(g.members) <= boxes
    assert next(e for e in elements(dom, "data-group") if e["data-group"] == g.id)["data-expanded"] == "1"
    assert len(elements(dom, "data-switch")) == 400
    screenshot(url, "fabric-map-director.png", size=(1400, 900))


def test_a_three_tier_fabric_with_sharp_is_drawn_in_tiers_grouped_by_pod(browser, served) -> None:
    """A generated three-tier fabric (records, no simulator) whose every switch carries a SHARP
    Aggregation Node: one row per tier (cores, spines, leaves), the leaf and spine rows collapsed
    into one group per pod (the switches they connect), every switch on the picture once."""
    from fabric_snap import fabric_snapshot
    from fabricmon.sim.fabric import three_tier_netfile
    srv, publish = served
    snap = fabric_snapshot(three_tier_netfile(pods=6, leaves_per_pod=8, spines_per_pod=6, cores_per_spine=2,
                                              hosts_per_leaf=4, aggregation_nodes=True), sweeps=2)
    assert sorted(set(snap.fabric.levels.values())) == [1, 2, 3] and len(snap.fabric.aggregation_nodes) == 96
    publish(snap)
    url = f"http://127.0.0.1:{srv.port}/"
    dom = dump_dom(url, budget_ms=2000)
    assert "96 switches on 3 levels" in dom
    assert len(elements(dom, "data-switch")) == 96
    groups = {e["data-group"]: e for e in elements(dom, "data-group")}
    assert len(groups) == 12 and all(e["data-switches"] in ("6", "8") for e in groups.values())    # a pod each
    lay = layout(snap.fabric, snap.findings)
    assert [(r.level, r.label) for r in lay.rows] == [(3, "cores"), (2, "spines"), (1, "leaves")]
    for gr in lay.groups:
        assert len({snap.fabric.switches[m].name[:2] for m in gr.members}) == 1           # p1.., p2..: one pod
    cores = [e for e in elements(dom, "data-switch") if e.get("data-level") == "3"]
    assert len(cores) == 12 and all(e.get("data-sharp") == "1" for e in cores)
    screenshot(url, "fabric-map-three-tier.png", size=(1400, 900))
