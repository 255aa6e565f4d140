"""The Ethernet collector's sweep side by side with prometheus-snmp-exporter, on the same simulated
switches (snmpsim), walking the same columns: ifTable (ifOperStatus, ifInDiscards, ifInErrors,
ifOutDiscards), ifXTable (ifName, ifHCIn/OutOctets, ifHCIn/OutUcastPkts, ifHighSpeed) and the PFC
table (CISCO-PFC-EXT-MIB requests and indications by priority).

fabricmon (SNMPv2c, read in process by host.snmp): CPU of one Ethernet sweep run (this process
and any child process it started, from getrusage: v2c starts none), wall time, and the process RSS. snmp_exporter: its CPU (/proc/<pid>/stat utime+stime)
for one scrape of every switch, 16 at a time (as Prometheus scrapes in parallel), with a
hand-written snmp.yml of numeric OIDs (Debian ships none). The ratio is fabricmon's CPU per sweep
over snmp_exporter's per round of scrapes: the target is <= 1.0.

    python bench/ethernet_sweep.py [--sizes 12,48,192] [--sweeps 3] [--hosts 16]
"""

from __future__ import annotations

import argparse
import http.client
import os
import resource
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import psutil

from fabricmon.config import from_dict
from fabricmon.host import LiveIO
from fabricmon.pipeline.source import Inputs
from fabricmon.sim.ethernet import SnmpSimFabric, free_udp_ports, leaf_spine
from fabricmon.sources.ethernet.discovery import SnmpDiscoverySource
from fabricmon.sources.ethernet.sweep import SnmpSweepSource
from fabricmon.model.fabric import build_topology

IF_COLS = [f"1.3.6.1.2.1.2.2.1.{c}" for c in (8, 13, 14, 19)]
IFX_COLS = [f"1.3.6.1.2.1.31.1.1.1.{c}" for c in (1, 6, 7, 10, 11, 15)]
PFC_COLS = [f"1.3.6.1.4.1.9.9.813.1.2.1.{c}" for c in (2, 3)]


def snmp_yml(path: Path) -> None:
    """One module walking the same columns, every object a metric (numeric OIDs, no MIBs)."""
    lines = ["fabric:", "  walk:"] + [f"  - {o}" for o in IF_COLS + IFX_COLS + PFC_COLS]
    lines += ["  version: 2", "  max_repetitions: 25", "  retries: 0", "  timeout: 5s",
              "  auth:", "    community: public", "  metrics:"]
    for oid in IF_COLS + IFX_COLS:
        typ = "DisplayString" if oid.endswith(".31.1.1.1.1") else ("gauge" if oid.endswith((".15", ".2.2.1.8"))
                                                                     else "counter")
        lines += [f"  - name: m_{oid.replace('.', '_')}", f"    oid: {oid}", f"    type: {typ}",
                  "    indexes:", "    - labelname: ifIndex", "      type: gauge"]
    for oid in PFC_COLS:
        lines += [f"  - name: m_{oid.replace('.', '_')}", f"    oid: {oid}", "    type: counter",
                  "    indexes:", "    - labelname: ifIndex", "      type: gauge",
                  "    - labelname: priority", "      type: gauge"]
    path.write_text("\n".join(lines) + "\n")


def cpu_self_and_children() -> float:
    s, c = resource.getrusage(resource.RUSAGE_SELF), resource.getrusage(resource.RUSAGE_CHILDREN)
    return s.ru_utime + s.ru_stime + c.ru_utime + c.ru_stime


