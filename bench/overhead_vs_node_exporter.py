"""Overhead of fabricmon against Prometheus node_exporter's infiniband collector, in one run.

Both exporters read the same sysfs tree (a synthetic 10-HCA NDR node from fabricmon/sim/sysfs_tree.py,
or with --tree h100 the real recorded H100 tree when ../shared/captures is present). Both run
as separate processes; their CPU time comes from /proc/<pid>/stat (utime + stime).

- node_exporter runs with only its infiniband collector
  (--collector.disable-defaults --collector.infiniband --path.sysfs=<tree>); it reads sysfs on
  every scrape, so its cost is CPU seconds per scrape.
- fabricmon runs as `fabricmon run` with only its sysfs source (the external tools ibstat,
  perfquery, iblinkinfo and the RoCE/GPU sources: enabled false) and a fast sysfs interval; it reads sysfs on every poll and serves
  scrapes from the cached exposition, so its cost is CPU seconds per poll cycle plus one scrape.

Every tick the benchmark also advances each port's data and packet counters in the tree (as
traffic does; --no-traffic leaves them still), so neither exporter reads a tree that never changes.

Each measurement window scrapes both exporters once per tick (tick = the fabricmon poll
interval), so both see the same cadence and the same machine noise. Cycles are counted from
fabricmon_snapshot_build_duration_seconds_count. The window is repeated and the median is printed.

A third process, fabricmon at its DEFAULT intervals (sysfs every 15 s) with every source at its
default (--default-sources all; tools that find no hardware fail fast), runs in the background for the whole benchmark and is scraped every 15 s: its CPU % of one core is
measured directly (from after its first poll to the end), and also computed from the fast
run's CPU per cycle / 15.

Prerequisite (the script does not install anything):

    apt-get install -y prometheus-node-exporter        # provides /usr/bin/prometheus-node-exporter

Usage:

    python bench/overhead_vs_node_exporter.py [--hcas 10] [--tree synthetic|h100]
        [--interval 0.5] [--cycles 60] [--repeats 3] [--latency-scrapes 1000]
        [--warmup-cycles 0] [--state-poll 1] [--compare-with CHECKOUT]

--state-poll SECONDS (default 1, as shipped) keeps the port state poll (sources.port_state: every port's
state and phys_state alone) on in the fast runs at that interval; 0 turns it off. Its runs build nothing
while the state files do not change, so the cycles counted are still the sysfs polls, and the CPU per
cycle carries interval/state-poll of its runs.

--compare-with CHECKOUT runs a second `fabricmon run` from another checkout (a worktree or
`git archive` of main, say) with the same config, scraped in the same ticks and measured over the
same windows, so that a change and its baseline are compared under one load, each against the
same node_exporter.

--warmup-cycles N waits until fabricmon has polled N times before measuring. fabricmon's
counter history keeps up to 2048 samples per counter, and its per-cycle cost grows until the
history is full, so `--interval 0.1 --warmup-cycles 2100` measures the steady state of a daemon
that has run for 2048 cycles (8.5 h at the default 15 s interval).
"""

from __future__ import annotations

import argparse
import http.client
import os
import re
import shutil
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

HERE = Path(__file__).resolve().parent

from fabricmon.sim import sysfs_tree as nodetree  # noqa: E402
import yaml  # noqa: E402
from fabricmon.config import registered  # noqa: E402

NODE_EXPORTER = "/usr/bin/prometheus-node-exporter"
H100_TREE = HERE.parent.parent / "shared" / "captures" / "sysfs" / "leptonai-gpud__sys-class-infiniband-h100.0"
CLK_TCK = os.sysconf("SC_CLK_TCK")
DEFAULT_SYSFS_INTERVAL = 15.0
_POLL_COUNT = re.compile(rb"^fabricmon_snapshot_build_duration_seconds_count ([0-9.e+]+)$", re.M)


# --- /proc ---------------------------------------------------------------------------------

def cpu_seconds(pid: int) -> float:
    """utime + stime of the process (all its threads) plus cutime + cstime (the children it
    waited for: the tools it ran), in seconds."""
    with open(f"/proc/{pid}/stat") as fh:
        fields = fh.read().rsplit(")", 1)[1].split()
    return sum(int(f) for f in fields[11:15]) / CLK_TCK        # fields 14-17 of stat(5)


