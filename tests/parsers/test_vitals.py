"""parsers.vitals and checks.fabric_vitals on LibreNMS's real switch recordings (tests/fixtures/snmprec, their
PROVENANCE.md), turned into net-snmp walk text here: every fan, power supply, temperature and module a
recording carries, with its state; a planted failure is one finding naming the switch and the part; a
recording without such tables has no vitals. The Cisco FRU/ENVMON and Dell OS9/OS10 rows are tested with lines
planted in their MIBs' layout: none of the recordings in the suite carries those tables (docs/vitals.md)."""

from __future__ import annotations

import pytest

from fabricmon.checks.fabric_vitals import judge
from fabricmon.parsers.errors import ParseError
from fabricmon.parsers.vitals import VENDOR_TABLES, VITALS_WALKS, kind_of, parse_vitals
from helpers import FIXTURES

SNMPREC = FIXTURES / "snmprec"
FAN2 = "1.3.6.1.2.1.99.1.1.1.5.100602111"          # Arista: Fan Tray 2 Fan 1 Sensor 1, entPhySensorOperStatus
PSU1 = "1.3.6.1.4.1.2636.3.1.13.1.6.2.1.2.0"       # Juniper: Power Supply 1 @ 0/1/*, jnxOperatingState


def walks(text: str) -> dict[str, str]:
    lines = []
    for line in text.splitlines():
        oid, tag, val = line.split("|", 2)
        if tag in ("2", "65", "66", "67", "70"):
            lines.append(f".{oid} = INTEGER: {val}")
        elif tag == "4":
            lines.append(f'.{oid} = STRING: "{val}"')
        elif tag == "4x":
            lines.append(f".{oid} = Hex-STRING: " + " ".join(val[i:i + 2] for i in range(0, len(val), 2)))
    text = "\n".join(lines)
    return {name: "\n".join(ln for ln in text.splitlines() if ln.startswith(f".{root}.")) for name, root in VITALS_WALKS}


def rec(path: str) -> str:
    return (SNMPREC / f"{path}.snmprec").read_text()


def test_arista_fans_and_temperatures_with_their_state_and_no_transceiver_sensor() -> None:
    vs = parse_vitals(walks(rec("optics/arista_eos")))
    by = {v.part: v for v in vs}
    fans = sorted(v.part for v in vs if v.kind == "fan")
    assert fans == ["Fan Tray 1 Fan 1 Sensor 1", "Fan Tray 2 Fan 1 Sensor 1", "Fan Tray 3 Fan 1 Sensor 1",
                    "Fan Tray 4 Fan 1 Sensor 1", "PowerSupply1 Fan 1 Sensor 1", "PowerSupply2 Fan 1 Sensor 1"]
    assert by["Fan Tray 1 Fan 1 Sensor 1"].value == 8426 and by["Fan Tray 1 Fan 1 Sensor 1"].unit == "rpm"
    temps = [v for v in vs if v.kind == "temperature"]
    assert len(temps) == 12 and all(v.state == "ok" and v.status == 0 for v in vs)
    assert by["Cpu temp sensor"].value == pytest.approx(53.3)
    # the two power supplies' sensors share their names: told apart by their index
    assert "Hotspot temperature sensor (100711101)" in by and "Hotspot temperature sensor (100721101)" in by
    assert not any("DOM" in v.part for v in vs)          # transceivers are optics', not vitals


def test_juniper_operating_table_and_sonic_temperatures() -> None:
    vs = parse_vitals(walks(rec("librenms/junos_qfx5100")))
    kinds = {(v.kind, v.part) for v in vs}
    assert {("psu", "Power Supply 0 @ 0/0/*"), ("psu", "Power Supply 1 @ 0/1/*")} <= kinds
    assert sum(1 for v in vs if v.kind == "fan") == 5 and all(v.state == "running" for v in vs)
    fpc = next(v for v in vs if v.part.startswith("FPC"))
    assert fpc.kind == "module" and fpc.value == 41 and fpc.unit == "celsius"
    sonic = parse_vitals(walks(rec("optics/dell-sonic")))
    assert {v.part for v in sonic} >= {"TEMP 1", "Temperature for PSU 1", "Temperature for PSU 2"}
    assert all(v.kind == "temperature" and v.status == 0 for v in sonic)


@pytest.mark.parametrize("path", ["librenms/dnos", "librenms/slxos_slx9150", "librenms/arista_eos_vrf",
                                  "optics/nxos_n3k-3064pq"])
def test_a_recording_without_such_tables_has_no_vitals(path: str) -> None:
    vs = parse_vitals(walks(rec(path)))
    assert vs == [] and judge("sw", "g", vs) is None       # no vitals, no OK


