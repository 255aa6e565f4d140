"""Soak: `fabricmon run` as a subprocess at a fast poll interval for thousands of cycles.

Targets:
- sysfs: a recorded-format 10-HCA NDR sysfs tree (fabricmon/sim/sysfs_tree.py); only the sysfs source,
  at --interval (every other source off), so one poll cycle is one sysfs read of 390 files.
- sim:   a simulated fat tree (fabricmon.sim.SimFabric over fat_tree_netfile()); the daemon runs
  as one host with the real infiniband-diags tools (the environment of fabric.env(host)), every
  source at --interval: ibstat, perfquery and iblinkinfo spawn real processes every cycle.

While the daemon runs, /metrics is scraped (a new connection each time) about every
--interval, which also counts the cycles (fabricmon_snapshot_build_duration_seconds_count). At the end
of the warm-up, at a few points in between and at the end the daemon's RSS (VmRSS), open file
descriptors (/proc/<pid>/fd), threads (/proc/<pid>/status Threads) and zombie children are
sampled. Open fds leave out the pipes of a tool running at that instant (their inode is held
by a live child of the daemon); fds, threads and zombies are the minimum of 5 reads 20 ms apart
taken 0.1 s after the last scrape, so a scrape in flight does not count (a leak raises the
minimum too).

Pass/fail, comparing every sample after the warm-up with the warm-up sample:
- RSS may grow by at most max(--rss-tolerance-mib, --rss-tolerance-pct) (default 8 MiB / 10 %);
- open fds +0, threads +0, zombie children 0;
- the daemon is alive, /healthz answers 200 at the end, and the cycles were all done.
The exit status is 1 when a target fails.

The warm-up defaults to the cycles that fill the counter history (CounterHistory.max_samples
samples per counter: memory grows by design until then, about 25 MiB for 10 ports), or a third
of the run when the run is shorter than twice that. On the sim target the counters come from
perfquery, which runs in every second poll cycle (after the inventory sources), so its history
is half full at the end of that warm-up; one port's history is under 3 MiB, within tolerance.

    python bench/soak.py [--target sim|sysfs|both] [--cycles 10000] [--interval 0.1]
                         [--warmup N] [--samples 6] [--hcas 10]
"""

from __future__ import annotations

import argparse
import http.client
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from fabricmon.model.history import CounterHistory
from fabricmon.config import registered
from fabricmon.sim import sysfs_tree as nodetree

# where `python -m fabricmon` finds the package when it is not installed
REPO = Path(__file__).resolve().parents[2]

_POLL_COUNT = re.compile(rb"^fabricmon_snapshot_build_duration_seconds_count ([0-9.e+]+)$", re.M)
_SOURCE_UP = re.compile(rb'^fabricmon_source_up\{source="([^"]+)"\} ([0-9.e+]+)$', re.M)
_SOURCE_ERR = re.compile(rb'^fabricmon_source_errors_total\{kind="([^"]+)",source="([^"]+)"\} ([0-9.e+]+)$'
                         rb'|^fabricmon_source_errors_total\{source="([^"]+)",kind="([^"]+)"\} ([0-9.e+]+)$', re.M)
SIM_HOST = "node01 mlx5_0"


# --- /proc -------------------------------------------------------------------------------

def _status(pid: int) -> dict[str, str]:
    out = {}
    with open(f"/proc/{pid}/status") as fh:
        for line in fh:
            k, _, v = line.partition(":")
            out[k] = v.strip()
    return out


def _children(pid: int) -> tuple[list[int], int]:
    """(live children of pid, zombie children of pid: exited tools that nobody reaped)."""
    live, zombies = [], 0
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/stat") as fh:
                rest = fh.read().rsplit(")", 1)[1].split()
        except OSError:
            continue
        if int(rest[1]) == pid:
            if rest[0] == "Z":
                zombies += 1
            else:
                live.append(int(entry))
    return live, zombies


def _fd_targets(pid: int) -> list[str]:
    out = []
    for fd in os.listdir(f"/proc/{pid}/fd"):
        try:
            out.append(os.readlink(f"/proc/{pid}/fd/{fd}"))
        except OSError:
            pass
    return out


def _open_fds(pid: int) -> tuple[int, int]:
    """(open fds, of which pipes to a tool running right now). A pipe's two ends show the
    same "pipe:[inode]", so a daemon pipe whose inode a live child holds is in flight."""
    mine = _fd_targets(pid)
    live, _ = _children(pid)
    held: set[str] = set()
    for child in live:
        try:
            held.update(t for t in _fd_targets(child) if t.startswith("pipe:"))
        except OSError:
            pass
    return len(mine), sum(1 for t in mine if t in held)


