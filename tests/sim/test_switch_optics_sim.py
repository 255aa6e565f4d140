"""Switch optics against real switches: LibreNMS's recordings of an Arista EOS (ENTITY-SENSOR-MIB in
watts, Arista's thresholds), a Cisco NX-OS (CISCO-ENTITY-SENSOR-MIB in dBm, per lane, with the
switch's thresholds) and a Dell Enterprise SONiC (ENTITY-SENSOR-MIB, sensors named `Ethernet52/1`
while ifName is `Eth1/53`) (tests/fixtures/snmprec/optics, PROVENANCE.md there), served by the real
snmpsim, read by the real source over SNMPv2c, joined, judged and rendered by the catalogue.

Asserted against what the files hold, computed here independently of the parser: every
receive-power sensor whose name names one interface is exported within 0.05 dB on that interface;
a receiver planted at -30 dBm on the up port Ethernet1/7 (it reads -8.268 dBm in the recording), under
the NX-OS switch's own low alarm threshold (-26.989 dBm), is a CRITICAL finding naming the port, lane, reading and threshold."""

from __future__ import annotations

import math
import os
import re
import shutil
import sys
import signal
import subprocess
import tempfile
import time
from pathlib import Path

import pytest

from fabricmon.config import from_dict
from fabricmon.exporter.render import render
from fabricmon.host import LiveIO
from fabricmon.model.fabric import FabricPort, FabricSection, SwitchNode, Topology
from fabricmon.model.snapshot import BuildStats, Snapshot, SourceState
from fabricmon.model.optics import SwitchOpticsData
from fabricmon.pipeline.fabric import FabricModel
from fabricmon.pipeline.source import Inputs
from fabricmon.sim.ethernet import free_udp_ports, tools_available
from fabricmon.sources.ethernet.optics import SnmpOpticsSource
from helpers import REPO, community_file, fabric_optics, unavailable, wait_until

DIR = REPO / "tests" / "fixtures" / "snmprec" / "optics"
VENDORS = ("arista_eos", "nxos_n3k-3064pq", "dell-sonic")
RX_NXOS_ETH1_7 = "1.3.6.1.4.1.9.9.91.1.1.1.1.4.300010573"     # Ethernet1/7 (up) Lane 1 receive power, milli-dBm


def records(text: str) -> dict[str, tuple[str, str]]:
    out = {}
    for line in text.splitlines():
        oid, tag, value = line.split("|", 2)
        out[oid] = (tag, value)
    return out


def col(rec: dict, prefix: str) -> dict[int, str]:
    return {int(o[len(prefix) + 1:].split(".")[0]): v for o, (_, v) in rec.items() if o.startswith(prefix + ".")}


def expected_rx(vendor: str, text: str) -> dict[tuple[int, int], float]:
    """(ifIndex, lane) -> dBm of every OK receive-power sensor that names one interface, from the file."""
    rec = records(text)
    names = col(rec, "1.3.6.1.2.1.31.1.1.1.1")
    by_name = {}
    for i, n in names.items():
        by_name.setdefault(n, []).append(i)
    out = {}
    if vendor == "nxos_n3k-3064pq":
        label = col(rec, "1.3.6.1.2.1.47.1.1.1.1.7")
        base = "1.3.6.1.4.1.9.9.91.1.1.1.1"
        for i, typ in col(rec, base + ".1").items():
            m = re.match(r"^(\S+) Lane (\d+) Transceiver Receive Power Sensor$", label.get(i, ""))
            if typ != "14" or not m or len(by_name.get(m.group(1), [])) != 1 \
                    or col(rec, base + ".5").get(i, "1") != "1":
                continue
            v = int(col(rec, base + ".4")[i]) * 10.0 ** (3 * (int(col(rec, base + ".2")[i]) - 9)) \
                * 10.0 ** -int(col(rec, base + ".3")[i])
            out[(by_name[m.group(1)][0], int(m.group(2)))] = v
        return out
    label = col(rec, "1.3.6.1.2.1.47.1.1.1.1.2")
    base = "1.3.6.1.2.1.99.1.1.1"
    for i, typ in col(rec, base + ".1").items():
        m = re.match(r"^DOM RX Power Sensor for (\S+)$", label.get(i, ""))
        if typ != "6" or not m or col(rec, base + ".5").get(i, "1") != "1":
            continue
        port, lane = m.group(1), 0
        if vendor == "dell-sonic":          # Ethernet52/1: lane 1 of Ethernet52, ifIndex 52 + 1 (sonic-snmpagent)
            p, lane = re.match(r"^Ethernet(\d+)/(\d+)$", port).groups()
            idx, lane = int(p) + 1, int(lane)
        else:
            if len(by_name.get(port, [])) != 1:
                continue
            idx = by_name[port][0]
        mw = int(col(rec, base + ".4")[i]) * 10.0 ** (3 * (int(col(rec, base + ".2")[i]) - 9)) \
            * 10.0 ** -int(col(rec, base + ".3")[i]) * 1000.0
        out[(idx, lane)] = max(-40.0, 10 * math.log10(mw)) if mw > 0.0001 else -40.0
    return out


