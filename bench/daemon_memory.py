"""Where the fabric collector's memory goes (issue 49): the real `fabric run` daemon (fabricmon.serve.daemon.Daemon
with the fabric pipeline, 15 s sweeps through the MAD engine) in this process on a simulator already running
(`--attach`: bench/sim_hold.py's environment), scraped like Prometheus (gzip, once a sweep), under tracemalloc:
after `--sweeps` sweeps, the live Python memory by where it was allocated (module, or file:line), the
process's RSS beside it (what tracemalloc does not see: the interpreter, the libraries, the allocator's
free lists and fragmentation), and RSS per cabled switch port. tracemalloc costs memory and CPU of its own
(it is not in its totals, it is in the RSS); `--no-trace` measures RSS alone.

    python bench/daemon_memory.py --attach /tmp/superpod-env.json [--sweeps 4] [--top 30] [--by file|line]
"""

from __future__ import annotations

import argparse
import gzip
import json
import os
import sys
import time
import tracemalloc
import urllib.request
from collections import defaultdict
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path[:0] = [str(HERE.parent)]


def rss_mib() -> float:
    with open("/proc/self/status") as fh:
        for line in fh:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) / 1024
    return float("nan")


def scrape(port: int, query: str = "") -> bytes:
    req = urllib.request.Request(f"http://127.0.0.1:{port}/metrics{query}", headers={"Accept-Encoding": "gzip"})
    with urllib.request.urlopen(req, timeout=120) as r:
        body = bytes(r.read())
    return gzip.decompress(body) if body[:2] == b"\x1f\x8b" else body


