"""The Ethernet collector against real switches: LibreNMS's recordings of an Arista EOS, a Dell
OS10, a Dell Enterprise SONiC, a Dell OS9, a Junos QFX, an Extreme SLX and a Cisco NX-OS switch
(five vendors; tests/fixtures/snmprec/librenms, PROVENANCE.md there), served by the real snmpsim,
read by the real collector over SNMPv2c, asserted over real HTTP against what the files hold.

What the files hold and the collector must get right (docs/ethernet.md): only physical ports are
fabric ports (LAGs, VLAN interfaces, loopbacks, tunnels, Junos logical units and management ports
are not); `port_up` is ifOperStatus on every fabric port, neighbour or not; LLDP IDs are decoded by
their subtype (a MAC written as text or as octets reads aa:bb:cc:dd:ee:ff, a local port ID as its
text); the text-recorded lldpRemSysCapEnabled is unknown (so those neighbours are hosts); a name
two fabric ports share is labelled apart (SLX); the seven switches share the sanitised sysName
"<private>", so each is named with its address; and no series is written twice. The recordings' counters are static."""

from __future__ import annotations

import re
import time
from pathlib import Path

import pytest

from helpers import REPO, community_file, duplicate_series, sample_value, scrape_text, unavailable, wait_for_scrape

from fabricmon.sim.ethernet import SnmpSimFabric, recorded, tools_available

DIR = REPO / "tests" / "fixtures" / "snmprec" / "librenms"
VENDORS = ("arista_eos_vrf", "dell-os10", "dell-sonic", "dnos", "junos_qfx5100", "slxos_slx9150", "nxos_n3k-3064pq")
SWEEP = 2.0


def snmprec(name: str) -> dict[str, tuple[str, str]]:
    """A recording as it is: OID -> (tag, value)."""
    out = {}
    for line in (DIR / f"{name}.snmprec").read_text().splitlines():
        oid, tag, value = line.split("|", 2)
        out[oid] = (tag, value)
    return out


def column(rec: dict, prefix: str) -> dict[int, str]:
    """ifIndex -> value of one IF-MIB column of a recording."""
    return {int(oid[len(prefix) + 1:]): v for oid, (_, v) in rec.items() if oid.startswith(prefix + ".")}


def physical(rec: dict) -> dict[int, str]:
    """What the files hold, by the rule of docs/ethernet.md: ifIndex -> label of each fabric port
    (ifType 6, ifConnectorPresent not false, not a management port): its name, or `name#ifIndex`
    where two fabric ports share the name."""
    types = column(rec, "1.3.6.1.2.1.2.2.1.3")
    names = column(rec, "1.3.6.1.2.1.31.1.1.1.1")
    descr = column(rec, "1.3.6.1.2.1.2.2.1.2")
    conn = column(rec, "1.3.6.1.2.1.31.1.1.1.17")
    out = {}
    for i, t in types.items():
        name = names.get(i) or descr.get(i) or f"ifIndex {i}"
        if t == "6" and conn.get(i) != "2" and not re.fullmatch(r"eth0|mgmt.*|Management.*|em0", name):
            out[i] = name
    shared = {n for n in out.values() if list(out.values()).count(n) > 1}
    return {i: f"{n}#{i}" if n in shared else n for i, n in out.items()}


def _require() -> None:
    ok, why = tools_available()
    if not ok:
        unavailable(why)