def proc_status(pid: int, key: str) -> int:
    with open(f"/proc/{pid}/status") as fh:
        for line in fh:
            if line.startswith(key + ":"):
                return int(line.split()[1])
    raise KeyError(key)


def rss_mib(pid: int) -> float:
    return proc_status(pid, "VmRSS") / 1024


# --- processes -----------------------------------------------------------------------------

def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def stop(proc: subprocess.Popen | None) -> None:
    """SIGTERM by PID, wait, SIGKILL if it lingers."""
    if proc is None or proc.poll() is not None:
        return
    proc.send_signal(signal.SIGTERM)
    try:
        proc.wait(timeout=10)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait()


def scrape(port: int, timeout: float = 10) -> bytes:
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=timeout)
    try:
        conn.request("GET", "/metrics")
        resp = conn.getresponse()
        body = resp.read()
        if resp.status != 200:
            raise RuntimeError(f"127.0.0.1:{port}/metrics answered {resp.status}")
        return body
    finally:
        conn.close()


def poll_count(body: bytes) -> int:
    m = _POLL_COUNT.search(body)
    return int(float(m.group(1))) if m else 0


def wait_ready(proc: subprocess.Popen, port: int, what: str, log: Path, fabricmon: bool, timeout: float = 30) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise SystemExit(f"{what} exited with status {proc.returncode}; its log {log}:\n{log.read_text()[-3000:]}")
        try:
            body = scrape(port, timeout=2)
            if not fabricmon or poll_count(body) >= 1:
                return
        except (OSError, RuntimeError):
            pass
        time.sleep(0.05)
    raise SystemExit(f"{what} did not answer on 127.0.0.1:{port} within {timeout}s; log {log}")


def start_node_exporter(sysfs: str, port: int, log: Path) -> subprocess.Popen:
    argv = [NODE_EXPORTER, "--collector.disable-defaults", "--collector.infiniband",
            f"--path.sysfs={sysfs}", f"--web.listen-address=127.0.0.1:{port}"]
    with open(log, "wb") as fh:
        proc = subprocess.Popen(argv, stdin=subprocess.DEVNULL, stdout=fh, stderr=subprocess.STDOUT)
    wait_ready(proc, port, "node_exporter", log, fabricmon=False)
    return proc


def fabricmon_config(sysfs: str, port: int, interval: float | None, state_dir: str,
                     only_sysfs: bool = True, kernel_log: bool = True, state_poll: float = 0.0) -> str:
    """YAML text listening on 127.0.0.1:port. only_sysfs: every other source (the external
    tools, and the RoCE/GPU sources) disabled, but the port state poll every `state_poll` seconds
    when it is not 0; else every source at its default (kernel_log: false turns the kernel log
    source off)."""
    keep = ("sysfs", "hw_counters") + (("port_state",) if state_poll else ())
    sources: dict = {name: {"enabled": False} for name in registered("node") if name not in keep} if only_sysfs else {}
    if only_sysfs and state_poll:
        sources["port_state"] = {"interval": state_poll}
    sources["sysfs"] = {"interval": interval} if interval else {}
    if not kernel_log:
        sources["kernel_log"] = {"enabled": False}
    return yaml.safe_dump({
        "server": {"address": "127.0.0.1", "port": port},
        "paths": {"sysfs": sysfs, "state_dir": state_dir},
        "sources": sources,
        "logging": {"level": "warning", "format": "json"},
    })


def start_fabricmon(cfg_text: str, workdir: Path, name: str, port: int, root: Path = HERE.parent) -> subprocess.Popen:
    """`fabricmon run` from the checkout at root (this one by default)."""
    cfg = workdir / f"{name}.yml"
    cfg.write_text(cfg_text)
    log = workdir / f"{name}.log"
    env = dict(os.environ, PYTHONPATH=str(root), PYTHONDONTWRITEBYTECODE="1")
    with open(log, "wb") as fh:
        proc = subprocess.Popen([sys.executable, "-m", "fabricmon", "run", "--config", str(cfg)],
                                stdin=subprocess.DEVNULL, stdout=fh, stderr=subprocess.STDOUT,
                                cwd=str(root), env=env)
    wait_ready(proc, port, f"fabricmon ({name})", log, fabricmon=True)
    return proc


