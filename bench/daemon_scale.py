"""The fabric collector as a daemon (`fabricmon fabric run`, 15 s sweeps) on a large fabric in ibsim,
against the MAD engine's bare read in the same run (issue 40):

- the bare read: `python -m fabricmon.sources.infiniband.mad` (one engine read of every switch, the
  physical floor here), median of `--reads`;
- the daemon, scraped like Prometheus (once a sweep interval, gzip): the daemon's CPU seconds per
  15 s window (user + system, psutil), its own sweep (`fabricmon_fabric_sweep_duration_seconds`, median
  over the windows) against the bare read, RSS (the largest seen), and per scrape the series and bytes,
  plain and gzip, of the default exposition and of `collect[]=all`;
- each tree given (`--tree after=.` is this checkout; `--tree before=/path` another one, e.g.
  `git archive main | tar -x -C /tmp/main`), each daemon alone on the fabric, one after another.

CPU is measured in CPU seconds (not wall time), so that a busy machine inflates it less; still, on a
shared machine every number is noisy: compare the rows of one run.

    python bench/daemon_scale.py [--net director|superpod|FILE] [--windows 8] [--tree before=/tmp/main]
"""

from __future__ import annotations

import argparse
import gzip
import json
import os
import re
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import time
import urllib.request
from pathlib import Path

import psutil

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
CAPTURE = ROOT.parent / "shared" / "captures" / "ibnetdiscover" / "director-hdr-400sw.ibsim.net"
INTERVAL = 15.0

sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(HERE))


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _scrape(port: int, query: str = "", want_gzip: bool = False) -> bytes:
    req = urllib.request.Request(f"http://127.0.0.1:{port}/metrics{query}",
                                 headers={"Accept-Encoding": "gzip"} if want_gzip else {})
    with urllib.request.urlopen(req, timeout=120) as r:
        return bytes(r.read())


def _series(body: bytes) -> int:
    return body.count(b"\n") - body.count(b"\n#") - (1 if body.startswith(b"#") else 0)


def _value(text: str, name: str) -> float | None:
    pattern = re.escape(name) if "{" in name else rf"{name}(?:{{[^}}]*}})?"
    m = re.search(rf"^{pattern} (\S+)$", text, re.M)
    return float(m[1]) if m else None


def bare_reads(env: dict[str, str], topology: Path, n: int) -> list[tuple[float, float]]:
    """(wall, CPU) seconds of `n` bare engine reads, each in its own process."""
    out = []
    for _ in range(n):
        r = subprocess.run([sys.executable, "-m", "fabricmon.sources.infiniband.mad", str(topology)], env=env,
                           cwd=ROOT, capture_output=True, text=True, timeout=600)
        if r.returncode != 0:
            raise SystemExit(f"bare read failed: {r.stderr[-2000:]}")
        doc = json.loads(r.stdout)
        out.append((doc["wall"], doc["cpu"]))
    return out


