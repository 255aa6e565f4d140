"""The fabric collector's own CPU per sweep beside the read, in-process and without a simulator (issue 40):
the real FabricModel fed the records a collector gets (a discovery of the SuperPOD-size fabric of
bench/superpod_net.py, sweeps with every counter of every switch port, an SM poll), timed in CPU seconds:

- a full build (a new sweep: counters into the history, every check, the port section);
- a build when only the SM poll is new (the last full build's port section reused);
- a render of the default counter set of that snapshot (its label texts cached, as in the daemon's
  second and later renders) and its gzip copy;
- an event build (issue 51: the SM reported a switch, its ports re-read, model.fabric_events): one
  leaf-spine cable down (the leaf's 40 ports re-read, one changed, and its far end), and a leaf's 40
  ports down at once (a storm), each with the render of the state set (`collect[]=state`) after it.

`--profile` prints the cProfile of one full build and one render (the largest costs first). CPU seconds on
a shared machine are still noisy: compare runs of one sitting.

    python bench/build_render.py [--pods 13] [--repeat 3] [--moving 1.0] [--profile]
"""

from __future__ import annotations

import argparse
import cProfile
import gzip
import io
import pstats
import statistics
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import TypeVar

T = TypeVar("T")
HERE = Path(__file__).resolve().parent
sys.path[:0] = [str(HERE.parent), str(HERE.parent / "tests"), str(HERE)]

from fabric_snap import ibnetdiscover_text  # noqa: E402
from superpod_net import superpod_netfile  # noqa: E402

from fabricmon.model import gc_pause, ibspec  # noqa: E402
from fabricmon.config import from_dict  # noqa: E402
from fabricmon.exporter.render import Renderer  # noqa: E402
from fabricmon.model.compact import PortCounters  # noqa: E402
from fabricmon.model.fabric import DiscoveryData, SmData, SmInfo, SweepData  # noqa: E402
from fabricmon.model.fabric_events import EventRead, FabricEventsData  # noqa: E402
from fabricmon.model.snapshot import BuildStats, Snapshot, SourceState  # noqa: E402
from fabricmon.parsers.ibnetdiscover import parse_ibnetdiscover  # noqa: E402
from fabricmon.pipeline.fabric import FabricModel  # noqa: E402


def _state(records: type, data: object, t: float) -> SourceState:
    return SourceState(name=records.__name__, enabled=True, interval=15, timeout=30, records=records, up=True,
                       ran=True, data=data, data_time=t)


def _sweep(disc: DiscoveryData, i: int, moving: float) -> SweepData:
    """Every switch port read, its counters packed as the MAD reader hands them (model.compact.PortCounters):
    the data and packet counters of `moving` of the ports moving (1.0: a busy fabric, every port; in ibsim
    the MADs themselves move about 5% of them), error counters 0, cabled ports up."""
    names = [c.name for c in ibspec.COUNTERS]
    sw = SweepData(bits={n: 64 for n in names})
    k = 0
    for g, node in disc.switches.items():
        for port in range(1, node.nports + 1):
            k += 1
            base = 1000 * i if (k % 1000) < moving * 1000 else 0
            sw.ports[(g, port)] = PortCounters.pack({n: (base + port if "bytes" in n or "packets" in n else 0)
                                                     for n in names})
            sw.link_up[(g, port)] = port in node.links
        sw.switches.add(g)
    return sw


def _cpu(fn: Callable[[], T]) -> tuple[float, T]:
    t0 = time.process_time()
    out = fn()
    return time.process_time() - t0, out