# --- measurement ---------------------------------------------------------------------------

@dataclass
class Window:
    ne_cpu_per_scrape: float
    fm_cpu_per_cycle: float
    fm_cycles: int
    fm_scrapes: int
    ne_scrapes: int
    wall: float
    base_cpu_per_cycle: float | None = None     # --compare-with: the other checkout's fabricmon

    @property
    def ratio(self) -> float:
        return self.fm_cpu_per_cycle / self.ne_cpu_per_scrape if self.ne_cpu_per_scrape else float("inf")

    @property
    def base_ratio(self) -> float | None:
        if self.base_cpu_per_cycle is None:
            return None
        return self.base_cpu_per_cycle / self.ne_cpu_per_scrape if self.ne_cpu_per_scrape else float("inf")


def measure_window(ne: subprocess.Popen, ne_port: int, fm: subprocess.Popen, fm_port: int,
                   interval: float, cycles: int, on_tick=lambda: None,
                   base: tuple[subprocess.Popen, int] | None = None) -> Window:
    """Scrape both (all three with `base`, the other checkout's fabricmon) once per tick until
    fabricmon has polled `cycles` more times."""
    start_count = poll_count(scrape(fm_port))
    base_count0 = poll_count(scrape(base[1])) if base else 0
    ne_c0, fm_c0, t0 = cpu_seconds(ne.pid), cpu_seconds(fm.pid), time.monotonic()
    base_c0 = cpu_seconds(base[0].pid) if base else 0.0
    ne_n = fm_n = 0
    count = start_count
    base_count = base_count0
    next_tick = time.monotonic()
    while count - start_count < cycles:
        next_tick += interval
        scrape(ne_port)
        ne_n += 1
        count = poll_count(scrape(fm_port))
        fm_n += 1
        if base:
            base_count = poll_count(scrape(base[1]))
        on_tick()
        delay = next_tick - time.monotonic()
        if delay > 0:
            time.sleep(delay)
        else:
            next_tick = time.monotonic()
    ne_c1, fm_c1, t1 = cpu_seconds(ne.pid), cpu_seconds(fm.pid), time.monotonic()
    base_cpu = None
    if base:
        base_cpu = (cpu_seconds(base[0].pid) - base_c0) / max(base_count - base_count0, 1)
    done = count - start_count
    return Window(ne_cpu_per_scrape=(ne_c1 - ne_c0) / ne_n, fm_cpu_per_cycle=(fm_c1 - fm_c0) / done,
                  fm_cycles=done, fm_scrapes=fm_n, ne_scrapes=ne_n, wall=t1 - t0, base_cpu_per_cycle=base_cpu)


def latencies(port: int, n: int) -> list[float]:
    out = []
    for _ in range(n):
        t0 = time.perf_counter()
        scrape(port)
        out.append(time.perf_counter() - t0)
    return out


def pct(values: list[float], p: float) -> float:
    s = sorted(values)
    return s[min(len(s) - 1, int(round(p / 100 * (len(s) - 1))))]


def series(body: bytes, prefix: bytes) -> tuple[int, int]:
    """(all samples, samples whose name starts with prefix)."""
    lines = [ln for ln in body.splitlines() if ln and not ln.startswith(b"#")]
    return len(lines), sum(1 for ln in lines if ln.startswith(prefix))


def build_tree(root: Path, tree: str, hcas: int) -> tuple[str, str]:
    """Return (sysfs root, description)."""
    if tree == "h100":
        if not H100_TREE.is_dir():
            raise SystemExit(f"--tree h100: {H100_TREE} is absent (it ships with ../shared/captures, not with fabricmon)")
        base = root / "class"
        base.mkdir(parents=True)
        shutil.copytree(H100_TREE, base / "infiniband", symlinks=True)   # a copy: --traffic writes to it
        n = len([d for d in H100_TREE.iterdir() if d.is_dir()])
        return str(root), f"real recorded H100 tree ({n} HCAs: 8 NDR IB ports + a RoCE bond)"
    nodetree.build(root, hcas)
    return str(root), f"synthetic {hcas}-HCA NDR node (fabricmon/sim/sysfs_tree.py)"


