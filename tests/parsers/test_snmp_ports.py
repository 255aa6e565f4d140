"""The Ethernet port model and LLDP as real switches send them (docs/ethernet.md): which interfaces
are fabric ports, how a shared ifName is made unique, LLDP IDs decoded by their subtype,
lldpRemSysCapEnabled, several neighbours on one port, and switch names an operator can tell apart.
The end-to-end view over the recorded switches is tests/sim/test_ethernet_recordings.py."""

from __future__ import annotations

import pytest

from helpers import duplicate_series

from fabricmon.config import ConfigError, from_dict
from fabricmon.model.fabric import DiscoveryData, build_topology
from fabricmon.model.snapshot import BuildStats, Snapshot, SourceState
from fabricmon.parsers.snmp import Octets, SwitchIdentity, decode_caps, decode_id, identity_from_walks
from fabricmon.pipeline.fabric import FabricModel
from fabricmon.sources.ethernet.discovery import build_graph, switch_names


def test_lldp_ids_read_by_subtype() -> None:
    mac = bytes.fromhex("001b21aabbcc")                    # \x00\x1b! ... printed garbled as text before
    assert decode_id(3, Octets(mac, False), 3, 4) == "00:1b:21:aa:bb:cc"
    assert decode_id(4, Octets(mac, False), 4, 5) == "00:1b:21:aa:bb:cc"
    # a MAC a recording (or an agent) writes as text, in any of its spellings
    for text in ("74:86:e2:0a:0c:04", "74-86-E2-0A-0C-04", "74 86 e2 0a 0c 04", "7486e20a0c04"):
        assert decode_id(4, Octets(text.encode(), True), 4, 5) == "74:86:e2:0a:0c:04", text
    assert decode_id(4, Octets(b"0:1c:73:b3:bd:72", True), 4, 5) == "00:1c:73:b3:bd:72"
    # a network address: IANA family octet then the address
    assert decode_id(4, Octets(bytes([1, 192, 168, 25, 217]), False), 3, 4) == "192.168.25.217"
    assert decode_id(5, Octets(bytes([2]) + bytes(15) + b"\x01", False), 4, 5) == "::1"
    # a name, an alias, a local ID: its text; a sanitised "MAC" stays what it says
    assert decode_id(5, Octets(b"Ethernet1/1", True), 3, 4) == "Ethernet1/1"
    assert decode_id(7, Octets(b"517", True), 3, 4) == "517"
    assert decode_id(4, Octets(b"xxxxx-T00634I", True), 4, 5) == "xxxxx-T00634I"
    # unprintable: hex, never mangled text; empty: absent, never "0"
    assert decode_id(5, Octets(b"\xff\xfe\x00", False), 3, 4) == "ff:fe:00"
    assert decode_id(7, Octets(b"", True), 3, 4) == "" and decode_id(7, None, 3, 4) == ""
    # no subtype: six unprintable octets are a MAC, text is text
    assert decode_id(None, Octets(mac, False), 3, 4) == "00:1b:21:aa:bb:cc"


def test_names_that_are_not_text_read_as_hex_never_mangled() -> None:
    """A sysName or port description an agent sends as unprintable octets (Hex-STRING) reads as
    hex; UTF-8 text (which net-snmp prints as Hex-STRING when it is not ASCII) as its text."""
    ident = identity_from_walks({"lldp_remote":
                                 ".1.0.8802.1.1.2.1.4.1.1.5.0.1.1 = Hex-STRING: 0C 42 A1 00 02 00 \n"
                                 ".1.0.8802.1.1.2.1.4.1.1.8.0.1.1 = Hex-STRING: FF FE 01 \n"
                                 ".1.0.8802.1.1.2.1.4.1.1.9.0.1.1 = Hex-STRING: 73 77 C3 A9 00 \n"})
    (n,) = ident.neighbours
    assert (n.port_desc, n.sys_name) == ("ff:fe:01", "sw\u00e9")


def test_system_capabilities_are_bits_and_text_recordings_are_unknown() -> None:
    assert decode_caps(Octets(b"\x28\x00", False)) == {"bridge", "router"}
    assert decode_caps(Octets(b"\x20", False)) == {"bridge"}
    assert decode_caps(Octets(b"\x80\x00", False)) == {"other"}
    assert decode_caps(Octets(b"(", True)) == {"bridge", "router"}   # 0x28 printed as text
    for text in (b"28 00 2 4", b"30 30 2 3 10 11", b"68 1 2 4", b"08"):   # as LibreNMS records them
        assert decode_caps(Octets(text, True)) is None, text
    assert decode_caps(None) is None and decode_caps(Octets(b"", True)) is None


