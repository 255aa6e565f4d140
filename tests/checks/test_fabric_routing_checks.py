"""Route balance, uplink symmetry and the subnet manager judged on records alone (no tools)."""

from __future__ import annotations

import pytest

from fabricmon.checks import CRITICAL, OK, WARNING, fabric_routing, fabric_sm, fabric_uplinks
from fabricmon.model.fabric import NO_ROUTE, DiscoveryData, FabricPort, Link, SmInfo, SwitchNode, build_topology

SP = ["00000000000000b1", "00000000000000b2"]
LF = ["00000000000000a1", "00000000000000a2"]


def fabric(unlinked: tuple[int, ...] = ()):
    """2 spines, 2 leaves; leaf ports 1-4 hosts (lids 10+.. / 20+..), 5-6 to spine1, 7-8 to spine2."""
    d = DiscoveryData()
    for i, g in enumerate(SP):
        d.switches[g] = SwitchNode(g, f"spine0{i + 1}", 8, 1 + i)
    for li, g in enumerate(LF):
        sw = SwitchNode(g, f"leaf0{li + 1}", 8, 3 + li)
        for h in range(4):
            hg = f"{0xc0 + li * 16 + h:016x}"
            d.cas[hg] = f"host{li}{h}"
            sw.links[h + 1] = Link(h + 1, hg, 1, "Ca", f"host{li}{h}", 4, "HDR", remote_lid=10 * (li + 1) + h)
        for u in range(4):
            sg = SP[u // 2]
            port = 5 + u
            lk = Link(port, sg, li * 2 + u % 2 + 1, "Switch", d.switches[sg].name, 4, "HDR", remote_lid=1)
            if not (li == 0 and port in unlinked):
                sw.links[port] = lk
                d.switches[sg].links[li * 2 + u % 2 + 1] = Link(li * 2 + u % 2 + 1, g, port, "Switch", sw.name, 4, "HDR")
        d.switches[g] = sw
    topo = build_topology(d)
    ports = {k: FabricPort(k[0], k[1], p.role, p.link, up=p.link is not None) for k, p in topo.ports.items()}
    return topo, ports


def table(routes: dict[int, int]) -> bytes:
    t = bytearray([NO_ROUTE]) * 32
    for lid, p in routes.items():
        t[lid] = p
    return bytes(t)


def test_planted_table_flagged_with_its_numbers_balanced_not() -> None:
    topo, ports = fabric()
    remote = [20, 21, 22, 23]                 # leaf02's hosts, remote for leaf01
    tables = {LF[0]: table({**{lid: 5 for lid in remote}, 10: 1, 11: 2, 12: 3, 13: 4}),
              LF[1]: table({10: 5, 11: 6, 12: 7, 13: 8, 20: 1, 21: 2, 22: 3, 23: 4})}
    rb = fabric_routing.balance(topo, tables, ports, LF + SP, 1.5)
    assert set(rb) == set(LF)                 # spines have no uplinks
    assert rb[LF[0]].routes == {5: 4, 6: 0, 7: 0, 8: 0} and rb[LF[0]].remote == 4 and rb[LF[0]].ratio == 4.0
    assert rb[LF[0]].imbalanced and not rb[LF[1]].imbalanced and rb[LF[1]].ratio == 1.0
    (f,) = fabric_routing.evaluate(rb, ports, 1.5)
    assert f.check == "routing" and f.device == LF[0] and f.port == 5 and f.status == WARNING
    assert f.message.startswith('leaf01 routes 4 of 4 remote hosts through port 5 (to "spine01"); ports 6-8 carry none')
    assert "check_lft_balance: largest exceeds smallest by 4" in f.message and "opensm -R" in f.message


def test_routes_through_a_down_port_count_elsewhere_and_below_sets() -> None:
    topo, ports = fabric(unlinked=(8,))
    every, below = fabric_routing.ca_lids_below(topo)
    assert below[LF[0]] == {10, 11, 12, 13} and below[SP[0]] == every
    tables = {LF[0]: table({20: 5, 21: 6, 22: 7, 23: 8})}
    rb = fabric_routing.balance(topo, tables, ports, [LF[0]], 1.5)[LF[0]]
    assert rb.routes == {5: 1, 6: 1, 7: 1} and rb.other == 1 and rb.ratio == 1.0


def test_symmetry_names_the_missing_port_seen_before() -> None:
    topo, ports = fabric()
    topo2, _ = fabric(unlinked=(7,))
    ports[(LF[0], 7)].up = False              # cabled at the first discovery, down now
    counts = fabric_uplinks.active_uplinks(topo2.ports.values())
    expected = fabric_uplinks.expected_uplinks(counts, topo2.levels)
    assert counts[LF[0]] == 3 and counts[LF[1]] == 4 and expected[LF[0]] == 4 and expected[SP[0]] == 0
    uplinks = {g: (counts[g], expected[g]) for g in counts}
    (f,) = fabric_uplinks.evaluate(uplinks, ports, topo.switches, topo.levels)
    assert f.device == LF[0] and f.port == 7 and f.status == WARNING
    assert f.message.startswith('leaf01 has 3 active uplinks where the switches of level 1 that share its upper switches have 4; missing: port 7 '
                                '(7 to "spine02"[1])')


def test_sm_master_none_two_and_hung() -> None:
    m = SmInfo(1, "0000000000100001", 100, 0, "MASTER")
    assert fabric_sm.evaluate([m], 0, 2).status == OK
    assert fabric_sm.evaluate([], 0, 2).status == CRITICAL
    standby = SmInfo(2, "0000000000100002", 5, 1, "STANDBY")
    f = fabric_sm.evaluate([standby], 0, 2)
    assert f.status == CRITICAL and "only 0x0000000000100002 lid 2 STANDBY" in f.message
    f = fabric_sm.evaluate([m, SmInfo(9, "0000000000100009", 3, 1, "MASTER")], 0, 2)
    assert f.status == CRITICAL and "2 subnet managers claim master" in f.message
    assert fabric_sm.evaluate([m], 1, 2).status == OK
    f = fabric_sm.evaluate([m], 2, 2)
    assert f.status == WARNING and "stayed at 100 for 2 polls" in f.message


def test_symmetry_severity_follows_the_share_of_uplinks_lost() -> None:
    """One uplink of four is a WARNING; from fabric.uplinks_critical_fraction of them missing, CRITICAL."""
    topo, ports = fabric()
    for p in (7, 8):
        ports[(LF[0], p)].up = False
    for frac, status in ((0.5, CRITICAL), (0.75, WARNING)):
        (f,) = fabric_uplinks.evaluate({LF[0]: (2, 4)}, ports, topo.switches, topo.levels, frac)
        assert f.status == status, frac
    (f,) = fabric_uplinks.evaluate({LF[0]: (3, 4)}, ports, topo.switches, topo.levels, 0.5)
    assert f.status == WARNING


def test_uplinks_critical_fraction_is_config() -> None:
    from fabricmon.config import ConfigError, from_dict
    cfg = from_dict({"fabric": {"uplinks_critical_fraction": 0.25}}, None, False)
    assert cfg.fabric.uplinks_critical_fraction == 0.25
    assert from_dict({}, None, False).fabric.uplinks_critical_fraction == 0.5
    with pytest.raises(ConfigError, match="fabric.uplinks_critical_fraction"):
        from_dict({"fabric": {"uplinks_critical_fraction": 2}}, None, False)
