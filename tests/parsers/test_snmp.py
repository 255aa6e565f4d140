"""parsers.snmp: net-snmp's text to records, the LLDP local-port join (lldpLocPortNum is not always the ifIndex: docs/ethernet.md), the
PFC rows of every vendor MIB; and the SNMP access: secrets never in argv, a private config file."""

from __future__ import annotations

import os
import stat

import pytest

from fabricmon.config import ConfigError, from_dict
from fabricmon.parsers.errors import ParseError
from fabricmon.parsers.snmp import OIDS, WALKS, counters_from_walks, identity_from_walks, parse_lines

IFX = """.1.3.6.1.2.1.31.1.1.1.1.1 = STRING: "mgmt0"
.1.3.6.1.2.1.31.1.1.1.1.101 = STRING: "Ethernet0"
.1.3.6.1.2.1.31.1.1.1.1.102 = STRING: "Ethernet4"
.1.3.6.1.2.1.31.1.1.1.6.101 = Counter64: 18446744073709551615
.1.3.6.1.2.1.31.1.1.1.15.101 = Gauge32: 400000
.1.3.6.1.2.1.31.1.1.1.18.101 = STRING: "to \\"leaf01\\""
"""
IFT = """.1.3.6.1.2.1.2.2.1.2.1 = STRING: "mgmt0"
.1.3.6.1.2.1.2.2.1.2.101 = STRING: "Ethernet1/1"
.1.3.6.1.2.1.2.2.1.2.102 = STRING: "Ethernet1/2"
.1.3.6.1.2.1.2.2.1.8.101 = INTEGER: 1
.1.3.6.1.2.1.2.2.1.8.102 = INTEGER: 2
.1.3.6.1.2.1.2.2.1.14.101 = Counter32: 4294967295
"""


def test_lines_hex_continuations_and_end_of_view() -> None:
    text = (".1.0.8802.1.1.2.1.3.2.0 = Hex-STRING: 0C 42 A1 00 01 00 0C 42 A1 00 01 00 0C 42 A1 00 \n"
            "01 02 \n"
            ".1.3.6.1.4.1.9 = No more variables left in this MIB View (It is past the end of the MIB tree)\n"
            ".1.3.6.1.2.1.1.5.0 = \"\"\n")
    assert parse_lines(text) == [("1.0.8802.1.1.2.1.3.2.0", "Hex-STRING",
                                  "0C 42 A1 00 01 00 0C 42 A1 00 01 00 0C 42 A1 00 01 02"),
                                 ("1.3.6.1.2.1.1.5.0", "STRING", "")]
    with pytest.raises(ParseError):
        parse_lines(".1.3.6 garbage\n")


def test_every_row_belongs_to_a_declared_walk_and_each_pfc_mib_is_a_pair_of_rows() -> None:
    walks = {w.name for w in WALKS}
    assert all(r.walk in walks for r in OIDS)
    pfc = {}
    for r in OIDS:
        if r.field == "pause":
            pfc.setdefault(r.walk, set()).add(r.direction)
    assert pfc == {w: {"tx", "rx"} for w in ("pfc_ieee", "pfc_cisco", "pfc_arista", "pfc_onyx")}


def _lldp(local: str, bridge: str = "") -> dict[str, str]:
    return {"if_table": IFT, "ifx_table": IFX, "lldp_local": local, "bridge_ports": bridge,
            "lldp_remote": ".1.0.8802.1.1.2.1.4.1.1.5.0.1.1 = Hex-STRING: 0C 42 A1 00 02 00 \n"
                           ".1.0.8802.1.1.2.1.4.1.1.6.0.1.1 = INTEGER: 7\n"
                           ".1.0.8802.1.1.2.1.4.1.1.7.0.1.1 = STRING: \"Ethernet8\"\n"
                           ".1.0.8802.1.1.2.1.4.1.1.9.0.1.1 = STRING: \"leaf01\"\n",
            "system": ".1.3.6.1.2.1.1.5.0 = STRING: \"spine01\"\n"}


