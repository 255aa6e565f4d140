"""The node daemon at its shipped intervals, CPU by thread: what it costs between polls as well as per poll.

`fabricmon run`'s Daemon in this process, every source at its defaults (tools that find no hardware fail fast),
on the real recorded H100 sysfs tree (or the synthetic one), scraped once every 15 s as Prometheus would, for
--seconds after a 20 s warm-up. It prints each thread's CPU in ms per 15 s (schedstat, nanoseconds) and the
process's share of one core. A thread that wakes on a timer costs CPU even when it finds nothing to do (a bare
Python Event.wait(1.0) wake costs about 0.16 ms on the shared 2-core machine): this is where such costs show,
where bench/overhead_vs_node_exporter.py's 0.5 s ticks amortize them per cycle.

Usage:

    python bench/node_idle.py [--seconds 120] [--tree h100|synthetic] [--root CHECKOUT]

--root: the checkout to import fabricmon from (a worktree of main, to compare; default this one). Run it for
each checkout in turn on a quiet machine.
"""

from __future__ import annotations

import argparse
import http.client
import shutil
import sys
import tempfile
import threading
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--seconds", type=float, default=120.0)
    ap.add_argument("--tree", choices=("h100", "synthetic"), default="h100")
    ap.add_argument("--hcas", type=int, default=10)
    ap.add_argument("--root", type=Path, default=HERE.parent)
    args = ap.parse_args()
    root = args.root.resolve()
    sys.path.insert(0, str(root))
    # fabricmon first, from --root (the bench helpers below put this checkout on the path too)
    from fabricmon.config import from_dict
    from fabricmon.host.io import LiveIO
    from fabricmon.serve.daemon import Daemon
    assert Path(sys.modules["fabricmon"].__file__ or "").resolve().is_relative_to(root), "fabricmon not from --root"
    sys.path.insert(1, str(HERE))
    from node_profile import thread_cpu
    from overhead_vs_node_exporter import build_tree

    work = Path(tempfile.mkdtemp(prefix="fabricmon-idle-"))
    try:
        sysfs, desc = build_tree(work / "sys", args.tree, args.hcas)
        config = from_dict({"paths": {"sysfs": sysfs, "state_dir": str(work / "state")},
                            "server": {"address": "127.0.0.1", "port": 0}, "logging": {"level": "warning"}})
        d = Daemon(config, LiveIO(sysfs=sysfs), port=0)
        d.start()
        time.sleep(20.0)            # the first polls: layouts, opened files, each source's first run
        me = threading.get_native_id()
        t0, per0 = time.monotonic(), thread_cpu()
        next_scrape = t0
        while time.monotonic() - t0 < args.seconds:
            if time.monotonic() >= next_scrape:
                conn = http.client.HTTPConnection("127.0.0.1", d.port, timeout=10)
                conn.request("GET", "/metrics")
                conn.getresponse().read()
                conn.close()
                next_scrape += 15.0
            time.sleep(0.2)
        wall, per1 = time.monotonic() - t0, thread_cpu()
        names = {t.native_id: t.name for t in threading.enumerate()}
        d.stop()
        by: dict[str, float] = {}
        for tid, cpu in per1.items():
            if tid == me:
                continue            # this harness (its scrapes and sleeps), not the daemon
            name = names.get(tid, "(ended)")
            if name.startswith("fabricmon-http-"):
                name = "fabricmon-http-* (handlers)"
            by[name] = by.get(name, 0.0) + cpu - per0.get(tid, 0.0)
        total = sum(by.values())
        print(f"{desc}; {root}; every source at its defaults; {wall:.0f} s, a scrape every 15 s")
        print(f"daemon CPU {total / wall * 15 * 1e3:.2f} ms per 15 s = {total / wall * 100:.3f} % of one core\n")
        print(f"| {'thread':32} | {'ms per 15 s':>11} |")
        print(f"|{'-' * 34}|{'-' * 13}|")
        for name, cpu in sorted(by.items(), key=lambda kv: -kv[1]):
            if cpu * 1e3 / wall * 15 >= 0.05:
                print(f"| {name:32} | {cpu * 1e3 / wall * 15:11.2f} |")
    finally:
        shutil.rmtree(work, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
