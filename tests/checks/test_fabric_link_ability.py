"""What a fabric link is judged against (checks.fabric_links): what both ends enable, its own past, and
its class only where neither end's abilities are known; uplink groups judged within one class."""

from __future__ import annotations

from fabricmon.checks import CRITICAL, fabric_ecmp, fabric_links, fabric_uplinks
from fabricmon.config import from_dict
from fabricmon.model.fabric import FabricPort, Link, PortInfo, SwitchNode
from fabricmon.model.link_ability import from_masks

LEAF, SPINE = "00000000000000a1", "00000000000000b1"
CFG = from_dict({}, check_paths=False).checks
HDR = from_masks(0x03, 0x1F, 0x7, 0x7, 0x7, 0xF)        # 1X/4X, up to HDR: every port of an HDR switch
EDR = from_masks(0x03, 0x1F, 0x7, 0x7, 0x3, 0xF)        # an EDR appliance's port
SWITCHES = {LEAF: SwitchNode(LEAF, "leaf01", 16, 1), SPINE: SwitchNode(SPINE, "spine01", 16, 2)}
LEVELS = {LEAF: 1, SPINE: 2}


def links(ports: dict, *args: object) -> list:
    """checks.fabric_links.judge, its verdicts written into the ports (as the fabric model's runner does)."""
    verdicts, findings = fabric_links.judge(ports, *args)      # type: ignore[arg-type]
    fabric_links.apply(ports, verdicts)
    return findings


def host(port: int, width: int = 4, speed: str = "HDR", up: bool = True) -> FabricPort:
    lk = Link(port, f"{port:016x}", 1, "Ca", f"node{port:02d} mlx5_0", width, speed, remote_lid=100 + port)
    return FabricPort(LEAF, port, "host", lk, up=up)


def fabric(*ports: FabricPort) -> dict:
    return {(p.guid, p.port): p for p in ports}


def hosts_of(slow: FabricPort, n: int = 6) -> dict:
    return fabric(*(host(p) for p in range(1, n + 1)), slow)


def abilities(ports: dict, **by_port: object) -> dict:
    """Both ends of every host link: HDR, or what `by_port` (port number -> ability) says for the CA end."""
    out = {}
    for (g, p), fp in ports.items():
        out[(g, p)] = HDR
        out[(fp.link.remote_guid, fp.link.remote_port)] = by_port.get(f"p{p}", HDR)
    return out


def test_slower_by_design_host_is_not_degraded_where_both_ends_are_known() -> None:
    ports = hosts_of(host(9, speed="EDR"))
    findings = links(ports, SWITCHES, LEVELS, CFG, abilities(ports, p9=EDR))
    slow = ports[(LEAF, 9)]
    assert not findings and slow.degraded == {"down": False, "width": False, "speed": False}
    assert slow.expected == "4X EDR" and slow.note == "" and ports[(LEAF, 1)].expected == "4X HDR"


def test_a_link_below_what_both_ends_enable_is_degraded() -> None:
    ports = hosts_of(host(9, speed="EDR"))
    findings = links(ports, SWITCHES, LEVELS, CFG, abilities(ports))     # both ends HDR
    assert [f.port for f in findings] == [9] and findings[0].status == CRITICAL
    assert "runs at 4X EDR, below the 4X HDR both ends enable (speed)" in findings[0].message
    ports = hosts_of(host(9, width=1))
    f = links(ports, SWITCHES, LEVELS, CFG, abilities(ports))
    assert "below the 4X HDR both ends enable (width)" in f[0].message


