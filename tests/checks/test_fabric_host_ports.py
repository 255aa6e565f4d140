"""host_port_unconfigured (checks.fabric_host_ports): a host port up with no LID (ibnetdiscover's `lid 65535`
or `lid 0`: no subnet manager configured it) is one WARNING on the switch port it is cabled to, naming the
host, its port and port GUID; never a healthy port, never a parse error, never a down link. On the real
director capture as it came (../shared: a PuTTY log, CRLF, its tabs lost), every one of its 631 such ports,
each once, through the real FabricModel."""

from __future__ import annotations

import re

from fabric_snap import fabric_snapshot, ibnetdiscover_text
from helpers import CAPTURES, skip_without_captures

from fabricmon.checks import WARNING, fabric_host_ports
from fabricmon.model.fabric import DiscoveryData, default_description
from fabricmon.model.snapshot import SourceState
from fabricmon.pipeline.fabric_checks import FabricChecks
from fabricmon.sim.fabric import fat_tree_netfile

RAW_DIRECTOR = CAPTURES / "ibnetdiscover" / "Mellanox-ufm_sdk_3.0__ibnetdiscover_director.txt"
LEAF01, LEAF02, SPINE01, SPINE02 = "0000000000200002", "0000000000200003", "0000000000200000", "0000000000200001"


def fat_tree(**lids: int) -> str:
    """A 2x2 fat tree as ibnetdiscover prints it, the named hosts' ports printing these LIDs (and their port
    GUIDs, as ibnetdiscover prints a CA end's)."""
    text = ibnetdiscover_text(fat_tree_netfile(spines=2, leaves=2, hosts_per_leaf=2))
    for host, lid in lids.items():
        text, n = re.subn(rf'^(\[\d+\]\t"H-0*([0-9a-f]+)"\[1\])(\t\t# "{host} mlx5_0") lid \d+ ',
                          lambda m: f"{m[1]}({m[2]}) {m[3]} lid {lid} ", text, flags=re.M)
        assert n == 1, host
    return text


def unconfigured(snap) -> dict[tuple[str, int | None], str]:
    return {(f.device, f.port): f.message for f in snap.findings if f.check == fabric_host_ports.CHECK and f.status}


def test_each_host_port_without_a_lid_is_one_warning_naming_it() -> None:
    snap = fabric_snapshot(fat_tree(node01=65535, node04=0), sweeps=2)
    found = unconfigured(snap)
    assert set(found) == {(LEAF01, 1), (LEAF02, 2)}
    assert found[(LEAF01, 1)] == (
        'leaf01 port 1 (host to "node01 mlx5_0"[1]): host node01 port 1 (CA 0x0000000000100000, port GUID '
        "0x0000000000100000) has no LID (lid 65535): its link is up at 4X HDR but no subnet manager configured it, "
        "so the host cannot use this port; check the subnet manager (sminfo; its log for port GUID "
        "0x0000000000100000: a partition, M_Key or LID range it refused) and the host's HCA")
    assert "host node04 port 1 (CA 0x0000000000100003, port GUID 0x0000000000100003) has no LID (lid 0)" in \
        found[(LEAF02, 2)]
    assert {f.status for f in snap.findings if f.check == fabric_host_ports.CHECK} == {WARNING}
    # nothing else: the link is up and as fast as its class (not down, not degraded), the rest is healthy
    assert [f.line() for f in snap.findings if f.status and f.check != fabric_host_ports.CHECK] == []
    status = {g: s for (c, g), s in snap.fabric.check_status.items() if c == fabric_host_ports.CHECK}
    assert status == {LEAF01: WARNING, LEAF02: WARNING, SPINE01: 0, SPINE02: 0}
    assert snap.fabric.ports[(LEAF01, 1)].up and not any(snap.fabric.ports[(LEAF01, 1)].degraded.values())


def test_a_fabric_whose_host_ports_all_have_lids_is_ok_on_every_switch() -> None:
    snap = fabric_snapshot(fat_tree(), sweeps=2)
    assert unconfigured(snap) == {}
    status = {g: s for (c, g), s in snap.fabric.check_status.items() if c == fabric_host_ports.CHECK}
    assert status == {LEAF01: 0, LEAF02: 0, SPINE01: 0, SPINE02: 0}


