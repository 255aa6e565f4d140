"""`python -m fabricmon.sources.infiniband.mad TOPOLOGY [--sweeps N] [--window N] [--per-switch N] [--timeout-ms N]`:
engine reads of every switch of an ibnetdiscover output, asking exactly what the daemon's sweep asks
(mad.plan_targets on the topology built from that output: the counters of every cabled port, the
PortInfo of one end of each inter-switch link and of every other cabled port, the far ends' once),
printed as JSON: per switch GUID its ports' counters, link state (both ends of every link), unanswered
queries, plus per sweep the engine's MADs, the far-end and fallback reads and the wall/CPU time. The
top-level `wall`, `cpu` and `engine` are the last sweep's: with the default 2 sweeps, a steady sweep
(the first also reads the far ends once), as the daemon's are. A debugging aid, what the simulator tests
drive (the process must itself run under umad2sim there) and the bare read the benchmarks compare the
daemon's sweep with."""

from __future__ import annotations

import argparse
import json
import sys
import time

from fabricmon.model import ibspec
from fabricmon.host.io import LiveIO
from fabricmon.host.mad import MadSettings
from fabricmon.host.umad import UmadUnavailable
from fabricmon.model.fabric import build_topology
from fabricmon.parsers.ibnetdiscover import parse_ibnetdiscover
from fabricmon.sources.infiniband import mad

ERRORS = tuple(c.name for c in ibspec.COUNTERS if c.kind in ("error", "congestion"))


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m fabricmon.sources.infiniband.mad")
    ap.add_argument("topology", help="ibnetdiscover output")
    ap.add_argument("--sweeps", type=int, default=2, help="reads in a row; the last one's figures are reported")
    ap.add_argument("--window", type=int, default=32)
    ap.add_argument("--per-switch", type=int, default=4)
    ap.add_argument("--timeout-ms", type=int, default=200)
    ap.add_argument("--retries", type=int, default=2)
    ap.add_argument("--deadline", type=float, default=30.0)
    a = ap.parse_args(argv)
    with open(a.topology) as f:
        topo = build_topology(parse_ibnetdiscover(f.read()))
    live = LiveIO()         # this tool's own LiveIO (not a source's HostIO): its engine's totals are read too
    try:
        live.mad_open(MadSettings(a.window, a.per_switch, a.timeout_ms, a.retries))
    except UmadUnavailable as exc:
        print(f"no umad port: {exc}", file=sys.stderr)
        return 1
    reader = mad.FabricReader(live.mad_run)
    targets, _no_lid = mad.plan_targets(topo, set(topo.switches))
    sweeps = []
    for _ in range(max(1, a.sweeps)):
        before = live.mad_host.totals()
        peer0, fall0 = reader.peer_reads, reader.fallback_reads
        t0, c0 = time.monotonic(), time.process_time()
        res = reader.read(targets, time.monotonic() + a.deadline, ERRORS)
        wall, cpu = time.monotonic() - t0, time.process_time() - c0
        after = live.mad_host.totals()
        sweeps.append({"wall": wall, "cpu": cpu, "engine": {k: v - before.get(k, 0) for k, v in after.items()},
                       "peer_reads": reader.peer_reads - peer0, "fallback_reads": reader.fallback_reads - fall0})
    out = {**sweeps[-1], "sweeps": sweeps, "switches": {
        g: {"ports": {str(p): dict(v) for p, v in r.ports.items()}, "errors_ok": r.errors_ok,
            "link_up": {str(p): v for p, v in r.link_up.items()},
            "link": {str(p): [w, s, sorted(ab.widths), sorted(ab.speeds)] for p, (w, s, ab) in r.link.items()},
            "queries": r.queries, "unanswered": r.unanswered, "failed": sorted(r.failed),
            # when its traffic counters were read, in seconds from the last read's start (None: not timed)
            "read_s": None if r.read_at is None else round(r.read_at - t0, 4)} for g, r in res.items()}}
    json.dump(out, sys.stdout)
    return 0


if __name__ == "__main__":
    sys.exit(main())
