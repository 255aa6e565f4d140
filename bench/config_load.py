"""Config load time: the declarative config layer (fabricmon/config.py now) against the config.py of a
baseline revision (default: the hand-written loader before it, 2ed9e98), both measured in this run.

Warm: from_dict on an already parsed document, in process (the best of --repeat rounds of --n
loads). Cold: a fresh interpreter that imports the config module and loads the file (what
`fabricmon check` pays), the best of --cold runs, baseline and now taking turns. Prints a table.

    python bench/config_load.py [--baseline REV] [--n 300] [--repeat 5] [--cold 7]
"""

from __future__ import annotations

import argparse
import importlib.util
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import yaml

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from fabricmon import config as current  # noqa: E402

EXAMPLE = REPO / "fabricmon" / "deploy" / "fabricmon.yml"


def baseline_module(rev: str, tmp: Path) -> tuple[object, Path]:
    src = subprocess.run(["git", "show", f"{rev}:fabricmon/config.py"], cwd=REPO, capture_output=True, text=True,
                         check=True).stdout
    path = tmp / "config_baseline.py"
    path.write_text(src)
    spec = importlib.util.spec_from_file_location("fabricmon_config_baseline", path)
    mod = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = mod
    spec.loader.exec_module(mod)
    return mod, path


def documents() -> dict[str, dict]:
    """Documents both loaders accept: the example config less the keys only one of them knows."""
    example = yaml.safe_load(EXAMPLE.read_text())
    for k in ("unresponsive_sweeps", "unresponsive_window", "stale_sweeps"):
        example["fabric"].pop(k, None)
    ethernet = {"fabric": {"kind": "ethernet", "ethernet": {
        "switches": [f"10.0.{i // 250}.{i % 250 + 1}" for i in range(192)],
        "snmp": {"community": "public", "timeout": 1, "retries": 0}}}}
    return {"defaults ({})": {}, "example config": example, "ethernet, 192 switches": ethernet}


def warm(mod: object, doc: dict, n: int, repeat: int) -> float:
    best = float("inf")
    for _ in range(repeat):
        t0 = time.perf_counter()
        for _ in range(n):
            mod.from_dict(doc, None, False)
        best = min(best, (time.perf_counter() - t0) / n)
    return best


def _cold_code(module_path: Path | None) -> str:
    """A fresh interpreter: import the config module, load the example config."""
    if module_path is None:
        return "from fabricmon.config import load; load(%r, check_paths=False)" % str(EXAMPLE)
    return ("import importlib.util, sys; s = importlib.util.spec_from_file_location('b', %r); "
            "m = importlib.util.module_from_spec(s); sys.modules['b'] = m; s.loader.exec_module(m); "
            "import yaml; d = yaml.safe_load(open(%r)); "
            "[d['fabric'].pop(k, None) for k in ('unresponsive_sweeps', 'unresponsive_window')]; "
            "m.from_dict(d, None, False)") % (str(module_path), str(EXAMPLE))


def cold(module_path: Path, runs: int) -> tuple[float, float]:
    """Best of `runs` fresh interpreters each, baseline and now taking turns (a busy machine slows both)."""
    best = [float("inf"), float("inf")]
    for _ in range(runs):
        for i, code in enumerate((_cold_code(module_path), _cold_code(None))):
            t0 = time.perf_counter()
            subprocess.run([sys.executable, "-c", code], cwd=REPO, check=True)
            best[i] = min(best[i], time.perf_counter() - t0)
    return best[0], best[1]


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--baseline", default="2ed9e98")
    ap.add_argument("--n", type=int, default=300)
    ap.add_argument("--repeat", type=int, default=5)
    ap.add_argument("--cold", type=int, default=9)
    args = ap.parse_args()
    with tempfile.TemporaryDirectory() as d:
        base, base_path = baseline_module(args.baseline, Path(d))
        print(f"config load time: declarative layer vs config.py at {args.baseline} (best of {args.repeat} x {args.n})")
        print(f"{'case':<26} {'baseline':>12} {'now':>12} {'now/baseline':>13}")
        for name, doc in documents().items():
            b, c = warm(base, doc, args.n, args.repeat), warm(current, doc, args.n, args.repeat)
            print(f"{name:<26} {b * 1e6:>9.1f} us {c * 1e6:>9.1f} us {c / b:>12.2f}x")
        b, c = cold(base_path, args.cold)
        print(f"{'cold: import + load (ex.)':<26} {b * 1e3:>9.1f} ms {c * 1e3:>9.1f} ms {c / b:>12.2f}x")
    return 0


if __name__ == "__main__":
    sys.exit(main())