# Counters that move on every poll of a busy port: data and packets, both directions.
TRAFFIC_FILES = ("port_xmit_data", "port_rcv_data", "port_xmit_packets", "port_rcv_packets",
                 "unicast_xmit_packets", "unicast_rcv_packets")


class Traffic:
    """Advances every port's data and packet counters in the tree once per tick, as traffic
    does on a busy node, so that neither exporter reads a tree that never changes."""

    def __init__(self, sysfs: str):
        self.files = [p for p in Path(sysfs, "class", "infiniband").glob("*/ports/*/counters/*")
                      if p.name in TRAFFIC_FILES and not p.is_symlink()]
        self.values = {}
        for p in self.files:
            try:
                self.values[p] = int(p.read_text().split()[0])
            except (OSError, ValueError, IndexError):
                pass
        self.step = 0

    def tick(self) -> None:
        self.step += 1
        for p, v in self.values.items():
            try:
                p.write_text(f"{v + 1_000_003 * self.step}\n")
            except OSError:
                pass


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--hcas", type=int, default=10, help="HCAs in the synthetic tree (default 10)")
    ap.add_argument("--tree", choices=("synthetic", "h100"), default="synthetic")
    ap.add_argument("--no-traffic", action="store_true",
                    help="leave the tree's counters still (default: data and packet counters move every tick)")
    ap.add_argument("--interval", type=float, default=0.5,
                    help="fabricmon's sysfs poll interval and the scrape tick, seconds (default 0.5)")
    ap.add_argument("--cycles", type=int, default=60, help="fabricmon poll cycles per window (default 60)")
    ap.add_argument("--state-poll", type=float, default=1.0, metavar="SECONDS",
                    help="the fast runs' port state poll (sources.port_state) every this many seconds, as shipped "
                         "(default 1); 0 turns it off (the sysfs source alone, as before issue 51)")
    ap.add_argument("--repeats", type=int, default=3, help="windows; the median is reported (default 3)")
    ap.add_argument("--latency-scrapes", type=int, default=1000)
    ap.add_argument("--warmup-cycles", type=int, default=0,
                    help="wait until fabricmon has polled this many times before measuring")
    ap.add_argument("--default-sources", choices=("all", "sysfs"), default="all",
                    help="sources of the background default-interval daemon: every source at its defaults "
                         "(as shipped; tools that find no hardware fail fast), or sysfs only (default all)")
    ap.add_argument("--default-seconds", type=float, default=150,
                    help="how long the default-interval daemon is measured, at least (default 150)")
    ap.add_argument("--no-default-run", action="store_true",
                    help="skip the background fabricmon at the default 15 s interval")
    ap.add_argument("--kernel-log-off-too", action="store_true",
                    help="also run a default-interval daemon with sources.kernel_log off, measured over the same "
                         "time, so the kernel log source's cost is the difference of the two (one run, one load)")
    ap.add_argument("--compare-with", type=Path, metavar="CHECKOUT",
                    help="also run `fabricmon run` from another checkout (e.g. a worktree of main) with the same "
                         "config, scraped in the same windows: both fabricmons against node_exporter, one load")
    args = ap.parse_args()
    if args.compare_with is not None and not (args.compare_with / "fabricmon" / "__main__.py").is_file():
        ap.error(f"--compare-with {args.compare_with}: no fabricmon package there")
    if args.interval < 0.1:
        ap.error("--interval must be >= 0.1 (fabricmon's minimum)")

    if not os.access(NODE_EXPORTER, os.X_OK):
        print(f"{NODE_EXPORTER} is missing: install Debian's node_exporter first:\n"
              "    apt-get install -y prometheus-node-exporter", file=sys.stderr)
        return 2
    version = subprocess.run([NODE_EXPORTER, "--version"], capture_output=True, text=True).stdout or ""
    version = (version.splitlines() or ["node_exporter"])[0]

    work = Path(tempfile.mkdtemp(prefix="fabricmon-overhead-"))
    procs: list[subprocess.Popen] = []
    try:
        sysfs, tree_desc = build_tree(work / "sys", args.tree, args.hcas)
        state = str(work / "state")

        ne_port, fm_port, fd_port = free_port(), free_port(), free_port()
        ne = start_node_exporter(sysfs, ne_port, work / "node_exporter.log")
        procs.append(ne)
        fm = start_fabricmon(fabricmon_config(sysfs, fm_port, args.interval, state, state_poll=args.state_poll),
                             work, "fabricmon-fast", fm_port)
        procs.append(fm)
        base = None
        if args.compare_with is not None:
            base_port = free_port()
            has_state_poll = (args.compare_with / "fabricmon" / "sources" / "port_state.py").is_file()
            base_proc = start_fabricmon(fabricmon_config(sysfs, base_port, args.interval, str(work / "state-base"),
                                                         state_poll=args.state_poll if has_state_poll else 0.0),
                                        work, "fabricmon-compared", base_port, root=args.compare_with.resolve())
            procs.append(base_proc)
            base = (base_proc, base_port)
        fd = None
        if not args.no_default_run:
            fd = start_fabricmon(fabricmon_config(sysfs, fd_port, None, state, args.default_sources == "sysfs"),
                                 work, "fabricmon-default", fd_port)
            procs.append(fd)
            fd_c0, fd_t0, fd_count0 = cpu_seconds(fd.pid), time.monotonic(), poll_count(scrape(fd_port))
            fd_next_scrape = time.monotonic() + DEFAULT_SYSFS_INTERVAL
        fk = None
        if not args.no_default_run and args.kernel_log_off_too:
            fk_port = free_port()
            fk = start_fabricmon(fabricmon_config(sysfs, fk_port, None, str(work / "state-off"),
                                                  args.default_sources == "sysfs", kernel_log=False),
                                 work, "fabricmon-default-kernel-log-off", fk_port)
            procs.append(fk)
            fk_c0 = cpu_seconds(fk.pid)

        traffic = None if args.no_traffic else Traffic(sysfs)

        def tick_default() -> None:
            nonlocal fd_next_scrape
            if traffic is not None:
                traffic.tick()
            if fd is not None and time.monotonic() >= fd_next_scrape:
                scrape(fd_port)
                fd_next_scrape += DEFAULT_SYSFS_INTERVAL

        if args.warmup_cycles:
            print(f"warming fabricmon up to {args.warmup_cycles} poll cycles ...", file=sys.stderr)
            while poll_count(scrape(fm_port)) < args.warmup_cycles:
                tick_default()
                time.sleep(1.0)
        # a short warm-up of both (first scrapes allocate), not measured
        for _ in range(5):
            scrape(ne_port)
            scrape(fm_port)
            if base:
                scrape(base[1])

        windows = []
        for i in range(args.repeats):
            w = measure_window(ne, ne_port, fm, fm_port, args.interval, args.cycles, tick_default, base)
            windows.append(w)
            compared = "" if w.base_cpu_per_cycle is None else (
                f"; {args.compare_with} {w.base_cpu_per_cycle * 1e3:.2f} ms CPU/cycle, ratio {w.base_ratio:.2f}")
            print(f"window {i + 1}/{args.repeats}: node_exporter {w.ne_cpu_per_scrape * 1e3:.2f} ms CPU/scrape, "
                  f"fabricmon {w.fm_cpu_per_cycle * 1e3:.2f} ms CPU/cycle ({w.fm_cycles} cycles, "
                  f"{w.fm_scrapes} scrapes, {w.wall:.0f} s), ratio {w.ratio:.2f}{compared}", file=sys.stderr)

        fm_lat = latencies(fm_port, args.latency_scrapes)
        tick_default()
        ne_lat = latencies(ne_port, args.latency_scrapes)
        tick_default()

        ne_body, fm_body = scrape(ne_port), scrape(fm_port)
        ne_series, ne_ib = series(ne_body, b"node_infiniband_")
        fm_series, fm_ib = series(fm_body, b"fabricmon_ib_")
        ne_rss, fm_rss = rss_mib(ne.pid), rss_mib(fm.pid)
        fm_cycles_total = poll_count(fm_body)

        fd_row = None
        if fd is not None:
            # let the default-interval daemon run for --default-seconds, scraped every 15 s
            while time.monotonic() < fd_t0 + args.default_seconds:
                tick_default()
                time.sleep(0.2)
            fd_cpu, fd_wall = cpu_seconds(fd.pid) - fd_c0, time.monotonic() - fd_t0
            fd_cycles = poll_count(scrape(fd_port)) - fd_count0
            fd_row = (fd_cpu / fd_wall * 100, fd_wall, fd_cycles, fd_cpu, rss_mib(fd.pid))
            fk_row = None
            if fk is not None:
                fk_cpu = cpu_seconds(fk.pid) - fk_c0
                fk_row = (fk_cpu / fd_wall * 100, rss_mib(fk.pid))
    finally:
        for p in reversed(procs):
            stop(p)
        shutil.rmtree(work, ignore_errors=True)

    med = statistics.median
    ne_cpu = med(w.ne_cpu_per_scrape for w in windows)
    fm_cpu = med(w.fm_cpu_per_cycle for w in windows)
    ratio = med(w.ratio for w in windows)
    print(f"\nfabricmon vs {version}: {tree_desc}; "
          f"{'counters still' if args.no_traffic else f'{len(traffic.values)} data/packet counters moving every tick'}; "
          f"fabricmon with its sysfs sources only (hw_counters at its default 30 s)"
          f"{f', the port state poll every {args.state_poll:g} s' if args.state_poll else ', no port state poll'}; "
          f"tick {args.interval} s; "
          f"{args.repeats} windows x {args.cycles} cycles (median); fabricmon had polled "
          f"{fm_cycles_total} times by the end; {os.cpu_count()} CPUs\n")
    print(f"| {'what':62} | {'node_exporter':>14} | {'fabricmon':>14} |")
    print(f"|{'-' * 64}|{'-' * 16}|{'-' * 16}|")
    print(f"| {'CPU ms per scrape (node_exporter) / per poll + scrape (fm)':62} | "
          f"{ne_cpu * 1e3:14.2f} | {fm_cpu * 1e3:14.2f} |")
    print(f"| {'ratio fabricmon / node_exporter (median of windows)':62} | {'1.00':>14} | {ratio:14.2f} |")
    print(f"| {'RSS MiB (VmRSS, at the end)':62} | {ne_rss:14.1f} | {fm_rss:14.1f} |")
    print(f"| {'series exported, all':62} | {ne_series:14d} | {fm_series:14d} |")
    print(f"| {'series exported, InfiniBand (node_infiniband_*/fabricmon_ib_*)':62} | {ne_ib:14d} | {fm_ib:14d} |")
    print(f"| {f'scrape latency p50 ms ({args.latency_scrapes} scrapes, new connection each)':62} | "
          f"{pct(ne_lat, 50) * 1e3:14.2f} | {pct(fm_lat, 50) * 1e3:14.2f} |")
    print(f"| {'scrape latency p99 ms':62} | {pct(ne_lat, 99) * 1e3:14.2f} | {pct(fm_lat, 99) * 1e3:14.2f} |")
    print(f"\nratio per window: {', '.join(f'{w.ratio:.2f}' for w in windows)}\n")
    if args.compare_with is not None:
        print(f"the same from {args.compare_with}, in the same windows: CPU ms per cycle "
              f"{med(w.base_cpu_per_cycle for w in windows) * 1e3:.2f} (median); ratio per window: "
              f"{', '.join(f'{w.base_ratio:.2f}' for w in windows)}\n")
    print(f"| {'fabricmon at the default intervals (sysfs 15 s)':62} | {'value':>14} |")
    print(f"|{'-' * 64}|{'-' * 16}|")
    print(f"| {'CPU % of one core, computed: sysfs-only CPU per cycle / 15 s':62} | "
          f"{fm_cpu / DEFAULT_SYSFS_INTERVAL * 100:13.3f}% |")
    if fd_row:
        cpu_pct, wall, cycles, cpu, rss = fd_row
        print(f"| {f'CPU % of one core, measured: {args.default_sources} sources, {wall:.0f} s, {cycles} polls':62} | "
              f"{cpu_pct:13.3f}% |")
        print(f"| {'RSS MiB of that daemon':62} | {rss:14.1f} |")
        if fk_row:
            print(f"| {'the same with sources.kernel_log off: CPU % of one core':62} | {fk_row[0]:13.3f}% |")
            print(f"| {'RSS MiB of that daemon':62} | {fk_row[1]:14.1f} |")
            print(f"| {'CPU ratio kernel_log on / off':62} | {cpu_pct / fk_row[0] if fk_row[0] else float('nan'):14.2f} |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