class Sim:
    """snmpsimd serving recordings (community public), one UDP endpoint each."""

    def __init__(self, files: dict[str, str]):
        self.dir = Path(tempfile.mkdtemp(prefix="fabricmon-optics-sim-"))
        data, cache = self.dir / "data" / "public", self.dir / "cache"
        data.mkdir(parents=True)
        cache.mkdir()
        self.names = list(files)
        for n, name in enumerate(self.names):
            (data / f"1.3.6.1.6.1.1.{n}.snmprec").write_text(files[name])
        self.addr = {name: f"127.0.0.1:{p}" for name, p in zip(self.names, free_udp_ports(len(files)))}
        for root, dirs, fs in os.walk(self.dir):
            os.chmod(root, 0o777 if "cache" in root else 0o755)
            for f in fs:
                os.chmod(os.path.join(root, f), 0o644)
        user = ["--process-user=nobody", "--process-group=nogroup"] if os.geteuid() == 0 else []
        self.log = open(self.dir / "log", "wb")
        self.proc = subprocess.Popen(["snmpsimd", "--v2c-arch", f"--data-dir={self.dir / 'data'}",
                                      f"--cache-dir={cache}", *[f"--agent-udpv4-endpoint={a}" for a in self.addr.values()],
                                      *user, "--logging-method=stderr"], stdout=self.log, stderr=self.log,
                                     stdin=subprocess.DEVNULL, start_new_session=True)
        deadline = time.monotonic() + 90

        def answers(a: str) -> bool:
            if self.proc.poll() is not None:
                self.stop()
                raise RuntimeError("snmpsimd did not start: " + (self.dir / "log").read_text()[-2000:])
            return subprocess.run(["snmpget", "-v2c", "-c", "public", "-On", "-t", "1", "-r", "0", a, "1.3.6.1.2.1.1.1.0"],
                                  capture_output=True, env={**os.environ, "MIBS": ""}).returncode == 0
        try:
            for a in self.addr.values():
                wait_until(lambda: answers(a), deadline - time.monotonic(), f"snmpsimd answering on {a}", interval=0.3)
        except AssertionError:
            self.stop()
            raise RuntimeError("snmpsimd did not start: " + (self.dir / "log").read_text()[-2000:]) from None

    def collect(self, source_cls, name: str):
        """One run of an Ethernet source (`source_cls`, registered as `name`) over every recording served, each a
        switch of a topology: (its config, the topology, its SourceOutput, the seconds it took)."""
        cfg = from_dict({"fabric": {"kind": "ethernet", "port": 0, "ethernet": {
            "switches": list(self.addr.values()), "snmp": {"community": "public"}}}}, check_paths=False)
        topo = Topology()
        for sw, addr in self.addr.items():
            topo.switches[sw] = SwitchNode(sw, sw, 0, None, kind="ethernet", address=addr)
        src = source_cls(cfg.fabric.sources[name])
        t0 = time.monotonic()
        out = src.collect(LiveIO(), Inputs(deadline=time.monotonic() + 120, inventory=topo))
        took = time.monotonic() - t0
        src.close()
        return cfg, topo, out, took

    def stop(self) -> None:
        if self.proc.poll() is None:
            os.killpg(self.proc.pid, signal.SIGTERM)
            try:
                self.proc.wait(10)
            except subprocess.TimeoutExpired:
                os.killpg(self.proc.pid, signal.SIGKILL)
                self.proc.wait(5)
        self.log.close()
        shutil.rmtree(self.dir, ignore_errors=True)