def daemon(tree: Path, env: dict[str, str], work: Path, windows: int, cabled: int) -> dict[str, float]:
    """One `fabricmon fabric run` from `tree`, measured over `windows` sweep intervals."""
    work.mkdir(parents=True)
    port = _free_port()
    cfg = work / "fabricmon.yml"
    cfg.write_text(json.dumps({"paths": {"state_dir": str(work)}, "logging": {"level": "warning"},
                               "fabric": {"cache_dir": str(work / "cache"), "sweep_method": "mad",
                                          "sweep_interval": INTERVAL}}))
    penv = dict(env, PYTHONPATH=str(tree))
    with open(work / "daemon.log", "wb") as log:
        proc = subprocess.Popen([sys.executable, "-m", "fabricmon", "fabric", "run", "--config", str(cfg),
                                 "--listen", f"127.0.0.1:{port}"], env=penv, cwd=work, stdout=log,
                                stderr=subprocess.STDOUT, start_new_session=True)
    ps = psutil.Process(proc.pid)
    try:
        deadline = time.monotonic() + 900
        while True:         # the first sweep: discovery, the first read
            if proc.poll() is not None:
                raise SystemExit(f"{tree}: the daemon exited: {(work / 'daemon.log').read_text()[-3000:]}")
            try:
                text = _scrape(port).decode()
                if _value(text, "fabricmon_fabric_sweep_duration_seconds") is not None:
                    break
            except OSError:
                pass
            if time.monotonic() > deadline:
                raise SystemExit(f"{tree}: no sweep in 900 s")
            time.sleep(2)
        time.sleep(INTERVAL)                    # past the start-up (discovery, routing, the first renders)
        cpus, sweeps, rss, gz_bytes = [], [], 0, []
        cpu0, runs0 = sum(ps.cpu_times()[:2]), _value(_scrape(port).decode(), 'fabricmon_source_runs_total{source="sweep"}')
        for _ in range(windows):
            t0, c0 = time.monotonic(), sum(ps.cpu_times()[:2])
            gz = _scrape(port, want_gzip=True)  # Prometheus: one scrape an interval, gzip
            gz_bytes.append(len(gz))
            text = gzip.decompress(gz).decode() if gz[:2] == b"\x1f\x8b" else gz.decode()
            s = _value(text, "fabricmon_fabric_sweep_duration_seconds")
            if s is not None:
                sweeps.append(s)
            time.sleep(max(0.0, INTERVAL - (time.monotonic() - t0)))
            cpus.append((sum(ps.cpu_times()[:2]) - c0) * INTERVAL / (time.monotonic() - t0))
            rss = max(rss, ps.memory_info().rss)
        plain = _scrape(port)
        runs = (_value(plain.decode(), 'fabricmon_source_runs_total{source="sweep"}') or 0) - (runs0 or 0)
        cpu_per_sweep = (sum(ps.cpu_times()[:2]) - cpu0) / runs if runs else float("nan")
        full = _scrape(port, "?collect[]=all")
        return {"cpu_per_sweep": cpu_per_sweep, "sweeps": runs, "cpu_per_15s": statistics.median(cpus), "cpu_max": max(cpus), "sweep_s": statistics.median(sweeps),
                "rss_mib": rss / 2**20, "series": _series(plain), "series_per_cabled_port": _series(plain) / cabled,
                "bytes": len(plain), "gzip_bytes": statistics.median(gz_bytes),
                "series_all": _series(full), "bytes_all": len(full)}
    finally:
        os.killpg(proc.pid, signal.SIGTERM)
        try:
            proc.wait(20)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--net", default="director", help="director (the 400-switch capture), superpod (bench/superpod_net.py) "
                                                      "or an ibsim net file")
    ap.add_argument("--windows", type=int, default=8, help="15 s windows measured per daemon")
    ap.add_argument("--reads", type=int, default=3, help="bare engine reads")
    ap.add_argument("--attach", metavar="ENV_JSON", help="use a simulator already running (the client environment "
                                                       "SimFabric.env gives, as JSON) instead of starting one")
    ap.add_argument("--tree", action="append", default=[], metavar="LABEL=DIR",
                    help="a checkout to run the daemon from (default: after=this one); repeat to compare")
    args = ap.parse_args()
    from fabricmon.model.fabric import DiscoveryData
    from fabricmon.parsers.ibnetdiscover import parse_ibnetdiscover
    from fabricmon.sim.fabric import SimFabric
    from superpod_net import superpod_netfile
    if args.net == "director":
        label, text = "400-switch HDR director (capture)", CAPTURE.read_text()
    elif args.net == "superpod":
        label, text = "three-tier SuperPOD-size fat tree (bench/superpod_net.py)", superpod_netfile()
    else:
        label, text = args.net, Path(args.net).read_text()
    trees = [t.split("=", 1) for t in args.tree] or [["after", str(ROOT)]]
    rows: dict[str, dict[str, float]] = {}
    with tempfile.TemporaryDirectory() as tmp:
        def measure(env: dict[str, str]) -> tuple[DiscoveryData, int, int, list[tuple[float, float]]]:
            topo = Path(tmp) / "topology.txt"
            r = subprocess.run(["ibnetdiscover"], env=env, capture_output=True, text=True, timeout=600, check=True)
            topo.write_text(r.stdout)
            disc = parse_ibnetdiscover(r.stdout)
            ports = sum(sw.nports for sw in disc.switches.values())
            cabled = sum(len(sw.links) for sw in disc.switches.values())
            reads = bare_reads(env, topo, args.reads)
            for name, tree in trees:
                print(f"# daemon {name} ({tree})", file=sys.stderr)
                rows[name] = daemon(Path(tree).resolve(), env, Path(tmp) / name, args.windows, cabled)
                print(f"# {name}: {rows[name]}", file=sys.stderr)
            return disc, ports, cabled, reads

        if args.attach:
            disc, ports, cabled, reads = measure(json.loads(Path(args.attach).read_text()))
        else:
            t0 = time.monotonic()
            fab = SimFabric(text, Path(tmp) / "sim").start(timeout=1800)
            with fab:
                fab.start_sm(timeout=1800)
                print(f"# {label}: ibsim and opensm up in {time.monotonic() - t0:.0f} s", file=sys.stderr)
                disc, ports, cabled, reads = measure(fab.env(fab.sm_host))
    read = statistics.median(w for w, _ in reads)
    read_cpu = statistics.median(c for _, c in reads)
    print(f"{label}: {len(disc.switches)} switches, {ports} switch ports ({cabled} cabled), {len(disc.cas)} CAs; "
          f"15 s sweeps, {args.windows} windows a daemon, one run. Bare engine read (median of {len(reads)}): "
          f"{read:.2f} s ({read_cpu:.2f} s CPU).\n")
    print("| daemon | CPU s per sweep (sweeps) | CPU s per 15 s (median / max) | its sweep s | sweep / bare read | RSS MiB | series (default) "
          "| per cabled port | MB plain | MB gzip | series (collect[]=all) | MB plain (all) |")
    print("|---|---|---|---|---|---|---|---|---|---|---|---|")
    for name, r in rows.items():
        print(f"| {name} | {r['cpu_per_sweep']:.2f} ({r['sweeps']:.0f}) | {r['cpu_per_15s']:.2f} / {r['cpu_max']:.2f} | {r['sweep_s']:.2f} | {r['sweep_s'] / read:.2f} | "
              f"{r['rss_mib']:.0f} | {r['series']:.0f} | {r['series_per_cabled_port']:.1f} | {r['bytes'] / 1e6:.1f} | "
              f"{r['gzip_bytes'] / 1e6:.2f} | {r['series_all']:.0f} | {r['bytes_all'] / 1e6:.1f} |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
