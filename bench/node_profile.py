"""Where the node daemon's CPU goes per poll and per scrape, in one process, under cProfile.

The same work `bench/overhead_vs_node_exporter.py` measures against node_exporter, without the
threads and the HTTP server: a copy of the sysfs tree (the real recorded H100 tree with --tree
h100, else the synthetic one) whose data and packet counters move every cycle (that benchmark's
Traffic), and per cycle one sysfs source run, one snapshot build and one render of the exposition.
It prints the CPU per cycle split into poll (the source's collect), build and render, then
cProfile's top functions by own time and by cumulative time.

Usage:

    python bench/node_profile.py [--tree h100|synthetic] [--cycles 400] [--top 30] [--no-profile]
    python bench/node_profile.py --state-runs 2000        # the port state poll alone (issue 51)

--state-runs N times the port state poll (sources.port_state) instead: N runs where no state file changed
(what it costs every second: one read_many, nothing built), then N/10 runs each after one port's state file
flipped (its run, the snapshot build and the render it causes), CPU per run of each.
"""

from __future__ import annotations

import argparse
import cProfile
import os
import pstats
import re
import shutil
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
CLK_TCK = os.sysconf("SC_CLK_TCK")
sys.path.insert(0, str(HERE))
sys.path.insert(0, str(HERE.parent))

from overhead_vs_node_exporter import Traffic, build_tree  # noqa: E402

from fabricmon.config import from_dict  # noqa: E402
from fabricmon.exporter.render import render  # noqa: E402
from fabricmon.host.io import LiveIO  # noqa: E402
from fabricmon.pipeline.scheduler import Pipeline  # noqa: E402
from fabricmon.config import registered  # noqa: E402


def thread_cpu() -> dict[int, float]:
    """CPU seconds of each of this process's threads, by native thread id: the scheduler's own
    count in nanoseconds (schedstat) where the kernel keeps it, else utime + stime in clock ticks."""
    out = {}
    for tid in os.listdir("/proc/self/task"):
        try:
            with open(f"/proc/self/task/{tid}/schedstat") as fh:
                out[int(tid)] = int(fh.read().split()[0]) / 1e9
            continue
        except (OSError, ValueError, IndexError):
            pass
        try:
            with open(f"/proc/self/task/{tid}/stat") as fh:
                fields = fh.read().rsplit(")", 1)[1].split()
        except OSError:
            continue
        out[int(tid)] = (int(fields[11]) + int(fields[12])) / CLK_TCK
    return out


def daemon(args: argparse.Namespace) -> int:
    """The daemon's own threads (workers, publisher, server) profiled together: a thread started
    after threading.setprofile starts its own cProfile.Profile on its first call. With
    --no-profile: each thread's CPU per build instead (from /proc)."""
    import http.client
    import threading

    from fabricmon.serve.daemon import Daemon

    work = Path(tempfile.mkdtemp(prefix="fabricmon-profile-"))
    profiles: list[cProfile.Profile] = []

    def start(frame: object, event: str, arg: object) -> None:
        p = cProfile.Profile(time.thread_time)     # each thread's own CPU time, not the wall clock
        profiles.append(p)
        p.enable()              # replaces this hook for the thread

    try:
        sysfs, desc = build_tree(work / "sys", args.tree, args.hcas)
        sources: dict[str, object] = {n: {"enabled": False} for n in registered("node") if n not in ("sysfs", "hw_counters")}
        sources["sysfs"] = {"interval": 0.5}
        config = from_dict({"paths": {"sysfs": sysfs, "state_dir": str(work / "state")}, "sources": sources,
                            "server": {"address": "127.0.0.1", "port": 0}, "logging": {"level": "warning"}})
        traffic = Traffic(sysfs)
        if not args.no_profile:
            threading.setprofile(start)
        d = Daemon(config, LiveIO(sysfs=sysfs), port=0)
        d.start()
        time.sleep(1.0)     # the first polls: layouts, opened files
        t0, c0, b0, per0 = time.monotonic(), time.process_time(), d.pipeline._builds.count, thread_cpu()
        while time.monotonic() - t0 < args.daemon:
            traffic.tick()
            conn = http.client.HTTPConnection("127.0.0.1", d.port, timeout=10)
            conn.request("GET", "/metrics")
            conn.getresponse().read()
            conn.close()
            time.sleep(0.5)
        cpu = time.process_time() - c0
        per1 = thread_cpu()
        cycles = d.pipeline._builds.count - b0
        names = {t.native_id: t.name for t in threading.enumerate()}
        d.stop()
        threading.setprofile(None)  # type: ignore[arg-type]
        print(f"{desc}; the daemon for {args.daemon:.0f} s: {cycles} builds, process CPU {cpu * 1e3:.0f} ms "
              f"(this harness's scrapes and traffic included)")
        if args.no_profile:
            groups: dict[str, float] = {}
            for tid, c in per1.items():
                name = re.sub(r"-\d+$", "-*", names.get(tid, f"thread {tid}"))
                groups[name] = groups.get(name, 0.0) + c - per0.get(tid, 0.0)
            print("CPU ms per build, by thread:")
            for name, c in sorted(groups.items(), key=lambda kv: -kv[1]):
                print(f"  {name:28} {c / max(cycles, 1) * 1e3:7.3f}")
            return 0
        st = pstats.Stats(*profiles).strip_dirs()
        st.sort_stats("tottime").print_stats(args.top)
        st.sort_stats("cumulative").print_stats(args.top)
    finally:
        shutil.rmtree(work, ignore_errors=True)
    return 0


