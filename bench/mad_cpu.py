"""The MAD engine's CPU per MAD: bare engine reads of one fabric in ibsim from each tree given, alternated,
in one run (docs/benchmarks.md, "Fifth pass: the engine's CPU per MAD").

Each read is `python -m fabricmon.sources.infiniband.mad TOPOLOGY` in its own process under umad2sim
(PYTHONPATH = the tree): one engine read of every switch (PortCountersExtended of every port, the
PortCounters aggregate, PortInfo of every cabled port). Reported per tree: the read's wall and CPU
seconds (median, min, max; CPU is the process's user + system over the read, umad2sim's receiving
thread included), the MADs it sent and the CPU microseconds per MAD, and whether every tree read the
same ports, counters and link states as the first tree (the data counters move between reads under
ibsim's own traffic, so only which ports were read, the error counters and the link states are
compared).

    python bench/mad_cpu.py --attach ENV_JSON [--net superpod|director|FILE] [--reads 5]
                            [--tree before=/tmp/base] [--tree after=.]

`--attach` takes the client environment of a running simulator (`SimFabric.env(host)` as JSON);
without it one simulator is started for the run (the SuperPOD-size fabric takes minutes to load).
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(HERE))


def one_read(tree: Path, env: dict[str, str], topology: Path) -> dict:
    env = {k: v for k, v in env.items() if k != "PYTHONUNBUFFERED"}    # its JSON is written after the read: buffered
    r = subprocess.run([sys.executable, "-m", "fabricmon.sources.infiniband.mad", str(topology)],
                       env=dict(env, PYTHONPATH=str(tree)), cwd=tree, capture_output=True, text=True, timeout=600)
    if r.returncode != 0:
        raise SystemExit(f"{tree}: bare read failed: {r.stderr[-2000:]}")
    doc = json.loads(r.stdout)
    return doc


def shape(doc: dict) -> dict:
    """What must be the same whatever the engine: per switch the ports read, their error counters
    (the data counters move under ibsim's traffic) and the link states."""
    out = {}
    for g, sw in doc["switches"].items():
        out[g] = (sorted(sw["ports"]), sorted(sw["link_up"].items()),
                  sorted((p, tuple(sorted((k, v) for k, v in c.items() if not k.endswith(("_bytes", "_packets")))))
                         for p, c in sw["ports"].items()), sw["unanswered"], sw["failed"])
    return out


def measure(env: dict[str, str], topology: Path, trees: list[tuple[str, Path]], reads: int) -> None:
    rows: dict[str, list[dict]] = {name: [] for name, _ in trees}
    first: dict | None = None
    same = {name: True for name, _ in trees}
    for _ in range(reads):
        for name, tree in trees:                # alternated: the load of each minute falls on every tree
            doc = one_read(tree, env, topology)
            rows[name].append(doc)
            s = shape(doc)
            if first is None:
                first = s
            elif s != first:
                same[name] = False
    print(f"| tree | reads | wall s (median / min / max) | CPU s (median / min / max) | MADs sent | CPU us per MAD | "
          f"same ports, error counters and link states |")
    print("|---|---|---|---|---|---|---|")
    for name, docs in rows.items():
        walls = [d["wall"] for d in docs]
        cpus = [d["cpu"] for d in docs]
        sent = statistics.median(d["engine"].get("sent", 0) for d in docs)
        cpu = statistics.median(cpus)
        print(f"| {name} | {len(docs)} | {statistics.median(walls):.2f} / {min(walls):.2f} / {max(walls):.2f} | "
              f"{cpu:.2f} / {min(cpus):.2f} / {max(cpus):.2f} | {sent:.0f} | {cpu / sent * 1e6:.1f} | "
              f"{'yes' if same[name] else 'NO'} |")


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--net", default="superpod", help="superpod (bench/superpod_net.py), director (the 400-switch "
                                                      "capture) or an ibsim net file (when no --attach)")
    ap.add_argument("--attach", metavar="ENV_JSON", help="a running simulator's client environment (JSON)")
    ap.add_argument("--reads", type=int, default=5, help="reads per tree")
    ap.add_argument("--tree", action="append", default=[], metavar="LABEL=DIR")
    args = ap.parse_args()
    trees = [(n, Path(d).resolve()) for n, d in (t.split("=", 1) for t in args.tree)] or [("after", ROOT)]
    with tempfile.TemporaryDirectory() as tmp:
        topology = Path(tmp) / "topology.txt"

        def run(env: dict[str, str]) -> None:
            t0 = time.monotonic()
            r = subprocess.run(["ibnetdiscover"], env=env, capture_output=True, text=True, timeout=900, check=True)
            topology.write_text(r.stdout)
            print(f"# ibnetdiscover {time.monotonic() - t0:.0f} s", file=sys.stderr)
            measure(env, topology, trees, args.reads)

        if args.attach:
            run(json.loads(Path(args.attach).read_text()))
            return 0
        from fabricmon.sim.fabric import SimFabric
        from daemon_scale import CAPTURE
        from superpod_net import superpod_netfile
        text = (superpod_netfile() if args.net == "superpod" else CAPTURE.read_text() if args.net == "director"
                else Path(args.net).read_text())
        with SimFabric(text, Path(tmp) / "sim").start(timeout=1800) as fab:
            fab.start_sm(timeout=1800)
            run(fab.env(fab.sm_host))
    return 0


if __name__ == "__main__":
    sys.exit(main())
