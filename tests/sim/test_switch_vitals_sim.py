"""Switch vitals against real switches: LibreNMS's recordings of an Arista EOS (ENTITY-SENSOR-MIB fans and
temperatures), a Juniper QFX5100 (jnxOperatingTable), a Dell Enterprise SONiC (ENTITY-SENSOR-MIB
temperatures) and a Dell OS9 switch whose recording carries none of the tables (tests/fixtures/snmprec,
PROVENANCE.md there), served by the real snmpsim, read by the real vitals source over SNMPv2c, judged by the
fabric model's check and rendered by the catalogue: every part a recording carries is exported with its
state; a fan planted nonoperational (Arista) and a power supply planted down (Juniper) are one finding each,
naming the switch and the part; the recording without such tables has no vitals series and no status."""

from __future__ import annotations

import re

import pytest

from fabricmon.checks.fabric_inputs import FabricInputs
from fabricmon.config import from_dict
from fabricmon.exporter.render import render
from fabricmon.model.fabric import FabricSection, Topology
from fabricmon.model.snapshot import BuildStats, Snapshot, SourceState
from fabricmon.model.vitals import SwitchVitalsData
from fabricmon.pipeline.fabric import FabricModel
from fabricmon.sim.ethernet import tools_available
from fabricmon.sources.ethernet.vitals import SnmpVitalsSource
from helpers import REPO, unavailable
from test_switch_optics_sim import Sim

SNMPREC = REPO / "tests" / "fixtures" / "snmprec"
FILES = {"arista": "optics/arista_eos", "junos": "librenms/junos_qfx5100", "sonic": "optics/dell-sonic",
         "dnos": "librenms/dnos"}
FAN2 = "1.3.6.1.2.1.99.1.1.1.5.100602111"
PSU1 = "1.3.6.1.4.1.2636.3.1.13.1.6.2.1.2.0"


@pytest.fixture(scope="module")
def served():
    ok, why = tools_available()
    if not ok:
        unavailable(why)
    files = {k: (SNMPREC / f"{v}.snmprec").read_text() for k, v in FILES.items()}
    files["arista-fan-failed"] = files["arista"].replace(f"{FAN2}|2|1", f"{FAN2}|2|3")
    files["junos-psu-down"] = files["junos"].replace(f"{PSU1}|2|2", f"{PSU1}|2|6")
    sim = Sim(files)
    try:
        _, topo, out, took = sim.collect(SnmpVitalsSource, "vitals")
        yield files, topo, out, took
    finally:
        sim.stop()


def build(topo: Topology, data: SwitchVitalsData, tmp):
    cfg = from_dict({"paths": {"state_dir": str(tmp)}, "fabric": {"kind": "ethernet", "port": 0, "ethernet": {
        "switches": ["127.0.0.1:1"], "snmp": {"community": "public"}}}}, check_paths=False)
    model = FabricModel(cfg)
    sec = FabricSection(kind="ethernet")
    sec.switches = dict(topo.switches)
    st = SourceState("vitals", True, 120.0, 60.0, records=SwitchVitalsData, up=True, ran=True, data=data,
                     data_time=1.0)
    inputs = FabricInputs({"vitals": st}, Topology(), sec, 1.0, model.history)
    findings, ran = model.checks.run_ports(inputs, model.checks.present({"vitals": st}, False))
    model.checks.check_status(sec, findings, ran)
    snap = Snapshot(time=2.0, findings=findings, sources={"vitals": st}, builds=BuildStats(), fabric=sec)
    return sec, [f for f in findings if f.check == "switch_vitals"], render(snap).decode()


def series(text: str, name: str) -> list[dict[str, str]]:
    out = []
    for line in text.splitlines():
        if line.startswith(name + "{"):
            head, value = line.rsplit(" ", 1)
            labels = dict(re.findall(r'(\w+)="((?:[^"\\]|\\.)*)"', head))
            labels["value"] = value
            out.append(labels)
    return out


