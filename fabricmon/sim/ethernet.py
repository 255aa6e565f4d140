"""A real Ethernet (RoCE) leaf/spine fabric on one machine: Debian's ``snmpsim`` serving one
generated switch per UDP endpoint (docs/ethernet.md, "Tests").

:func:`leaf_spine` builds the switches (ports, LLDP neighbours, traffic rates, PFC pause rates),
:func:`snmprec` writes one switch as snmpsim data (``OID|TAG|VALUE``, sorted by OID; a counter
grows at its rate with ``TAG:numeric|rate=R``; ifOperStatus is ``2:writecache`` so that a test
takes a port down with the real ``snmpset``), and :class:`SnmpSimFabric` runs ``snmpsimd``
(v2c: one process, one endpoint per switch; v3: one process per switch, whose context name
``public`` selects its data file) and stops it with its process group.

Transceivers (``leaf_spine(optics=True)``; docs/optics.md): every port gets a 4-lane module served
the way a switch's ENTITY-MIB and ENTITY-SENSOR-MIB give it: per lane a receive power, transmit power
(watts, scale milli, precision 4: 0.1 uW steps) and bias (amperes, milli, precision 2) sensor named
``Ethernet0 Lane 1 Transceiver Receive Power Sensor`` (NX-OS's spelling) and a module temperature
sensor (Celsius, precision 1), each mapped to its interface by entAliasMappingIdentifier, with the
receive and transmit thresholds in Arista's threshold table (ARISTA-ENTITY-SENSOR-MIB, the sensor's
units). Receive power is -2 to -4 dBm; :func:`set_rx_power` plants a dim receiver.

Switch styles (how the switch numbers its LLDP ports; lldpLocPortNum is not always the ifIndex,
docs/ethernet.md):
- ``sonic``: lldpLocPortNum is the ifIndex, the port ID is the ifName (SONiC);
- ``numbered``: LLDP ports numbered 1..N, the port ID a MAC, the description the ifDescr (the
  join goes through ifDescr); ifIndex 1 is a management port that the raw number would hit;
- ``bridge``: LLDP ports numbered by bridge port, ID and description unrelated to any interface
  name (the join goes through BRIDGE-MIB dot1dBasePortIfIndex).
"""

from __future__ import annotations

import os
import shutil
import signal
import socket
import subprocess
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from fabricmon.sim.ports import free_ports

PFC_ROOTS = {"cisco": ("1.3.6.1.4.1.9.9.813.1.2.1", 2, 3), "arista": ("1.3.6.1.4.1.30065.3.11.1.1.1", 3, 4),
             "onyx": ("1.3.6.1.4.1.33049.15.1.2.1", 5, 3), "ieee": ("1.3.111.2.802.1.1.21.1.1.1", 2, 3)}
LLDP = "1.0.8802.1.1.2.1"
DEFAULT_MBPS = 400000
ENT_SENSOR = "1.3.6.1.2.1.99.1.1.1"
ARISTA_THRESHOLD = "1.3.6.1.4.1.30065.3.12.1.1.1"
LANES = 4
# the simulated switch's thresholds in dBm (low alarm, low warning, high warning, high alarm): invented, of
# the order real 100-400G modules give
RX_LIMITS_DBM = (-10.4, -8.4, 4.0, 5.0)
TX_LIMITS_DBM = (-6.4, -4.4, 4.0, 5.0)


@dataclass
class SimOptics:
    """One port's transceiver: per lane receive and transmit power (dBm) and laser bias (mA)."""
    rx_dbm: list[float]
    tx_dbm: list[float] = field(default_factory=lambda: [1.0] * LANES)
    bias_ma: list[float] = field(default_factory=lambda: [6.5] * LANES)
    temperature_c: float = 38.0


@dataclass
class SimPort:
    if_index: int
    name: str
    speed_mbps: int = DEFAULT_MBPS
    peer: str = ""                   # the switch or host at the other end ("" none)
    peer_port: str = ""              # its port name
    tx_rate: float = 0.0             # bytes/s the port sends
    rx_rate: float = 0.0
    pause: dict[tuple[int, str], float] = field(default_factory=dict)   # (priority, "tx"/"rx") -> frames/s
    in_errors: float = 0.0           # per second (Counter32)
    out_discards: float = 0.0
    oper: int = 1
    descr: str = ""
    lldp_num: int = 0                # its lldpLocPortNum
    optics: SimOptics | None = None  # its transceiver (None: no sensors)