def proc_cpu(pid: int) -> float:
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def fabric_size(n: int) -> tuple[int, int]:
    """(spines, leaves) of an n-switch fabric: 4, 8 and 16 spines at 12, 48 and 192 switches."""
    spines = {12: 4, 48: 8, 192: 16}.get(n, max(2, n // 12))
    return spines, n - spines


def run_size(n: int, sweeps: int, hosts: int, tmp: Path) -> dict:
    spines, leaves = fabric_size(n)
    sw = leaf_spine(spines=spines, leaves=leaves, hosts_per_leaf=hosts, uplink_rate=20e9)
    for s in sw:
        for p in s.ports:
            p.pause[(3, "tx")] = 10.0
    ports = sum(len(s.ports) for s in sw)
    fab = SnmpSimFabric(sw, tmp / f"sim{n}").start(timeout=300)
    try:
        comm = tmp / "community"
        comm.write_text("public\n")
        comm.chmod(0o600)
        cfg = from_dict({"paths": {"state_dir": str(tmp / "state")},
                         "fabric": {"kind": "ethernet", "timeouts": {"sweep": 300, "discovery": 300},
                                    "ethernet": {"switches": fab.addresses(), "concurrency": 16,
                                                 "snmp": {"community_file": str(comm), "timeout": 5, "retries": 1}}}})
        io = LiveIO()
        disc = SnmpDiscoverySource(cfg, cfg.fabric.sources["discovery"])
        out = disc.collect(io, Inputs(deadline=time.monotonic() + 300))
        assert out.data is not None and not out.errors, out.errors
        topo = build_topology(out.data)
        sweep = SnmpSweepSource(cfg, cfg.fabric.sources["sweep"])
        ours = []
        for _ in range(sweeps):
            c0, w0 = cpu_self_and_children(), time.monotonic()
            res = sweep.collect(io, Inputs(deadline=time.monotonic() + 300, inventory=topo))
            ours.append((cpu_self_and_children() - c0, time.monotonic() - w0))
            assert res.data is not None and not res.errors, res.errors
            values = sum(len(v) for v in res.data.ports.values()) + sum(len(v) for v in res.data.pause.values())
        rss = psutil.Process().memory_info().rss
        sweep.close()
        disc.close()

        yml = tmp / "snmp.yml"
        snmp_yml(yml)
        port = free_udp_ports(1)[0]      # a free TCP port is as likely; checked by the exporter's start
        exp = subprocess.Popen(["prometheus-snmp-exporter", f"--config.file={yml}",
                                f"--web.listen-address=127.0.0.1:{port}"], stdout=subprocess.DEVNULL,
                               stderr=subprocess.DEVNULL)
        try:
            for _ in range(100):
                try:
                    http.client.HTTPConnection("127.0.0.1", port, timeout=1).request("GET", "/")
                    break
                except OSError:
                    time.sleep(0.1)

            def scrape(target: str) -> int:
                conn = http.client.HTTPConnection("127.0.0.1", port, timeout=300)
                conn.request("GET", f"/snmp?module=fabric&target={target}")
                body = conn.getresponse().read().decode()
                conn.close()
                return sum(1 for line in body.splitlines() if line.startswith("m_"))

            theirs = []
            for _ in range(sweeps):
                c0, w0 = proc_cpu(exp.pid), time.monotonic()
                with ThreadPoolExecutor(16) as pool:
                    got = sum(pool.map(scrape, fab.addresses()))
                theirs.append((proc_cpu(exp.pid) - c0, time.monotonic() - w0))
            exp_rss = psutil.Process(exp.pid).memory_info().rss
        finally:
            exp.terminate()
            exp.wait(10)
    finally:
        fab.stop()
    cpu, wall = statistics.median(c for c, _ in ours), statistics.median(w for _, w in ours)
    ecpu, ewall = statistics.median(c for c, _ in theirs), statistics.median(w for _, w in theirs)
    return {"switches": n, "ports": ports, "values": values, "exporter_values": got, "cpu": cpu, "wall": wall,
            "rss": rss, "exp_cpu": ecpu, "exp_wall": ewall, "exp_rss": exp_rss, "ratio": cpu / ecpu if ecpu else None}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--sizes", default="12,48,192")
    ap.add_argument("--sweeps", type=int, default=3)
    ap.add_argument("--hosts", type=int, default=16, help="host ports per leaf")
    args = ap.parse_args()
    for tool in ("snmpsimd", "snmpbulkwalk", "prometheus-snmp-exporter"):
        if shutil.which(tool) is None:
            print(f"{tool} is not installed (apt-get install snmpsim snmp prometheus-snmp-exporter)", file=sys.stderr)
            return 2
    tmp = Path(tempfile.mkdtemp(prefix="fabricmon-bench-eth-"))
    rows = []
    try:
        for n in (int(x) for x in args.sizes.split(",")):
            rows.append(run_size(n, args.sweeps, args.hosts, tmp))
            r = rows[-1]
            print(f"{r['switches']} switches done: ratio {r['ratio']:.2f}", file=sys.stderr)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    print("| switches | ports | values/sweep | fabricmon sweep wall s | fabricmon CPU s/sweep (with children) | "
          "fabricmon RSS MiB | snmp_exporter round wall s | snmp_exporter CPU s/round | snmp_exporter RSS MiB | "
          "CPU ratio |")
    print("|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|")
    for r in rows:
        print(f"| {r['switches']} | {r['ports']} | {r['values']} | {r['wall']:.2f} | {r['cpu']:.3f} | "
              f"{r['rss'] / 2**20:.0f} | {r['exp_wall']:.2f} | {r['exp_cpu']:.3f} | {r['exp_rss'] / 2**20:.0f} | "
              f"{r['ratio']:.2f} |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
