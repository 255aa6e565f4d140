"""A leaf's 40 ports down at once (issue 51): how long until each is published, and what the collector's CPU does
over that minute against a quiet one.

A fat tree on ibsim with a running opensm: 2 spines, 2 leaves of 40 hosts each (48-port leaves: 40 host cables,
2 uplinks). `fabricmon fabric run` runs under umad2sim on a host of leaf01 (the SM on another), at its defaults
but for `--sweep-interval`. ibsim drops the SM's reports (docs/latency.md), so this is the sweep fallback: the
subscription is accepted, the first change no report announced demotes the mode to sweep, and the sweep
publishes the ports.

Per round: a quiet minute (nothing changes), then a storm minute: at a random second within its first 20 the 40
host cables of leaf02 are pulled (`Unlink`, one after another as fast as ibsim's console takes them). Through
both minutes a scraper keeps Prometheus's cadence as shipped (the default set every 15 s, the state set every
5 s: job fabricmon-fabric-state), and from each minute's moment (the storm's, a random one in the quiet minute)
scrapes `/metrics?collect[]=state` every `--scrape` seconds for max(6, 1.5 sweep intervals + 3) seconds, noting
when each port's `fabricmon_fabric_port_up` turns 0: both minutes carry the same scrapes. Each port's latency
is that moment less its own Unlink's. CPU is the collector process's user + system time (with its waited-for
children) over each minute, beside each minute's source runs and snapshot builds. Between rounds the cables
are put back (`ReLink`; the running opensm brings them to Active).

    python bench/link_storm.py [--sweep-interval 2] [--rounds 2] [--scrape 0.1]

Prints a table per round and the medians; docs/latency.md and docs/benchmarks.md have the numbers.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import re
import shutil
import statistics
import subprocess
import sys
import tempfile
import threading
import time
import urllib.request
from pathlib import Path

import psutil

from fabricmon.sim.fabric import SimFabric, fat_tree_netfile
from fabricmon.sim.ports import free_port

HOSTS = 40
STORM_LEAF = "leaf02"
COLLECTOR_HOST = "node02 mlx5_0"          # under leaf01: the storm does not cut it off (opensm runs on node01)
UP = re.compile(r'^fabricmon_fabric_port_up\{(?P<labels>[^}]*)\} (?P<v>\S+)$', re.M)
INFO = re.compile(r'^fabricmon_fabric_switch_info\{(?P<labels>[^}]*)\} ', re.M)
LABEL = re.compile(r'(\w+)="([^"]*)"')


def scrape(url: str) -> dict[tuple[str, str], float]:
    """(switch name, port) -> fabricmon_fabric_port_up, from one state-set scrape (names by switch_info)."""
    body = urllib.request.urlopen(url, timeout=5).read().decode()
    names = {}
    for m in INFO.finditer(body):
        lab = dict(LABEL.findall(m["labels"]))
        names[lab["switch_guid"]] = lab.get("switch", lab["switch_guid"])
    out = {}
    for m in UP.finditer(body):
        lab = dict(LABEL.findall(m["labels"]))
        out[(names.get(lab["switch_guid"], lab["switch_guid"]), lab["port"])] = float(m["v"])
    return out


class Scraper(threading.Thread):
    """Prometheus's cadence as shipped (the default set every 15 s, the state set every 5 s: job
    fabricmon-fabric-state) all along, and in a burst (`burst(seconds)`) the state set every `every` s;
    records when each (switch, port) was first seen at 0 while armed."""

    def __init__(self, base: str, every: float):
        super().__init__(daemon=True)
        self.base, self.every = base, every
        self.down_at: dict[tuple[str, str], float] = {}
        self.armed = threading.Event()
        self.stopping = threading.Event()
        self.burst_until = 0.0
        self.errors = 0
        self.scrapes = 0

    def burst(self, seconds: float) -> None:
        self.burst_until = time.monotonic() + seconds

    def run(self) -> None:
        next_state = next_default = time.monotonic()
        while not self.stopping.is_set():
            now = time.monotonic()
            try:
                if now >= next_default:
                    urllib.request.urlopen(f"{self.base}/metrics", timeout=10).read()
                    next_default += 15.0
                if now >= next_state or now < self.burst_until:
                    got = scrape(f"{self.base}/metrics?collect[]=state")
                    self.scrapes += 1
                    next_state = max(next_state, now) + 5.0 if now >= next_state else next_state
                    seen = time.monotonic()
                    if self.armed.is_set():
                        for k, v in got.items():
                            if v == 0 and k not in self.down_at:
                                self.down_at[k] = seen
            except OSError:
                self.errors += 1
            self.stopping.wait(self.every if time.monotonic() < self.burst_until else 0.05)


RUNS = re.compile(r'^fabricmon_source_runs_total\{source="(\w+)"\} (\S+)$', re.M)
BUILDS = re.compile(r'^fabricmon_snapshot_build_duration_seconds_(count|sum) (\S+)$', re.M)


def counts(base: str) -> dict[str, float]:
    """Each source's runs and the snapshot builds (count, seconds) so far, from the default scrape."""
    body = urllib.request.urlopen(f"{base}/metrics", timeout=10).read().decode()
    out = {f"runs:{s}": float(v) for s, v in RUNS.findall(body)}
    out.update({f"builds:{k}": float(v) for k, v in BUILDS.findall(body)})
    return out


