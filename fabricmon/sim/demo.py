"""`fabricmon demo`: the daemon on a built-in simulated fat-tree fabric.

Starts ibsim with the bundled topology (2 spines, 4 leaves, 32 hosts, HDR), keeps an opensm running as the master SM,
then runs the real daemon as host `node01` (the real infiniband-diags tools, under the
umad2sim preload), plus the fabric collector (`fabricmon fabric run`) on port+2 with simulated
traffic on every leaf's uplinks. After a short while it injects a burst of symbol errors on that
host's port and polarises leaf02's traffic onto spine01, so findings appear (an imbalanced leaf
after 3 sweeps), and prints findings as they change.

Beside it, when snmpsim and net-snmp are installed, an Ethernet (RoCE) fabric: 2 spines and 4 leaves
served by snmpsim, read by a second collector (`fabric.kind: ethernet`) on port+3, with rocel03
polarised onto rspine01 and a PFC storm on rocel04's host port Ethernet0 (priority 3). Ctrl-C or
SIGTERM (systemd, `timeout`, a CI runner) stops everything: the simulators' processes end and the
temp directory is removed.
"""

from __future__ import annotations

import signal
import sys
import tempfile
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any

from fabricmon.sim import fabric as sim
from fabricmon.checks import STATUS_NAMES
from fabricmon.model.snapshot import Snapshot
from fabricmon.config import from_dict
from fabricmon.host import LiveIO

if TYPE_CHECKING:
    from fabricmon.serve.daemon import Daemon
    from fabricmon.sim.ethernet import SnmpSimFabric

DEMO_HOST = "node01 mlx5_0"
FAULT_SYMBOL_ERRORS = 8000          # above 4X HDR's 1e-11 critical budget (7,200 an hour)


def demo_config(sysfs: str, port: int) -> dict[str, Any]:
    """The config the demo runs with (also a template for a simulated-fabric setup)."""
    return {
        "server": {"address": "127.0.0.1", "port": port},
        # An empty sysfs root: only the simulated HCA is seen, never this machine's own.
        "paths": {"sysfs": sysfs, "state_dir": sysfs},
        "sources": {
            "sysfs": {"interval": 5},
            "ibstat": {"interval": 5},
            "perfquery": {"interval": 5},
            "iblinkinfo": {"interval": 5},
        },
        "expected_links": [{"device": "*", "width": "4X", "speed": "HDR"}],
        # the host it runs as: the pages' header and the Slurm source name node01, not this machine
        "slurm": {"node_name": DEMO_HOST.split()[0]},
    }


# what the collectors' maps are titled (fabric.name): the fabric each one reads, not node01's name
IB_FABRIC = "demo InfiniBand fabric"
ROCE_FABRIC = "demo RoCE fabric"


def collector_config(sysfs: str, port: int, fabric: dict[str, Any]) -> dict[str, Any]:
    """A demo fabric collector's config: the daemon's paths and server, and `fabric`; not its
    slurm.node_name (a collector runs on a management host, here this machine, and is not node01)."""
    base = {k: v for k, v in demo_config(sysfs, port).items() if k not in ("slurm", "expected_links")}
    return {**base, "fabric": fabric}


# leaf uplinks in the demo topology: ports 9, 10 to spine01 and 11, 12 to spine02
BALANCED = {f"leaf0{i}": {9: 0.5, 10: 0.5, 11: 0.5, 12: 0.5} for i in range(1, 5)}
POLARISED_LEAF = "leaf02"


_SAY = threading.Lock()


def _say(msg: str) -> None:
    """One line, whole: the three daemons' publishers call this from their own threads, and print()
    writes the text and its newline separately, so that two lines could run into each other."""
    line = f"[{time.strftime('%H:%M:%S')}] {msg}\n"
    with _SAY:
        sys.stdout.write(line)
        sys.stdout.flush()


def summarize(snap: Snapshot) -> list[str]:
    lines = []
    for key, p in sorted(snap.ib.ports.items()):
        rate = f"{p.rate_gbps:g} Gb/s" if p.rate_gbps is not None else "?"
        lines.append(f"{p.label()}: {'up' if p.up else 'DOWN'} at {p.link_text()} ({rate}), "
                     f"counters from {p.counter_source or '-'}")
    down = [n for n, s in snap.sources.items() if s.enabled and s.active and not s.up]
    off = [n for n, s in snap.sources.items() if not (s.enabled and s.active)]
    lines.append(f"sources: {', '.join(n for n, s in snap.sources.items() if s.enabled and s.active and s.up)} up"
                 + (f"; DOWN: {', '.join(down)}" if down else "") + (f"; off: {', '.join(off)}" if off else ""))
    return lines