@dataclass
class SimSwitch:
    name: str
    chassis: str                     # "0c:42:a1:00:00:01"
    style: str = "sonic"
    pfc: str = "cisco"
    ports: list[SimPort] = field(default_factory=list)
    silent: bool = False             # never answers (no endpoint)
    recording: str = ""              # a real switch's snmprec text, served as it is (recorded())

    def port(self, name: str) -> SimPort:
        return next(p for p in self.ports if p.name == name)

    def advertised(self, p: SimPort) -> tuple[int, str, str]:
        """(port ID subtype, port ID, port description) this switch's LLDP sends for port p."""
        if self.style == "sonic":
            return 7, p.name, p.descr
        if self.style == "numbered":
            return 3, f"{self.chassis[:-2]}{p.lldp_num:02x}", p.descr
        return 7, f"port-{p.lldp_num}", f"bridge port {p.lldp_num}"


def _mac(n: int) -> str:
    return f"0c:42:a1:{(n >> 16) & 0xff:02x}:{(n >> 8) & 0xff:02x}:{n & 0xff:02x}"


def leaf_spine(spines: int = 2, leaves: int = 4, hosts_per_leaf: int = 2, uplink_rate: float = 0.0,
               host_rate: float = 0.0, spine_styles: tuple[str, ...] = ("sonic",), speed_mbps: int = DEFAULT_MBPS,
               name_prefix: str = "", optics: bool = False) -> list[SimSwitch]:
    """A 2-tier fabric: every leaf has one uplink to every spine and `hosts_per_leaf` host ports.
    Leaf ports are Ethernet0, Ethernet4, ... (hosts first, then uplinks); traffic rates start
    even (`uplink_rate` on every uplink in both directions) and are changed per port by a test.
    `optics`: every fabric port (not a management port) gets a transceiver whose lanes read -2 to
    -4 dBm (fixed per port and lane, so a run is reproducible)."""
    sw: list[SimSwitch] = []
    spine_objs = []
    for k in range(spines):
        style = spine_styles[k % len(spine_styles)]
        sp = SimSwitch(f"{name_prefix[:1]}spine{k + 1:02d}" if name_prefix else f"spine{k + 1:02d}",
                       _mac(0x100 + k), style=style)
        if style == "numbered":
            sp.ports.append(SimPort(1, "mgmt0", 1000, descr="mgmt0", oper=1))
        for li in range(leaves):
            idx = 101 + li if style != "sonic" else li + 1
            sp.ports.append(SimPort(idx, f"Ethernet{li * 4}", speed_mbps, descr=f"Ethernet1/{li + 1}",
                                    lldp_num=(li + 1) if style != "sonic" else idx))
        spine_objs.append(sp)
    for li in range(leaves):
        leaf = SimSwitch(f"{name_prefix}l{li + 1:02d}" if name_prefix else f"leaf{li + 1:02d}", _mac(0x200 + li))
        n = 0
        for h in range(hosts_per_leaf):
            host = f"{name_prefix}node{li * hosts_per_leaf + h + 1:02d}"
            leaf.ports.append(SimPort(n + 1, f"Ethernet{n * 4}", speed_mbps, host, "eth0", host_rate, host_rate,
                                      descr=f"Ethernet1/{n + 1}", lldp_num=n + 1))
            n += 1
        for sp in spine_objs:
            p = SimPort(n + 1, f"Ethernet{n * 4}", speed_mbps, sp.name, "", uplink_rate, uplink_rate,
                        descr=f"Ethernet1/{n + 1}", lldp_num=n + 1)
            leaf.ports.append(p)
            spp = sp.ports[li + (1 if sp.style == "numbered" else 0)]
            spp.peer, spp.peer_port, spp.tx_rate, spp.rx_rate = leaf.name, p.name, uplink_rate, uplink_rate
            n += 1
        sw.append(leaf)
    sw = spine_objs + sw
    if optics:
        for s in sw:
            for p in s.ports:
                if p.name.startswith("Ethernet"):
                    seed = sum(map(ord, s.name)) * 31 + p.if_index * 7
                    p.optics = SimOptics([-2.0 - ((seed + 3 * lane) % 21) / 10.0 for lane in range(LANES)],
                                         temperature_c=34.0 + (seed % 9))
    by_name = {s.name: s for s in sw}
    for s in sw:                     # each end learns how the other advertises its port
        for p in s.ports:
            if p.peer in by_name and not p.peer_port:
                other = by_name[p.peer]
                p.peer_port = next(q.name for q in other.ports if q.peer == s.name)
    return sw


