"""The fabric collector's sweep against one `ibqueryerrors --data` pass, in the same run, on
simulated fabrics of growing size (ibsim, the real infiniband-diags tools, a running opensm so
that ibqueryerrors without --skip-sl has its SA).

For each fabric: start it, run discovery once (cached, timed apart: it does not count against
every sweep), then alternate full sweeps (`Pipeline.collect(["sweep"])`: both ibqueryerrors
passes, parsing, counter history, checks and the snapshot) with `ibqueryerrors --data` passes,
and print the medians, their ratio, the rendered exposition size and the collector's RSS.
Each size runs in its own process, so RSS is that size's alone.

    python bench/fabric_sweep.py [--repeat 5] [--sizes small,medium,director,director:0/4]

A size with `:i/n` runs the collector as shard i of n (`--shard i/n`): it sweeps only its own switches, with
perfquery per switch by LID (`-x -l` and the `-a` aggregate, per port only where it shows errors), 8 at once; the `ibqueryerrors --data` pass still reads the
whole fabric, so the ratio compares a shard's sweep with one whole-fabric pass.

Also timed per fabric: one read of every switch's forwarding table as the `routing` source does
it (one `dump_fts -n` run, parsing and the route balance of every switch), against the
alternative it was chosen over: `ibroute -n <lid>` per switch, 4 at a time.

Also per fabric: the fabric map (fabricmon.pages) of the last snapshot: server render time and
size of the page with every group collapsed (what an operator first gets), with every group
expanded, and one switch's details; and, when headless Chromium is installed, the wall time for
Chromium to load and lay out each page against loading a near-empty page in the same run.

`director` is the real 400-switch HDR fabric with a director core (16,568 switch ports) from
../shared/captures; without the captures a generated 300-switch fat tree stands in.
"""

from __future__ import annotations

import argparse
import json
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

from fabricmon.config import from_dict
from fabricmon.exporter import render
from fabricmon.host import LiveIO
from fabricmon.pipeline.fabric import fabric_pipeline
from fabricmon.sim.fabric import SimFabric, fat_tree_netfile

CAPTURE = Path(__file__).resolve().parents[1].parent / "shared" / "captures" / "ibnetdiscover" / "director-hdr-400sw.ibsim.net"


def netfile(size: str) -> tuple[str, str]:
    if size == "small":
        return "fat tree 8 spines x 16 leaves", fat_tree_netfile(spines=8, leaves=16, hosts_per_leaf=8)
    if size == "medium":
        return "fat tree 32 spines x 64 leaves", fat_tree_netfile(spines=32, leaves=64, hosts_per_leaf=16)
    if size == "director" and CAPTURE.exists():
        return "real director HDR fabric (capture)", CAPTURE.read_text()
    return "fat tree 100 spines x 200 leaves", fat_tree_netfile(spines=100, leaves=200, hosts_per_leaf=8)


def one(size: str, repeat: int) -> dict:
    size, _, shard = size.partition(":")
    label, text = netfile(size)
    if shard:
        label += f", shard {shard}"
    with tempfile.TemporaryDirectory() as tmp, SimFabric(text, Path(tmp) / "sim") as fab:
        fab.start_sm(timeout=300)
        host = fab.sm_host
        cfg = from_dict({"paths": {"state_dir": tmp}, "fabric": {"cache_dir": tmp, "shard": shard or "0/1"},
                         "logging": {"level": "error"}})
        pipe = fabric_pipeline(cfg, LiveIO(env=fab.env(host)))
        t = time.monotonic()
        pipe.collect(["discovery"])
        discovery = time.monotonic() - t
        sweeps, passes = [], []
        snap = None
        for _ in range(repeat):
            t = time.monotonic()
            snap = pipe.collect(["sweep"])
            sweeps.append(time.monotonic() - t)
            t = time.monotonic()
            r = fab.run_tool(host, "ibqueryerrors", "--data", timeout=300)
            passes.append(time.monotonic() - t)
            if "Query SA failed" in r.stderr + r.stdout or "Summary" not in r.stdout:
                raise RuntimeError(f"ibqueryerrors --data failed: {r.stderr[-300:]}")
        lft, dump = [], []
        for _ in range(repeat):
            t = time.monotonic()
            snap = pipe.collect(["routing"])
            lft.append(time.monotonic() - t)
            t = time.monotonic()
            with ThreadPoolExecutor(4) as ex:
                rs = list(ex.map(lambda lid: fab.run_tool(host, "ibroute", "-n", str(lid), timeout=300),
                                 [sw.lid for sw in snap.fabric.switches.values() if sw.lid]))
            dump.append(time.monotonic() - t)
            if any(r.returncode != 0 for r in rs):
                raise RuntimeError("ibroute failed")
        assert snap.sources["routing"].up and not snap.sources["routing"].active_errors, snap.sources["routing"].active_errors
        assert snap.fabric.routes, "no route balance computed"
        body = render(snap)
        pipe.close()
        pages = page_stats(snap, repeat)
        sw = snap.sources["sweep"]
        assert sw.up and not sw.active_errors, sw.active_errors
        return {
            "fabric": label, "switches": len(snap.fabric.switches), "ports": len(snap.fabric.ports),
            "discovery_s": discovery, "sweep_s": statistics.median(sweeps), "data_pass_s": statistics.median(passes),
            "lft_s": statistics.median(lft), "ibroute_s": statistics.median(dump), "balanced": len(snap.fabric.routes),
            "series": body.count(b"\n") - body.count(b"\n#"), "exposition_mib": len(body) / 2**20,
            "rss_mib": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024,
            **pages,
        }