@pytest.fixture(scope="module")
def real(tmp_path_factory):
    _require()
    from fabricmon.config import from_dict
    from fabricmon.host import LiveIO
    from fabricmon.pipeline.fabric import fabric_pipeline
    from fabricmon.serve.daemon import Daemon
    tmp = tmp_path_factory.mktemp("ethreal")
    switches = [recorded(v, DIR / f"{v}.snmprec") for v in VENDORS]
    fab = SnmpSimFabric(switches, tmp / "sim").start()
    comm = community_file(tmp)
    cfg = from_dict({"server": {"address": "127.0.0.1", "collect": ["default", "state"]}, "paths": {"state_dir": str(tmp / "state")},
                     "fabric": {"port": 0, "kind": "ethernet", "sweep_interval": SWEEP, "discovery_interval": 300,
                                "timeouts": {"sweep": 8, "discovery": 20},
                                "ethernet": {"switches": fab.addresses(),
                                             "snmp": {"community_file": str(comm), "timeout": 2, "retries": 1}}}})
    (tmp / "state" / "fabric").mkdir(parents=True, exist_ok=True)
    io = LiveIO(cfg.sysfs, cfg.procfs)
    d = Daemon(cfg, io, port=0, pipeline=fabric_pipeline(cfg, io))
    d.start()
    try:
        addr = fab.endpoints
        # every switch discovered and swept (its ports' state read: a sweep answered in full) before any
        # test looks; a loaded snmpsim may leave a switch unanswered in the first sweeps
        wait_for_scrape(d.port, lambda s: all(
            sample_value(s, "fabricmon_fabric_switch_info", switch_guid=addr[v], switch=f"<private> ({addr[v]})",
                         level=_level(s, addr[v])) == 1
            and sample_value(s, "fabricmon_fabric_switch_last_read_timestamp_seconds", switch_guid=addr[v],
                             switch=f"<private> ({addr[v]})") is not None for v in VENDORS)
            and (sample_value(s, "fabricmon_source_runs_total", source="sweep") or 0) >= 2
            and sample_value(s, "fabricmon_source_up", source="sweep") == 1, 90)
        yield fab, d
    finally:
        d.stop()
        fab.stop()


def _level(s: dict, guid: str) -> str:
    return next((dict(k[1])["level"] for k in s if k[0] == "fabricmon_fabric_switch_info"
                 and dict(k[1]).get("switch_guid") == guid), "?")


def _series(s: dict, name: str, guid: str) -> dict[str, dict]:
    """port label -> labels of one metric's series on one switch."""
    return {dict(k[1])["port"]: dict(k[1]) | {"value": v} for k, v in s.items()
            if k[0] == name and dict(k[1]).get("switch_guid") == guid}


def test_only_physical_ports_are_fabric_ports_and_their_state_is_ifoperstatus(real) -> None:
    """On every vendor: the fabric ports are exactly the physical interfaces the file holds, each
    named by its ifName, and port_up is that port's ifOperStatus, with an LLDP neighbour or not."""
    fab, d = real
    s = wait_for_scrape(d.port, lambda s: True, 5)
    for v in VENDORS:
        rec = snmprec(v)
        want = physical(rec)
        oper = column(rec, "1.3.6.1.2.1.2.2.1.8")
        up = _series(s, "fabricmon_fabric_port_up", fab.endpoints[v])
        assert set(up) == set(want.values()), (v, sorted(set(up) ^ set(want.values()))[:10])
        for i, name in want.items():
            assert up[name]["value"] == (1 if oper[i] == "1" else 0), (v, name, oper[i])
    # what that means on these switches
    by = {v: _series(s, "fabricmon_fabric_port_up", fab.endpoints[v]) for v in VENDORS}
    assert len(by["dell-os10"]) == 30 and "mgmt1/1/1" not in by["dell-os10"] and "port-channel1" not in by["dell-os10"]
    assert len(by["dell-sonic"]) == 54 and "eth0" not in by["dell-sonic"] and "Vlan1" not in by["dell-sonic"]
    assert len(by["arista_eos_vrf"]) == 24 and "Management1" not in by["arista_eos_vrf"]
    assert sorted(by["junos_qfx5100"]) == ["ge-0/0/45", "ge-0/0/46", "ge-0/0/47", "xe-0/0/0", "xe-0/0/1",
                                           "xe-0/0/2", "xe-0/0/3", "xe-0/0/4", "xe-0/0/5"]
    assert len(by["dnos"]) == 94 and not any(p.startswith(("Port-channel", "Vlan", "Management", "NULL"))
                                             for p in by["dnos"])
    # Extreme SLX: 25 names that two fabric ports share (IF-MIB does not promise a unique ifName), each
    # labelled name#ifIndex; a name whose twin has no connector stays plain
    slx = by["slxos_slx9150"]
    assert len(slx) == 77 and sum("#" in p for p in slx) == 50
    assert {"Ethernet 0/3#201351168", "Ethernet 0/3#201351488", "Ethernet 0/1"} <= set(slx)
    assert not any(p.startswith(("Port-channel", "Loopback", "eth0", "Ethernet 0/1#")) for p in slx)
    # Cisco NX-OS: the ten ports with a connector; mgmt0 and port-channel10 are no fabric ports
    nxos = by["nxos_n3k-3064pq"]
    assert len(nxos) == 10 and "mgmt0" not in nxos and "port-channel10" not in nxos
    # up with no LLDP neighbour (SONiC Eth1/1 has none): up, not down; a down port reads down
    links = _series(s, "fabricmon_fabric_link_info", fab.endpoints["dell-sonic"])
    assert links["Eth1/1"]["role"] == "unconnected" and by["dell-sonic"]["Eth1/1"]["value"] == 1
    assert by["dell-sonic"]["Eth1/3"]["value"] == 0
    assert by["arista_eos_vrf"]["Ethernet1"]["value"] == 1 and by["arista_eos_vrf"]["Ethernet2"]["value"] == 0


