"""The type checker runs with the tests (so in `make test` and CI): mypy, strict on the whole package
(`[tool.mypy]` in pyproject.toml; its `exclude` names the files other changes have open until they land),
must find nothing."""

from __future__ import annotations

import subprocess
import sys

from helpers import REPO


def test_mypy_strict_finds_nothing() -> None:
    res = subprocess.run([sys.executable, "-m", "mypy"], cwd=REPO, capture_output=True, text=True, timeout=900)
    assert res.returncode == 0, res.stdout + res.stderr
    assert res.stdout.startswith("Success: no issues found"), res.stdout


def test_the_snapshot_and_its_sections_hold_no_any() -> None:
    """mypy refuses an explicit Any in the snapshot and its section types (the override in
    pyproject.toml, which the test above enforces), and the sections are typed: Snapshot.fabric,
    .jobs and .optics name their section classes."""
    from fabricmon.model.snapshot import Snapshot
    conf = (REPO / "pyproject.toml").read_text()
    override = conf[conf.index('module = ["fabricmon.model.snapshot"'):]
    assert override.split("\n", 2)[1] == "disallow_any_explicit = true"
    for module in ("snapshot", "fabric", "jobs", "optics"):
        assert f'"fabricmon.model.{module}"' in override.split("\n", 1)[0]
    hints = Snapshot.__annotations__
    assert (hints["fabric"], hints["jobs"], hints["optics"]) == (
        "FabricSection | None", "JobsSection | None", "OpticsSection | None")