def state_runs(args: argparse.Namespace) -> int:
    """The port state poll's CPU per run: quiet (nothing changed: no build), and after a flip (run, build, render)."""
    work = Path(tempfile.mkdtemp(prefix="fabricmon-profile-"))
    try:
        sysfs, desc = build_tree(work / "sys", args.tree, args.hcas)
        sources: dict[str, object] = {n: {"enabled": False} for n in registered("node")
                                      if n not in ("sysfs", "hw_counters", "port_state")}
        config = from_dict({"paths": {"sysfs": sysfs, "state_dir": str(work / "state")}, "sources": sources})
        pipe = Pipeline(config, LiveIO(sysfs=sysfs))
        pipe.collect()
        files = sorted(Path(sysfs, "class", "infiniband").glob("*/ports/*/state"))
        was = files[0].read_text()
        for _ in range(20):
            pipe.run_source("port_state", time.monotonic() + 5)
        c0 = time.process_time()
        rebuilt = 0
        for _ in range(args.state_runs):
            rebuilt += pipe.run_source("port_state", time.monotonic() + 5)
        quiet = (time.process_time() - c0) / args.state_runs
        flips = max(1, args.state_runs // 10)
        c0 = time.process_time()
        changed = 0
        for i in range(flips):
            files[0].write_text("1: DOWN\n" if i % 2 == 0 else was)
            if pipe.run_source("port_state", time.monotonic() + 5):
                changed += 1
                render(pipe.rebuild())
        flipped = (time.process_time() - c0) / flips
        files[0].write_text(was)
        n = len(files)
        print(f"{desc}; {n} ports, {2 * n} state files a run")
        print(f"port_state, nothing changed: {quiet * 1e3:.3f} ms CPU a run ({args.state_runs} runs, {rebuilt} built)")
        print(f"port_state, one port flipped: {flipped * 1e3:.3f} ms CPU a run with its build and render "
              f"({flips} runs, {changed} built)")
        pipe.close()
    finally:
        shutil.rmtree(work, ignore_errors=True)
    return 0


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--tree", choices=("synthetic", "h100"), default="h100")
    ap.add_argument("--hcas", type=int, default=10)
    ap.add_argument("--cycles", type=int, default=400)
    ap.add_argument("--top", type=int, default=30)
    ap.add_argument("--no-profile", action="store_true", help="only the split, without cProfile's overhead")
    ap.add_argument("--daemon", type=float, default=0.0, metavar="SECONDS",
                    help="instead: run the daemon itself (its threads, its server) for this long at a 0.5 s sysfs "
                         "interval, scraped every 0.5 s, every thread of it under cProfile")
    ap.add_argument("--state-runs", type=int, default=0, metavar="N",
                    help="instead: the port state poll's CPU per run, quiet and after a flip (see above)")
    args = ap.parse_args()
    if args.state_runs:
        return state_runs(args)
    if args.daemon:
        return daemon(args)
    work = Path(tempfile.mkdtemp(prefix="fabricmon-profile-"))
    try:
        sysfs, desc = build_tree(work / "sys", args.tree, args.hcas)
        sources: dict[str, object] = {n: {"enabled": False} for n in registered("node") if n not in ("sysfs", "hw_counters")}
        config = from_dict({"paths": {"sysfs": sysfs, "state_dir": str(work / "state")}, "sources": sources})
        pipe = Pipeline(config, LiveIO(sysfs=sysfs))
        traffic = Traffic(sysfs)
        pipe.collect()                          # the first poll: layouts, opened files, hw_counters
        for _ in range(5):                      # warm caches as the daemon's first polls do
            traffic.tick()
            pipe.run_source("sysfs", time.monotonic() + 5)
            render(pipe.rebuild())
        split = {"poll": 0.0, "build": 0.0, "render": 0.0}
        prof = None if args.no_profile else cProfile.Profile()
        for _ in range(args.cycles):
            traffic.tick()
            if prof is not None:
                prof.enable()
            t0 = time.process_time()
            pipe.run_source("sysfs", time.monotonic() + 5)
            t1 = time.process_time()
            snap = pipe.rebuild()
            t2 = time.process_time()
            render(snap)
            t3 = time.process_time()
            if prof is not None:
                prof.disable()
            split["poll"] += t1 - t0
            split["build"] += t2 - t1
            split["render"] += t3 - t2
        total = sum(split.values())
        print(f"{desc}; {args.cycles} cycles; {'under cProfile' if prof else 'no profiler'}")
        print(f"CPU ms per cycle: {total / args.cycles * 1e3:.3f} = "
              + " + ".join(f"{k} {v / args.cycles * 1e3:.3f}" for k, v in split.items()))
        if prof is not None:
            st = pstats.Stats(prof).strip_dirs()
            st.sort_stats("tottime").print_stats(args.top)
            st.sort_stats("cumulative").print_stats(args.top)
        pipe.close()
    finally:
        shutil.rmtree(work, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