def set_rate(switches: list[SimSwitch], switch: str, port: str, tx: float, rx: float | None = None) -> None:
    """Set one port's rates and the peer port's opposite direction."""
    by_name = {s.name: s for s in switches}
    p = by_name[switch].port(port)
    p.tx_rate = tx
    if rx is not None:
        p.rx_rate = rx
    if p.peer in by_name:
        q = by_name[p.peer].port(p.peer_port)
        q.rx_rate = tx
        if rx is not None:
            q.tx_rate = rx


def set_rx_power(switches: list[SimSwitch], switch: str, port: str, dbm: float, lane: int | None = None) -> None:
    """Plant a receive power on one port's transceiver: one lane (1-based), or every lane (None).
    Like set_rate, before the fabric starts (the data is written then)."""
    p = next(s for s in switches if s.name == switch).port(port)
    if p.optics is None:
        raise ValueError(f"{switch} {port} has no transceiver (leaf_spine(optics=True))")
    for n in range(LANES):
        if lane is None or n + 1 == lane:
            p.optics.rx_dbm[n] = dbm


def _mw01(dbm: float) -> int:
    """dBm -> watts at scale milli, precision 4 (units of 0.1 uW)."""
    watts: float = 10.0 ** (dbm / 10.0)
    return round(watts * 1e4)


def _hex(text: str) -> str:
    return text.encode().hex()


def _counter(tag: int, rate: float, wrap: bool = False) -> str:
    extra = ",wrap=1" if wrap else ""
    return f"{tag}:numeric|rate={rate:.6f},initial=0{extra}"


def recorded(name: str, path: Path) -> SimSwitch:
    """A recorded switch (an snmprec file, e.g. LibreNMS's recordings of real switches under
    tests/fixtures/snmprec/): served as the file holds it, with no generated ports or traffic."""
    return SimSwitch(name, "", recording=Path(path).read_text())


