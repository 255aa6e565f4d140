"""A golden exposition (node_exporter's e2e-output.txt, in our words): for every bundle under
tests/fixtures/bundles, the complete `fabricmon once --replay` output is compared with
tests/golden/<bundle>.prom, so every change to a metric name, label or value shows in review.

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
from helpers import FIXTURES, REPO

BUNDLES = sorted(p for p in (FIXTURES / "bundles").iterdir() if (p / "bundle.json").is_file())
GOLDEN = REPO / "tests" / "golden"
UPDATE = os.environ.get("FABRICMON_UPDATE_GOLDEN") == "1"

# Values that differ between runs of the same bundle: how long things took, and when.
_VOLATILE = re.compile(r"^(fabricmon_source_duration_seconds|fabricmon_source_last_success_timestamp_seconds"
                       r"|fabricmon_snapshot_build_duration_seconds_\w+|fabricmon_snapshot_timestamp_seconds)"
                       r"(\{[^}]*\})? .*$", re.M)


def normalise(text: str) -> str:
    text = _VOLATILE.sub(lambda m: f"{m.group(1)}{m.group(2) or ''} <volatile>", text)
    text = re.sub(r'python_version="[^"]*"', 'python_version="<python>"', text)
    text = re.sub(r'le="[^"]*"\} <volatile>', 'le="<le>"} <volatile>', text)
    return text


@pytest.mark.parametrize("bundle", BUNDLES, ids=[b.name for b in BUNDLES])
def test_once_output_matches_the_golden_file(bundle: Path) -> None:
    res = subprocess.run([sys.executable, "-m", "fabricmon", "once", "--replay", str(bundle)],
                         capture_output=True, text=True, timeout=60, cwd=REPO)
    assert res.returncode == 0, res.stderr
    promtool = shutil.which("promtool")
    assert promtool, "promtool (Debian package prometheus) is needed: make deps installs it"
    lint = subprocess.run([promtool, "check", "metrics"], input=res.stdout, capture_output=True, text=True)
    assert lint.returncode == 0, lint.stdout + lint.stderr
    got = normalise(res.stdout)
    golden = GOLDEN / f"{bundle.name}.prom"
    if UPDATE:
        golden.write_text(got)
    assert golden.is_file(), f"{golden} missing: run `make golden`"
    assert got == golden.read_text(), f"exposition of {bundle.name} changed: review the diff, then `make golden`"


def test_every_bundle_has_a_golden_file_and_no_stale_ones() -> None:
    assert {p.stem for p in GOLDEN.glob("*.prom")} == {b.name for b in BUNDLES}
