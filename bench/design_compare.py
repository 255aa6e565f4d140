"""The cost of comparing the live fabric with its design (docs/design.md) against a sweep's, in the
same run, on the real 400-switch HDR director fabric (../shared/captures; without it a generated
300-switch fat tree stands in) in ibsim with a running opensm.

The collector's pipeline discovers the fabric, `fabric design save`'s writer turns that discovery
into the design file, the `design` source reads it back; then, alternately, full sweeps
(`Pipeline.collect(["sweep"])`: the reads, parsing, history, every check, the design comparison
included, the snapshot) and the comparison alone (model.design.compare on the same topology and
the sweep's link rates), and the design file's read and parse alone. Prints the medians and the
comparison's share of a sweep (goal: under 10%).

    python bench/design_compare.py [--repeat 5]
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import tempfile
import time
from pathlib import Path

from fabricmon.config import from_dict
from fabricmon.host import LiveIO
from fabricmon.model import design as fabric_design
from fabricmon.model.design import DesignData
from fabricmon.model.snapshot import source_data
from fabricmon.parsers.design import parse_design
from fabricmon.pipeline.fabric import fabric_pipeline
from fabricmon.sim.fabric import SimFabric

sys.path.insert(0, str(Path(__file__).resolve().parent))
from fabric_sweep import netfile  # noqa: E402 - the same fabrics as the sweep benchmark


def median_s(fn, repeat: int) -> float:
    times = []
    for _ in range(repeat):
        t = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t)
    return statistics.median(times)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--repeat", type=int, default=5)
    ap.add_argument("--size", default="director", help="director (the capture), small, medium")
    args = ap.parse_args()
    label, text = netfile(args.size)
    with tempfile.TemporaryDirectory() as tmp:
        fab = SimFabric(text, Path(tmp) / "sim")
        fab.start(timeout=300)          # a loaded machine needs more than the default for 400 switches
        try:
            run(fab, tmp, args, label)
        finally:
            fab.stop()


def run(fab: SimFabric, tmp: str, args: argparse.Namespace, label: str) -> None:
    fab.start_sm(timeout=300)
    path = Path(tmp) / "design.net"
    cfg = from_dict({"paths": {"state_dir": tmp}, "fabric": {"cache_dir": tmp, "sources": {"design": {
        "path": str(path)}}}, "logging": {"level": "error"}})
    pipe = fabric_pipeline(cfg, LiveIO(env=fab.env(fab.sm_host)))
    try:
        pipe.collect(["discovery"])
        topo = pipe.model.inventory(pipe.states)
        path.write_text(fabric_design.design_ibnetdiscover(topo))       # what `fabric design save` writes
        size = path.stat().st_size
        pipe.collect(["design"])
        design = source_data(pipe.states, DesignData)
        assert design is not None and design.configured, pipe.states["design"].active_errors
        sweeps, compares = [], []
        snap = None
        for _ in range(args.repeat):
            t = time.perf_counter()
            snap = pipe.collect(["sweep"])
            sweeps.append(time.perf_counter() - t)
            rates = {k: (p.link.width, p.link.speed) for k, p in snap.fabric.ports.items()
                     if p.link is not None and p.up}
            topo = pipe.model.inventory(pipe.states)
            t = time.perf_counter()
            found = fabric_design.compare(design.design, topo, rates)
            compares.append(time.perf_counter() - t)
            assert found == [], found[:3]
        assert snap is not None and snap.fabric.design_cables == len(design.design.cables)
        parse = median_s(lambda: parse_design(path.read_text()), args.repeat)
    finally:
        pipe.close()
    sweep, compare = statistics.median(sweeps), statistics.median(compares)
    out = {"fabric": label, "switches": len(topo.switches), "cables": len(design.design.cables),
           "sweep_s": round(sweep, 3), "compare_s": round(compare, 4), "compare_share_of_sweep": round(compare / sweep, 4),
           "design_read_parse_s": round(parse, 3), "design_file_kib": round(size / 1024, 1), "repeat": args.repeat}
    print(json.dumps(out, indent=1))


if __name__ == "__main__":
    main()
