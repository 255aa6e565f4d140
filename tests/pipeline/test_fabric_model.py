"""FabricModel on records alone: a hung SM (activity count unchanged over polls), the age limit
of remembered down ports (fabric.down_port_max_age), check status per switch OK included, and
topology changes logged with both ends."""

from __future__ import annotations

from fabricmon.config import from_dict
from fabricmon.model.fabric import DiscoveryData, Link, SmData, SmInfo, SwitchNode
from fabricmon.model.snapshot import SourceState
from fabricmon.pipeline.fabric import FabricModel

LEAF, SPINE, CA = "00000000000000a1", "00000000000000b1", "00000000000000c1"


def discovery(cabled: bool = True) -> DiscoveryData:
    d = DiscoveryData(cas={CA: "host01"})
    leaf = SwitchNode(LEAF, "leaf01", 4, 2, {1: Link(1, CA, 1, "Ca", "host01", 4, "HDR", 5)})
    spine = SwitchNode(SPINE, "spine01", 4, 1)
    if cabled:
        leaf.links[2] = Link(2, SPINE, 1, "Switch", "spine01", 4, "HDR", 1)
        spine.links[1] = Link(1, LEAF, 2, "Switch", "leaf01", 4, "HDR", 2)
    d.switches = {LEAF: leaf, SPINE: spine}
    return d


def state(records: type, data: object, t: float) -> SourceState:
    return SourceState(name=records.__name__, enabled=True, interval=1, timeout=1, records=records, up=True,
                       ran=True, data=data, data_time=t)


def test_hung_sm_warns_after_the_configured_polls_and_check_status_is_per_switch() -> None:
    cfg = from_dict({"fabric": {"sm_stalled_polls": 2}}, check_paths=False)
    model = FabricModel(cfg)
    disc = state(DiscoveryData, discovery(), 1.0)
    sm = SmInfo(1, "0000000000100001", 50, 0, "MASTER")
    statuses = []
    for t in (1.0, 2.0, 2.0, 3.0):          # the same poll built twice counts once
        sec, findings = model.build({"discovery": disc, "sm": state(SmData, SmData([sm], True), t)})
        statuses.append(next(f.status for f in findings if f.check == "sm"))
    assert statuses == [0, 0, 0, 1]
    sec = sec["fabric"]
    assert sec.check_status[("sm", "")] == 1 and sec.sm_activity == 50
    assert {c for c, g in sec.check_status if g == LEAF} == {"degraded_link", "link_errors", "ecmp", "uplinks"}
    moved = SmInfo(1, "0000000000100001", 51, 0, "MASTER")
    _, findings = model.build({"discovery": disc, "sm": state(SmData, SmData([moved], True), 4.0)})
    assert next(f.status for f in findings if f.check == "sm") == 0
    _, findings = model.build({"discovery": disc, "sm": state(SmData, SmData([], False), 5.0)})
    assert next(f.status for f in findings if f.check == "sm") == 2


def test_a_down_port_stays_until_the_age_limit_and_changes_name_both_ends(caplog) -> None:
    import structlog
    cfg = from_dict({"fabric": {"down_port_max_age": 100}}, check_paths=False)
    model = FabricModel(cfg)
    model.build({"discovery": state(DiscoveryData, discovery(), 0.0)})
    with structlog.testing.capture_logs() as logs:
        sec, findings = model.build({"discovery": state(DiscoveryData, discovery(cabled=False), 50.0)})
    sec = sec["fabric"]
    p = sec.ports[(LEAF, 2)]
    assert not p.up and p.link is not None and p.degraded["down"] and sec.topology_changes == 2
    assert sec.check_status[("degraded_link", LEAF)] == 2
    assert any('link "leaf01"[2] (0x00000000000000a1) <-> "spine01"[1] (0x00000000000000b1) 4xHDR vanished'
               in str(e.get("change")) for e in logs)
    sec, _ = model.build({"discovery": state(DiscoveryData, discovery(cabled=False), 99.0)})
    assert sec["fabric"].ports[(LEAF, 2)].link is not None          # still within the age limit
    sec, _ = model.build({"discovery": state(DiscoveryData, discovery(cabled=False), 101.0)})
    assert sec["fabric"].ports[(LEAF, 2)].role == "unconnected"      # forgotten after it