@dataclass
class Sample:
    cycle: int
    elapsed: float
    rss_mib: float
    fds: int
    threads: int
    zombies: int


def sample(pid: int, cycle: int, elapsed: float, reads: int = 5) -> Sample:
    fds, threads, zombies = [], [], []
    rss = 0.0
    for i in range(reads):
        if i:
            time.sleep(0.02)
        st = _status(pid)
        rss = int(st["VmRSS"].split()[0]) / 1024
        threads.append(int(st["Threads"]))
        total, in_flight = _open_fds(pid)
        fds.append(total - in_flight)
        zombies.append(_children(pid)[1])
    return Sample(cycle, elapsed, rss, min(fds), min(threads), min(zombies))


# --- HTTP --------------------------------------------------------------------------------

def _get(port: int, path: str, timeout: float = 10) -> tuple[int, bytes]:
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=timeout)
    try:
        conn.request("GET", path)
        resp = conn.getresponse()
        return resp.status, resp.read()
    finally:
        conn.close()


def poll_count(body: bytes) -> int:
    m = _POLL_COUNT.search(body)
    return int(float(m.group(1))) if m else 0


def source_summary(body: bytes) -> dict[str, tuple[int, int]]:
    """source -> (up, errors_total summed over kinds)."""
    out: dict[str, list[int]] = {}
    for name, v in _SOURCE_UP.findall(body):
        out.setdefault(name.decode(), [0, 0])[0] = int(float(v))
    for m in _SOURCE_ERR.finditer(body):
        src = (m.group(2) or m.group(4)).decode()
        val = m.group(3) or m.group(6)
        out.setdefault(src, [0, 0])[1] += int(float(val))
    return {k: (v[0], v[1]) for k, v in sorted(out.items())}


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


# --- the soak ----------------------------------------------------------------------------

@dataclass
class Tolerance:
    rss_mib: float = 8.0
    rss_pct: float = 10.0
    fds: int = 0
    threads: int = 0

    def rss_allowed(self, base: float) -> float:
        return max(self.rss_mib, base * self.rss_pct / 100)

    def describe(self) -> str:
        return (f"RSS +max({self.rss_mib:g} MiB, {self.rss_pct:g}%), fds +{self.fds}, threads +{self.threads}, "
                f"zombies 0")


@dataclass
class SoakResult:
    target: str
    cycles: int
    warmup: int
    interval: float
    samples: list[Sample] = field(default_factory=list)
    wall: float = 0.0
    scrapes: int = 0
    sources: dict[str, tuple[int, int]] = field(default_factory=dict)
    failures: list[str] = field(default_factory=list)
    tolerance: Tolerance = field(default_factory=Tolerance)
    log: str = ""

    @property
    def ok(self) -> bool:
        return not self.failures

    def table(self) -> str:
        lines = [f"soak {self.target}: {self.cycles} cycles at a {self.interval:g} s interval in {self.wall:.0f} s "
                 f"({self.wall / max(1, self.cycles) * 1e3:.0f} ms/cycle), {self.scrapes} scrapes, "
                 f"warm-up {self.warmup} cycles",
                 "",
                 f"| {'point':9} | {'cycle':>6} | {'elapsed s':>9} | {'RSS MiB':>8} | {'fds':>4} | {'threads':>7} | "
                 f"{'zombies':>7} |",
                 f"|{'-' * 11}|{'-' * 8}|{'-' * 11}|{'-' * 10}|{'-' * 6}|{'-' * 9}|{'-' * 9}|"]
        for i, s in enumerate(self.samples):
            point = "warm-up" if i == 0 else ("end" if i == len(self.samples) - 1 else "")
            lines.append(f"| {point:9} | {s.cycle:6d} | {s.elapsed:9.1f} | {s.rss_mib:8.1f} | {s.fds:4d} | "
                         f"{s.threads:7d} | {s.zombies:7d} |")
        if len(self.samples) >= 2:
            a, b = self.samples[0], self.samples[-1]
            lines.append(f"| {'growth':9} | {'':6} | {'':9} | {b.rss_mib - a.rss_mib:+8.1f} | {b.fds - a.fds:+4d} | "
                         f"{b.threads - a.threads:+7d} | {b.zombies - a.zombies:+7d} |")
        lines.append("")
        lines.append("sources at the end (up, errors_total): " +
                     ", ".join(f"{k} {u}/{e}" for k, (u, e) in self.sources.items()))
        lines.append(f"tolerance after warm-up: {self.tolerance.describe()}")
        lines.append("result: " + ("PASS" if self.ok else "FAIL: " + "; ".join(self.failures)))
        return "\n".join(lines)


