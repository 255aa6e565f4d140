"""The fuzz targets as tests (issue 47; docs/development.md "Fuzzing"): every target (tests/fuzz/targets.py)
on its seed corpus and on every input a fuzz run found (tests/fixtures/fuzz/<target>/, each a regression
test): each returns, or raises only the error its decoder promises, within a second. `make fuzz` runs
the same targets under atheris."""

from __future__ import annotations

import sys
import time
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent))

from targets import FOUND, TARGETS  # noqa: E402

FOUND_INPUTS = [(name, fname, data) for name, t in TARGETS.items() for fname, data in t.found_inputs()]


@pytest.mark.parametrize("name", list(TARGETS))
def test_every_target_takes_its_seeds(name: str) -> None:
    t = TARGETS[name]
    seeds = list(t.seed_inputs())
    assert seeds, f"{name}: no seed input (its globs match nothing and it builds none)"
    for seed, data in seeds:
        t0 = time.monotonic()
        t(data)
        assert time.monotonic() - t0 < 5, f"{name}: seed {seed} took {time.monotonic() - t0:.1f} s"


@pytest.mark.parametrize("name, fname, data", FOUND_INPUTS, ids=[f"{n}/{f}" for n, f, _ in FOUND_INPUTS])
def test_what_fuzzing_found_stays_fixed(name: str, fname: str, data: bytes) -> None:
    t0 = time.monotonic()
    TARGETS[name](data)
    assert time.monotonic() - t0 < 1.0, f"{name}/{fname} took {time.monotonic() - t0:.2f} s"


def test_found_inputs_belong_to_targets() -> None:
    if FOUND.exists():
        assert {p.name for p in FOUND.iterdir() if p.is_dir()} <= set(TARGETS)