def snmprec(sw: SimSwitch, switches: list[SimSwitch]) -> str:
    """One switch as snmpsim data, sorted by OID."""
    if sw.recording:
        return sw.recording
    by_name = {s.name: s for s in switches}
    rows: list[tuple[tuple[int, ...], str]] = []

    def add(oid: str, tagval: str) -> None:
        rows.append((tuple(int(x) for x in oid.split(".")), f"{oid}|{tagval}"))

    add("1.3.6.1.2.1.1.1.0", f"4|simulated switch {sw.name}")
    add("1.3.6.1.2.1.1.5.0", f"4|{sw.name}")
    add(f"{LLDP}.3.1.0", "2|4")
    add(f"{LLDP}.3.2.0", "4x|" + sw.chassis.replace(":", ""))
    add(f"{LLDP}.3.3.0", f"4|{sw.name}")
    for p in sw.ports:
        i = p.if_index
        add(f"1.3.6.1.2.1.2.2.1.1.{i}", f"2|{i}")
        add(f"1.3.6.1.2.1.2.2.1.2.{i}", f"4|{p.descr or p.name}")
        add(f"1.3.6.1.2.1.2.2.1.3.{i}", "2|6")                   # ifType ethernetCsmacd
        add(f"1.3.6.1.2.1.2.2.1.8.{i}", f"2:writecache|value={p.oper}")
        add(f"1.3.6.1.2.1.2.2.1.13.{i}", _counter(65, 0.0))
        add(f"1.3.6.1.2.1.2.2.1.14.{i}", _counter(65, p.in_errors, wrap=True))
        add(f"1.3.6.1.2.1.2.2.1.19.{i}", _counter(65, p.out_discards, wrap=True))
        add(f"1.3.6.1.2.1.31.1.1.1.1.{i}", f"4|{p.name}")
        add(f"1.3.6.1.2.1.31.1.1.1.6.{i}", _counter(70, p.rx_rate))
        add(f"1.3.6.1.2.1.31.1.1.1.7.{i}", _counter(70, p.rx_rate / 4096))
        add(f"1.3.6.1.2.1.31.1.1.1.10.{i}", _counter(70, p.tx_rate))
        add(f"1.3.6.1.2.1.31.1.1.1.11.{i}", _counter(70, p.tx_rate / 4096))
        add(f"1.3.6.1.2.1.31.1.1.1.15.{i}", f"66|{p.speed_mbps}")
        add(f"1.3.6.1.2.1.31.1.1.1.17.{i}", "2|1")                # ifConnectorPresent
        add(f"1.3.6.1.2.1.31.1.1.1.18.{i}", f"4|{('to ' + p.peer) if p.peer else ''}")
        if p.lldp_num:
            sub, pid, desc = sw.advertised(p)
            n = p.lldp_num
            add(f"{LLDP}.3.7.1.2.{n}", f"2|{sub}")
            add(f"{LLDP}.3.7.1.3.{n}", f"4|{pid}")
            add(f"{LLDP}.3.7.1.4.{n}", f"4|{desc}")
            if sw.style == "bridge":
                add(f"1.3.6.1.2.1.17.1.4.1.2.{n}", f"2|{i}")
            if p.peer:
                rem = f"0.{n}.1"
                other = by_name.get(p.peer)
                if other is not None:
                    q = other.port(p.peer_port)
                    chassis, (psub, ppid, pdesc) = other.chassis, other.advertised(q)
                else:                # a host: lldpd sends its MAC and the interface name as description
                    chassis = _mac(0x10000 + sum(map(ord, p.peer)) * 7 + len(p.peer))
                    psub, ppid, pdesc = 3, chassis, p.peer_port
                add(f"{LLDP}.4.1.1.4.{rem}", "2|4")
                add(f"{LLDP}.4.1.1.5.{rem}", "4x|" + chassis.replace(":", ""))
                add(f"{LLDP}.4.1.1.6.{rem}", f"2|{psub}")
                add(f"{LLDP}.4.1.1.7.{rem}", f"4|{ppid}")
                add(f"{LLDP}.4.1.1.8.{rem}", f"4|{pdesc}")
                add(f"{LLDP}.4.1.1.9.{rem}", f"4|{p.peer}")
        if p.optics is not None:
            _sensors(add, p)
        root, tx_col, rx_col = PFC_ROOTS[sw.pfc]
        if sw.pfc == "ieee":
            add(f"{root}.{tx_col}.{i}", _counter(70, sum(r for (_, d), r in p.pause.items() if d == "tx")))
            add(f"{root}.{rx_col}.{i}", _counter(70, sum(r for (_, d), r in p.pause.items() if d == "rx")))
        else:
            for prio in range(8):
                add(f"{root}.{tx_col}.{i}.{prio}", _counter(70, p.pause.get((prio, "tx"), 0.0)))
                add(f"{root}.{rx_col}.{i}.{prio}", _counter(70, p.pause.get((prio, "rx"), 0.0)))
    rows.sort()
    return "\n".join(r for _, r in rows) + "\n"