def test_lldp_ids_are_decoded_by_subtype_and_every_neighbour_is_a_host_or_a_switch(real) -> None:
    fab, d = real
    s = wait_for_scrape(d.port, lambda s: True, 5)
    os10 = _series(s, "fabricmon_fabric_link_info", fab.endpoints["dell-os10"])
    # Hex-STRING chassis IDs (subtype 4) read as MACs; port IDs as names (5) and local (7) as text
    assert {k: (v["remote_guid"], v["remote_port"], v["remote_name"], v["role"]) for k, v in os10.items()
            if v["role"] != "unconnected"} == {
        "ethernet1/1/25": ("4c:d9:8f:fb:1e:fe", "ethernet1/1/25", "1007-lan-2", "host"),
        "ethernet1/1/26": ("4c:d9:8f:fb:1e:fe", "ethernet1/1/26", "1007-lan-2", "host"),
        "ethernet1/1/29": ("e4:fc:82:36:23:c0", "517", "core-1", "host"),
        "ethernet1/1/30": ("f4:8e:38:55:de:f6", "TenGigabitEthernet 1/43", "Not Advertised", "host")}
    # SONiC: chassis and port IDs recorded as text MACs read as MACs; the sanitised ones as their text
    sonic = _series(s, "fabricmon_fabric_link_info", fab.endpoints["dell-sonic"])
    assert (sonic["Eth1/19"]["remote_guid"], sonic["Eth1/19"]["remote_port"]) == \
        ("74:86:e2:0a:0c:04", "74:86:e2:0a:0c:04")
    assert (sonic["Eth1/47"]["remote_guid"], sonic["Eth1/47"]["remote_port"]) == ("xxxxx-T00634I", "c4:5a:b1:e0:c0:f5")
    assert sonic["Eth1/53"]["remote_port"] == "Eth1/54" and sonic["Eth1/53"]["remote_name"] == "xxxxx-xxx-xxx-sw-dist01"
    assert sum(1 for v in sonic.values() if v["role"] != "unconnected") == 22    # 23 entries, one on eth0
    # Dell OS9's chassis IDs recorded as "e4 f0 04 fb 1f fb" text; Junos local port IDs as text
    os9 = _series(s, "fabricmon_fabric_link_info", fab.endpoints["dnos"])
    assert (os9["fortyGigE 1/49"]["remote_guid"], os9["fortyGigE 1/49"]["remote_port"]) == \
        ("e4:f0:04:fb:1f:fb", "fortyGigE 1/50")
    assert os9["fortyGigE 1/54"]["remote_guid"] == "e4:f0:04:e1:89:18"
    junos = _series(s, "fabricmon_fabric_link_info", fab.endpoints["junos_qfx5100"])
    assert (junos["xe-0/0/0"]["remote_guid"], junos["xe-0/0/0"]["remote_port"], junos["xe-0/0/0"]["remote_name"]) == \
        ("50:c5:8d:12:34:56", "2150", "devicea")
    # NX-OS: a Hex-STRING MAC chassis ID, a port ID by name
    nxos = _series(s, "fabricmon_fabric_link_info", fab.endpoints["nxos_n3k-3064pq"])
    assert (nxos["Ethernet1/49"]["remote_guid"], nxos["Ethernet1/49"]["remote_port"], nxos["Ethernet1/49"]["role"]) \
        == ("18:e7:28:92:28:78", "Ethernet1/49", "host")
    # SLX: LLDP local port 3 is the second of the two "Ethernet 0/3" (BRIDGE-MIB: ifIndex 201351488); its
    # neighbour is on that one, not on both, and no neighbour is lost to a shared name
    slx = _series(s, "fabricmon_fabric_link_info", fab.endpoints["slxos_slx9150"])
    assert slx["Ethernet 0/3#201351488"]["role"] == "host" and slx["Ethernet 0/3#201351168"]["role"] == "unconnected"
    assert sum(1 for v in slx.values() if v["role"] != "unconnected") == 31
    # every label printable, no MAC as mangled text, no empty ID as "0"
    for k, v in s.items():
        if k[0] == "fabricmon_fabric_link_info":
            labels = dict(k[1])
            assert all(ch.isprintable() for x in labels.values() for ch in x), labels
            assert "\ufffd" not in labels["remote_port"] and labels["remote_port"] != "0", labels


