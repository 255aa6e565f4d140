"""fabricmon runs on the Python that GPU nodes ship: 3.10 (Ubuntu 22.04, DGX OS 6) and newer.

No 3.10 interpreter is installable here (Debian 12 ships 3.11 only), so vermin proves the minimum
version from the code itself: the package, the tests, the build scripts and the contrib wrappers
must need nothing newer than 3.10 (no datetime.UTC, typing.Self, tomllib, except*, ...)."""

from __future__ import annotations

import importlib.util
import re
import subprocess
import sys

from helpers import REPO

TARGET = "3.10"


def test_requires_python_is_3_10() -> None:
    text = (REPO / "pyproject.toml").read_text()        # no tomllib: it is 3.11+
    assert re.search(r'^requires-python = ">=3\.10"$', text, re.M), "requires-python must be >=3.10"
    assert re.search(r'"vermin[>=<0-9.]*"', text), "vermin belongs in the test extras"


def test_code_needs_nothing_newer_than_3_10() -> None:
    assert importlib.util.find_spec("vermin") is not None, \
        "vermin is missing: pip install -e '.[test]' (it proves the 3.10 minimum)"
    paths = [p for p in ("fabricmon", "tests", "bench", "prometheus", "grafana")
             if (REPO / p).exists()]
    res = subprocess.run(
        [sys.executable, "-c", "import sys; from vermin import main; sys.exit(main())", "--no-tips", "--no-parse-comments", f"-t={TARGET}-", "--violations",
         "--eval-annotations", "--backport", "dataclasses", *paths],
        cwd=REPO, capture_output=True, text=True, timeout=120)
    assert res.returncode == 0, f"code needs a Python newer than {TARGET}:\n{res.stdout}\n{res.stderr}"
    assert "Minimum required versions" in res.stdout, res.stdout