def test_the_lldp_local_port_joins_by_name_then_bridge_port_then_number() -> None:
    # LLDP port 1 is not ifIndex 1 (mgmt0): its description names Ethernet1/1 (ifDescr) -> 101
    by_desc = identity_from_walks(_lldp('.1.0.8802.1.1.2.1.3.7.1.3.1 = STRING: "0c:42:a1:00:01:01"\n'
                                        '.1.0.8802.1.1.2.1.3.7.1.4.1 = STRING: "Ethernet1/1"\n'))
    assert by_desc.sys_name == "spine01" and by_desc.if_index_of_lldp_port(1) == 101
    (n,) = by_desc.neighbours
    assert (n.local_port_num, n.chassis_id, n.port_name, n.sys_name) == (1, "0c:42:a1:00:02:00", "Ethernet8", "leaf01")
    # nothing matches a name: BRIDGE-MIB dot1dBasePortIfIndex
    by_bridge = identity_from_walks(_lldp('.1.0.8802.1.1.2.1.3.7.1.3.1 = STRING: "port-1"\n',
                                          ".1.3.6.1.2.1.17.1.4.1.2.1 = INTEGER: 101\n"))
    assert by_bridge.if_index_of_lldp_port(1) == 101
    # nothing else: the raw number (SONiC numbers LLDP ports by ifIndex)
    raw = identity_from_walks(_lldp('.1.0.8802.1.1.2.1.3.7.1.3.102 = STRING: "x"\n'))
    assert raw.if_index_of_lldp_port(102) == 102 and raw.if_index_of_lldp_port(7) is None
    # by ifName, and the neighbour's view of our port joined through our own LLDP table
    named = identity_from_walks(_lldp('.1.0.8802.1.1.2.1.3.7.1.3.5 = STRING: "port-5"\n'
                                      '.1.0.8802.1.1.2.1.3.7.1.4.5 = STRING: "Ethernet4"\n'))
    assert named.if_index_of_lldp_port(5) == 102
    assert named.if_index_of_advertised("port-5", "") == 102 and named.if_index_of_advertised("Ethernet0", "") == 101


def test_counters_pfc_by_priority_and_the_per_port_ieee_mib() -> None:
    sc = counters_from_walks({
        "if_table": IFT, "ifx_table": IFX,
        "pfc_cisco": ".1.3.6.1.4.1.9.9.813.1.2.1.2.101.3 = Counter64: 500\n"
                     ".1.3.6.1.4.1.9.9.813.1.2.1.3.101.3 = Counter64: 7\n"})
    assert sc.counters[101] == {"receive_bytes": 2**64 - 1, "receive_errors": 2**32 - 1}
    assert sc.bits == {"receive_bytes": 64, "receive_errors": 32}
    assert sc.oper_status == {101: 1, 102: 2} and sc.speed_mbps == {101: 400000}
    assert sc.pause == {101: {(3, "tx"): 500, (3, "rx"): 7}}
    ieee = counters_from_walks({"pfc_ieee": ".1.3.111.2.802.1.1.21.1.1.1.2.101 = Counter64: 9\n"})
    assert ieee.pause == {101: {(-1, "tx"): 9}}


# --- config and access ------------------------------------------------------------------------

def _eth(tmp_path, **snmp):
    return {"fabric": {"kind": "ethernet", "ethernet": {"switches": ["127.0.0.1:1161", "spine01.example"],
                                                        "snmp": snmp}}}


def test_switches_that_fail_alike_are_one_message_naming_each_and_counted_each() -> None:
    """Issue 53: two dead switches were `switch A: no answer (+1 more)`; now one message names every one of
    them (the first NAMED_SWITCHES and a count), recorded once per switch so that the error counter still
    counts switches; switches that failed otherwise keep their own message."""
    from fabricmon.pipeline.source import SourceOutput
    from fabricmon.sources.ethernet.snmp import NAMED_SWITCHES, switch_errors, switch_label
    out = SourceOutput()
    switch_errors(out, [("leaf01 (10.0.0.1)", "timeout", "no answer"), ("10.0.0.9", "parse", "bad OID"),
                        ("leaf02 (10.0.0.2)", "timeout", "no answer")])
    assert out.errors == [("timeout", "2 switches leaf01 (10.0.0.1), leaf02 (10.0.0.2): no answer")] * 2 + [
        ("parse", "switch 10.0.0.9: bad OID")]
    many = SourceOutput()
    n = NAMED_SWITCHES + 4
    switch_errors(many, [(f"10.0.0.{i}", "timeout", "no answer") for i in range(n)])
    assert len(many.errors) == n and len(set(many.errors)) == 1
    shown = ", ".join(f"10.0.0.{i}" for i in range(NAMED_SWITCHES))
    assert many.errors[0] == ("timeout", f"{n} switches {shown} and 4 more: no answer")
    assert switch_errors(SourceOutput(), []) is None
    assert switch_label("leaf01", "10.0.0.1") == "leaf01 (10.0.0.1)" and switch_label("10.0.0.1", "10.0.0.1") == "10.0.0.1"


