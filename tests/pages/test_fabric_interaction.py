"""The fabric map as an operator uses it, in a live headless Chromium driven over the DevTools
protocol (browser.Session): real mouse clicks on a switch, a link and a group; the selection
and the expanded groups kept across the page's own refreshes; a new snapshot drawn in place
without a reload; the collector going away. Snapshots come from records (fabric_snap), served
by the real HTTP server, so each step is deterministic."""

from __future__ import annotations


import pytest

from browser import Session
from fabric_snap import fabric_snapshot, switch_guid
from fabricmon.pages.fabric_layout import layout
from fabricmon.sim.fabric import fat_tree_netfile

LEAF02, SPINE01 = switch_guid(3), switch_guid(0)
BALANCED = {f"leaf0{i}": {3: 0.5, 4: 0.5, 5: 0.5, 6: 0.5} for i in range(1, 5)}
POLARISED = {**BALANCED, "leaf02": {3: 0.9, 4: 0.3, 5: 0.3, 6: 0.3}}


def topology() -> str:
    return fat_tree_netfile(spines=2, leaves=4, hosts_per_leaf=2, uplinks_per_spine=2)


@pytest.fixture
def page(browser):
    with Session() as s:
        yield s


def state_of(page: Session, guid: str) -> str:
    return page.js(f"document.querySelector('[data-guid=\"{guid}\"]').getAttribute('data-state')")


def test_click_a_switch_then_a_link_then_close(served, page) -> None:
    srv, publish = served
    publish(fabric_snapshot(topology(), POLARISED))
    page.open(f"http://127.0.0.1:{srv.port}/")
    assert page.js("document.getElementById('details').hidden") is True
    page.click(f'g[data-guid="{LEAF02}"] rect')
    page.wait("!document.getElementById('details').hidden && !!document.querySelector('#details [data-switch-ports]')")
    text = page.js("document.getElementById('details').innerText")
    assert "leaf02" in text and "GUID 0x" + LEAF02 in text and "ecmp" in text
    assert "spine01 [" in text and "180.0 Gb/s" in text                  # the port table: remote end, rate
    assert page.js("location.hash") == f"#select=switch%3A{LEAF02}"
    assert page.js(f"document.querySelector('g[data-guid=\"{LEAF02}\"]').classList.contains('selected')")
    # the hot link: both ends, both directions, utilisation, the finding's mark
    hot = page.js("document.querySelector('[data-hot=\"1\"]').getAttribute('data-link')")
    assert hot.startswith(f"{LEAF02}:3-{SPINE01}:")
    page.click(f'[data-link="{hot}"]')
    page.wait(f"document.querySelector('[data-link=\"{hot}\"]').classList.contains('selected')")
    text = page.js("document.getElementById('details').innerText")
    assert "leaf02 [3] <-> spine01 [" in text and "utilisation 90 %" in text and "hot port" in text
    assert page.js("document.querySelectorAll('.selected').length") == 1
    page.click("#close")
    page.wait("document.getElementById('details').hidden")
    assert page.js("location.hash") == "" and page.js("document.querySelectorAll('.selected').length") == 0


def test_a_new_snapshot_is_drawn_in_place_and_the_selection_stays(served, page) -> None:
    srv, publish = served
    publish(fabric_snapshot(topology(), BALANCED))
    page.open(f"http://127.0.0.1:{srv.port}/#select=switch:{LEAF02}")
    page.wait("!!document.querySelector('#details [data-switch-ports]')")
    assert state_of(page, LEAF02) == "ok" and page.js("document.querySelectorAll('[data-hot]').length") == 0
    page.js("window.stillHere = 1")                     # gone if the page were reloaded
    publish(fabric_snapshot(topology(), POLARISED))
    page.wait(f"document.querySelector('[data-guid=\"{LEAF02}\"]').getAttribute('data-state') === 'warning'")
    assert page.js("window.stillHere") == 1
    assert page.js("document.getElementById('overall').className") == "dot warning"
    assert page.js(f"document.querySelector('g[data-guid=\"{LEAF02}\"]').classList.contains('selected')")
    assert not page.js("document.getElementById('details').hidden")
    assert page.js("document.querySelectorAll('[data-hot]').length") == 1
    page.screenshot("fabric-map-refreshed.png")


def test_a_collector_that_stops_answering_leaves_the_last_picture_marked_stale(served, page) -> None:
    srv, publish = served
    publish(fabric_snapshot(topology(), POLARISED))
    page.open(f"http://127.0.0.1:{srv.port}/")
    page.wait("parseInt(document.body.getAttribute('data-refreshes') || '0', 10) >= 1")
    # the browser keeps its connection alive, so stopping the listener alone would not show
    # here: the server answers 503 from now on (as a restarted daemon before its first snapshot)
    publish(None)
    page.wait("document.body.classList.contains('stale')", timeout=10)
    assert "unreachable" in page.js("document.getElementById('updated').textContent")
    assert page.js("document.querySelectorAll('[data-switch]').length") == 6      # the last picture stays


def test_director_groups_expand_on_click_and_stay_expanded_across_refreshes(served, page, director) -> None:
    srv, publish = served
    snap = director
    publish(snap)
    group = next(g for g in layout(snap.fabric, snap.findings).groups if g.level == 2)
    page.open(f"http://127.0.0.1:{srv.port}/")
    assert page.js("document.querySelectorAll('[data-switch]').length") == 400
    page.click(f'text[data-toggle="{group.id}"]')
    page.wait(f"document.querySelector('[data-group=\"{group.id}\"]').getAttribute('data-expanded') === '1'")
    boxes = page.js(f"Array.from(document.querySelectorAll('g[data-switch]')).map(e => e.getAttribute('data-guid'))")
    assert set(group.members) <= set(boxes)
    assert page.js("location.hash") == "#expand=" + group.id
    n = page.js("parseInt(document.body.getAttribute('data-refreshes') || '0', 10)")
    publish(snap)                                                   # a new snapshot: still expanded
    page.wait(f"parseInt(document.body.getAttribute('data-refreshes') || '0', 10) >= {n + 2}")
    assert page.js(f"document.querySelector('[data-group=\"{group.id}\"]').getAttribute('data-expanded')") == "1"
    # a cell inside another, collapsed group selects that switch rather than expanding it
    other = next(g for g in layout(snap.fabric, snap.findings).groups if g.level == 1)
    page.click(f'rect[data-guid="{other.members[0]}"]')
    page.wait("!!document.querySelector('#details [data-switch-ports]')")
    assert page.js(f"document.querySelector('[data-group=\"{other.id}\"]').getAttribute('data-expanded')") == "0"
    # and the expanded group's [-] collapses it again
    page.click(f'text[data-toggle="{group.id}"]')
    page.wait(f"document.querySelector('[data-group=\"{group.id}\"]').getAttribute('data-expanded') === '0'")
    assert page.js("location.hash").startswith("#select=")