def test_unknown_ends_a_host_slower_since_first_seen_is_a_note_and_a_drop_is_degraded() -> None:
    ports = hosts_of(host(9, speed="EDR"))
    past = fabric_links.remember(ports, {})
    assert not links(ports, SWITCHES, LEVELS, CFG, {}, past)
    assert ports[(LEAF, 9)].note.startswith("slower than its link class (4X HDR): it has run at 4X EDR since first seen")
    assert not any(ports[(LEAF, 9)].degraded.values())
    # a host seen at HDR that runs at EDR now dropped below its own past: a cable, not a design
    ports = hosts_of(host(9))
    past = fabric_links.remember(ports, {})
    ports = hosts_of(host(9, speed="EDR"))
    f = links(ports, SWITCHES, LEVELS, CFG, {}, past)
    assert [x.port for x in f] == [9] and "below the 4X HDR it ran at earlier (speed)" in f[0].message
    assert ports[(LEAF, 9)].note == ""
    # narrower than its class is degraded from the first sight, as before (a bad lane, not a design)
    ports = hosts_of(host(9, width=1))
    f = links(ports, SWITCHES, LEVELS, CFG, {}, fabric_links.remember(ports, {}))
    assert "below the 4X HDR of its link class (width)" in f[0].message


def test_a_drop_below_its_past_is_degraded_even_within_what_both_ends_enable() -> None:
    ports = hosts_of(host(9))
    past = fabric_links.remember(ports, {})
    ports = hosts_of(host(9, speed="EDR"))
    f = links(ports, SWITCHES, LEVELS, CFG, abilities(ports), past)
    assert "both ends enable" in f[0].message and "it ran at earlier" in f[0].message
    # one end now enables only EDR and the link runs there: still below its past (a lowered enabled set
    # under a running link is not told apart from lost lanes)
    narrowed = abilities(ports, p9=EDR)
    past = fabric_links.remember(ports, past)
    f = links(ports, SWITCHES, LEVELS, CFG, narrowed, past)
    assert [x.port for x in f] == [9] and "both ends enable" not in f[0].message and "it ran at earlier" in f[0].message
    # a cable moved to another host: its past is not the new link's
    moved = host(9, speed="EDR")
    moved.link = Link(9, "00000000000000ff", 1, "Ca", "storage01 mlx5_0", 4, "EDR")
    assert not links(hosts_of(moved), SWITCHES, LEVELS, CFG, {}, fabric_links.remember(hosts_of(host(9)), {}))


def uplink(port: int, speed: str = "HDR", rate: float = 10e9) -> FabricPort:
    return FabricPort(LEAF, port, "up", Link(port, SPINE, port, "Switch", "spine01", 4, speed), up=True, tx_rate=rate)


def test_a_slower_uplink_is_degraded_without_abilities_and_groups_hold_one_class() -> None:
    ports = fabric(*(uplink(p) for p in range(1, 5)), uplink(5, "EDR", 1e9))
    f = links(ports, SWITCHES, LEVELS, CFG, {}, fabric_links.remember(ports, {}))
    assert [x.port for x in f] == [5]          # switch-to-switch links are built as one class
    # with both ends known to enable only EDR, port 5 is fine, and the ECMP group is the HDR uplinks
    ab = {(LEAF, p): HDR for p in range(1, 5)} | {(SPINE, p): HDR for p in range(1, 5)} | {(LEAF, 5): EDR, (SPINE, 5): HDR}
    assert not links(ports, SWITCHES, LEVELS, CFG, ab)
    g = fabric_ecmp.groups(ports, {LEAF: SWITCHES[LEAF]}, LEVELS)[0]
    assert g.ports == [1, 2, 3, 4] and g.excluded == [5] and g.ratio == 1.0


def test_uplink_counts_compared_within_one_uplink_class() -> None:
    def ports_of(guid: str, n: int, speed: str) -> list[PortInfo]:
        return [PortInfo(guid, p, "up", Link(p, SPINE, p, "Switch", "spine01", 4, speed), True) for p in range(1, n + 1)]
    compute = [f"{i:016x}" for i in (1, 2, 3)]
    storage = "00000000000000f1"
    infos = [pi for g in compute for pi in ports_of(g, 8, "HDR")] + ports_of(storage, 2, "EDR")
    counts = fabric_uplinks.active_uplinks(infos)
    levels = {g: 1 for g in (*compute, storage)}
    assert fabric_uplinks.expected_uplinks(counts, levels)[storage] == 8        # one norm for the level
    expected = fabric_uplinks.expected_uplinks(counts, levels, classes=fabric_uplinks.uplink_classes(infos))
    assert expected[storage] == 2 and expected[compute[0]] == 8
