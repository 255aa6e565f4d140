"""MAD loss against the fabric collector (issue 22): up to which loss rate it stays quiet, and how
fast a pulled cable shows under it (docs/freshness.md).

For each loss rate: an ibsim fat tree (4 spines x 8 leaves, 2 hosts per leaf, 2 uplinks per spine,
as in issue 22) with a running opensm; the collector (in this process, the real tools) with
--sweep/--discovery intervals; once its first view is complete, `rate` % of the MADs through every
port of spine01 and through two uplinks of leaf02 are dropped (ibsim `Error`). For --observe
seconds every build is checked: cabled ports reported down, degraded_link findings, topology changes,
switches without their name, unresponsive switches. Then leaf01's cable to spine01 is pulled (still under
loss) and the time until both ends read down is measured; then the loss is lifted and the time until
no switch is unresponsive and nothing but the pulled cable is down.

    .venv/bin/python bench/fabric_loss.py [--rates 10,30,50,70,90] [--sweep 15] [--discovery 300] [--observe 60]

Prints one JSON line per rate."""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
import time
from pathlib import Path

from fabricmon.config import from_dict
from fabricmon.host import LiveIO
from fabricmon.pipeline.fabric import fabric_pipeline
from fabricmon.sim.fabric import SimFabric, fat_tree_netfile


def g(n: int) -> str:
    return f"{n:016x}"


def view(pipe) -> tuple:
    snap = pipe.snapshot
    fab = snap.fabric if snap is not None else None
    if fab is None:
        return None, [], 0, set(), [], []
    down = sorted(k for k, p in fab.ports.items() if p.link is not None and not p.up)
    nameless = {g for g, sw in fab.switches.items() if not sw.name}
    stale = sorted(fab.switches[g].name for g, s in fab.unresponsive.items() if s)
    links = [f for f in snap.findings if f.check == "degraded_link"]
    return fab, down, fab.topology_changes, nameless, stale, links


def run_rate(rate: int, args, work: Path) -> dict:
    spines, leaves = 4, 8
    net = fat_tree_netfile(spines=spines, leaves=leaves, hosts_per_leaf=2, uplinks_per_spine=2)
    fab = SimFabric(net, work / f"sim{rate}")
    fab.start()
    try:
        fab.start_sm()
        cfg = from_dict({"paths": {"state_dir": str(work / f"state{rate}")},
                         "fabric": {"sweep_interval": args.sweep, "discovery_interval": args.discovery}},
                        check_paths=False)
        (work / f"state{rate}" / "fabric").mkdir(parents=True, exist_ok=True)
        io = LiveIO(cfg.sysfs, cfg.procfs, env=fab.env(fab.hosts[0]))
        pipe = fabric_pipeline(cfg, io)
        pipe.start()
        try:
            end = time.monotonic() + 120
            while True:
                fab_, down, *_ = view(pipe)
                if fab_ is not None and fab_.link_state_method and len(fab_.switches) == spines + leaves and not down:
                    break
                if time.monotonic() > end:
                    raise SystemExit("no complete first view")
                time.sleep(0.2)
            changes0 = fab_.topology_changes
            for p in range(1, 17):
                fab.console(f'Error "spine01"[{p}] {rate}')
            for p in (5, 7):                        # leaf02's uplinks to spine02 and spine03
                fab.console(f'Error "leaf02"[{p}] {rate}')
            worst_down, worst_changes, worst_nameless, links, stale_seen = 0, 0, 0, 0, set()
            end = time.monotonic() + args.observe
            while time.monotonic() < end:
                fab_, down, changes, nameless, stale, lk = view(pipe)
                worst_down = max(worst_down, len(down))
                worst_changes = max(worst_changes, changes - changes0)
                worst_nameless = max(worst_nameless, len(nameless))
                links = max(links, len(lk))
                stale_seen |= set(stale)
                time.sleep(0.25)
            unanswered = pipe.states["sweep"].errors_total.get("unanswered", 0)
            leaf01 = g(0x200000 + spines)        # fat_tree_netfile: spines first, then leaves
            t0 = time.monotonic()
            fab.console('Unlink "leaf01"[3]')          # leaf01[3] <-> spine01[1]
            pulled = None
            while time.monotonic() - t0 < 180:
                fab_, down, *_ = view(pipe)
                if (leaf01, 3) in down and any(k[1] == 1 and k[0] == g(0x200000) for k in down):
                    pulled = time.monotonic() - t0
                    break
                time.sleep(0.1)
            for p in range(1, 17):
                fab.console(f'Error "spine01"[{p}] 0')
            for p in (5, 7):
                fab.console(f'Error "leaf02"[{p}] 0')
            t1 = time.monotonic()
            converged = None
            while time.monotonic() - t1 < 180:
                fab_, down, changes, nameless, stale, lk = view(pipe)
                if not stale and len(down) == 2:
                    converged = time.monotonic() - t1
                    break
                time.sleep(0.2)
            return {"loss_percent": rate, "observe_s": args.observe, "sweep_s": args.sweep,
                    "discovery_s": args.discovery, "max_ports_down": worst_down, "max_link_findings": links,
                    "max_topology_changes": worst_changes, "max_nameless_switches": worst_nameless,
                    "unresponsive_switches": sorted(stale_seen), "unanswered_errors": unanswered,
                    "pulled_cable_down_s": None if pulled is None else round(pulled, 1),
                    "converged_after_loss_s": None if converged is None else round(converged, 1)}
        finally:
            pipe.stop()
    finally:
        fab.stop()


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--rates", default="10,30,50,70,90")
    ap.add_argument("--sweep", type=float, default=15.0)
    ap.add_argument("--discovery", type=float, default=300.0)
    ap.add_argument("--observe", type=float, default=60.0)
    args = ap.parse_args()
    with tempfile.TemporaryDirectory(prefix="fabricmon-loss-") as tmp:
        for rate in (int(r) for r in args.rates.split(",")):
            print(json.dumps(run_rate(rate, args, Path(tmp))), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