class _Terminated(KeyboardInterrupt):
    """SIGTERM (systemd, `timeout`, a CI runner): stops the demo as Ctrl-C does."""


def _interrupt(signum: int, frame: object) -> None:
    raise _Terminated           # SIGTERM stops the demo as Ctrl-C does: through the cleanup below


def run_demo(port: int = 9879, duration: float = 0, fault_after: float = 20.0,
             workdir: str | None = None) -> int:
    ok, why = sim.tools_available()
    if not ok:
        print(f"fabricmon demo needs the simulator and the InfiniBand tools: {why}\n"
              "install them with: sudo apt-get install ibsim-utils libumad2sim0 infiniband-diags opensm\n"
              "(or run `make demo`, which does it for you)", file=sys.stderr)
        return 1
    from fabricmon.serve.daemon import Daemon

    main = threading.current_thread() is threading.main_thread()
    previous = signal.signal(signal.SIGTERM, _interrupt) if main else None
    tmp = fabric = daemon = collector = traffic = eth_sim = eth_collector = None
    why = "it stopped"
    try:
        tmp = tempfile.TemporaryDirectory(prefix="fabricmon-demo-") if workdir is None else None
        wd = Path(tmp.name) if tmp is not None else Path(workdir or "")
        wd.mkdir(parents=True, exist_ok=True)
        (wd / "sys").mkdir(exist_ok=True)
        netfile = sim.demo_netfile_path().read_text()
        fabric = sim.SimFabric(netfile, wd / "fabric")
        _say(f"starting the simulated fabric ({len(fabric.hosts)} hosts, 2 spines, 4 leaves, HDR) ...")
        fabric.start()
        fabric.start_sm()       # a master SM that keeps answering, as on a real fabric
        cfg = from_dict(demo_config(str(wd / "sys"), port))
        daemon = Daemon(cfg, LiveIO(cfg.sysfs, cfg.procfs, env=fabric.env(DEMO_HOST)), journal=False)
        seen: dict[tuple[str, str, int | None], int] = {}
        first = threading.Event()

        def on_snapshot(snap: Snapshot) -> None:
            if not first.is_set() and snap.fabric is None \
                    and all(s.ran for s in snap.sources.values() if s.enabled and s.active):
                first.set()         # the summary once every source in use has answered
                for line in summarize(snap):
                    _say(line)
            for f in snap.findings:
                key = (f.check, f.device, f.port)
                if seen.get(key, 0) != f.status:
                    if f.status or key in seen:
                        _say(f"{STATUS_NAMES[f.status]:8} {f.check}: {f.message}")
                    seen[key] = f.status

        daemon.on_snapshot = on_snapshot
        daemon.start()
        _say(f"fabricmon runs as host {DEMO_HOST!r}: status page at http://127.0.0.1:{daemon.port}/ , metrics at "
             f"http://127.0.0.1:{daemon.port}/metrics (health: /healthz). Ctrl-C stops.")
        from fabricmon.pipeline.fabric import fabric_pipeline
        fcfg = from_dict(collector_config(str(wd / "sys"), port, {
            "name": IB_FABRIC, "port": port + 2 if port else 0, "sweep_interval": 2, "discovery_interval": 60,
            "cache_dir": str(wd / "fabric-cache")}))
        (wd / "fabric-cache").mkdir(exist_ok=True)
        traffic = sim.TrafficDriver(fabric, dict(BALANCED))
        traffic.start()
        fio = LiveIO(fcfg.sysfs, fcfg.procfs, env=fabric.env(DEMO_HOST))
        # journal=False: the demo prints each finding itself, once (not the collector's log line as well)
        collector = Daemon(fcfg, fio, port=fcfg.fabric.port, pipeline=fabric_pipeline(fcfg, fio), journal=False)
        collector.on_snapshot = on_snapshot
        collector.start()
        _say(f"the fabric collector sweeps every switch port: the live fabric map at http://127.0.0.1:{collector.port}/ "
             f", metrics at http://127.0.0.1:{collector.port}/metrics (fabricmon_ecmp_imbalance_ratio, "
             f"fabricmon_fabric_port_*)")
        eth_sim, eth_collector = _ethernet_fabric(wd, port, on_snapshot)
        start = time.monotonic()
        injected = False
        while duration <= 0 or time.monotonic() - start < duration:
            if not injected and time.monotonic() - start >= fault_after:
                fabric.set_counter(DEMO_HOST, 1, "PortCounters.SymbolErrorCounter", FAULT_SYMBOL_ERRORS)
                _say(f"injected a fault: {FAULT_SYMBOL_ERRORS} symbol errors on {DEMO_HOST} port 1 "
                     "(watch fabricmon_ib_port_symbol_errors_total and fabricmon_check_status)")
                traffic.plan = {**BALANCED, POLARISED_LEAF: {9: 0.8, 10: 0.8, 11: 0.0, 12: 0.0}}
                _say(f"polarised {POLARISED_LEAF}'s uplink traffic onto spine01 (watch fabricmon_ecmp_imbalanced; "
                     "flagged after 3 sweeps)")
                injected = True
            time.sleep(0.2)
        why = f"--duration {duration:g} s is up"
        _say(f"stopping: {why}")
    except _Terminated:
        why = "SIGTERM"
        _say(f"stopping: {why}")
    except KeyboardInterrupt:
        print()
        why = "Ctrl-C"
        _say(f"stopping: {why}")
    finally:
        if main:        # a second SIGTERM does not cut the cleanup short (SIGKILL still ends it)
            signal.signal(signal.SIGTERM, signal.SIG_IGN)
        if traffic is not None:
            traffic.stop()
        if eth_collector is not None:
            eth_collector.stop()
        if eth_sim is not None:
            eth_sim.stop()
        if collector is not None:
            collector.stop()
        if daemon is not None:
            daemon.stop()
        if fabric is not None:
            fabric.stop()
        if tmp is not None:
            tmp.cleanup()
        if main:
            signal.signal(signal.SIGTERM, previous if previous is not None else signal.SIG_DFL)
    _say(f"the demo ended ({why}): every simulator stopped and its files removed")
    return 0


