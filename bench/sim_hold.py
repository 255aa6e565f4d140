"""Start a simulated fabric (ibsim with a running opensm) and hold it until SIGTERM or SIGINT, writing the
client environment of its subnet manager's host (`SimFabric.env`, as JSON) for the benchmarks' `--attach`:
a SuperPOD-size ibsim takes minutes to start on a 2-core machine, so several runs share one.

    python bench/sim_hold.py --net superpod --env /tmp/superpod-env.json [--dir /tmp/superpod-sim]
"""

from __future__ import annotations

import argparse
import json
import signal
import sys
import threading
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path[:0] = [str(HERE.parent), str(HERE)]

CAPTURE = HERE.parent.parent / "shared" / "captures" / "ibnetdiscover" / "director-hdr-400sw.ibsim.net"


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--net", default="superpod", help="superpod (bench/superpod_net.py), director (the 400-switch "
                                                      "capture) or an ibsim net file")
    ap.add_argument("--pods", type=int, default=13, help="pods of the superpod net (13: 26,000 switch ports)")
    ap.add_argument("--env", required=True, help="where to write the client environment (JSON)")
    ap.add_argument("--dir", default=None, help="the simulator's work directory (default: next to --env)")
    args = ap.parse_args()
    from fabricmon.sim.fabric import SimFabric
    from superpod_net import superpod_netfile
    text = (superpod_netfile(args.pods) if args.net == "superpod" else CAPTURE.read_text() if args.net == "director"
            else Path(args.net).read_text())
    work = Path(args.dir or str(Path(args.env).with_suffix("")) + "-sim")
    stop = threading.Event()
    signal.signal(signal.SIGTERM, lambda *_: stop.set())
    signal.signal(signal.SIGINT, lambda *_: stop.set())
    t0 = time.monotonic()
    with SimFabric(text, work).start(timeout=1800) as fab:
        fab.start_sm(timeout=1800)
        env = fab.env(fab.sm_host)
        Path(args.env).write_text(json.dumps(env))
        print(f"# {args.net}: ibsim and opensm up in {time.monotonic() - t0:.0f} s; environment in {args.env}",
              file=sys.stderr, flush=True)
        while not stop.wait(1.0):
            if not fab.running:
                print("# ibsim exited", file=sys.stderr)
                return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
