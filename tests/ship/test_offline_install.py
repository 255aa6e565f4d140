"""The air-gapped install (docs/install-offline.md): `make offline` builds one archive from a clean copy
of the source, with fabricmon's wheel and every runtime dependency's wheel for CPython 3.10-3.13 on x86_64
and aarch64; its install.sh puts fabricmon into a fresh venv with no package index reachable (pip's
config ignored, PIP_NO_INDEX, and PIP_INDEX_URL and the proxies on a closed local port), and that venv's
`fabricmon check` runs. Built once per module (pip download, about a minute; pip's cache makes a rerun faster)."""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
import tarfile
from pathlib import Path

import pytest

from helpers import free_port, unavailable
from ship_helpers import ROOT

SOURCE = ("pyproject.toml", "README.md", "LICENSE", "Makefile")
PYTHONS = ("3.10", "3.11", "3.12", "3.13")
ARCHES = ("x86_64", "aarch64")
RUNTIME = ("prometheus-client", "psutil", "pyyaml", "structlog", "nvidia-ml-py", "bcrypt", "cryptography",
           "cffi", "pycparser")


def run(argv: list, **kw) -> subprocess.CompletedProcess:
    res = subprocess.run([str(a) for a in argv], capture_output=True, text=True, timeout=900, **kw)
    assert res.returncode == 0, f"{argv}:\n{res.stdout[-3000:]}\n{res.stderr[-3000:]}"
    return res


def no_index_env(home: Path) -> dict[str, str]:
    """This environment less every pip setting, with any index or proxy access failing at once."""
    dead = f"http://127.0.0.1:{free_port()}"
    env = {k: v for k, v in os.environ.items()
           if not k.upper().startswith(("PIP_", "HTTP_PROXY", "HTTPS_PROXY", "ALL_PROXY", "NO_PROXY"))}
    env.update(PIP_CONFIG_FILE=os.devnull, PIP_NO_INDEX="1", PIP_INDEX_URL=f"{dead}/simple", PIP_NO_CACHE_DIR="1",
               PIP_RETRIES="0", PIP_DEFAULT_TIMEOUT="5", http_proxy=dead, https_proxy=dead, HTTP_PROXY=dead,
               HTTPS_PROXY=dead, HOME=str(home), XDG_CACHE_HOME=str(home / ".cache"))
    return env


@pytest.fixture(scope="module")
def archive(tmp_path_factory) -> Path:
    """`make offline` in a clean copy of the source (what a fresh clone has), with this test run's venv."""
    src = tmp_path_factory.mktemp("src")
    for name in SOURCE:
        shutil.copy(ROOT / name, src / name)
    for d in ("fabricmon", "release"):
        shutil.copytree(ROOT / d, src / d, ignore=shutil.ignore_patterns("__pycache__"))
    make = shutil.which("make") or unavailable("make (Debian package make) is needed")
    venv = Path(sys.prefix)
    if not (venv / "bin" / "python").exists():
        unavailable(f"the tests run outside a venv ({sys.prefix}): make offline needs one")
    res = subprocess.run([make, "-C", str(src), "offline", f"VENV={venv}"], capture_output=True, text=True,
                         timeout=900)
    if res.returncode != 0 and re.search(r"(?i)connection|resolve|network is unreachable", res.stderr):
        unavailable(f"make offline needs a package index (pip download): {res.stderr.strip().splitlines()[-1]}")
    assert res.returncode == 0, res.stdout[-3000:] + res.stderr[-3000:]
    [arc] = (src / "dist").glob("fabricmon-*-offline.tar.gz")
    assert f"dist/{arc.name}" in res.stdout, res.stdout                # it says where the archive is
    return arc


@pytest.fixture(scope="module")
def unpacked(archive: Path, tmp_path_factory) -> Path:
    dest = tmp_path_factory.mktemp("unpacked")
    with tarfile.open(archive) as tar:
        tar.extractall(dest, filter="data")
    [top] = dest.iterdir()
    assert top.name == archive.name.removesuffix(".tar.gz")
    return top


