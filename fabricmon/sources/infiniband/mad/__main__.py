"""`python -m fabricmon.sources.infiniband.mad TOPOLOGY [--window N] [--per-switch N] [--timeout-ms N]`:
one engine read of every switch of an ibnetdiscover output (counters of every port, PortInfo of the
cabled ones), printed as JSON: per switch GUID its ports' counters, link state, unanswered queries,
plus the engine's stats and the wall/CPU time. A debugging aid and what the simulator tests drive
(the process must itself run under umad2sim there)."""

from __future__ import annotations

import argparse
import json
import sys
import time

from fabricmon import ibspec
from fabricmon.host import mad as host_mad
from fabricmon.host.io import LiveIO
from fabricmon.host.mad import MadSettings
from fabricmon.host.umad import UmadUnavailable
from fabricmon.parsers.ibnetdiscover import parse_ibnetdiscover
from fabricmon.sources.infiniband import mad

ERRORS = tuple(c.name for c in ibspec.COUNTERS if c.kind in ("error", "congestion"))


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m fabricmon.sources.infiniband.mad")
    ap.add_argument("topology", help="ibnetdiscover output")
    ap.add_argument("--window", type=int, default=32)
    ap.add_argument("--per-switch", type=int, default=4)
    ap.add_argument("--timeout-ms", type=int, default=200)
    ap.add_argument("--retries", type=int, default=2)
    ap.add_argument("--deadline", type=float, default=30.0)
    a = ap.parse_args(argv)
    with open(a.topology) as f:
        disc = parse_ibnetdiscover(f.read())
    io = LiveIO()
    try:
        io.mad_open(MadSettings(a.window, a.per_switch, a.timeout_ms, a.retries))
    except UmadUnavailable as exc:
        print(f"no umad port: {exc}", file=sys.stderr)
        return 1
    reader = mad.FabricReader(io.mad_run)
    targets = [mad.SwitchTarget(g, sw.lid, sw.nports, tuple(sorted(sw.links)))
               for g, sw in sorted(disc.switches.items()) if sw.lid]
    t0, c0 = time.monotonic(), time.process_time()
    res = reader.read(targets, time.monotonic() + a.deadline, ERRORS)
    wall, cpu = time.monotonic() - t0, time.process_time() - c0
    out = {"wall": wall, "cpu": cpu, "engine": host_mad.engine_totals(), "switches": {
        g: {"ports": {str(p): dict(v) for p, v in r.ports.items()}, "errors_ok": r.errors_ok,
            "link_up": {str(p): v for p, v in r.link_up.items()}, "queries": r.queries,
            "unanswered": r.unanswered, "failed": sorted(r.failed)} for g, r in res.items()}}
    json.dump(out, sys.stdout)
    return 0


if __name__ == "__main__":
    sys.exit(main())
