"""The fabric's optics check (checks.optics.Optics, registered by pipeline.fabric_checks): a switch's joined transceivers
are judged by checks.optics, the finding names the LLDP neighbour at the other end of the cable, the
check status counts per switch, and a dimming switch lane is found against the fabric's own baseline
file. Records are built here; tests/sim/test_switch_optics_sim.py reads real recordings over snmpsim."""

from __future__ import annotations

import json

from fabricmon.config import from_dict
from fabricmon.model.fabric import FabricPort, FabricSection, Link, SwitchNode
from fabricmon.model.optics import LaneDiag, Limits, ModuleDiag, SwitchOpticsData, dbm_to_mw
from fabricmon.model.snapshot import SourceState
from fabricmon.parsers.entity_sensor import SwitchOptics
from fabricmon.pipeline.fabric import FabricModel
from helpers import fabric_optics as optics


def setup(tmp_path, rx_dbm: float):
    cfg = from_dict({"paths": {"state_dir": str(tmp_path)}, "fabric": {"kind": "ethernet", "port": 0, "ethernet": {
        "switches": ["127.0.0.1:1"], "snmp": {"community": "public"}}}}, check_paths=False)
    model = FabricModel(cfg)
    mod = ModuleDiag(module_class="switch", lanes={n: LaneDiag(n, dbm_to_mw(rx_dbm if n == 2 else -2.0), 1.0, 7.0)
                                                  for n in (1, 2, 3, 4)})
    mod.lane_limits[("rx_power", 2)] = Limits(3.0, -12.0, 1.0, -10.0, source="switch")
    so = SwitchOptics(ports={7: mod}, port_names={7: "Ethernet7"}, oper_up={7: True})
    data = SwitchOpticsData(switches={"aa:bb": so})
    sec = FabricSection(kind="ethernet")
    sec.switches = {"aa:bb": SwitchNode("aa:bb", "leaf1", 0, None, kind="ethernet")}
    link = Link(7, "cc:dd", 0, "Host", "gpu-node-3", None, None, remote_port_name="ens1f0np0")
    sec.ports = {("aa:bb", 7): FabricPort("aa:bb", 7, "host", link, up=True, name="Ethernet7")}
    st = SourceState("optics", True, 300.0, 60.0, records=SwitchOpticsData, up=True, ran=True, data=data, data_time=1.0)
    return model, sec, {"optics": st}


def test_switch_finding_names_port_lane_reading_threshold_and_peer(tmp_path) -> None:
    model, sec, states = setup(tmp_path, -13.0)
    findings = optics(model, states, sec, 1000.0)
    (f,) = [f for f in findings if f.check == "optics_thresholds"]
    assert f.status == 2 and f.device == "aa:bb" and f.port == 7
    assert "switch leaf1 Ethernet7: lane 2 receive power -13.00 dBm is beyond the switch's low alarm threshold " \
           "-12.00 dBm; the other end: gpu-node-3 ens1f0np0" in f.message
    (li,) = [f for f in findings if f.check == "optics_lane_imbalance"]
    assert li.status == 1 and "lane 2" in li.message
    assert sec.check_status[("optics_thresholds", "aa:bb")] == 2
    assert sec.check_status[("optics_dimming", "aa:bb")] == 0
    assert sec.optics[("aa:bb", 7)].lanes[2].rx_power_dbm == -13.0 and sec.optics_unjoined == {"aa:bb": 0}


def test_switch_lane_dimming_against_the_fabric_baseline(tmp_path) -> None:
    model, sec, states = setup(tmp_path, -2.0)
    optics(model, states, sec, 1000.0)                  # learns -2.0 dBm on every lane
    model.optics_baseline.flush(force=True)
    doc = json.loads((tmp_path / "fabric_optics_baseline.json").read_text())
    assert doc["lanes"]["switch:aa:bb:Ethernet7#2"]["rx_dbm"] == -2.0
    model2, sec2, states2 = setup(tmp_path, -5.5)       # a new collector process, the same state dir
    findings = optics(model2, states2, sec2, 2000.0)
    (d,) = [f for f in findings if f.check == "optics_dimming"]
    assert d.status == 1 and "lane 2 receives -5.50 dBm, 3.5 dB below its baseline -2.00 dBm" in d.message
    assert [f.status for f in findings if f.check == "optics_thresholds"] == [0]


def test_the_optics_checks_run_when_a_source_yields_switch_optics_never_by_fabric_kind(tmp_path) -> None:
    """checks.optics declares its input (NEEDS, a capability of checks.fabric_inputs): without a source of
    SwitchOpticsData the collector lists no optics check for a switch, even on an Ethernet fabric; with
    one, every optics check of each switch read is listed, OK included."""
    from fabricmon.checks import optics as optics_checks
    from fabricmon.checks.fabric_inputs import CAPABILITIES
    assert set(optics_checks.NEEDS) <= set(CAPABILITIES)
    model, sec, states = setup(tmp_path, -2.0)
    assert "transceiver_readings" not in model.checks.present({}, False)
    optics(model, {}, sec, 1000.0)
    assert not {c for c, _ in sec.check_status} & set(optics_checks.CHECKS)
    assert "transceiver_readings" in model.checks.present(states, False)
    optics(model, states, sec, 1000.0)                 # the switch was read: sec.optics_unjoined names it
    assert {(c, s) for (c, g), s in sec.check_status.items() if c in optics_checks.CHECKS} == \
        {(c, 0) for c in optics_checks.CHECKS}