def _ident(ifaces: dict[int, dict], neighbours: str = "", sys_name: str = "sw", chassis: str = "0C 42 A1 00 00 01",
           stack: str = "") -> SwitchIdentity:
    ift = "".join(f'.1.3.6.1.2.1.2.2.1.2.{i} = STRING: "{f["name"]}"\n'
                  f".1.3.6.1.2.1.2.2.1.3.{i} = INTEGER: {f.get('type', 6)}\n" for i, f in ifaces.items())
    ifx = "".join(f'.1.3.6.1.2.1.31.1.1.1.1.{i} = STRING: "{f["name"]}"\n' for i, f in ifaces.items())
    ifx += "".join(f".1.3.6.1.2.1.31.1.1.1.17.{i} = INTEGER: {f['connector']}\n"
                   for i, f in ifaces.items() if "connector" in f)
    return identity_from_walks({"system": f'.1.3.6.1.2.1.1.5.0 = STRING: "{sys_name}"\n',
                                "lldp_local": ".1.0.8802.1.1.2.1.3.1.0 = INTEGER: 4\n"
                                              f".1.0.8802.1.1.2.1.3.2.0 = Hex-STRING: {chassis} \n",
                                "if_table": ift, "ifx_table": ifx, "lldp_remote": neighbours, "if_stack": stack})


def test_a_fabric_port_is_physical_and_its_label_is_unique() -> None:
    """Extreme SLX names two interfaces `Ethernet 0/1`: both stay, as `<name>#<ifIndex>`; LAGs,
    VLAN interfaces, loopbacks, Junos logical units, a port without a connector and a management
    port are not fabric ports."""
    ident = _ident({201334784: {"name": "Ethernet 0/1"}, 402661376: {"name": "Ethernet 0/1"},
                    201342976: {"name": "Ethernet 0/2"}, 805306369: {"name": "eth0"},
                    1207959753: {"name": "Ve 201", "type": 136}, 43: {"name": "port-channel1", "type": 161},
                    6: {"name": "lo0", "type": 24}, 514: {"name": "xe-0/0/0.0", "type": 53},
                    23: {"name": "em1", "connector": 2}, 10: {"name": "mgmt1/1/1"}})
    ports = ident.fabric_ports(("eth0", "mgmt.*", "Management.*", "em0"))
    assert ports.labels == {201334784: "Ethernet 0/1#201334784", 402661376: "Ethernet 0/1#402661376",
                            201342976: "Ethernet 0/2"}
    assert ports.disambiguated == 2
    assert ports.excluded == {805306369: "management port (fabric.ethernet.exclude_ports)",
                              1207959753: "virtual (ifType l3ipvlan)", 43: "virtual (ifType ieee8023adLag)",
                              6: "virtual (ifType softwareLoopback)", 514: "virtual (ifType propVirtual)",
                              23: "no connector (ifConnectorPresent false)",
                              10: "management port (fabric.ethernet.exclude_ports)"}
    # the config decides what a management port is
    assert set(ident.fabric_ports(()).labels) == {201334784, 402661376, 201342976, 805306369, 10}
    d = build_graph({"10.0.0.1": ident}, {})
    (sw,) = d.switches.values()
    assert sorted(sw.port_names.values()) == ["Ethernet 0/1#201334784", "Ethernet 0/1#402661376", "Ethernet 0/2"]
    assert sw.excluded_ports["port-channel1"] == "virtual (ifType ieee8023adLag)"


def test_exclude_ports_config_is_regexes() -> None:
    base = {"kind": "ethernet", "ethernet": {"switches": ["a"], "snmp": {"community": "x"}}}
    cfg = from_dict({"fabric": base})
    assert cfg.fabric.ethernet.exclude_ports == ("eth0", "mgmt.*", "Management.*", "em0")
    base["ethernet"]["exclude_ports"] = ["oob.*"]
    assert from_dict({"fabric": base}).fabric.ethernet.exclude_ports == ("oob.*",)
    for bad, key in ((["x("], "fabric.ethernet.exclude_ports[0]"), ("eth0", "fabric.ethernet.exclude_ports"),
                     ([3], "fabric.ethernet.exclude_ports[0]")):
        base["ethernet"]["exclude_ports"] = bad
        with pytest.raises(ConfigError) as exc:
            from_dict({"fabric": base})
        assert exc.value.key == key


