"""The pages say which mode remediation is in and mark what it took out of service: the fabric map's link
carries `data-isolated` and a mark with why and when it returns, the switch's details name it, the node page
says the modes; a dry run's mark is dashed. From the published snapshot only."""

from __future__ import annotations

from dataclasses import replace

from fabric_snap import fabric_snapshot

from fabricmon.model.remediation import Action, Breaker, RemediationSection
from fabricmon.pages import fabric_map, node
from fabricmon.sim.fabric import fat_tree_netfile


def section(snap, mode: str = "act") -> RemediationSection:
    g = next(g for g, sw in snap.fabric.switches.items() if sw.name == "leaf01")
    peer = snap.fabric.ports[(g, 3)].link
    a = Action(id="p1", kind="isolate_port", target=f"{g}:3", label=f"leaf01 (0x{g}) port 3", mode=mode, state="done",
               reason="CRITICAL symbol_errors: leaf01 port 3: rose by 5000", check="symbol_errors", window=3600,
               created=snap.time, updated=snap.time, effective=snap.time, clean_since=snap.time, guid=g, port=3,
               switch="leaf01", peer=f"{peer.remote_guid}:{peer.remote_port}")
    return RemediationSection("fabric", {"isolate_port": mode, "drain_node": "off"}, actions=(a,),
                              breakers={"isolate_port": Breaker(10, 1)})


def test_the_map_marks_an_isolated_link_and_says_the_mode() -> None:
    snap = fabric_snapshot(fat_tree_netfile(spines=2, leaves=2, hosts_per_leaf=2, uplinks_per_spine=1))
    snap = replace(snap, remediation=section(snap))
    html = fabric_map.live(snap, {})
    assert 'data-isolated="p1" data-isolated-mode="act"' in html
    assert 'data-mark="isolated"' in html and "isolated by fabricmon" in html
    assert 'data-remediation="isolate_port act, drain_node off"' in html
    assert "1 port(s) isolated: p1 leaf01" in html and 'data-remediation-actions="1"' in html
    assert "returns at" in html
    g = snap.remediation.actions[0].guid
    detail = fabric_map.switch(snap, {"guid": g})
    assert "isolated by fabricmon: isolate_port p1: out of service since" in detail
    dry = fabric_map.live(replace(snap, remediation=section(snap, "dry_run")), {})
    assert 'data-isolated-mode="dry_run"' in dry and 'stroke-dasharray="2 2"' in dry and 'data-dry-run="1"' in dry
    assert 'data-isolated=' not in fabric_map.live(replace(snap, remediation=None), {})


def test_the_node_page_says_the_modes() -> None:
    from fabric_snap import BuildStats, Snapshot
    snap = Snapshot(time=1.0, findings=[], sources={}, builds=BuildStats(), host="node01",
                    remediation=RemediationSection("node", {"isolate_port": "off", "drain_node": "dry_run"}))
    html = node.live(snap, {})
    assert 'data-remediation="isolate_port off, drain_node dry_run"' in html
