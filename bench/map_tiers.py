"""The fabric map of a SuperPOD-size three-tier fabric: server render time of the map page (layout
and SVG, median of N) against the real 400-switch director capture in the same run (when
../shared/captures is there), both built from records by the real FabricModel (tests/fabric_snap.py,
no simulator), with a SHARP Aggregation Node in every switch of the generated one.

    python bench/map_tiers.py [--repeat 5]
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "tests"))

from fabric_snap import fabric_snapshot  # noqa: E402

from fabricmon.pages import fabric_map  # noqa: E402
from fabricmon.pages.fabric_layout import layout  # noqa: E402
from fabricmon.sim.fabric import three_tier_netfile  # noqa: E402

DIRECTOR = REPO.parent / "shared" / "captures" / "ibnetdiscover" / "director-hdr-400sw.ibsim.net"


def fabrics() -> list[tuple[str, str]]:
    out = [("three-tier 21 pods x (16 leaves, 14 spines), 28 cores, SHARP", three_tier_netfile(
        pods=21, leaves_per_pod=16, spines_per_pod=14, cores_per_spine=2, hosts_per_leaf=8, aggregation_nodes=True))]
    if DIRECTOR.exists():
        out.append(("real director HDR fabric (capture)", DIRECTOR.read_text()))
    return out


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--repeat", type=int, default=5)
    args = ap.parse_args()
    print("| fabric | switches | rows | groups | cables | map page ms (median) | KiB |")
    print("|---|---|---|---|---|---|---|")
    for name, net in fabrics():
        snap = fabric_snapshot(net, sweeps=2)
        times, body = [], ""
        for _ in range(args.repeat):
            t = time.perf_counter()
            lay = layout(snap.fabric, snap.findings)
            body = fabric_map.svg(lay, snap.fabric)
            times.append(time.perf_counter() - t)
        print(f"| {name} | {len(snap.fabric.switches)} | {len(lay.rows)} | {len(lay.groups)} | "
              f"{len(lay.links) + sum(len(b.links) for b in lay.bundles)} | {statistics.median(times) * 1000:.0f} | "
              f"{len(body) / 1024:.0f} |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
