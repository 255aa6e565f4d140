"""Merging partial discoveries (model.fabric.merge_discovery) and what the fabric model makes of
unreached switches and ports (issue 22): unreached is not down, a partial discovery never removes
what it did not see, only positive evidence (a complete discovery, the port's own or its peer's
PortInfo) makes a link down, an unresponsive switch is its own WARNING (checks.fabric_unresponsive)."""

from __future__ import annotations

from fabricmon.config import from_dict
from fabricmon.model.fabric import DiscoveryData, Link, SweepData, SwitchNode, merge_discovery
from fabricmon.model.snapshot import SourceState
from fabricmon.parsers.portinfo import parse_portinfo, parse_saquery_pir
from fabricmon.pipeline.fabric import FabricModel

L1, L2, SP, CA = "00000000000000a1", "00000000000000a2", "00000000000000b1", "00000000000000c1"


def full() -> DiscoveryData:
    d = DiscoveryData(cas={CA: "host01"})
    l1 = SwitchNode(L1, "leaf01", 4, 2, {1: Link(1, CA, 1, "Ca", "host01", 4, "HDR", 5),
                                         3: Link(3, SP, 1, "Switch", "spine01", 4, "HDR", 1)})
    l2 = SwitchNode(L2, "leaf02", 4, 3, {3: Link(3, SP, 2, "Switch", "spine01", 4, "HDR", 1)})
    sp = SwitchNode(SP, "spine01", 4, 1, {1: Link(1, L1, 3, "Switch", "leaf01", 4, "HDR", 2),
                                          2: Link(2, L2, 3, "Switch", "leaf02", 4, "HDR", 3)})
    d.switches = {L1: l1, L2: l2, SP: sp}
    return d


def partial() -> DiscoveryData:
    """What a lossy run returns: leaf02 unreached, spine01 without its name, its port 2 unread,
    leaf01's uplink seen without its width (the remote PortInfo was lost)."""
    d = DiscoveryData(cas={CA: "host01"}, complete=False, unanswered=7)
    l1 = SwitchNode(L1, "leaf01", 4, 2, {1: Link(1, CA, 1, "Ca", "host01", 4, "HDR", 5),
                                         3: Link(3, SP, 1, "Switch", "", None, None, None)})
    sp = SwitchNode(SP, "", 4, 1, {1: Link(1, L1, 3, "Switch", "leaf01", 4, "HDR", 2)})
    d.switches = {L1: l1, SP: sp}
    return d


def test_a_partial_discovery_only_adds_to_the_last_complete_view() -> None:
    base = full()
    m = merge_discovery(base, partial())
    assert not m.complete and set(m.switches) == {L1, L2, SP}
    assert m.switches[SP].name == "spine01" and set(m.switches[SP].links) == {1, 2}
    assert m.switches[L1].links[3] == base.switches[L1].links[3]        # width, speed, name, LID kept
    assert m.switches[L2] .links == base.switches[L2].links
    assert base.switches[SP].links.keys() == {1, 2}                      # the base is not modified
    # positive evidence in a partial run: a port seen cabled to another end is recabled
    p = partial()
    p.switches[SP].links[4] = Link(4, CA, 1, "Ca", "host09", 4, "HDR", 9)
    assert merge_discovery(base, p).switches[SP].links[4].remote_name == "host09"


def test_a_complete_discovery_is_the_truth_and_the_first_partial_is_taken_as_it_is() -> None:
    d = full()
    del d.switches[SP].links[2], d.switches[L2].links[3]
    assert merge_discovery(full(), d) is d
    p = partial()
    assert merge_discovery(None, p) is p


def state(records: type, data: object, t: float) -> SourceState:
    return SourceState(name=records.__name__, enabled=True, interval=1, timeout=1, records=records, up=True,
                       ran=True, data=data, data_time=t)


def sweep(link_up=None, unanswered=None, t: float = 0.0) -> SweepData:
    s = SweepData(link_up=dict(link_up or {}), state_method="smp")
    for g in (L1, L2, SP):
        s.queries[g] = 10
        s.switches.add(g)
    for g, n in (unanswered or {}).items():
        s.unanswered[g] = n
        s.failed[g] = {"port state"}
    return s


def cabled_down(sec) -> set:
    return {k for k, p in sec.ports.items() if p.link is not None and not p.up}


def test_partial_discoveries_and_unanswered_reads_turn_nothing_down_and_change_nothing() -> None:
    """OpenSM's rule: unresponsive once queries went unanswered in 5 of the last 7 sweeps, not at 4;
    it clears once fewer than 5 of the last 7 failed; nothing is taken as down meanwhile."""
    model = FabricModel(from_dict({}, check_paths=False))
    model.build({"discovery": state(DiscoveryData, full(), 0.0)})
    for t in (10.0, 20.0, 30.0, 40.0, 50.0):
        secs, findings = model.build({"discovery": state(DiscoveryData, partial(), t),
                                      "sweep": state(SweepData, sweep(unanswered={L2: 4}), t + 1)})
        sec = secs["fabric"]
        assert not cabled_down(sec) and not [f for f in findings if f.check == "degraded_link" and f.status]
        assert sec.switches[SP].name == "spine01" and sec.topology_changes == 0
        unresp = [f for f in findings if f.check == "unresponsive"]
        assert sec.unresponsive[L2] is (t == 50.0) and len(unresp) == (t == 50.0), t
    assert [(f.device, f.status) for f in unresp] == [(L2, 1)]
    assert unresp[0].message.startswith("leaf02 (0x00000000000000a2) did not answer in 5 of its last 5 sweeps (40% "
                                        "of its queries unanswered: port state; never read completely)")
    assert sec.unresponsive == {L1: False, L2: True, SP: False}
    assert sec.last_read[L1] == 51.0 and sec.last_read[L2] is None
    assert sec.check_status[("unresponsive", L2)] == 1 and sec.check_status[("unresponsive", L1)] == 0
    # answered again: still 5 of the last 7 after two good sweeps, cleared after the third
    for t, still in ((61.0, True), (71.0, True), (81.0, False)):
        secs, findings = model.build({"sweep": state(SweepData, sweep(), t)})
        assert bool([f for f in findings if f.check == "unresponsive"]) is still, t
    assert secs["fabric"].last_read[L2] == 81.0 and secs["fabric"].check_status[("unresponsive", L2)] == 0