def _sensors(add: Callable[[str, str], None], p: SimPort) -> None:
    """Port p's transceiver as ENTITY-MIB entities and ENTITY-SENSOR-MIB sensors (module docstring):
    entity 1000000 + 1000 x ifIndex + 10 x kind + lane (kind 0 temperature, 1 rx, 2 tx, 3 bias)."""
    o = p.optics
    assert o is not None                # called for a port with a transceiver only
    rows: list[tuple[int, int, str, int, int, int, int, tuple[float, ...] | None]] = [
        (0, 0, f"{p.name} Transceiver Temperature Sensor", 8, 9, 1, round(o.temperature_c * 10), None)]
    for n in range(LANES):
        lane = n + 1
        rows += [(1, lane, f"{p.name} Lane {lane} Transceiver Receive Power Sensor", 6, 8, 4, _mw01(o.rx_dbm[n]),
                  RX_LIMITS_DBM),
                 (2, lane, f"{p.name} Lane {lane} Transceiver Transmit Power Sensor", 6, 8, 4, _mw01(o.tx_dbm[n]),
                  TX_LIMITS_DBM),
                 (3, lane, f"{p.name} Lane {lane} Transceiver Bias Current Sensor", 5, 8, 2,
                  round(o.bias_ma[n] * 100), None)]
    for kind, lane, name, typ, scale, prec, value, limits in rows:
        e = 1000000 + 1000 * p.if_index + 10 * kind + lane
        add(f"1.3.6.1.2.1.47.1.1.1.1.2.{e}", f"4|{name}")              # entPhysicalDescr
        add(f"1.3.6.1.2.1.47.1.1.1.1.5.{e}", "2|8")                    # entPhysicalClass sensor
        add(f"1.3.6.1.2.1.47.1.1.1.1.7.{e}", f"4|{name}")              # entPhysicalName
        add(f"1.3.6.1.2.1.47.1.3.2.1.2.{e}.0", f"6|1.3.6.1.2.1.2.2.1.1.{p.if_index}")   # entAliasMappingIdentifier
        for col, v in ((1, typ), (2, scale), (3, prec), (4, value), (5, 1)):         # ..., entPhySensorOperStatus ok
            add(f"{ENT_SENSOR}.{col}.{e}", f"2|{v}")
        if limits is not None:               # low warning, low critical, high warning, high critical
            low_alarm, low_warn, high_warn, high_alarm = limits
            for col, dbm in ((1, low_warn), (2, low_alarm), (3, high_warn), (4, high_alarm)):
                add(f"{ARISTA_THRESHOLD}.{col}.{e}", f"2|{_mw01(dbm)}")


def free_udp_ports(n: int) -> list[int]:
    """n UDP ports on 127.0.0.1 that are free now (fabricmon.sim.ports: the process's own block in the tests)."""
    return free_ports(n, socket.SOCK_DGRAM)


def tools_available() -> tuple[bool, str]:
    missing = [t for t in ("snmpsimd", "snmpbulkwalk", "snmpset", "snmpget") if shutil.which(t) is None]
    return (not missing, "missing: " + ", ".join(missing) + " (apt-get install snmpsim snmp)" if missing else "")