def _profile(fn: Callable[[], object]) -> str:
    pr = cProfile.Profile()
    pr.runcall(fn)
    s = io.StringIO()
    pstats.Stats(pr, stream=s).sort_stats("tottime").print_stats(15)
    return s.getvalue()


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--pods", type=int, default=13, help="pods of bench/superpod_net.py (13: 26,000 switch ports)")
    ap.add_argument("--repeat", type=int, default=3, help="timed sweeps (after two to fill the history)")
    ap.add_argument("--moving", type=float, default=1.0,
                    help="the share of ports whose data counters move each sweep (1.0: every port; ibsim: about 0.05)")
    ap.add_argument("--profile", action="store_true", help="print the cProfile of one full build and one render")
    args = ap.parse_args()
    disc = parse_ibnetdiscover(ibnetdiscover_text(superpod_netfile(args.pods)))
    clock = [1.9e9]
    model = FabricModel(from_dict({}, check_paths=False), clock=lambda: clock[0])
    sm = SmInfo(1, "0000000000100001", 50, 0, "MASTER")
    states = {"discovery": _state(DiscoveryData, disc, clock[0])}
    renderer = Renderer()
    full: list[float] = []
    sm_only: list[float] = []
    render: list[float] = []
    gz: list[float] = []
    body = b""
    for i in range(args.repeat + 2):
        clock[0] += 15.0
        states["sweep"] = _state(SweepData, _sweep(disc, i, args.moving), clock[0])
        states["sm"] = _state(SmData, SmData([sm], True), clock[0])
        with gc_pause.paused():         # as the daemon builds and renders (Pipeline.rebuild, Renderer.render)
            t, (sections, findings) = _cpu(lambda: model.build(states))
        clock[0] += 5.0
        states["sm"] = _state(SmData, SmData([sm], True), clock[0])
        t_sm, _ = _cpu(lambda: model.build(states))
        snap = Snapshot(time=clock[0], findings=findings, sources=states, builds=BuildStats(), **sections)
        t_r, body = _cpu(lambda: renderer.render(snap))
        t_g, _ = _cpu(lambda: gzip.compress(body, compresslevel=1))
        if i >= 2:
            full.append(t)
            sm_only.append(t_sm)
            render.append(t_r)
            gz.append(t_g)
    # the SM's reports: one leaf re-read with one uplink down; then another leaf's 40 ports down at once
    leaves = [g for g, sw in disc.switches.items() if "-leaf" in (sw.name or "")]
    ev = FabricEventsData(mode="events", sm_lid=1, sm_guid=sm.guid, traps=(128,))
    events: dict[str, tuple[float, float, int]] = {}
    seq = 0
    for what, leaf, down in (("one cable", leaves[0], {max(disc.switches[leaves[0]].links)}),
                             ("40 ports", leaves[1], set(range(1, disc.switches[leaves[1]].nports + 1)))):
        reads = dict(ev.reads)
        for port in range(1, disc.switches[leaf].nports + 1):
            seq += 1
            reads[(leaf, port)] = EventRead(seq, port in disc.switches[leaf].links and port not in down, 4, "HDR")
        ev = FabricEventsData(mode="events", sm_lid=1, sm_guid=sm.guid, traps=(128,),
                              reports={128: ev.reports.get(128, 0) + len(down)}, reads=reads, seq=seq,
                              reported={**ev.reported, leaf: ev.rereads + 1}, rereads=ev.rereads + 1, latency=0.002)
        clock[0] += 1.0
        states["events"] = _state(FabricEventsData, ev, clock[0])
        before = model.event_builds
        with gc_pause.paused():
            t_e, (sections, findings) = _cpu(lambda: model.build(states))
        assert model.event_builds == before + 1, "not an event build"
        snap = Snapshot(time=clock[0], findings=findings, sources=states, builds=BuildStats(), **sections)
        t_s, state_body = _cpu(lambda: renderer.render(snap, frozenset({"state"})))
        changed = sum(1 for k in sections["fabric"].ports if not sections["fabric"].ports[k].up
                      and k[0] == leaf)
        events[what] = (t_e, t_s, changed)
    ports = sum(sw.nports for sw in disc.switches.values())
    lines = body.count(b"\n") - body.count(b"\n#") - 1
    print(f"{len(disc.switches)} switches, {ports} switch ports ({args.moving:.0%} of them moving), {lines} series "
          f"({len(body) / 1e6:.1f} MB) in the default exposition; CPU seconds, median of {args.repeat}:")
    print(f"  full build (a new sweep)      {statistics.median(full):.2f}")
    print(f"  build, only the SM poll new   {statistics.median(sm_only):.3f}")
    print(f"  render (default set)          {statistics.median(render):.2f}")
    print(f"  gzip (level 1)                {statistics.median(gz):.2f}")
    for what, (t_e, t_s, changed) in events.items():
        print(f"  event build, {what:9} down    {t_e:.3f}  (render of the state set after it {t_s:.3f}; "
              f"{changed} ports of that leaf read down, its uncabled ones included)")
    if args.profile:
        clock[0] += 15.0
        states["sweep"] = _state(SweepData, _sweep(disc, args.repeat + 2, args.moving), clock[0])
        print(_profile(lambda: model.build(states)))
        print(_profile(lambda: renderer.render(snap)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