def test_the_unresponsive_rule_is_config() -> None:
    model = FabricModel(from_dict({"fabric": {"unresponsive_sweeps": 2, "unresponsive_window": 3}},
                                  check_paths=False))
    model.build({"discovery": state(DiscoveryData, full(), 0.0)})
    got = []
    for t, lost in ((1.0, 3), (2.0, 0), (3.0, 3), (4.0, 3), (5.0, 0), (6.0, 0)):
        secs, _ = model.build({"sweep": state(SweepData, sweep(unanswered={SP: lost} if lost else None), t)})
        got.append(secs["fabric"].unresponsive[SP])
    assert got == [False, False, True, True, True, False]     # 2 of the last 3 sweeps without an answer


def test_link_state_positive_evidence_own_port_peer_port_and_the_last_state_is_kept() -> None:
    model = FabricModel(from_dict({}, check_paths=False))
    model.build({"discovery": state(DiscoveryData, full(), 0.0)})
    disc = state(DiscoveryData, full(), 0.0)
    # the spine's end reads down, leaf01's end was not answered: the link is down at both ends
    secs, findings = model.build({"discovery": disc, "sweep": state(SweepData, sweep({(SP, 1): False}), 5.0)})
    assert cabled_down(secs["fabric"]) == {(SP, 1), (L1, 3)}
    assert {(f.device, f.port) for f in findings if f.check == "degraded_link"} == {(SP, 1), (L1, 3)}
    # a later sweep that reads neither end keeps them down (unreached is not up either)
    secs, _ = model.build({"discovery": disc, "sweep": state(SweepData, sweep(unanswered={SP: 1, L1: 1}), 6.0)})
    assert cabled_down(secs["fabric"]) == {(SP, 1), (L1, 3)}
    # both ends read up again (re-linked): up, no rediscovery needed
    secs, findings = model.build({"discovery": disc, "sweep": state(SweepData, sweep({(SP, 1): True, (L1, 3): True}), 7.0)})
    assert not cabled_down(secs["fabric"]) and not [f for f in findings if f.check == "degraded_link" and f.status]


def test_a_link_gone_from_a_complete_discovery_is_down_and_its_state_is_still_read() -> None:
    model = FabricModel(from_dict({}, check_paths=False))
    model.build({"discovery": state(DiscoveryData, full(), 0.0)})
    d = full()
    del d.switches[SP].links[2], d.switches[L2].links[3]
    disc = state(DiscoveryData, d, 10.0)
    secs, _ = model.build({"discovery": disc})
    assert cabled_down(secs["fabric"]) == {(SP, 2), (L2, 3)} and secs["fabric"].topology_changes == 2
    assert set(model.inventory({"discovery": disc}).down_links) == {(SP, 2), (L2, 3)}    # the sweep reads them
    secs, _ = model.build({"discovery": disc, "sweep": state(SweepData, sweep({(SP, 2): True, (L2, 3): True}), 11.0)})
    assert not cabled_down(secs["fabric"])


def test_portinfo_parsers() -> None:
    smp = "# Port info: Lid 4 port 6\nLinkState:.......................Down\nPhysLinkState:...................Polling\n"
    assert parse_portinfo(smp).up is False
    assert parse_portinfo(smp.replace("Down", "Init").replace("Polling", "LinkUp")).up is True
    pir = ("2 PortInfoRecord dump:\n\tRID\n\t\tEndPortLid..............9\n\t\tPortNum.................3\n"
           "\tPortInfo dump:\n\t\tLinkState:.......................Active\n\t\tPhysLinkState:...................LinkUp\n"
           "\tRID\n\t\tEndPortLid..............9\n\t\tPortNum.................4\n\tPortInfo dump:\n"
           "\t\tLinkState:.......................Down\n\t\tPhysLinkState:...................Polling\n")
    assert {k: v.up for k, v in parse_saquery_pir(pir).items()} == {(9, 3): True, (9, 4): False}
    import pytest
    from fabricmon.parsers.errors import ParseError
    with pytest.raises(ParseError):
        parse_portinfo("ibwarn: [1] mad_rpc: _do_madrpc failed; dport (Lid 2)\n")


def test_a_partial_discovery_brings_the_cache_the_last_view_lacked() -> None:
    """A complete run whose cache could not be moved into place leaves a view without one; the partial runs
    after it (a link disabled on purpose keeps every later run partial) point at the last complete cache on
    disk, and the merged view takes it, so the sweep is not left without a cache until a complete run."""
    base = full()
    base.cache_file = None
    new = partial()
    new.cache_file = "/var/lib/fabricmon/fabric/topology.cache"
    assert merge_discovery(base, new).cache_file == "/var/lib/fabricmon/fabric/topology.cache"
    base.cache_file = "/old"
    new.cache_file = None
    assert merge_discovery(base, new).cache_file == "/old"
