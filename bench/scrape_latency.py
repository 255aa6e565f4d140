"""Scrape latency and CPU per poll cycle of the per-node daemon on a 10-port node.

Prints a table. The baseline, measured in the same run on the same series, is what a plain
prometheus_client exporter does: build the metric families and render them on every scrape
(start_http_server over a custom collector). fabricmon renders once per poll and serves bytes.

    python bench/scrape_latency.py [--scrapes 1000] [--polls 300] [--hcas 10]
"""

from __future__ import annotations

import argparse
import http.client
import os
import statistics
import sys
import tempfile
import time


from prometheus_client import start_http_server  # noqa: E402
from prometheus_client.registry import CollectorRegistry  # noqa: E402

from fabricmon.sim import sysfs_tree as nodetree  # noqa: E402
from fabricmon.pipeline.scheduler import Pipeline  # noqa: E402
from fabricmon.config import from_dict  # noqa: E402
from fabricmon.serve.daemon import Daemon  # noqa: E402
from fabricmon.exporter import SnapshotCollector, render  # noqa: E402
from fabricmon.host import LiveIO  # noqa: E402


def config(sysfs: str) -> dict:
    return {
        "server": {"address": "127.0.0.1", "port": 0},
        "paths": {"sysfs": sysfs},
        "sources": {"ibstat": {"enabled": False}, "perfquery": {"enabled": False},
                    "iblinkinfo": {"enabled": False}, "sysfs": {"interval": 3600}},
        "expected_links": [{"device": "mlx5_*", "width": "4X", "speed": "NDR"}],
    }


def scrape_latencies(port: int, n: int) -> list[float]:
    out = []
    for _ in range(n):
        t0 = time.perf_counter()
        conn = http.client.HTTPConnection("127.0.0.1", port, timeout=5)
        conn.request("GET", "/metrics")
        resp = conn.getresponse()
        resp.read()
        conn.close()
        out.append(time.perf_counter() - t0)
    return out


def pct(values: list[float], p: float) -> float:
    s = sorted(values)
    return s[min(len(s) - 1, int(round(p / 100 * (len(s) - 1))))]


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--scrapes", type=int, default=1000)
    ap.add_argument("--polls", type=int, default=300)
    ap.add_argument("--hcas", type=int, default=10)
    args = ap.parse_args()
    tmp = tempfile.mkdtemp(prefix="fabricmon-bench-")
    sysfs = str(nodetree.build(tmp, args.hcas))
    cfg = from_dict(config(sysfs))

    daemon = Daemon(cfg, LiveIO(cfg.sysfs, cfg.procfs))
    daemon._publish(daemon.pipeline.collect())
    daemon.server.start()
    series = sum(1 for ln in render(daemon.snapshot).decode().splitlines() if ln and not ln.startswith("#"))
    scrape_latencies(daemon.port, 50)                     # warm-up
    ours = scrape_latencies(daemon.port, args.scrapes)

    registry = CollectorRegistry(auto_describe=False)
    registry.register(SnapshotCollector(daemon.snapshot))
    server, thread = start_http_server(0, addr="127.0.0.1", registry=registry)
    base_port = server.server_address[1]
    scrape_latencies(base_port, 50)
    base = scrape_latencies(base_port, args.scrapes)
    server.shutdown()

    col = Pipeline(cfg, LiveIO(cfg.sysfs, cfg.procfs))
    col.collect()
    t0, c0 = time.perf_counter(), time.process_time()
    for _ in range(args.polls):
        render(col.collect(["sysfs"]))
    wall = (time.perf_counter() - t0) / args.polls
    cpu = (time.process_time() - c0) / args.polls
    open_fds = col.io.open_files()
    col.close()
    daemon.stop()

    print(f"\nfabricmon scrape and poll benchmark: {args.hcas}-port node (sysfs), {series} series, "
          f"{args.scrapes} scrapes (new connection each)\n")
    print(f"| {'what':44} | {'p50 ms':>8} | {'p99 ms':>8} | {'mean ms':>8} |")
    print(f"|{'-' * 46}|{'-' * 10}|{'-' * 10}|{'-' * 10}|")
    for name, vals in (("fabricmon /metrics (cached snapshot)", ours),
                       ("baseline: prometheus_client render per scrape", base)):
        print(f"| {name:44} | {pct(vals, 50) * 1e3:8.3f} | {pct(vals, 99) * 1e3:8.3f} | "
              f"{statistics.mean(vals) * 1e3:8.3f} |")
    print(f"\nscrape p99 ratio fabricmon/baseline: {pct(ours, 99) / pct(base, 99):.2f}\n")
    print(f"| {'poll cycle (sysfs read + merge + checks + render)':50} | {'value':>10} |")
    print(f"|{'-' * 52}|{'-' * 12}|")
    print(f"| {'CPU seconds per poll cycle':50} | {cpu:10.5f} |")
    print(f"| {'wall seconds per poll cycle':50} | {wall:10.5f} |")
    print(f"| {'CPU % of one core at a 15 s interval':50} | {cpu / 15 * 100:9.3f}% |")
    print(f"| {'sysfs files kept open (pread)':50} | {open_fds:10d} |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
