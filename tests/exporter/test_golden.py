"""A golden exposition (node_exporter's e2e-output.txt, in our words): for every bundle under
tests/fixtures/bundles, the complete `fabricmon once --replay` output is compared with
tests/golden/<bundle>.prom, so every change to a metric name, label or value shows in review.
The fabric collector has one per fabric kind: a replayed InfiniBand bundle (tests/fixtures/fabric/fat-tree)
and a replayed Ethernet one (tests/fixtures/fabric/ethernet), two sweeps a minute apart on a fixed clock,
compared with tests/golden/fabric-<kind>.prom.

Regenerate after an intended change with `make golden`.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from helpers import FIXTURES, REPO, promtool
from prometheus_client.parser import text_string_to_metric_families

BUNDLES = sorted(p for p in (FIXTURES / "bundles").iterdir() if (p / "bundle.json").is_file())
GOLDEN = REPO / "tests" / "golden"
UPDATE = os.environ.get("FABRICMON_UPDATE_GOLDEN") == "1"

# Values that differ between runs of the same bundle: how long things took, and when.
_VOLATILE = re.compile(r"^(fabricmon_source_duration_seconds|fabricmon_source_last_success_timestamp_seconds"
                       r"|fabricmon_snapshot_build_duration_seconds_\w+|fabricmon_snapshot_timestamp_seconds)"
                       r"(\{[^}]*\})? .*$", re.M)
# ... and on a fixed wall clock (the fabric goldens), only how long things took
_DURATIONS = re.compile(r"^(fabricmon_source_duration_seconds|fabricmon_fabric_sweep_duration_seconds"
                        r"|fabricmon_snapshot_build_duration_seconds_\w+)(\{[^}]*\})? .*$", re.M)


def normalise(text: str, volatile: re.Pattern = _VOLATILE) -> str:
    text = volatile.sub(lambda m: f"{m.group(1)}{m.group(2) or ''} <volatile>", text)
    text = re.sub(r'python_version="[^"]*"', 'python_version="<python>"', text)
    text = re.sub(r'le="[^"]*"\} <volatile>', 'le="<le>"} <volatile>', text)
    return text


@pytest.mark.parametrize("bundle", BUNDLES, ids=[b.name for b in BUNDLES])
def test_once_output_matches_the_golden_file(bundle: Path) -> None:
    res = subprocess.run([sys.executable, "-m", "fabricmon", "once", "--replay", str(bundle)],
                         capture_output=True, text=True, timeout=60, cwd=REPO)
    assert res.returncode == 0, res.stderr
    lint = subprocess.run([promtool(), "check", "metrics"], input=res.stdout, capture_output=True, text=True)
    assert lint.returncode == 0, lint.stdout + lint.stderr
    got = normalise(res.stdout)
    golden = GOLDEN / f"{bundle.name}.prom"
    if UPDATE:
        golden.write_text(got)
    assert golden.is_file(), f"{golden} missing: run `make golden`"
    assert got == golden.read_text(), f"exposition of {bundle.name} changed: review the diff, then `make golden`"


# the fabric collector's golden bundles, one per fabric kind: tests/golden/fabric-<kind>.prom
FABRIC_BUNDLES = {"infiniband": FIXTURES / "fabric" / "fat-tree", "ethernet": FIXTURES / "fabric" / "ethernet"}
FABRIC_T0 = 1_800_000_000.0     # the fixed wall clock of the first sweep (2027-01-15T08:00:00Z)


class FixedClock:
    """The wall clock the fabric pipeline reads: stands still until the test moves it."""

    def __init__(self, t: float) -> None:
        self.t = t

    def __call__(self) -> float:
        return self.t


def fabric_exposition(bundle: Path, sets: frozenset[str] | None = None) -> str:
    """`fabricmon fabric once --replay BUNDLE --sweeps 2 --interval 60` on a fixed clock: discovery and
    a sweep at FABRIC_T0, a second sweep 60 s later, the exposition of the last snapshot: of every
    counter set (the golden file: a family moved out of the default set stays in it), or of `sets`
    (test_counter_sets.py compares the default one with it)."""
    from fabricmon.exporter import counter_sets
    from fabricmon.config import load
    from fabricmon.exporter.render import Renderer
    from fabricmon.host.bundle import ReplayIO
    from fabricmon.pipeline.fabric import fabric_pipeline
    cfg = load(str(bundle / "config.yml"), check_paths=False)
    clock = FixedClock(FABRIC_T0)
    pipe = fabric_pipeline(cfg, ReplayIO(bundle), clock=clock)
    try:
        pipe.collect()
        clock.t += 60.0
        snap = pipe.collect(sorted({"sweep", *pipe.stale()}))        # as cli._fabric_sweeps
    finally:
        pipe.close()
    return Renderer().render(snap, counter_sets.parse(["all"]) if sets is None else sets).decode()


@pytest.mark.parametrize("kind", sorted(FABRIC_BUNDLES))
def test_fabric_exposition_matches_the_golden_file(kind: str) -> None:
    body = fabric_exposition(FABRIC_BUNDLES[kind])
    promtool = shutil.which("promtool")
    assert promtool, "promtool (Debian package prometheus) is needed: make deps installs it"
    lint = subprocess.run([promtool, "check", "metrics"], input=body, capture_output=True, text=True)
    assert lint.returncode == 0, lint.stdout + lint.stderr
    # the fixed clock is in the exposition: the second sweep's time, not the time of the run
    stamps = {s.value for fam in text_string_to_metric_families(body) for s in fam.samples
              if s.name == "fabricmon_snapshot_timestamp_seconds"}
    assert stamps == {FABRIC_T0 + 60.0}
    got = normalise(body, _DURATIONS)
    golden = GOLDEN / f"fabric-{kind}.prom"
    if UPDATE:
        golden.write_text(got)
    assert golden.is_file(), f"{golden} missing: run `make golden`"
    assert got == golden.read_text(), f"fabric exposition ({kind}) changed: review the diff, then `make golden`"


def test_every_bundle_has_a_golden_file_and_no_stale_ones() -> None:
    assert {p.stem for p in GOLDEN.glob("*.prom")} == \
        {b.name for b in BUNDLES} | {f"fabric-{k}" for k in FABRIC_BUNDLES}
