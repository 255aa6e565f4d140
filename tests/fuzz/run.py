"""Fuzz one target (tests/fuzz/targets.py) with atheris for a bounded time (issue 47; docs/development.md
"Fuzzing"): `python tests/fuzz/run.py TARGET [--time S] [--work DIR]`.

The corpus starts from the target's seeds, written into `<work>/<target>/corpus` (the seeds are
never committed there: they are the suite's fixtures and ../shared/captures); what libFuzzer adds
stays there between runs. A crash (an exception the decoder does not promise), a timeout (an input
taking more than --timeout s) or memory past --rss MiB writes the input as `<work>/<target>/crash-*`,
`timeout-*` or `oom-*` and exits non-zero; copy it into tests/fixtures/fuzz/<target>/ and it is a
regression test (tests/fuzz/test_fuzz_regressions.py). libFuzzer's final stats (executions, coverage)
are printed on stderr."""

from __future__ import annotations

import argparse
import hashlib
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
sys.path.insert(0, str(HERE.parent))


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("target")
    ap.add_argument("--time", type=int, default=30, help="seconds of fuzzing (libFuzzer -max_total_time)")
    ap.add_argument("--timeout", type=int, default=5, help="seconds one input may take")
    ap.add_argument("--rss", type=int, default=2048, help="MiB of memory the process may use")
    ap.add_argument("--work", default=str(HERE.parents[1] / ".fuzz"), help="corpus and artefact directory")
    a, rest = ap.parse_known_args()
    import atheris
    from targets import TARGETS
    t = TARGETS.get(a.target)
    if t is None:
        print(f"unknown target {a.target!r}: one of {', '.join(TARGETS)}", file=sys.stderr)
        return 2
    with atheris.instrument_imports(include=["fabricmon"]):
        for m in t.modules:
            __import__(m)
        t.errors            # the error classes (their modules) under instrumentation too
    work = Path(a.work) / t.name
    corpus = work / "corpus"
    corpus.mkdir(parents=True, exist_ok=True)
    for name, data in [*t.seed_inputs(), *t.found_inputs()]:
        (corpus / ("seed-" + hashlib.sha1(data).hexdigest()[:16])).write_bytes(data)
    argv = [sys.argv[0], str(corpus), f"-max_total_time={a.time}", f"-timeout={a.timeout}",
            f"-rss_limit_mb={a.rss}", "-print_final_stats=1", f"-artifact_prefix={work}/", "-max_len=65536", *rest]
    atheris.Setup(argv, t)
    atheris.Fuzz()
    return 0


if __name__ == "__main__":
    sys.exit(main())