def test_the_archive_holds_every_targets_wheels(unpacked: Path) -> None:
    names = sorted(p.name for p in (unpacked / "wheels").glob("*.whl"))
    # the distribution name normalised (PyYAML, nvidia_ml_py), the tags as they are
    lower = [n.split("-", 1)[0].lower().replace("_", "-") + "-" + n.split("-", 1)[1] for n in names]
    for dep in RUNTIME:
        assert any(n.startswith(dep + "-") for n in lower), (dep, names)
    assert any(n.startswith("fabricmon-") and n.endswith("-py3-none-any.whl") for n in names), names
    # the compiled ones, per target: a CPython-version wheel (pyyaml, cffi) or an abi3 one (cryptography, bcrypt)
    for py in PYTHONS:
        cp = "cp" + py.replace(".", "")
        for arch in ARCHES:
            for dep in ("pyyaml", "cffi"):
                assert any(n.startswith(dep + "-") and f"-{cp}-{cp}-" in n and arch in n for n in lower), (dep, cp, arch)
            for dep in ("cryptography", "bcrypt", "psutil"):
                assert any(n.startswith(dep + "-") and "abi3" in n and arch in n for n in lower), (dep, arch)
    # what only Python 3.10 needs (`typing-extensions; python_version < "3.11"`, of structlog and cryptography),
    # which pip download run on a newer Python leaves out: the builder adds it, and says so per target
    manifest = dict(ln.split(": ", 1) for ln in (unpacked / "MANIFEST").read_text().splitlines()[1:])
    assert set(manifest) == {f"cp{py.replace('.', '')}-manylinux-{a}" for py in PYTHONS for a in ARCHES}
    assert "typing_extensions-" in manifest["cp310-manylinux-x86_64"]
    assert "typing_extensions-" in manifest["cp310-manylinux-aarch64"]
    sha = shutil.which("sha256sum") or unavailable("sha256sum (coreutils) is needed")
    run([sha, "--quiet", "-c", "SHA256SUMS"], cwd=unpacked)


@pytest.mark.parametrize("py", PYTHONS)
def test_pip_resolves_every_target_from_the_archive_alone(unpacked: Path, tmp_path: Path, py: str) -> None:
    """pip's own resolver, told each target's Python and platform, finds everything in wheels/ alone."""
    cp = "cp" + py.replace(".", "")
    for arch in ARCHES:
        report = tmp_path / f"{cp}-{arch}.json"
        run([sys.executable, "-m", "pip", "install", "--dry-run", "--quiet", "--ignore-installed", "--no-index",
             "--find-links", unpacked / "wheels", "--only-binary=:all:", "--python-version", py, "--implementation",
             "cp", "--abi", cp, "--platform", f"manylinux_2_28_{arch}", "--platform", f"manylinux2014_{arch}",
             "--target", tmp_path / "t", "--report", report, "fabricmon"], env=no_index_env(tmp_path))
        got = {i["metadata"]["name"].lower().replace("_", "-") for i in json.loads(report.read_text())["install"]}
        assert {"fabricmon", *RUNTIME} <= got, (py, arch, sorted(got))


def test_install_sh_installs_with_no_index_reachable(unpacked: Path, tmp_path: Path) -> None:
    env = no_index_env(tmp_path)
    python = "/usr/bin/python3" if os.path.exists("/usr/bin/python3") else shutil.which("python3")
    # the environment has teeth: an install that needs the index fails
    probe = subprocess.run([sys.executable, "-m", "pip", "download", "--no-deps", "-d", tmp_path / "probe",
                            "prometheus-client"], capture_output=True, text=True, timeout=120, env=env)
    assert probe.returncode != 0, probe.stdout
    venv = tmp_path / "opt" / "fabricmon"
    res = run(["sh", unpacked / "install.sh", venv], env={**env, "PYTHON": python})
    assert "fabricmon " in res.stdout and f"installed in {venv}" in res.stdout, res.stdout
    listed = run([venv / "bin" / "python", "-m", "pip", "list", "--format=json"], env=env)
    got = {p["name"].lower().replace("_", "-") for p in json.loads(listed.stdout)}
    assert {"fabricmon", *RUNTIME} <= got, sorted(got)
    run([venv / "bin" / "python", "-m", "pip", "check"], env=env)
    # the installed program works: `check` answers with a Nagios status and exit code, and imports the
    # compiled dependencies it needs for basic_auth and SNMPv3
    chk = subprocess.run([venv / "bin" / "fabricmon", "check", "--no-state"], capture_output=True, text=True,
                         timeout=120, env=env, cwd=tmp_path)
    assert chk.returncode in (0, 1, 2, 3), chk.stdout + chk.stderr
    assert re.match(r"FABRICMON (OK|WARNING|CRITICAL|UNKNOWN)\b", chk.stdout), chk.stdout + chk.stderr
    assert "Traceback" not in chk.stderr, chk.stderr
    run([venv / "bin" / "python", "-c", "import bcrypt, yaml, psutil, pynvml, structlog, prometheus_client; "
         "from cryptography.hazmat.primitives.ciphers import Cipher"], env=env)
    # run again: an upgrade in place from the same archive changes nothing and still needs no index
    again = run(["sh", unpacked / "install.sh", venv], env={**env, "PYTHON": python})
    assert f"installed in {venv}" in again.stdout