def test_no_series_twice_and_switches_named_apart(real) -> None:
    fab, d = real
    body = scrape_text(d.port)
    assert duplicate_series(body) == []
    names = set(re.findall(r'fabricmon_fabric_switch_info\{[^}]*switch="([^"]*)"', body))
    assert names == {f"<private> ({a})" for a in fab.addresses()}


def test_a_first_discovery_claims_no_history(tmp_path: Path) -> None:
    """A port that LLDP lists but the switch reads down at the first discovery and sweep: down,
    and the finding does not say it was up at an earlier discovery (there was none)."""
    _require()
    from fabricmon.config import from_dict
    from fabricmon.host import LiveIO
    from fabricmon.pipeline.fabric import fabric_pipeline
    text = (DIR / "dell-os10.snmprec").read_text()
    # ethernet1/1/25 (ifIndex 37) carries an LLDP neighbour; the copy reads it down
    text = text.replace("1.3.6.1.2.1.2.2.1.8.37|2|1", "1.3.6.1.2.1.2.2.1.8.37|2|2")
    (tmp_path / "os10.snmprec").write_text(text)
    comm = community_file(tmp_path)
    with SnmpSimFabric([recorded("os10", tmp_path / "os10.snmprec")], tmp_path / "sim") as fab:
        cfg = from_dict({"paths": {"state_dir": str(tmp_path / "state")},
                         "fabric": {"kind": "ethernet", "ethernet": {"switches": fab.addresses(), "snmp": {
                             "community_file": str(comm), "timeout": 1, "retries": 1}}}})
        pipe = fabric_pipeline(cfg, LiveIO())
        try:
            snap = pipe.collect()
            time.sleep(0.1)         # what is tested: a second sweep, later (the intake drops a sample no later)
            snap = pipe.collect()
        finally:
            pipe.close()
    down = [f for f in snap.findings if f.status > 0 and "link is down" in f.message]
    assert len(down) == 1, [f.message for f in snap.findings]
    assert "ethernet1/1/25" in down[0].message
    assert "earlier discovery" not in down[0].message and "no read has seen it up" in down[0].message