def test_a_lidless_port_gone_down_is_the_link_checks_not_this_ones() -> None:
    """node01's port had no LID and its cable is pulled: down (degraded_link), never also unconfigured (the port,
    flagged before, keeps its status: OK now)."""
    snap = fabric_snapshot(fat_tree(node01=65535), sweeps=2, drop=[("leaf01", 1)])
    assert unconfigured(snap) == {}
    assert [(f.check, f.device, f.port) for f in snap.findings if f.status] == [("degraded_link", LEAF01, 1)]


def test_the_check_runs_only_where_the_discovery_reads_lids() -> None:
    """LLDP (the Ethernet discovery) knows no LIDs: no host_lids, no status of this check (absent, never OK)."""
    def present(d: DiscoveryData) -> set[str]:
        st = SourceState(name="discovery", enabled=True, interval=1, timeout=1, records=DiscoveryData, up=True,
                         ran=True, data=d, data_time=1.0)
        return FabricChecks.present({"discovery": st}, pause=False)
    assert "host_lids" in present(DiscoveryData(reads_lids=True))
    assert "topology" in present(DiscoveryData(links_are_up=False)) and "host_lids" not in present(DiscoveryData())


def test_the_real_director_capture_as_it_came_every_lidless_port_once() -> None:
    """The capture (a PuTTY log of a real 400-switch HDR fabric) holds 631 host ports printed `lid 65535`: each
    is one WARNING on its switch port, naming its host and port GUID; no other port of the capture is."""
    skip_without_captures(RAW_DIRECTOR)
    raw = RAW_DIRECTOR.read_bytes().decode()
    want = {}                                            # what the capture says, read apart from the parser
    switch = None
    for line in raw.replace("\r", "\n").split("\n"):
        m = re.match(r'^Switch\s*\d+\s*"S-([0-9a-f]+)"', line)
        if m:
            switch = m[1]
        elif line.startswith("Ca"):
            switch = None
        elif switch and (m := re.match(r'^\[(\d+)\]\s*"H-[0-9a-f]+"\[\d+\]\(([0-9a-f]+)\)\s*# "([^"]*)" lid 65535 ', line)):
            guid = m[2].rjust(16, "0")          # the host: its description's first word, its GUID where that is default
            want[(switch, int(m[1]))] = (guid, f"0x{guid}" if default_description(m[3]) else m[3].split()[0])
    assert len(want) == 631
    snap = fabric_snapshot(raw, sweeps=1)
    found = unconfigured(snap)
    assert set(found) == set(want)
    for key, (guid, host) in want.items():
        assert f"host {host} port 1 (CA 0x{guid}, port GUID 0x{guid}) has no LID (lid 65535)" in found[key], found[key]
    assert not [f for f in snap.findings if f.check == "degraded_link" and (f.device, f.port) in want]


def test_a_port_without_a_lid_is_no_route_destination_and_no_mads_target() -> None:
    """What the printed 65535 would have been taken for: a CA LID every leaf routes to (LID 0xFFFF, past every
    forwarding table), and the far end a MAD is LID-routed to (0xFFFF is the permissive LID)."""
    from fabricmon.checks.fabric_routing import ca_lids_below
    from fabricmon.model.fabric import build_topology
    from fabricmon.parsers.ibnetdiscover import parse_ibnetdiscover
    from fabricmon.sources.infiniband.mad.reader import plan_targets
    topo = build_topology(parse_ibnetdiscover(fat_tree(node01=65535, node04=0)))
    every, below = ca_lids_below(topo)
    assert every == {0x101, 0x102} and below[LEAF01] == {0x101} and below[LEAF02] == {0x102}
    targets, _ = plan_targets(topo, set(topo.switches))
    peers = {(t.guid, p): lid for t in targets for p, lid, _ in t.peers}
    assert peers == {(LEAF01, 2): 0x101, (LEAF02, 1): 0x102}
