"""Config load time: this tree's config (fabricmon/config/__init__.py and the sections its packages declare)
against a baseline revision's (default: the hand-written loader before the declarative layer, 2ed9e98),
both measured in this run.

The baseline's whole `fabricmon` package is extracted (git archive) into a temporary directory, so a
config split over several modules is compared as a whole. Each measurement runs in a fresh interpreter
with that tree first on sys.path. Warm: from_dict on an already parsed document (the best of --repeat
rounds of --n loads). Cold: the interpreter imports the config module and loads the file (what
`fabricmon check` pays), the best of --cold runs, baseline and now taking turns. Prints a table.

    python bench/config_load.py [--baseline REV] [--n 300] [--repeat 5] [--cold 7]
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
EXAMPLE = REPO / "fabricmon" / "deploy" / "fabricmon.yml"
# keys of the example config that one of the two loaders does not know
UNSHARED = ("unresponsive_sweeps", "unresponsive_window", "stale_sweeps", "pfc_storm")

WARM = """
import json, sys, time, yaml
from fabricmon.config import from_dict
example = yaml.safe_load(open(sys.argv[1]))
[example["fabric"].pop(k, None) for k in json.loads(sys.argv[2])]
docs = {"defaults ({})": {}, "example config": example, "ethernet, 192 switches": {"fabric": {
    "kind": "ethernet", "ethernet": {"switches": [f"10.0.{i // 250}.{i % 250 + 1}" for i in range(192)],
                                     "snmp": {"community": "public", "timeout": 1, "retries": 0}}}}}
n, repeat = int(sys.argv[3]), int(sys.argv[4])
out = {}
for name, doc in docs.items():
    best = float("inf")
    for _ in range(repeat):
        t0 = time.perf_counter()
        for _ in range(n):
            from_dict(doc, None, False)
        best = min(best, (time.perf_counter() - t0) / n)
    out[name] = best
print(json.dumps(out))
"""
COLD = ("import json, sys, yaml; from fabricmon.config import from_dict; d = yaml.safe_load(open(sys.argv[1])); "
        "[d['fabric'].pop(k, None) for k in json.loads(sys.argv[2])]; from_dict(d, None, False)")


def run(tree: Path, code: str, *args: str) -> str:
    return subprocess.run([sys.executable, "-c", code, str(EXAMPLE), json.dumps(UNSHARED), *args], cwd=tree,
                          check=True, capture_output=True, text=True).stdout


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--baseline", default="2ed9e98")
    ap.add_argument("--n", type=int, default=300)
    ap.add_argument("--repeat", type=int, default=5)
    ap.add_argument("--cold", type=int, default=9)
    args = ap.parse_args()
    with tempfile.TemporaryDirectory() as d:
        base = Path(d)
        archive = subprocess.run(["git", "archive", args.baseline, "fabricmon"], cwd=REPO, check=True,
                                 capture_output=True).stdout
        subprocess.run(["tar", "-x", "-C", str(base)], input=archive, check=True)
        print(f"config load time: this tree vs fabricmon/ at {args.baseline} (best of {args.repeat} x {args.n})")
        print(f"{'case':<26} {'baseline':>12} {'now':>12} {'now/baseline':>13}")
        b = json.loads(run(base, WARM, str(args.n), str(args.repeat)))
        c = json.loads(run(REPO, WARM, str(args.n), str(args.repeat)))
        for name in b:
            print(f"{name:<26} {b[name] * 1e6:>9.1f} us {c[name] * 1e6:>9.1f} us {c[name] / b[name]:>12.2f}x")
        best = {base: float("inf"), REPO: float("inf")}
        for _ in range(args.cold):
            for tree in best:
                t0 = time.perf_counter()
                run(tree, COLD)
                best[tree] = min(best[tree], time.perf_counter() - t0)
        print(f"{'cold: import + load (ex.)':<26} {best[base] * 1e3:>9.1f} ms {best[REPO] * 1e3:>9.1f} ms "
              f"{best[REPO] / best[base]:>12.2f}x")
    return 0


if __name__ == "__main__":
    sys.exit(main())