def test_a_loose_secret_file_is_warned_about_once_logged_or_said(tmp_path) -> None:
    """One warning, two outlets: `fabric run` logs it, `fabric once` (quiet logs) is given it to print."""
    from structlog.testing import capture_logs

    from fabricmon.sources.ethernet import snmp as s
    secret = tmp_path / "community"
    secret.write_text("public\n")
    secret.chmod(0o640)
    cfg = from_dict(_eth(tmp_path, community_file=str(secret)), check_paths=True).fabric.ethernet.snmp
    said: list[tuple[str, list[str]]] = []
    s.warn_loose(cfg, lambda what, files: said.append((what, files)))
    assert said == [(s.LOOSE_SECRETS, [f"{secret} (mode 640)"])]
    with capture_logs() as logs:
        s.warn_loose(cfg)                       # said already in this process: not again
        s._warned.clear()
        s.warn_loose(cfg)
    assert logs == [{"event": s.LOOSE_SECRETS, "files": [f"{secret} (mode 640)"], "log_level": "warning"}]


def test_config_names_the_key_and_never_the_secret(tmp_path) -> None:
    secret = tmp_path / "community"
    secret.write_text("s3cret-community\n")
    secret.chmod(0o644)
    cfg = from_dict(_eth(tmp_path, community_file=str(secret)), check_paths=True)
    s = cfg.fabric.ethernet.snmp
    assert s.community == "s3cret-community" and s.loose_files == (f"{secret} (mode 644)",)
    assert "s3cret" not in repr(cfg.fabric)
    assert cfg.fabric.ethernet.switches == ("127.0.0.1:1161", "spine01.example")
    assert set(cfg.fabric.sources) == {"discovery", "sweep", "optics", "vitals", "slurm_jobs", "slurm_topology"}   # jobs and the scheduler's topology are kind-neutral
    for bad, key in ((_eth(tmp_path, community_file=str(tmp_path / "nope")), "fabric.ethernet.snmp.community_file"),
                     (_eth(tmp_path, version="3", user="mon", auth_password="short", priv_password="longenough"),
                      "fabric.ethernet.snmp.auth_password"),
                     (_eth(tmp_path, version="3", user="mon", auth_password="longenough", priv_password="longenough",
                           auth_protocol="SHA1000"), "fabric.ethernet.snmp.auth_protocol"),
                     (_eth(tmp_path, version="1", community="x"), "fabric.ethernet.snmp.version"),
                     ({"fabric": {"kind": "ethernet", "ethernet": {"switches": ["a b"], "snmp": {"community": "x"}}}},
                      "fabric.ethernet.switches[0]"),
                     ({"fabric": {"ethernet": {"switches": ["x"]}}}, "fabric.ethernet"),
                     ({"fabric": {"kind": "roce"}}, "fabric.kind")):
        with pytest.raises(ConfigError) as exc:
            from_dict(bad, check_paths=True)
        assert exc.value.key == key, (exc.value.key, key)
        assert "longenough" not in str(exc.value) and "short" not in str(exc.value).replace("shorter", "")


def test_secrets_go_to_a_private_file_never_to_argv(tmp_path) -> None:
    from fabricmon.sources.ethernet.snmp import SnmpAccess
    cfg = from_dict(_eth(tmp_path, version="3", user="monitor", auth_protocol="SHA256", auth_password="auth pass \"1\"",
                         priv_protocol="AES256", priv_password="privpass2", context="public"), check_paths=True)
    acc = SnmpAccess(cfg.fabric.ethernet.snmp)
    argv = acc.walk_argv("127.0.0.1:1161", "1.3.6.1.2.1.2.2.1")
    assert argv == ["snmpbulkwalk", "-On", "-Oe", "-Ot", "-t", "2", "-r", "1", "-Cr25", "127.0.0.1:1161",
                    "1.3.6.1.2.1.2.2.1"]
    env = acc.env()
    conf = os.path.join(env["SNMPCONFPATH"], "snmp.conf")
    assert stat.S_IMODE(os.stat(env["SNMPCONFPATH"]).st_mode) == 0o700 and stat.S_IMODE(os.stat(conf).st_mode) == 0o600
    text = open(conf).read()
    assert 'defAuthPassphrase "auth pass \\"1\\""' in text and "defAuthType SHA-256" in text
    assert "defPrivType AES256" in text and 'defContext "public"' in text
    assert not any("pass" in a for a in argv)
    acc.close()
    assert not os.path.exists(conf)
