"""One key tuple a switch port (issue 49, docs/scale.md "Memory"): every record keyed by a port holds the same
(GUID, port) object, so a fabric of 25,000 cabled ports keeps one 56-byte tuple a port, not six."""

from __future__ import annotations

from fabric_snap import ibnetdiscover_text
from fabricmon.model.fabric import FabricSection, build_topology, port_key
from fabricmon.parsers.ibnetdiscover import parse_ibnetdiscover
from fabricmon.pipeline.fabric_state import LinkEvidence
from fabricmon.pipeline.fabric_topology import FabricTopology
from fabricmon.sim.fabric import fat_tree_netfile


def test_one_tuple_a_port():
    a = port_key("0000000000200000", 1)
    assert a == ("0000000000200000", 1)
    assert port_key("0000000000200000", 1) is a
    assert port_key("0000000000200000", 2) is not a


def test_the_topology_and_a_section_share_the_ports_keys():
    topo = build_topology(parse_ibnetdiscover(ibnetdiscover_text(fat_tree_netfile(spines=2, leaves=2,
                                                                                  hosts_per_leaf=2))))
    sec = FabricSection()
    FabricTopology(LinkEvidence(7), None).ports(topo, sec)
    assert sec.ports and set(sec.ports) == set(topo.ports)
    keys = {k: k for k in topo.ports}
    assert all(keys[k] is k for k in sec.ports)
    assert all(port_key(*k) is k for k in sec.ports)