def test_a_failed_fan_and_a_failed_power_supply_are_one_finding_each_naming_the_part() -> None:
    arista = rec("optics/arista_eos")
    assert f"{FAN2}|2|1" in arista
    vs = parse_vitals(walks(arista.replace(f"{FAN2}|2|1", f"{FAN2}|2|3")))
    f = judge("leaf03", "0c42a1", vs)
    assert f is not None and f.status == 2 and f.device == "0c42a1" and f.port is None
    assert f.message.startswith('switch leaf03: fan "Fan Tray 2 Fan 1 Sensor 1" nonoperational, 8287 rpm')
    assert "replace the fan (tray)" in f.message and "Fan Tray 1" not in f.message
    junos = rec("librenms/junos_qfx5100")
    assert f"{PSU1}|2|2" in junos
    f = judge("spine01", "2c6bf5", parse_vitals(walks(junos.replace(f"{PSU1}|2|2", f"{PSU1}|2|6"))))
    assert f is not None and f.status == 2 and 'power supply "Power Supply 1 @ 0/1/*" down (jnxOperatingState)' in f.message
    ok = judge("spine01", "2c6bf5", parse_vitals(walks(junos)))
    assert ok is not None and ok.status == 0 and ok.message == "switch spine01: 5 fans, 2 power supplies, 4 modules OK"


def test_a_fan_stopped_or_a_sensor_beyond_the_switchs_threshold() -> None:
    arista = rec("optics/arista_eos")
    stopped = arista.replace("1.3.6.1.2.1.99.1.1.1.4.100603111|2|8450", "1.3.6.1.2.1.99.1.1.1.4.100603111|2|0")
    f = judge("leaf", "g", parse_vitals(walks(stopped)))
    assert f is not None and f.status == 2 and "stopped (0 rpm)" in f.message
    hot = (arista + "1.3.6.1.4.1.30065.3.12.1.1.1.3.100006001|2|500\n"
           "1.3.6.1.4.1.30065.3.12.1.1.1.4.100006001|2|800\n")
    f = judge("leaf", "g", parse_vitals(walks(hot)))
    assert f is not None and f.status == 1 and "Cpu temp sensor" in f.message and "high warning threshold 50" in f.message


def test_cisco_and_dell_tables_in_their_mibs_layout() -> None:
    planted = "\n".join([
        "1.3.6.1.2.1.47.1.1.1.1.7.470|4|PowerSupply-1", "1.3.6.1.2.1.47.1.1.1.1.7.471|4|PowerSupply-2",
        "1.3.6.1.2.1.47.1.1.1.1.7.534|4|Fan Module-1",
        "1.3.6.1.4.1.9.9.117.1.1.2.1.2.470|2|2", "1.3.6.1.4.1.9.9.117.1.1.2.1.2.471|2|8",
        "1.3.6.1.4.1.9.9.117.1.4.1.1.1.534|2|2",
        "1.3.6.1.4.1.9.9.13.1.3.1.2.1|4|Intake", "1.3.6.1.4.1.9.9.13.1.3.1.3.1|66|31",
        "1.3.6.1.4.1.9.9.13.1.3.1.6.1|2|1", "1.3.6.1.4.1.9.9.13.1.5.1.2.1|4|PS1", "1.3.6.1.4.1.9.9.13.1.5.1.3.1|2|5",
        "1.3.6.1.4.1.6027.3.26.1.4.6.1.4.1.1|2|1", "1.3.6.1.4.1.6027.3.26.1.4.7.1.4.1.2|2|2",
        "1.3.6.1.4.1.674.11000.5000.100.4.1.2.1.1.4.1|2|1", "1.3.6.1.4.1.674.11000.5000.100.4.1.2.2.1.4.2|2|2"])
    vs = {(v.source, v.part): v for v in parse_vitals(walks(planted))}
    assert vs[("cefcFRUPowerOperStatus", "PowerSupply-2")].state == "failed"
    assert vs[("cefcFRUPowerOperStatus", "PowerSupply-2")].status == 2
    assert vs[("cefcFanTrayOperStatus", "Fan Module-1")].status == 0
    assert vs[("ciscoEnvMonTemperatureState", "Intake")].value == 31
    assert vs[("ciscoEnvMonSupplyState", "PS1")].state == "notPresent" and vs[("ciscoEnvMonSupplyState", "PS1")].status is None
    assert vs[("dellNetFanTrayOperStatus", "Fan tray 1.2")].status == 2
    assert vs[("os10FanTrayOperStatus", "Fan tray 2")].state == "abnormal"


def test_the_quirk_table_and_names() -> None:
    assert {t.vendor for t in VENDOR_TABLES} == {"cisco", "juniper", "dell-os9", "dell-os10"}
    assert kind_of("Power Supply 0 @ 0/0/*") == "psu" and kind_of("Fan Tray 4 @ 0/4/*") == "fan"
    assert kind_of("FPC: QFX5100-48S-6Q @ 0/*/*") == "module"
    with pytest.raises(ParseError):
        parse_vitals({"ent_name": ".1.3.6.1.2.1.47.1.1.1.1.7.1 garbage without an equals sign"})