class SnmpSimFabric:
    """snmpsimd serving `switches` on 127.0.0.1 (one UDP endpoint each; a silent switch gets a port
    nobody listens on). v3: `v3` = (user, auth_proto, auth_key, priv_proto, priv_key)."""

    def __init__(self, switches: list[SimSwitch], workdir: Path | None = None, community: str = "public",
                 v3: tuple[str, str, str, str, str] | None = None):
        self.switches = switches
        # snmpsimd started as root runs as nobody: its data lives in a directory of its own that
        # nobody can read (a pytest tmp_path is not), removed by stop()
        self.workdir = Path(tempfile.mkdtemp(prefix="fabricmon-ethsim-", dir=workdir if workdir and
                                             os.geteuid() != 0 else None))
        self.community = community
        self.v3 = v3
        self.procs: list[subprocess.Popen[bytes]] = []
        ports = free_udp_ports(len(switches))
        self.endpoints = {s.name: f"127.0.0.1:{p}" for s, p in zip(switches, ports)}

    def addresses(self) -> list[str]:
        return [self.endpoints[s.name] for s in self.switches]

    def _user_args(self) -> list[str]:
        if os.geteuid() == 0:
            return ["--process-user=nobody", "--process-group=nogroup"]
        return []

    def start(self, timeout: float = 60.0) -> SnmpSimFabric:
        data = self.workdir / "data"
        cache = self.workdir / "cache"
        for d in (data, cache):
            d.mkdir(parents=True, exist_ok=True)
        live = [s for s in self.switches if not s.silent]
        logs = self.workdir / "snmpsim.log"
        if self.v3 is None:
            comm = data / self.community
            comm.mkdir(exist_ok=True)
            for n, s in enumerate(live):
                (comm / f"1.3.6.1.6.1.1.{n}.snmprec").write_text(snmprec(s, self.switches))
            argvs = [["snmpsimd", "--v2c-arch", f"--data-dir={data}", f"--cache-dir={cache}",
                      *[f"--agent-udpv4-endpoint={self.endpoints[s.name]}" for s in live]]]
        else:
            user, aproto, akey, pproto, pkey = self.v3
            argvs = []
            for s in live:
                d = data / s.name
                d.mkdir(exist_ok=True)
                (d / "public.snmprec").write_text(snmprec(s, self.switches))
                argvs.append(["snmpsimd", f"--data-dir={d}", f"--cache-dir={cache / s.name}",
                              f"--agent-udpv4-endpoint={self.endpoints[s.name]}", "--v3-only",
                              f"--v3-user={user}", f"--v3-auth-key={akey}", f"--v3-auth-proto={aproto}",
                              f"--v3-priv-key={pkey}", f"--v3-priv-proto={pproto}"])
                (cache / s.name).mkdir(exist_ok=True)
        os.chmod(self.workdir, 0o755)
        for root, dirs, files in os.walk(self.workdir):
            for dname in dirs:
                os.chmod(os.path.join(root, dname), 0o777 if "cache" in root or dname == "cache" else 0o755)
            for f in files:
                os.chmod(os.path.join(root, f), 0o644)
        with open(logs, "ab") as log:
            for argv in argvs:
                self.procs.append(subprocess.Popen([*argv, *self._user_args(), "--logging-method=stderr"],
                                                   stdout=log, stderr=log, stdin=subprocess.DEVNULL,
                                                   start_new_session=True))
        deadline = time.monotonic() + timeout
        for s in live:
            while not self._answers(s):
                if any(p.poll() is not None for p in self.procs) or time.monotonic() > deadline:
                    self.stop()
                    raise RuntimeError(f"snmpsimd did not serve {s.name}: {logs.read_text()[-2000:]}")
                time.sleep(0.3)
        return self

    def snmp_args(self) -> list[str]:
        if self.v3 is None:
            return ["-v2c", "-c", self.community]
        user, aproto, akey, pproto, pkey = self.v3
        return ["-v3", "-l", "authPriv", "-u", user, "-a", aproto, "-A", akey, "-x", pproto, "-X", pkey, "-n", "public"]

    def _answers(self, s: SimSwitch) -> bool:
        try:
            r = subprocess.run(["snmpget", *self.snmp_args(), "-On", "-t", "1", "-r", "0", self.endpoints[s.name],
                                "1.3.6.1.2.1.1.5.0"], capture_output=True, text=True, timeout=10,
                               env={**os.environ, "MIBS": ""})
        except subprocess.TimeoutExpired:
            return False
        return r.returncode == 0 and (bool(s.recording) or s.name in r.stdout)

    def set_oper_status(self, switch: str, port: str, status: int) -> None:
        """Take a port down (2) or up (1) with the real snmpset."""
        sw = next(s for s in self.switches if s.name == switch)
        idx = sw.port(port).if_index
        subprocess.run(["snmpset", *self.snmp_args(), "-On", "-t", "2", "-r", "1", self.endpoints[switch],
                        f"1.3.6.1.2.1.2.2.1.8.{idx}", "i", str(status)], check=True, capture_output=True,
                       timeout=20, env={**os.environ, "MIBS": ""})

    def stop(self) -> None:
        for p in self.procs:
            if p.poll() is None:
                try:
                    os.killpg(p.pid, signal.SIGTERM)
                except ProcessLookupError:
                    pass
        for p in self.procs:
            try:
                p.wait(5)
            except subprocess.TimeoutExpired:
                os.killpg(p.pid, signal.SIGKILL)
                p.wait(5)
        self.procs = []
        shutil.rmtree(self.workdir, ignore_errors=True)

    def __enter__(self) -> SnmpSimFabric:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()


__all__ = ["SimOptics", "SimPort", "SimSwitch", "SnmpSimFabric", "free_udp_ports", "leaf_spine", "recorded", "set_rate",
           "set_rx_power", "snmprec", "tools_available"]