@pytest.fixture(scope="module")
def served():
    ok, why = tools_available()
    if not ok:
        unavailable(why)
    files = {v: (DIR / f"{v}.snmprec").read_text() for v in VENDORS}
    nx = files["nxos_n3k-3064pq"]
    assert f"{RX_NXOS_ETH1_7}|2|-8268" in nx
    files["nxos-planted"] = nx.replace(f"{RX_NXOS_ETH1_7}|2|-8268", f"{RX_NXOS_ETH1_7}|2|-30000")
    sim = Sim(files)
    try:
        cfg, topo, out, took = sim.collect(SnmpOpticsSource, "optics")
        yield files, cfg, topo, out, took
    finally:
        sim.stop()


def snapshot(cfg, topo, data: SwitchOpticsData, tmp: Path):
    cfg = from_dict({"paths": {"state_dir": str(tmp)}, "fabric": {"kind": "ethernet", "port": 0, "ethernet": {
        "switches": ["127.0.0.1:1"], "snmp": {"community": "public"}}}}, check_paths=False)
    model = FabricModel(cfg)
    sec = FabricSection(kind="ethernet")
    sec.switches = dict(topo.switches)
    for g, so in data.switches.items():
        for i, name in so.port_names.items():
            sec.ports[(g, i)] = FabricPort(g, i, "unconnected", None, up=so.oper_up.get(i, False), name=name)
    st = SourceState("optics", True, 300.0, 60.0, records=SwitchOpticsData, up=True, ran=True, data=data, data_time=1.0)
    findings = fabric_optics(model, {"optics": st}, sec, 1.0)
    snap = Snapshot(time=2.0, findings=findings, sources={"optics": st}, builds=BuildStats(), fabric=sec)
    return sec, findings, render(snap).decode()


def samples(text: str, name: str) -> dict[tuple[str, ...], float]:
    out = {}
    for line in text.splitlines():
        if line.startswith(name + "{"):
            head, value = line.rsplit(" ", 1)
            labels = dict(re.findall(r'(\w+)="((?:[^"\\]|\\.)*)"', head))
            out[(labels["switch_guid"], labels["port"], labels.get("lane", ""))] = float(value)
    return out


def test_every_receive_power_sensor_naming_one_interface_is_exported(served, tmp_path) -> None:
    files, cfg, topo, out, took = served
    assert out.errors == [], out.errors
    sec, findings, text = snapshot(cfg, topo, out.data, tmp_path)
    got = samples(text, "fabricmon_fabric_port_optics_rx_power_dbm")
    total = 0
    for vendor in VENDORS:
        exp = expected_rx(vendor, files[vendor])
        assert exp, vendor
        names = out.data.switches[vendor].port_names
        for (idx, lane), dbm in exp.items():
            key = (vendor, names[idx], str(lane) if lane else "")
            assert key in got, (vendor, key)
            assert abs(got[key] - dbm) <= 0.05, (key, got[key], dbm)
        assert len([k for k in got if k[0] == vendor]) == len(exp), vendor
        total += len(exp)
    print(f"\n{total} receive-power sensors exported, within 0.05 dB; optics read of 4 switches in {took:.2f} s")
    # SONiC's Ethernet52/1..4 are the four lanes of Eth1/53; the NX-OS lanes carry the switch's thresholds
    assert {k[2] for k in got if k[0] == "dell-sonic" and k[1] == "Eth1/53"} == {"1", "2", "3", "4"}
    thr = [ln for ln in text.splitlines() if ln.startswith("fabricmon_fabric_port_optics_threshold{") and
           'port="Ethernet1/1"' in ln and 'switch_guid="nxos_n3k-3064pq"' in ln and 'level="low_alarm"' in ln
           and 'quantity="rx_power_dbm"' in ln and 'lane="1"' in ln]
    assert len(thr) == 1 and float(thr[0].rsplit(" ", 1)[1]) == pytest.approx(-26.989), thr
    unjoined = samples(text.replace("fabricmon_fabric_optics_unjoined_sensors{", "U{port=\"\",").replace(
        "U{", "fabricmon_fabric_optics_unjoined_sensors{"), "fabricmon_fabric_optics_unjoined_sensors")
    assert set(g for g, _, _ in unjoined) == set(files)