def _check(res: SoakResult) -> None:
    if not res.samples:
        res.failures.append("no sample taken")
        return
    base, tol = res.samples[0], res.tolerance
    for s in res.samples[1:]:
        if s.rss_mib - base.rss_mib > tol.rss_allowed(base.rss_mib):
            res.failures.append(f"RSS grew {base.rss_mib:.1f} -> {s.rss_mib:.1f} MiB by cycle {s.cycle} "
                                f"(allowed +{tol.rss_allowed(base.rss_mib):.1f})")
            break
    for s in res.samples[1:]:
        if s.fds - base.fds > tol.fds:
            res.failures.append(f"open fds grew {base.fds} -> {s.fds} by cycle {s.cycle}")
            break
    for s in res.samples[1:]:
        if s.threads - base.threads > tol.threads:
            res.failures.append(f"threads grew {base.threads} -> {s.threads} by cycle {s.cycle}")
            break
    if any(s.zombies for s in res.samples):
        res.failures.append(f"zombie children: {[s.zombies for s in res.samples]}")


def default_warmup(cycles: int) -> int:
    full = CounterHistory().max_samples + 50
    return full if cycles >= 2 * full else max(1, cycles // 3)


def run_soak(target: str, config: dict[str, Any], workdir: Path, cycles: int, interval: float,
             warmup: int | None = None, samples: int = 6, env: dict[str, str] | None = None,
             tolerance: Tolerance | None = None, progress: bool = False) -> SoakResult:
    """Start `fabricmon run` with this config (server.port is set here), run `cycles` poll
    cycles, sample, stop it by PID, and judge growth after the warm-up."""
    warmup = default_warmup(cycles) if warmup is None else warmup
    if not 0 < warmup < cycles:
        raise ValueError(f"warm-up ({warmup}) must be between 0 and cycles ({cycles})")
    res = SoakResult(target, cycles, warmup, interval, tolerance=tolerance or Tolerance())
    port = free_port()
    config = dict(config)
    config["server"] = {"address": "127.0.0.1", "port": port}
    config.setdefault("logging", {"level": "warning", "format": "json"})
    workdir.mkdir(parents=True, exist_ok=True)
    cfg_path = workdir / f"soak-{target}.yml"
    cfg_path.write_text(yaml.safe_dump(config))
    log_path = workdir / f"soak-{target}.log"
    points = [warmup + round(i * (cycles - warmup) / (samples - 1)) for i in range(samples)] if samples > 1 \
        else [cycles]
    with open(log_path, "wb") as logf:
        proc = subprocess.Popen([sys.executable, "-m", "fabricmon", "run", "--config", str(cfg_path)],
                                stdin=subprocess.DEVNULL, stdout=logf, stderr=subprocess.STDOUT,
                                cwd=str(REPO), env=env)
    t0 = time.monotonic()
    try:
        count, body, nxt = 0, b"", 0
        tick = max(interval, 0.1)
        deadline = t0 + 60 + cycles * max(interval, 0.05) * 20        # a stuck daemon fails, never hangs
        while nxt < len(points):
            if proc.poll() is not None:
                res.failures.append(f"daemon exited with status {proc.returncode} after {count} cycles")
                break
            if time.monotonic() > deadline:
                res.failures.append(f"only {count} of {cycles} cycles before the deadline")
                break
            try:
                status, body = _get(port, "/metrics")
                res.scrapes += 1
                if status == 200:
                    count = poll_count(body)
            except OSError:
                if count:        # it answered before: a failed scrape is a failure
                    res.failures.append(f"/metrics did not answer at cycle {count}")
                    break
            if count >= points[nxt]:
                time.sleep(0.1)                         # let in-flight tools and scrape threads end
                res.samples.append(sample(proc.pid, count, time.monotonic() - t0))
                if progress:
                    s = res.samples[-1]
                    print(f"  {target}: cycle {s.cycle} RSS {s.rss_mib:.1f} MiB fds {s.fds} threads {s.threads}",
                          file=sys.stderr, flush=True)
                nxt += 1
                continue
            time.sleep(tick)
        res.wall = time.monotonic() - t0
        if proc.poll() is None:
            try:
                status, _ = _get(port, "/healthz")
                if status != 200:
                    res.failures.append(f"/healthz answered {status} at the end")
            except OSError as exc:
                res.failures.append(f"/healthz did not answer at the end: {exc}")
            res.sources = source_summary(body)
            res.cycles = count
    finally:
        if proc.poll() is None:
            proc.send_signal(signal.SIGTERM)
            try:
                proc.wait(timeout=15)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()
                res.failures.append("daemon did not stop within 15 s of SIGTERM")
        res.log = log_path.read_text(errors="replace")[-4000:]
    if not res.failures or res.samples:
        _check(res)
    return res


def sysfs_config(sysfs: str, interval: float, state_dir: str) -> dict[str, Any]:
    """The sysfs sources (port state and counters, mlx5 hw_counters) at `interval`, every other
    source off."""
    sources = {name: ({"interval": interval} if name in ("sysfs", "hw_counters") else {"enabled": False})
               for name in registered("node")}
    return {"paths": {"sysfs": sysfs, "state_dir": state_dir}, "sources": sources}


def sim_config(empty_sysfs: str, interval: float, state_dir: str) -> dict[str, Any]:
    """Every source at `interval` (sysfs reads an empty tree: the simulator has none)."""
    sources = {name: {"interval": interval} for name in registered("node")}
    return {"paths": {"sysfs": empty_sysfs, "state_dir": state_dir}, "sources": sources}


def soak_sysfs(workdir: Path, cycles: int, interval: float, hcas: int = 10, **kw: Any) -> SoakResult:
    sysfs = str(nodetree.build(workdir / "sys", hcas))
    return run_soak("sysfs", sysfs_config(sysfs, interval, str(workdir / "state")), workdir, cycles, interval, **kw)


def soak_sim(fabric: Any, workdir: Path, cycles: int, interval: float, host: str = SIM_HOST,
             **kw: Any) -> SoakResult:
    """fabric: a started fabricmon.sim.SimFabric."""
    empty = workdir / "sim-sys"
    empty.mkdir(parents=True, exist_ok=True)
    return run_soak("sim", sim_config(str(empty), interval, str(workdir / "state-sim")), workdir, cycles,
                    interval, env=fabric.env(host), **kw)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--target", choices=("sim", "sysfs", "both"), default="both")
    ap.add_argument("--cycles", type=int, default=10000)
    ap.add_argument("--interval", type=float, default=0.1, help="poll interval, seconds (>= 0.1)")
    ap.add_argument("--warmup", type=int, default=None,
                    help="cycles before the baseline sample (default: until the counter history is full)")
    ap.add_argument("--samples", type=int, default=6, help="sample points, warm-up and end included")
    ap.add_argument("--hcas", type=int, default=10)
    ap.add_argument("--rss-tolerance-mib", type=float, default=8.0)
    ap.add_argument("--rss-tolerance-pct", type=float, default=10.0)
    args = ap.parse_args()
    tol = Tolerance(args.rss_tolerance_mib, args.rss_tolerance_pct)

    def _terminate(signum: int, frame: object) -> None:
        raise SystemExit(128 + signum)          # run the finally blocks: stop the daemon and ibsim
    signal.signal(signal.SIGTERM, _terminate)
    signal.signal(signal.SIGINT, _terminate)
    work = Path(tempfile.mkdtemp(prefix="fabricmon-soak-"))
    results = []
    try:
        if args.target in ("sysfs", "both"):
            results.append(soak_sysfs(work, args.cycles, args.interval, args.hcas, warmup=args.warmup,
                                      samples=args.samples, tolerance=tol, progress=True))
            print(results[-1].table() + "\n", flush=True)
        if args.target in ("sim", "both"):
            from fabricmon.sim.fabric import SimFabric, fat_tree_netfile, tools_available
            ok, why = tools_available()
            if not ok:
                print(f"soak sim: cannot run the simulated fabric: {why}", file=sys.stderr)
                return 2
            with SimFabric(fat_tree_netfile(), work / "fabric") as fabric:
                results.append(soak_sim(fabric, work, args.cycles, args.interval, warmup=args.warmup,
                                        samples=args.samples, tolerance=tol, progress=True))
            print(results[-1].table() + "\n", flush=True)
    finally:
        failed = [r for r in results if not r.ok]
        for r in failed:
            print(f"--- daemon log tail ({r.target}) ---\n{r.log}", file=sys.stderr)
        if not failed:
            shutil.rmtree(work, ignore_errors=True)
        else:
            print(f"work directory kept: {work}", file=sys.stderr)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