def _median_time(fn, repeat: int) -> tuple[float, object]:
    times, out = [], None
    for _ in range(repeat):
        t = time.perf_counter()
        out = fn()
        times.append(time.perf_counter() - t)
    return statistics.median(times), out


def page_stats(snap, repeat: int) -> dict:
    """Render time and size of the map pages, and Chromium's load time (if installed)."""
    import shutil

    from fabricmon.pages import Pages
    from fabricmon.pages.fabric_layout import layout
    from fabricmon.serve.server import Exposition, MetricsServer

    every = ",".join(g.id for g in layout(snap.fabric, snap.findings).groups)
    guid = next(iter(snap.fabric.switches))
    out: dict = {"groups": every.count(",") + 1 if every else 0}
    for name, part, q in (("collapsed", "page", {}), ("expanded", "page", {"expand": every}),
                          ("switch", "switch", {"guid": guid})):
        t, body = _median_time(lambda: Pages(snap).get(part, q), repeat)
        out[f"page_{name}_ms"], out[f"page_{name}_kib"] = t * 1000, len(body) / 1024
    exe = shutil.which("chromium") or shutil.which("chromium-browser")
    if exe is None:
        return out
    expo = Exposition()
    expo.pages = Pages(snap)
    srv = MetricsServer("127.0.0.1", 0, expo)
    srv.start()
    base = f"http://127.0.0.1:{srv.port}"
    try:
        with tempfile.TemporaryDirectory() as prof:
            def load(url: str) -> None:
                subprocess.run([exe, "--headless", "--no-sandbox", "--disable-gpu", f"--user-data-dir={prof}",
                                "--window-size=1600,1000", "--dump-dom", url], capture_output=True, timeout=120,
                               check=True)
            load(base + "/healthz")                 # warm the profile
            for name, url in (("empty", base + "/healthz"), ("collapsed", base + "/"),
                              ("expanded", base + "/?expand=" + every)):
                out[f"chromium_{name}_s"] = _median_time(lambda: load(url), repeat)[0]
    finally:
        srv.stop()
    return out


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--repeat", type=int, default=5)
    ap.add_argument("--sizes", default="small,medium,director")
    ap.add_argument("--one", help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.one:
        print(json.dumps(one(args.one, args.repeat)))
        return 0
    rows = []
    for size in args.sizes.split(","):
        r = subprocess.run([sys.executable, __file__, "--one", size, "--repeat", str(args.repeat)],
                           capture_output=True, text=True, timeout=1800)
        if r.returncode != 0:
            print(r.stderr[-2000:], file=sys.stderr)
            return 1
        rows.append(json.loads(r.stdout.strip().splitlines()[-1]))
    print(f"| fabric | switches | switch ports | discovery s (cached) | sweep s (median of {args.repeat}) "
          f"| `ibqueryerrors --data` s | ratio | series | exposition MiB | collector RSS MiB |")
    print("|---|---|---|---|---|---|---|---|---|---|")
    for x in rows:
        print(f"| {x['fabric']} | {x['switches']} | {x['ports']} | {x['discovery_s']:.2f} | {x['sweep_s']:.2f} | "
              f"{x['data_pass_s']:.2f} | {x['sweep_s'] / x['data_pass_s']:.2f} | {x['series']} | "
              f"{x['exposition_mib']:.1f} | {x['rss_mib']:.0f} |")
    print()
    print(f"| fabric | switches | LFT read s (`routing`: one dump_fts -n, parse, balance; median of {args.repeat}) "
          f"| `ibroute -n` per switch x4 s | switches with a route balance |")
    print("|---|---|---|---|---|")
    for x in rows:
        print(f"| {x['fabric']} | {x['switches']} | {x['lft_s']:.2f} | {x['ibroute_s']:.2f} | {x['balanced']} |")
    print()
    print(f"| fabric | groups | map page, collapsed: ms / KiB | every group expanded: ms / KiB | switch details: ms / KiB "
          f"| Chromium load s: near-empty page / collapsed / expanded (median of {args.repeat}) |")
    print("|---|---|---|---|---|---|")
    for x in rows:
        chrome = (f"{x['chromium_empty_s']:.2f} / {x['chromium_collapsed_s']:.2f} / {x['chromium_expanded_s']:.2f}"
                  if "chromium_empty_s" in x else "(chromium not installed)")
        print(f"| {x['fabric']} | {x['groups']} | {x['page_collapsed_ms']:.0f} / {x['page_collapsed_kib']:.0f} | "
              f"{x['page_expanded_ms']:.0f} / {x['page_expanded_kib']:.0f} | {x['page_switch_ms']:.1f} / "
              f"{x['page_switch_kib']:.1f} | {chrome} |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