def test_a_receiver_under_the_switchs_own_low_alarm_is_a_finding(served, tmp_path) -> None:
    files, cfg, topo, out, _ = served
    so = out.data.switches["nxos-planted"]
    idx = next(i for i, n in so.port_names.items() if n == "Ethernet1/7")
    assert so.oper_up[idx], "the planted port is up in the recording"
    _, findings, text = snapshot(cfg, topo, out.data, tmp_path)
    (f,) = [f for f in findings if f.check == "optics_thresholds" and f.device == "nxos-planted" and f.port == idx]
    assert f.status == 2
    assert "switch nxos-planted Ethernet1/7: lane 1 receive power -30.00 dBm" in f.message
    assert "the switch's low alarm threshold -26.99 dBm" in f.message
    # the same port of the unplanted recording (-8.268 dBm) is within the switch's thresholds
    (g,) = [f for f in findings if f.check == "optics_thresholds" and f.device == "nxos_n3k-3064pq" and f.port == idx]
    assert g.status == 0, g.message
    assert 'fabricmon_fabric_check_status{check="optics_thresholds",switch_guid="nxos-planted"} 2' in text or \
        any(ln.startswith("fabricmon_fabric_check_status") and 'optics_thresholds' in ln and 'nxos-planted' in ln
            and ln.endswith(" 2.0") for ln in text.splitlines())


def test_fabric_once_reads_exports_and_judges_the_recorded_switches(tmp_path) -> None:
    """End to end: `fabricmon fabric once` (discovery, sweep and optics over SNMPv2c) against the three
    recordings and the planted NX-OS copy: every receive-power sensor is in the exposition on its
    interface, and the planted receiver is a CRITICAL finding on stderr; `fabric capture` of the same
    switches replays to the same readings."""
    ok, why = tools_available()
    if not ok:
        unavailable(why)
    files = {v: (DIR / f"{v}.snmprec").read_text() for v in VENDORS}
    files["nxos-planted"] = files["nxos_n3k-3064pq"].replace(f"{RX_NXOS_ETH1_7}|2|-8268", f"{RX_NXOS_ETH1_7}|2|-30000")
    sim = Sim(files)
    try:
        comm = community_file(tmp_path)
        cfg = tmp_path / "fabricmon.yml"
        cfg.write_text(f"paths: {{state_dir: {tmp_path / 'state'}}}\nfabric:\n  kind: ethernet\n  port: 0\n"
                       f"  ethernet:\n    switches: [{', '.join(sim.addr.values())}]\n"
                       f"    snmp: {{community_file: {comm}}}\n")
        (tmp_path / "state").mkdir()
        t0 = time.monotonic()
        py = [sys.executable, "-m", "fabricmon", "fabric"]
        r = subprocess.run([*py, "once", "--config", str(cfg)], capture_output=True, text=True, timeout=300, cwd=REPO)
        took = time.monotonic() - t0
        # a capture bundle carries the readings: replayed without the switches, the same values
        cap = subprocess.run([*py, "capture", "--config", str(cfg), str(tmp_path / "bundle")], capture_output=True,
                             text=True, timeout=300, cwd=REPO)
        assert cap.returncode == 0, cap.stderr[-2000:]
    finally:
        sim.stop()
    replay = subprocess.run([*py, "once", "--replay", str(tmp_path / "bundle")], capture_output=True, text=True,
                            timeout=300, cwd=REPO)
    assert samples(replay.stdout, "fabricmon_fabric_port_optics_rx_power_dbm") == \
        samples(r.stdout, "fabricmon_fabric_port_optics_rx_power_dbm")
    got = samples(r.stdout, "fabricmon_fabric_port_optics_rx_power_dbm")
    total = 0
    for vendor in (*VENDORS, "nxos-planted"):
        guid = sim.addr[vendor]      # these recordings carry no LLDP chassis ID: a switch is known by its address
        rec = records(files[vendor])
        names = {int(o.rsplit(".", 1)[1]): v for o, (_, v) in rec.items() if o.startswith("1.3.6.1.2.1.31.1.1.1.1.")}
        exp = expected_rx("nxos_n3k-3064pq" if vendor == "nxos-planted" else vendor, files[vendor])
        # a port without a connector (ifConnectorPresent false: Arista's empty cages, ifOperStatus notPresent,
        # whose sensors read -1000000000) is no fabric port (docs/ethernet.md, the port model): no readings
        connector = {int(o.rsplit(".", 1)[1]): v for o, (_, v) in rec.items() if o.startswith("1.3.6.1.2.1.31.1.1.1.17.")}
        exp = {k: v for k, v in exp.items() if connector.get(k[0]) != "2"}
        for (idx, lane), dbm in exp.items():
            key = (guid, names[idx], str(lane) if lane else "")
            assert key in got and abs(got[key] - dbm) <= 0.05, (key, got.get(key), dbm)
        assert len([k for k in got if k[0] == guid]) == len(exp), vendor
        total += len(exp)
    # the Arista recording's 35 sensors name 12 ports with a connector; the 23 others are empty cages
    assert total == 12 + 8 + 4 + 8
    planted = [ln for ln in r.stderr.splitlines() if ln.startswith("CRITICAL optics_thresholds") and "Ethernet1/7" in ln]
    assert len(planted) == 1, r.stderr[-3000:]
    assert "lane 1 receive power -30.00 dBm is beyond the switch's low alarm threshold -26.99 dBm" in planted[0]
    print(f"\nfabric once over 4 recorded switches: {took:.1f} s, {total} receive-power sensors exported")


