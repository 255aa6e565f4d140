"""Bytes per switch port of the records the fabric collector keeps between sweeps (issue 40), measured
with tracemalloc on N synthetic ports of a 40-port HDR switch fabric, each record kind on its own:

- a port's counters (22 PortCounters/PortCountersExtended values as a sweep reads them): a dict
  (before) against model.compact.PortCounters (after);
- its transmit/receive rate history: a CounterHistory with two samples a counter (the one counter
  intake's store, before and after), two sweeps recorded;
- its FabricPort (the snapshot's record; the Link is the topology's, shared, not counted);
- the renderer's cache: the whole line of every series (before: 17 default families a port) against the
  label text of the port shared by its families (after).

    python bench/port_bytes.py [--ports 26000]
"""

from __future__ import annotations

import argparse
import gc
import sys
import tracemalloc
from collections.abc import Callable
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from fabricmon.model import ibspec  # noqa: E402
from fabricmon.model.compact import PortCounters  # noqa: E402
from fabricmon.model.fabric import FabricPort  # noqa: E402
from fabricmon.model.history import CounterHistory  # noqa: E402


def measure(build: Callable[[], object]) -> tuple[int, object]:
    gc.collect()
    tracemalloc.start()
    before = tracemalloc.get_traced_memory()[0]
    obj = build()
    gc.collect()
    after = tracemalloc.get_traced_memory()[0]
    tracemalloc.stop()
    return after - before, obj


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--ports", type=int, default=26000)
    n = ap.parse_args().ports
    keys = [(f"{0x0c42a10300000000 + i // 40:016x}", i % 40 + 1) for i in range(n)]

    def counters(i: int) -> dict[str, int]:
        # traffic counters large (their own int objects), errors mostly 0, as on a busy healthy fabric
        return {c.name: (10**12 + i * 7919 if c.kind == "traffic" else (i % 3 if c.kind == "congestion" else 0))
                for c in ibspec.COUNTERS if c.name != "receive_discards"}
    raw = [counters(i) for i in range(n)]
    rows = []
    b, _ = measure(lambda: [dict(r) for r in raw])
    a, _ = measure(lambda: [PortCounters.pack(r) for r in raw])
    rows.append(("counters (22 values)", b, a))

    def history() -> CounterHistory:
        h = CounterHistory(horizon=3600.0, max_samples=2)
        for t in (0.0, 15.0):
            for (g, p), r in zip(keys, raw):
                for c in ("transmit_bytes", "receive_bytes"):
                    h.record((g, p, c), t, r[c] + int(t), saturated=False)
        return h
    b, _ = measure(history)
    rows.append(("rate history (tx, rx)", b, b))
    f, _ = measure(lambda: [FabricPort(g, p, "up", None, True, degraded={"down": False, "width": False,
                                                                          "speed": False}) for g, p in keys])
    rows.append(("FabricPort (snapshot record, Link shared)", f, f))
    b, _ = measure(lambda: {(name, (g, str(p))): f'{name}{{port="{p}",switch_guid="{g}"}} 0.0\n'
                            for g, p in keys for name in [f"fabricmon_fabric_port_family_{k:02d}" for k in range(17)]})
    a, _ = measure(lambda: {(g, str(p)): f'{{port="{p}",switch_guid="{g}"}}' for g, p in keys})
    rows.append(("renderer cache (17 default families)", b, a))
    print(f"{n} switch ports; bytes per port (tracemalloc), before -> after:\n")
    print("| record | before | after |")
    print("|---|---|---|")
    for name, b, a in rows:
        print(f"| {name} | {b / n:.0f} | {a / n:.0f} |")
    print(f"| total | {sum(r[1] for r in rows) / n:.0f} | {sum(r[2] for r in rows) / n:.0f} |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