def _ethernet_fabric(wd: Path, port: int, on_snapshot: Callable[[Snapshot], None]
                     ) -> tuple[SnmpSimFabric, Daemon] | tuple[None, None]:
    """The Ethernet fabric beside the InfiniBand one: (simulator, collector), or (None, None) when
    snmpsim or net-snmp is not installed (said once)."""
    from fabricmon.sim import ethernet as eth
    ok, why = eth.tools_available()
    if not ok:
        _say(f"no Ethernet fabric beside it: {why}")
        return None, None
    switches = eth.leaf_spine(spines=2, leaves=4, hosts_per_leaf=2, uplink_rate=25e9, name_prefix="roce",
                              spine_styles=("sonic", "numbered"), optics=True)     # the Optics rows have data
    by = {s.name: s for s in switches}
    eth.set_rate(switches, "rocel03", "Ethernet8", 45e9)           # polarised onto rspine01
    eth.set_rate(switches, "rocel03", "Ethernet12", 1e9)
    by["rocel04"].port("Ethernet0").pause[(3, "rx")] = 4000.0      # its host pauses the switch
    sim = eth.SnmpSimFabric(switches)
    try:            # a SIGTERM while it starts still ends snmpsimd and removes its directory
        return sim, _ethernet_collector(sim, len(switches), wd, port, on_snapshot)
    except BaseException:
        sim.stop()
        raise


def _ethernet_collector(sim: SnmpSimFabric, count: int, wd: Path, port: int,
                        on_snapshot: Callable[[Snapshot], None]) -> Daemon:
    from fabricmon.pipeline.fabric import fabric_pipeline
    from fabricmon.serve.daemon import Daemon
    sim.start()
    secret = wd / "snmp-community"
    secret.write_text("public\n")
    secret.chmod(0o600)
    cfg = from_dict(collector_config(str(wd / "sys"), port, {
        "name": ROCE_FABRIC, "kind": "ethernet", "port": port + 3 if port else 0, "sweep_interval": 2,
        "discovery_interval": 60, "cache_dir": str(wd / "ethernet-cache"),
        "ethernet": {"switches": sim.addresses(), "snmp": {"community_file": str(secret), "timeout": 1, "retries": 0}}}))
    (wd / "ethernet-cache").mkdir(exist_ok=True)
    io = LiveIO(cfg.sysfs, cfg.procfs)
    collector = Daemon(cfg, io, port=cfg.fabric.port, pipeline=fabric_pipeline(cfg, io), journal=False)
    collector.on_snapshot = on_snapshot
    collector.start()
    _say(f"the Ethernet (RoCE) fabric collector reads {count} simulated switches over SNMP: its map at "
         f"http://127.0.0.1:{collector.port}/ , metrics at http://127.0.0.1:{collector.port}/metrics "
         f"(fabricmon_fabric_port_pause_frames_total, fabricmon_ecmp_*)")
    return collector