def _rem(port: int, idx: int, chassis: str, port_id: str, name: str, caps: str = "", port_sub: int = 5) -> str:
    r = f"0.{port}.{idx}"
    out = (f".1.0.8802.1.1.2.1.4.1.1.4.{r} = INTEGER: 4\n.1.0.8802.1.1.2.1.4.1.1.5.{r} = Hex-STRING: {chassis} \n"
           f".1.0.8802.1.1.2.1.4.1.1.6.{r} = INTEGER: {port_sub}\n.1.0.8802.1.1.2.1.4.1.1.7.{r} = {port_id}\n"
           f'.1.0.8802.1.1.2.1.4.1.1.9.{r} = STRING: "{name}"\n')
    return out + (f".1.0.8802.1.1.2.1.4.1.1.12.{r} = Hex-STRING: {caps} \n" if caps else "")


def test_a_bridge_outside_the_fabric_is_external_and_several_neighbours_are_all_kept() -> None:
    leaf = _ident({1: {"name": "Ethernet0"}, 2: {"name": "Ethernet4"}, 3: {"name": "Ethernet8"}},
                  _rem(1, 1, "AA BB CC 00 00 01", 'Hex-STRING: 00 1B 21 AA BB CC ', "node01", port_sub=3)
                  + _rem(2, 1, "AA BB CC 00 00 02", 'STRING: "xe-0/0/1"', "border01", caps="28 00")
                  + _rem(3, 1, "AA BB CC 00 00 03", 'STRING: "eth1"', "node02")
                  + _rem(3, 2, "0C 42 A1 00 00 02", 'STRING: "Ethernet0"', "spine01", caps="20 00")
                  + _rem(3, 3, "AA BB CC 00 00 04", 'STRING: "eth1"', "node03"),
                  sys_name="leaf01")
    spine = _ident({1: {"name": "Ethernet0"}}, sys_name="spine01", chassis="0C 42 A1 00 00 02")
    d = build_graph({"10.0.0.1": leaf, "10.0.0.2": spine}, {})
    sw = d.switches["0c:42:a1:00:00:01"]
    host, ext, shared = sw.links[1], sw.links[2], sw.links[3]
    assert (host.remote_type, host.remote_port_name) == ("Host", "00:1b:21:aa:bb:cc")
    assert (ext.remote_type, ext.remote_name, ext.remote_port_name) == ("External", "border01", "xe-0/0/1")
    # three neighbours on Ethernet8: the configured switch is the link, all three are kept
    assert (shared.remote_type, shared.remote_name, shared.remote_port_name) == ("Switch", "spine01", "Ethernet0")
    assert sw.neighbours[3] == ("node02[eth1] (aa:bb:cc:00:00:03)", "spine01[Ethernet0] (0c:42:a1:00:00:02)",
                                "node03[eth1] (aa:bb:cc:00:00:04)")
    assert set(d.cas) == {"aa:bb:cc:00:00:01"}          # the border router is no host
    topo = build_topology(d)
    assert topo.ports[("0c:42:a1:00:00:01", 2)].role == "external"
    assert topo.ports[("0c:42:a1:00:00:01", 1)].role == "host"


def test_switch_names_an_operator_can_tell_apart() -> None:
    idents = {"10.0.0.1": SwitchIdentity(sys_name="sonic"), "10.0.0.2": SwitchIdentity(sys_name="SONiC"),
              "10.0.0.3": SwitchIdentity(sys_name=""), "10.0.0.4": SwitchIdentity(sys_name="leaf01"),
              "10.0.0.5": SwitchIdentity(sys_name="spine"), "10.0.0.6": SwitchIdentity(sys_name="spine"),
              "10.0.0.7": SwitchIdentity(sys_name="switch")}
    assert switch_names(idents) == {"10.0.0.1": "sonic (10.0.0.1)", "10.0.0.2": "SONiC (10.0.0.2)",
                                    "10.0.0.3": "10.0.0.3", "10.0.0.4": "leaf01", "10.0.0.5": "spine (10.0.0.5)",
                                    "10.0.0.6": "spine (10.0.0.6)", "10.0.0.7": "switch (10.0.0.7)"}


def _snapshot(d: DiscoveryData) -> Snapshot:
    """The fabric collector's snapshot of one discovery (no sweep yet), built by the real model."""
    cfg = from_dict({"fabric": {"kind": "ethernet", "ethernet": {"switches": ["10.0.0.1"], "snmp": {"community": "x"}}}})
    st = SourceState(name="DiscoveryData", enabled=True, interval=1, timeout=1, records=DiscoveryData, up=True,
                     data=d, data_time=1.0, ran=True)
    sections, findings = FabricModel(cfg, clock=lambda: 2.0).build({"discovery": st})
    return Snapshot(time=2.0, findings=findings, sources={}, builds=BuildStats(), fabric=sections["fabric"])