def who_holds() -> None:
    """Every live Snapshot and FabricSection, and what refers to each (type, and for a dict the object whose
    __dict__ or attribute it is, when found)."""
    import gc
    from fabricmon.model.fabric import FabricSection
    from fabricmon.model.snapshot import Snapshot
    gc.collect()
    objs = [o for o in gc.get_objects() if isinstance(o, (Snapshot, FabricSection))]
    print(f"\n{sum(isinstance(o, Snapshot) for o in objs)} snapshots, "
          f"{sum(isinstance(o, FabricSection) for o in objs)} fabric sections alive:")
    for o in objs:
        refs = []
        for r in gc.get_referrers(o):
            if r is objs or isinstance(r, type(sys._getframe())):
                continue
            name = type(r).__name__
            if isinstance(r, (dict, list, tuple)):
                owners = [type(x).__name__ for x in gc.get_referrers(r) if x is not objs
                          and not isinstance(x, type(sys._getframe()))][:3]
                name += f"<-{'/'.join(owners)}"
            refs.append(name)
        extra = f" {len(o.ports)} ports" if isinstance(o, FabricSection) else f" t={o.time:.0f}"
        print(f"  {type(o).__name__} {id(o):x}{extra}: held by {', '.join(refs)}")


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--attach", required=True, help="the simulator's client environment (JSON)")
    ap.add_argument("--sweeps", type=int, default=4)
    ap.add_argument("--top", type=int, default=30)
    ap.add_argument("--by", choices=("file", "line"), default="line")
    ap.add_argument("--no-trace", action="store_true", help="RSS only (no tracemalloc)")
    ap.add_argument("--frames", type=int, default=1, help="tracemalloc frames kept (1: the allocating line)")
    ap.add_argument("--who", action="store_true", help="list the live snapshots and fabric sections, and what "
                                                      "holds each (one level of referrers)")
    args = ap.parse_args()
    env = json.loads(Path(args.attach).read_text())
    if os.environ.get("LD_PRELOAD") != env.get("LD_PRELOAD") or os.environ.get("IBSIM_SOCKNAME") != env.get("IBSIM_SOCKNAME"):
        # the MAD engine opens its umad port in this process: it runs under the simulator's preload
        os.execve(sys.executable, [sys.executable, *sys.argv], {**os.environ, **{k: env[k] for k in (
            "IBSIM_SOCKNAME", "SIM_HOST", "LD_PRELOAD", "PATH")}})
    if not args.no_trace:
        tracemalloc.start(args.frames)
    import tempfile

    from fabricmon.config import from_dict
    from fabricmon.host import LiveIO
    from fabricmon.pipeline.fabric import fabric_pipeline
    from fabricmon.serve.daemon import Daemon
    work = Path(tempfile.mkdtemp(prefix="fm-mem-"))
    (work / "state" / "fabric").mkdir(parents=True)
    cfg = from_dict({"server": {"address": "127.0.0.1"}, "logging": {"level": "warning"},
                     "paths": {"state_dir": str(work / "state")},
                     "fabric": {"port": 0, "sweep_method": "mad", "sweep_interval": 15.0}})
    io = LiveIO(cfg.sysfs, cfg.procfs, env={k: env[k] for k in ("IBSIM_SOCKNAME", "SIM_HOST", "LD_PRELOAD", "PATH")})
    print(f"# RSS before the daemon: {rss_mib():.0f} MiB (the interpreter and fabricmon's imports)", file=sys.stderr)
    d = Daemon(cfg, io, port=0, pipeline=fabric_pipeline(cfg, io), journal=False)
    d.start()
    try:
        t0 = time.monotonic()
        runs = 0.0
        while runs < args.sweeps:
            time.sleep(15.0 - (time.monotonic() - t0) % 15.0)
            body = scrape(d.port).decode()
            for line in body.splitlines():
                if line.startswith('fabricmon_source_runs_total{source="sweep"}'):
                    runs = float(line.split()[-1])
            print(f"# {time.monotonic() - t0:.0f} s: {runs:.0f} sweeps, RSS {rss_mib():.0f} MiB", file=sys.stderr)
        # between sweeps: the next sweep built and rendered (scraped just after its build), then nothing in flight
        want = runs + 1
        while runs < want:
            time.sleep(0.2)
            body = scrape(d.port).decode()
            runs = float(next((ln.split()[-1] for ln in body.splitlines()
                               if ln.startswith('fabricmon_source_runs_total{source="sweep"}')), runs))
        del body
        time.sleep(3.0)
        snap = d.snapshot
        cabled = sum(len(sw.links) for sw in snap.fabric.switches.values()) if snap and snap.fabric else 0
        rss = rss_mib()
        print(f"RSS {rss:.0f} MiB after {runs:.0f} sweeps; {cabled} cabled switch ports: "
              f"{rss * 1024 / max(cabled, 1):.2f} KiB per cabled port")
        if args.who:
            who_holds()
        if args.no_trace:
            return 0
        traced = tracemalloc.get_traced_memory()[0]
        shot = tracemalloc.take_snapshot()
        stats = shot.statistics("filename" if args.by == "file" else "lineno")
        print(f"tracemalloc: {traced / 2**20:.1f} MiB live Python objects "
              f"({traced / max(cabled, 1):.0f} bytes per cabled port); the largest {args.top} sites:\n")
        print("| MiB | bytes / cabled port | objects | where |")
        print("|---|---|---|---|")
        root = str(HERE.parent) + "/"
        for st in stats[:args.top]:
            fr = st.traceback[0]
            where = fr.filename.replace(root, "") + ("" if args.by == "file" else f":{fr.lineno}")
            print(f"| {st.size / 2**20:.1f} | {st.size / max(cabled, 1):.0f} | {st.count} | {where} |")
        by_pkg: dict[str, int] = defaultdict(int)
        for st in shot.statistics("filename"):
            f = st.traceback[0].filename.replace(root, "")
            by_pkg["/".join(f.split("/")[:2]) if f.startswith("fabricmon/") else "(outside fabricmon)"] += st.size
        print("\n| package | MiB |\n|---|---|")
        for k, v in sorted(by_pkg.items(), key=lambda kv: -kv[1])[:15]:
            print(f"| {k} | {v / 2**20:.1f} |")
    finally:
        d.stop()
    return 0


if __name__ == "__main__":
    sys.exit(main())