def delta(a: dict[str, float], b: dict[str, float]) -> str:
    runs = ", ".join(f"{k[5:]} {b[k] - a.get(k, 0):.0f}" for k in sorted(b) if k.startswith("runs:") and b[k] != a.get(k, 0))
    n = b.get("builds:count", 0) - a.get("builds:count", 0)
    s = b.get("builds:sum", 0) - a.get("builds:sum", 0)
    return f"runs: {runs}; {n:.0f} builds, {s * 1e3:.0f} ms building"


def cpu(proc: psutil.Process) -> float:
    t = proc.cpu_times()
    return t.user + t.system + t.children_user + t.children_system


def wait(pred, timeout: float, what: str):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        got = pred()
        if got:
            return got
        time.sleep(0.2)
    raise SystemExit(f"timed out waiting for {what}")


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--sweep-interval", type=float, default=2.0)
    ap.add_argument("--rounds", type=int, default=2)
    ap.add_argument("--scrape", type=float, default=0.1, help="seconds between the scraper's state-set scrapes")
    ap.add_argument("--minute", type=float, default=60.0, help="seconds a measured window lasts")
    ap.add_argument("--seed", type=int, default=None)
    args = ap.parse_args()
    rng = random.Random(args.seed)
    burst = max(6.0, 1.5 * args.sweep_interval + 3.0)     # seconds of fast state-set scrapes from each moment
    work = Path(tempfile.mkdtemp(prefix="fabricmon-storm-"))
    net = fat_tree_netfile(spines=2, leaves=2, hosts_per_leaf=HOSTS, uplinks_per_spine=1)
    fab = SimFabric(net, work / "sim")
    fab.start()
    fab.start_sm()
    (work / "state").mkdir()
    cfg = work / "fabricmon.yml"
    cfg.write_text(json.dumps({"paths": {"state_dir": str(work / "state")},
                               "fabric": {"sweep_interval": args.sweep_interval, "cache_dir": str(work)}}))
    port = free_port()
    log = open(work / "collector.log", "wb")
    p = subprocess.Popen([sys.executable, "-m", "fabricmon", "fabric", "run", "--config", str(cfg), "--listen",
                          f"127.0.0.1:{port}", "--log-level", "warning"], env=fab.env(COLLECTOR_HOST), stdout=log,
                         stderr=subprocess.STDOUT, start_new_session=True, cwd=work)
    proc = psutil.Process(p.pid)
    base = f"http://127.0.0.1:{port}"
    url = f"{base}/metrics?collect[]=state"
    storm_ports = [str(i) for i in range(1, HOSTS + 1)]
    rows = []
    try:
        def all_up():
            try:
                s = scrape(url)
            except OSError:
                return False
            return all(s.get((STORM_LEAF, q)) == 1 for q in storm_ports)
        wait(all_up, 120, f"{STORM_LEAF}'s {HOSTS} host ports up in the exposition")
        time.sleep(2 * args.sweep_interval + 5)           # past the first builds
        scraper = Scraper(base, args.scrape)
        scraper.start()
        for rnd in range(1, args.rounds + 1):
            load0 = os.getloadavg()[0]
            k0, c0 = counts(base), cpu(proc)
            start = time.monotonic()
            time.sleep(rng.uniform(0, 20))
            scraper.burst(burst)                          # as the storm minute's, with nothing to see
            time.sleep(max(0.0, start + args.minute - time.monotonic()))
            quiet = cpu(proc) - c0
            quiet_what = delta(k0, counts(base))
            # the storm minute
            scraper.down_at.clear()
            scraper.armed.set()
            start = time.monotonic()
            k0, c0 = counts(base), cpu(proc)
            time.sleep(rng.uniform(0, 20))
            pulled: dict[str, float] = {}
            scraper.burst(burst)
            for q in storm_ports:
                pulled[q] = time.monotonic()
                fab.unlink(STORM_LEAF, int(q))
            spread = pulled[storm_ports[-1]] - pulled[storm_ports[0]]
            time.sleep(max(0.0, start + args.minute - time.monotonic()))
            storm = cpu(proc) - c0
            storm_what = delta(k0, counts(base))
            scraper.armed.clear()
            load1 = os.getloadavg()[0]
            lat = [scraper.down_at[(STORM_LEAF, q)] - pulled[q] for q in storm_ports if (STORM_LEAF, q) in scraper.down_at]
            missed = len(storm_ports) - len(lat)
            rows.append({"round": rnd, "quiet": quiet, "storm": storm, "ratio": storm / quiet if quiet else float("nan"),
                         "spread": spread, "lat_median": statistics.median(lat) if lat else float("nan"),
                         "lat_max": max(lat) if lat else float("nan"), "missed": missed,
                         "within_3s": sum(1 for x in lat if x <= 3.0), "load": (load0 + load1) / 2})
            r = rows[-1]
            print(f"round {rnd}: quiet {quiet:.2f} s CPU, storm {storm:.2f} s CPU ({r['ratio']:.2f}x); 40 unlinks over "
                  f"{spread:.2f} s; published median {r['lat_median']:.2f} s, max {r['lat_max']:.2f} s, "
                  f"{r['within_3s']}/{HOSTS} within 3 s, {missed} never; load {r['load']:.2f}\n"
                  f"  quiet minute {quiet_what}\n  storm minute {storm_what}", flush=True)
            if rnd < args.rounds:
                for q in storm_ports:
                    fab.console(f'ReLink "{STORM_LEAF}"[{q}]')
                wait(all_up, 120, "the cables back up (the running opensm brings them to Active)")
                time.sleep(2 * args.sweep_interval + 5)
        scraper.stopping.set()
    finally:
        if p.poll() is None:
            p.terminate()
            try:
                p.wait(10)
            except subprocess.TimeoutExpired:
                p.kill()
                p.wait()
        log.close()
        fab.stop()
        shutil.rmtree(work, ignore_errors=True)
    print()
    print(f"sweep_interval {args.sweep_interval:g} s, state-set scrape every {args.scrape:g} s, {args.minute:g} s windows")
    print(f"{'round':>5} {'quiet CPU s':>11} {'storm CPU s':>11} {'ratio':>6} {'unlinks over s':>14} "
          f"{'median s':>8} {'max s':>6} {'<=3 s':>6} {'load':>5}")
    for r in rows:
        print(f"{r['round']:>5} {r['quiet']:>11.2f} {r['storm']:>11.2f} {r['ratio']:>6.2f} {r['spread']:>14.2f} "
              f"{r['lat_median']:>8.2f} {r['lat_max']:>6.2f} {r['within_3s']:>3}/{HOSTS} {r['load']:>5.2f}")
    if rows:
        print(f"{'median':>5} {statistics.median(r['quiet'] for r in rows):>11.2f} "
              f"{statistics.median(r['storm'] for r in rows):>11.2f} {statistics.median(r['ratio'] for r in rows):>6.2f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