def recorded_parts(text: str) -> int:
    """Fans and temperatures of ENTITY-SENSOR-MIB (types 8 and 10) that are no transceiver's, and the rows of
    jnxOperatingTable: what a recording carries, counted from the file."""
    names: dict[str, str] = {}
    for o, _, v in (ln.split("|", 2) for ln in text.splitlines()):
        if o.startswith("1.3.6.1.2.1.47.1.1.1.1.7.") or o.startswith("1.3.6.1.2.1.47.1.1.1.1.2."):
            names[o.rsplit(".", 1)[1]] = names.get(o.rsplit(".", 1)[1], "") + " " + v
    n = 0
    for ln in text.splitlines():
        o, _, v = ln.split("|", 2)
        if o.startswith("1.3.6.1.2.1.99.1.1.1.1.") and v in ("8", "10") and "DOM" not in names.get(o.rsplit(".", 1)[1], ""):
            n += 1
        if o.startswith("1.3.6.1.4.1.2636.3.1.13.1.6."):
            n += 1
    return n


def test_every_part_a_recording_carries_is_exported_with_its_state(served, tmp_path) -> None:
    files, topo, out, took = served
    assert out.errors == [], out.errors
    sec, findings, text = build(topo, out.data, tmp_path)
    info = series(text, "fabricmon_fabric_switch_vital_info")
    for sw in ("arista", "junos", "sonic"):
        mine = [s for s in info if s["switch_guid"] == sw]
        assert len(mine) == recorded_parts(files[sw]) > 0, sw
        assert all(s["state"] in ("ok", "running") for s in mine), sw
    assert {s["part"] for s in info if s["switch_guid"] == "arista" and s["kind"] == "fan"} >= {
        "Fan Tray 1 Fan 1 Sensor 1", "PowerSupply2 Fan 1 Sensor 1"}
    rpm = {s["part"]: float(s["value"]) for s in series(text, "fabricmon_fabric_switch_fan_speed_rpm")
           if s["switch_guid"] == "arista"}
    assert rpm["Fan Tray 3 Fan 1 Sensor 1"] == 8450
    temps = {(s["switch_guid"], s["part"]): float(s["value"]) for s in series(text, "fabricmon_fabric_switch_temperature_celsius")}
    assert temps[("junos", "FPC: QFX5100-48S-6Q @ 0/*/*")] == 41 and temps[("sonic", "TEMP 2")] == pytest.approx(42.062)
    ok = {f.device: f for f in findings}
    assert ok["arista"].status == 0 and ok["junos"].status == 0 and ok["sonic"].status == 0
    # the Dell OS9 recording carries none of the tables: no vitals series, no status (never an OK)
    assert "dnos" not in ok and not any(s["switch_guid"] == "dnos" for s in info)
    assert 'check="switch_vitals"' in text
    assert not re.search(r'fabricmon_fabric_check_status\{check="switch_vitals"[^}]*switch_guid="dnos"', text)


def test_a_failed_fan_and_a_power_supply_down_are_one_finding_each(served, tmp_path) -> None:
    files, topo, out, took = served
    _, findings, text = build(topo, out.data, tmp_path)
    by = {f.device: f for f in findings}
    fan = by["arista-fan-failed"]
    assert fan.status == 2 and fan.message.startswith('switch arista-fan-failed: fan "Fan Tray 2 Fan 1 Sensor 1" '
                                                      'nonoperational'), fan.message
    psu = by["junos-psu-down"]
    assert psu.status == 2 and 'power supply "Power Supply 1 @ 0/1/*" down (jnxOperatingState)' in psu.message
    assert [f.device for f in findings if f.status] == ["arista-fan-failed", "junos-psu-down"]
    status = {(s["switch_guid"], s["part"]): s["value"] for s in series(text, "fabricmon_fabric_switch_vital_status")}
    assert status[("arista-fan-failed", "Fan Tray 2 Fan 1 Sensor 1")] == "2.0"
    assert status[("arista-fan-failed", "Fan Tray 1 Fan 1 Sensor 1")] == "0.0"
    print(f"vitals of {len(files)} recorded switches read in {took:.1f} s")