def test_the_map_shows_an_external_switch_apart_from_hosts() -> None:
    """The fabric map counts a port to a bridge outside the fabric as external, not as a host."""
    from fabricmon.pages.fabric_layout import layout
    from fabricmon.pages.fabric_map import svg
    leaf = _ident({1: {"name": "Ethernet0"}, 2: {"name": "Ethernet4"}},
                  _rem(1, 1, "AA BB CC 00 00 01", 'STRING: "eth0"', "node01")
                  + _rem(2, 1, "AA BB CC 00 00 02", 'STRING: "xe-0/0/1"', "border01", caps="08 00"), sys_name="leaf01")
    snap = _snapshot(build_graph({"10.0.0.1": leaf}, {}))
    sec, findings = snap.fabric, snap.findings
    assert {p.role for p in sec.ports.values()} == {"host", "external"}
    lay = layout(sec, findings)
    (box,) = lay.switches.values()
    assert (box.hosts, box.external) == (1, 1)
    assert "1 hosts, 1 external" in svg(lay, sec)


def test_an_slx_with_a_shared_ifname_exposes_no_series_twice() -> None:
    """Two interfaces named `Ethernet 0/1` (each with a neighbour) render as two distinct series
    of every port family; the exposition has no label set twice (before the port model: 501
    duplicated series on a real SLX, one of each pair silently dropped by Prometheus)."""
    from fabricmon.exporter.render import render
    slx = _ident({201334784: {"name": "Ethernet 0/1"}, 402661376: {"name": "Ethernet 0/1"}},
                 _rem(201334784, 1, "AA BB CC 00 00 01", 'STRING: "eth0"', "node01")
                 + _rem(402661376, 1, "AA BB CC 00 00 02", 'STRING: "eth0"', "node02"), sys_name="slx01")
    body = render(_snapshot(build_graph({"10.0.0.1": slx}, {}))).decode()
    assert duplicate_series(body) == []
    assert 'port="Ethernet 0/1#201334784"' in body and 'port="Ethernet 0/1#402661376"' in body
    assert duplicate_series('a{x="1"} 1\na{x="1"} 2\n') == [("a", (("x", "1"),))]


def test_the_switch_page_lists_every_neighbour_of_a_shared_port() -> None:
    from fabricmon.pages.fabric_map import switch
    leaf = _ident({1: {"name": "Ethernet0"}},
                  _rem(1, 1, "AA BB CC 00 00 03", 'STRING: "eth1"', "node02")
                  + _rem(1, 2, "AA BB CC 00 00 04", 'STRING: "eth1"', "node03"), sys_name="leaf01")
    html = switch(_snapshot(build_graph({"10.0.0.1": leaf}, {})), {"guid": "0c:42:a1:00:00:01"})
    assert "2 LLDP neighbours: node02[eth1] (aa:bb:cc:00:00:03), node03[eth1] (aa:bb:cc:00:00:04)" in html


def test_a_lags_members_are_fabric_ports_that_carry_its_name() -> None:
    """ifStackTable puts port-channel1 above ethernet1/1/1 and 1/1/2: the members stay fabric ports
    under their own names and carry the LAG's name (SwitchNode.lags, the switch page); the LAG is
    no port; a VLAN above a port is no LAG; inactive rows and the 0 (top/bottom) rows are ignored."""
    from fabricmon.pages.fabric_map import switch
    ident = _ident({13: {"name": "ethernet1/1/1"}, 14: {"name": "ethernet1/1/2"}, 15: {"name": "ethernet1/1/3"},
                    43: {"name": "port-channel1", "type": 161}, 47: {"name": "vlan1", "type": 135}},
                   _rem(13, 1, "AA BB CC 00 00 01", 'STRING: "eth0"', "node01"),
                   stack="".join(f".1.3.6.1.2.1.31.1.2.1.3.{h}.{lo} = INTEGER: {st}\n" for h, lo, st in
                                 ((0, 43, 1), (43, 13, 1), (43, 14, 1), (43, 15, 2), (47, 15, 1), (13, 0, 1))))
    ports = ident.fabric_ports()
    assert set(ports.labels) == {13, 14, 15} and ports.lags == {13: "port-channel1", 14: "port-channel1"}
    d = build_graph({"10.0.0.1": ident}, {})
    assert d.switches["0c:42:a1:00:00:01"].lags == {13: "port-channel1", 14: "port-channel1"}
    html = switch(_snapshot(d), {"guid": "0c:42:a1:00:00:01"})
    assert "ethernet1/1/1 (port-channel1)</td>" in html
