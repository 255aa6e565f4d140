"""debian/ stays true to the project: the package's version is pyproject.toml's, its python3-* dependencies
are the runtime dependencies with the same lower bounds (nvidia-ml-py the one left to the wheel, and
README.Debian says how to get it), and every deploy file debian/rules installs exists. Building and trying
the package (`make deb`, lintian, release/deb-trial.sh on a clean Debian 12 chroot) is `make deb-trial`,
which .ci/run runs after the suite."""

from __future__ import annotations

import re

from ship_helpers import ROOT

DEBIAN = ROOT / "debian"
# PyPI name -> Debian's package of it
DEBIAN_NAMES = {"prometheus-client": "python3-prometheus-client", "psutil": "python3-psutil", "pyyaml": "python3-yaml",
                "structlog": "python3-structlog", "bcrypt": "python3-bcrypt", "cryptography": "python3-cryptography"}
FROM_THE_WHEEL = {"nvidia-ml-py"}


def pyproject() -> str:
    return (ROOT / "pyproject.toml").read_text()


def runtime_bounds() -> dict[str, str]:
    deps = re.search(r"^dependencies = \[(.*?)\]", pyproject(), re.S | re.M).group(1)
    return dict(re.findall(r'"([a-z0-9-]+)>=([0-9.]+)"', deps))


def test_the_package_version_is_pyprojects() -> None:
    version = re.search(r'^version = "([^"]+)"', pyproject(), re.M).group(1)
    first = (DEBIAN / "changelog").read_text().splitlines()[0]
    assert re.match(rf"fabricmon \({re.escape(version)}\) ", first), first


def test_depends_are_the_runtime_dependencies_with_the_same_bounds() -> None:
    control = (DEBIAN / "control").read_text()
    depends = dict(re.findall(r"(python3-[a-z0-9-]+) \(>= ([0-9.]+)\)", control.split("Package: fabricmon", 1)[1]))
    bounds = runtime_bounds()
    assert set(bounds) == set(DEBIAN_NAMES) | FROM_THE_WHEEL, bounds
    assert depends == {DEBIAN_NAMES[d]: v for d, v in bounds.items() if d in DEBIAN_NAMES}, depends
    readme = (DEBIAN / "README.Debian").read_text()
    assert all(d in readme for d in FROM_THE_WHEEL)


def test_rules_install_files_that_exist() -> None:
    rules = (DEBIAN / "rules").read_text()
    used = set(re.findall(r"\$\(DEPLOY\)/([\w./-]+)", rules))
    assert len(used) >= 12, used
    missing = sorted(p for p in used if not (ROOT / "fabricmon" / "deploy" / p).is_file())
    assert not missing, missing
    # every unit and the wrappers get the packaged program, not the venv's
    assert rules.count("s|/opt/fabricmon/bin/fabricmon|/usr/bin/fabricmon|g") == 4


def test_the_man_page_names_every_command() -> None:
    import subprocess
    import sys
    res = subprocess.run([sys.executable, "-m", "fabricmon", "--help"], capture_output=True, text=True, timeout=60)
    commands = re.search(r"\{([a-z,]+)\}", res.stdout).group(1).split(",")
    page = (DEBIAN / "fabricmon.1").read_text()
    assert commands and [c for c in commands if f"\n.B {c}\n" not in page] == []
