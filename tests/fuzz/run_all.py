"""`make fuzz`: every target of tests/fuzz/targets.py fuzzed for a bounded time, one process each
(tests/fuzz/run.py), and a table of what each reached: executions, executions per second, coverage
(libFuzzer's `cov`: edges of the instrumented fabricmon modules) and features (`ft`), corpus size, and
the finding if any. Exits 1 when a target found something (a crash, a timeout, memory past the limit);
the artefact is under .fuzz/<target>/. `--only a,b` runs some targets; `--time S` each for S seconds."""

from __future__ import annotations

import argparse
import re
import subprocess
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
sys.path.insert(0, str(HERE.parent))

_COV = re.compile(r"^#(\d+)\s+\w+\s+cov: (\d+) ft: (\d+) corp: (\d+)", re.M)
_STAT = re.compile(r"^stat::(\w+):\s+(\d+)", re.M)
_ART = re.compile(r"Test unit written to (\S+)")


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--time", type=int, default=30)
    ap.add_argument("--only", default="")
    ap.add_argument("--work", default=str(HERE.parents[1] / ".fuzz"))
    a = ap.parse_args()
    from targets import TARGETS
    names = [n for n in TARGETS if not a.only or n in a.only.split(",")]
    rows, bad = [], 0
    for name in names:
        t0 = time.monotonic()
        r = subprocess.run([sys.executable, str(HERE / "run.py"), name, "--time", str(a.time), "--work", a.work],
                           capture_output=True, text=True, timeout=a.time * 3 + 120)
        took = time.monotonic() - t0
        err = r.stderr
        stats = {k: int(v) for k, v in _STAT.findall(err)}
        covs = _COV.findall(err)
        cov, ft, corp = (covs[-1][1], covs[-1][2], covs[-1][3]) if covs else ("?", "?", "?")
        art = _ART.search(err)
        found = "" if r.returncode == 0 else (art.group(1) if art else f"exit {r.returncode}")
        if found:
            bad += 1
            tail = "\n".join(err.splitlines()[-40:])
            print(f"--- {name}: {found}\n{tail}\n", file=sys.stderr)
        rows.append((name, stats.get("number_of_executed_units", 0), stats.get("average_exec_per_sec", 0), cov, ft,
                     corp, stats.get("peak_rss_mb", 0), f"{took:.0f}", found or "none"))
    head = ("target", "executions", "exec/s", "cov", "ft", "corpus", "peak MiB", "s", "finding")
    widths = [max(len(str(x)) for x in col) for col in zip(head, *rows)]
    for row in (head, *rows):
        print("  ".join(str(x).ljust(w) for x, w in zip(row, widths)))
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