def test_the_simulated_leaf_spine_serves_its_transceivers(tmp_path) -> None:
    """fabricmon.sim.ethernet's generated switches with optics: every port's four lanes read by the real
    source through snmpsim, joined by entAliasMapping, within 0.05 dB of what the sim planted (-2 to -4 dBm),
    the switch's thresholds exported, and a receiver planted with set_rx_power under the low alarm threshold
    is a CRITICAL finding naming its port and lane (the fabric dashboard's Optics row is tested on this)."""
    from fabricmon.sim.ethernet import LANES, RX_LIMITS_DBM, SnmpSimFabric, leaf_spine, set_rx_power
    ok, why = tools_available()
    if not ok:
        unavailable(why)
    sw = leaf_spine(spines=1, leaves=2, hosts_per_leaf=1, optics=True)
    set_rx_power(sw, "leaf02", "Ethernet4", -12.0, lane=2)
    with SnmpSimFabric(sw) as fab:
        cfg = from_dict({"fabric": {"kind": "ethernet", "port": 0, "ethernet": {
            "switches": fab.addresses(), "snmp": {"community": "public"}}}}, check_paths=False)
        topo = Topology()
        for s in sw:
            topo.switches[s.name] = SwitchNode(s.name, s.name, 0, None, kind="ethernet", address=fab.endpoints[s.name])
        src = SnmpOpticsSource(cfg.fabric.sources["optics"])
        out = src.collect(LiveIO(), Inputs(deadline=time.monotonic() + 120, inventory=topo))
        src.close()
    assert out.errors == [], out.errors
    _, findings, text = snapshot(cfg, topo, out.data, tmp_path)
    got = samples(text, "fabricmon_fabric_port_optics_rx_power_dbm")
    want = {(s.name, p.name, str(n + 1)): p.optics.rx_dbm[n] for s in sw for p in s.ports for n in range(LANES)}
    assert set(got) == set(want)
    for key, dbm in want.items():
        assert abs(got[key] - dbm) <= 0.05, (key, got[key], dbm)
    assert all(-4.0 <= v <= -2.0 for k, v in want.items() if k != ("leaf02", "Ethernet4", "2"))
    assert not any(out.data.switches[s.name].unjoined for s in sw)
    assert len(samples(text, "fabricmon_fabric_port_optics_temperature_celsius")) == sum(len(s.ports) for s in sw)
    low = [ln for ln in text.splitlines() if ln.startswith("fabricmon_fabric_port_optics_threshold{")
           and 'quantity="rx_power_dbm"' in ln and 'level="low_alarm"' in ln]
    assert len(low) == len(want) and all(float(ln.rsplit(" ", 1)[1]) == pytest.approx(RX_LIMITS_DBM[0], abs=0.05)
                                         for ln in low)
    bad = [f for f in findings if f.check == "optics_thresholds" and f.status > 0]
    assert len(bad) == 1 and bad[0].status == 2 and bad[0].device == "leaf02", [f.message for f in bad]
    assert "switch leaf02 Ethernet4: lane 2 receive power -12.00 dBm" in bad[0].message, bad[0].message
