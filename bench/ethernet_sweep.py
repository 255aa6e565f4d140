"""The Ethernet collector's sweep side by side with prometheus-snmp-exporter, on the same simulated
switches (snmpsim), walking the same columns: ifTable (ifOperStatus, ifInDiscards, ifInErrors,
ifOutDiscards), ifXTable (ifName, ifHCIn/OutOctets, ifHCIn/OutUcastPkts, ifHighSpeed) and the PFC
table (CISCO-PFC-EXT-MIB requests and indications by priority).

Each size is measured twice in the same run: SNMPv2c, and SNMPv3 authPriv (HMAC-SHA-96 + AES-128,
both clients alike; snmpsim serves every switch as its own SNMP engine, all from one process, with
its own engine ID, data and endpoint).

fabricmon (read in process by host.snmp, v3 with host.usm): CPU of one Ethernet sweep run (this
process and any child process it started, from getrusage: the in-process client starts none), wall
time, and the process RSS. snmp_exporter: its CPU (/proc/<pid>/stat utime+stime) for one scrape of
every switch, 16 at a time (as Prometheus scrapes in parallel), with a hand-written snmp.yml of
numeric OIDs (Debian ships none). The ratio is fabricmon's CPU per sweep over snmp_exporter's per
round of scrapes: the target is <= 1.0 for both versions.

    python bench/ethernet_sweep.py [--sizes 12,48,192] [--sweeps 3] [--hosts 16] [--versions 2c,3] [--timeout 5]
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
from fabricmon.host.snmp import WalkSpec, walk_many
from fabricmon.host.usm import Usm
from fabricmon.sim.ethernet import SnmpSimFabric, free_udp_ports, leaf_spine, snmprec
from fabricmon.sources.ethernet.discovery import SnmpDiscoverySource
from fabricmon.sources.ethernet.sweep import SnmpSweepSource
from fabricmon.model.fabric import build_topology

IF_COLS = [f"1.3.6.1.2.1.2.2.1.{c}" for c in (8, 13, 14, 19)]
IFX_COLS = [f"1.3.6.1.2.1.31.1.1.1.{c}" for c in (1, 6, 7, 10, 11, 15)]
PFC_COLS = [f"1.3.6.1.4.1.9.9.813.1.2.1.{c}" for c in (2, 3)]


V3_USER, V3_AUTH, V3_PRIV = "fabmon", "bench-Auth-1234", "bench-Priv-5678"


class V3SimFabric:
    """The switches in snmpsim's SNMPv3 mode, every one its own SNMP engine (engine ID, data
    directory, UDP endpoint) in one snmpsimd process (one process per switch, as SnmpSimFabric's
    v3 mode does, would be 192 Python processes), user V3_USER with SHA and AES."""

    def __init__(self, switches):
        self.switches = switches
        # snmpsimd started as root runs as nobody: a directory of its own, which it can reach
        self.workdir = Path(tempfile.mkdtemp(prefix="fabricmon-bench-v3sim-"))
        self.ports = free_udp_ports(len(switches))
        self.proc: subprocess.Popen | None = None

    def addresses(self) -> list[str]:
        return [f"127.0.0.1:{p}" for p in self.ports]

    def start(self, timeout: float = 600) -> V3SimFabric:
        cache = self.workdir / "cache"
        cache.mkdir()
        argv = ["snmpsimd", f"--cache-dir={cache}", "--v3-only", "--logging-method=null"]
        if os.geteuid() == 0:
            argv += ["--process-user=nobody", "--process-group=nogroup"]
        for i, (sw, port) in enumerate(zip(self.switches, self.ports)):
            d = self.workdir / sw.name
            d.mkdir()
            (d / "public.snmprec").write_text(snmprec(sw, self.switches))
            argv += [f"--v3-engine-id=80001f8804{i + 1:08x}", f"--data-dir={d}", f"--v3-user={V3_USER}",
                     f"--v3-auth-key={V3_AUTH}", "--v3-auth-proto=SHA", f"--v3-priv-key={V3_PRIV}",
                     "--v3-priv-proto=AES", f"--agent-udpv4-endpoint=127.0.0.1:{port}"]
        for root, dirs, files in os.walk(self.workdir):
            for d in dirs:
                os.chmod(os.path.join(root, d), 0o777)
            for f in files:
                os.chmod(os.path.join(root, f), 0o644)
        os.chmod(self.workdir, 0o755)
        log = open(self.workdir / "log", "wb")
        self.proc = subprocess.Popen(argv, stdout=log, stderr=log, stdin=subprocess.DEVNULL, start_new_session=True)
        usm = Usm(V3_USER, "SHA", V3_AUTH, "AES", V3_PRIV, "public")
        end = time.monotonic() + timeout
        todo = self.addresses()
        while todo:
            res = walk_many([WalkSpec(a, "1.3.6.1.2.1.1.5", usm=usm, timeout=2, retries=0) for a in todo],
                            time.monotonic() + 30)
            todo = [a for a, r in zip(todo, res) if not (r.ok and r.stdout)]
            if todo and (self.proc.poll() is not None or time.monotonic() > end):
                self.stop()
                raise RuntimeError(f"snmpsimd (v3) did not serve {len(todo)} switches")
            if todo:
                time.sleep(1)
        return self

    def stop(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            os.killpg(self.proc.pid, 15)
            try:
                self.proc.wait(10)
            except subprocess.TimeoutExpired:
                os.killpg(self.proc.pid, 9)
                self.proc.wait(5)
        shutil.rmtree(self.workdir, ignore_errors=True)


def snmp_yml(path: Path, v3: bool = False, timeout: float = 5.0) -> None:
    """One module walking the same columns, every object a metric (numeric OIDs, no MIBs)."""
    lines = ["fabric:", "  walk:"] + [f"  - {o}" for o in IF_COLS + IFX_COLS + PFC_COLS]
    lines += [f"  version: {3 if v3 else 2}", "  max_repetitions: 25", "  retries: 0", f"  timeout: {timeout:g}s",
              "  auth:"]
    if v3:
        lines += [f"    username: {V3_USER}", "    security_level: authPriv", f"    password: {V3_AUTH}",
                  "    auth_protocol: SHA", "    priv_protocol: AES", f"    priv_password: {V3_PRIV}",
                  "    context_name: public"]
    else:
        lines += ["    community: public"]
    lines += ["  metrics:"]
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


def run_size(n: int, sweeps: int, hosts: int, tmp: Path, version: str, timeout: float = 5.0) -> dict:
    spines, leaves = fabric_size(n)
    sw = leaf_spine(spines=spines, leaves=leaves, hosts_per_leaf=hosts, uplink_rate=20e9)
    for s in sw:
        for p in s.ports:
            p.pause[(3, "tx")] = 10.0
    ports = sum(len(s.ports) for s in sw)
    v3 = version == "3"
    fab = (V3SimFabric(sw) if v3 else SnmpSimFabric(sw, tmp / f"sim{n}")).start(timeout=600)
    try:
        secrets = {}
        for name, value in (("community", "public"), ("auth", V3_AUTH), ("priv", V3_PRIV)):
            secrets[name] = tmp / name
            secrets[name].write_text(value + "\n")
            secrets[name].chmod(0o600)
        snmp = ({"version": "3", "user": V3_USER, "auth_protocol": "SHA", "auth_password_file": str(secrets["auth"]),
                 "priv_protocol": "AES", "priv_password_file": str(secrets["priv"]), "context": "public"} if v3
                else {"community_file": str(secrets["community"])})
        cfg = from_dict({"paths": {"state_dir": str(tmp / "state")},
                         "fabric": {"kind": "ethernet", "timeouts": {"sweep": 600, "discovery": 600},
                                    "ethernet": {"switches": fab.addresses(), "concurrency": 16,
                                                 "snmp": {**snmp, "timeout": timeout, "retries": 1}}}})
        io = LiveIO()
        disc = SnmpDiscoverySource(cfg.fabric.sources["discovery"])
        out = disc.collect(io, Inputs(deadline=time.monotonic() + 600))
        assert out.data is not None and not out.errors, out.errors
        topo = build_topology(out.data)
        sweep = SnmpSweepSource(cfg.fabric.sources["sweep"])
        assert sweep.access.inprocess, "v3 fell back to net-snmp's tools (is cryptography installed?)"
        ours = []
        for _ in range(sweeps):
            c0, w0 = cpu_self_and_children(), time.monotonic()
            res = sweep.collect(io, Inputs(deadline=time.monotonic() + 600, inventory=topo))
            ours.append((cpu_self_and_children() - c0, time.monotonic() - w0))
            assert res.data is not None and not res.errors, res.errors
            values = sum(len(v) for v in res.data.ports.values()) + sum(len(v) for v in res.data.pause.values())
        rss = psutil.Process().memory_info().rss
        sweep.close()
        disc.close()

        yml = tmp / "snmp.yml"
        snmp_yml(yml, v3, timeout)
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
    return {"version": version, "switches": n, "ports": ports, "values": values, "exporter_values": got, "cpu": cpu, "wall": wall,
            "rss": rss, "exp_cpu": ecpu, "exp_wall": ewall, "exp_rss": exp_rss, "ratio": cpu / ecpu if ecpu else None}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--sizes", default="12,48,192")
    ap.add_argument("--sweeps", type=int, default=3)
    ap.add_argument("--hosts", type=int, default=16, help="host ports per leaf")
    ap.add_argument("--versions", default="2c,3", help="SNMP versions to measure, each at every size")
    ap.add_argument("--timeout", type=float, default=5.0,
                    help="seconds per request, both clients (snmpsim answers slowly on a loaded machine)")
    args = ap.parse_args()
    for tool in ("snmpsimd", "snmpbulkwalk", "prometheus-snmp-exporter"):
        if shutil.which(tool) is None:
            print(f"{tool} is not installed (apt-get install snmpsim snmp prometheus-snmp-exporter)", file=sys.stderr)
            return 2
    tmp = Path(tempfile.mkdtemp(prefix="fabricmon-bench-eth-"))
    rows = []
    try:
        for n in (int(x) for x in args.sizes.split(",")):
            for version in args.versions.split(","):
                rows.append(run_size(n, args.sweeps, args.hosts, tmp, version, args.timeout))
                r = rows[-1]
                print(f"{r['switches']} switches, v{version} done: ratio {r['ratio']:.2f} (values: ours {r['values']}, "
                      f"snmp_exporter {r['exporter_values']}; CPU s ours {r['cpu']:.3f}, theirs {r['exp_cpu']:.3f}; "
                      f"wall s ours {r['wall']:.2f}, theirs {r['exp_wall']:.2f}; RSS MiB ours {r['rss'] / 2**20:.0f}, "
                      f"theirs {r['exp_rss'] / 2**20:.0f})", file=sys.stderr, flush=True)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    print("| SNMP | switches | ports | values/sweep | fabricmon sweep wall s | fabricmon CPU s/sweep (with children) | "
          "fabricmon RSS MiB | snmp_exporter round wall s | snmp_exporter CPU s/round | snmp_exporter RSS MiB | "
          "CPU ratio |")
    print("|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|")
    for r in rows:
        print(f"| v{r['version']} | {r['switches']} | {r['ports']} | {r['values']} | {r['wall']:.2f} | {r['cpu']:.3f} | "
              f"{r['rss'] / 2**20:.0f} | {r['exp_wall']:.2f} | {r['exp_cpu']:.3f} | {r['exp_rss'] / 2**20:.0f} | "
              f"{r['ratio']:.2f} |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
