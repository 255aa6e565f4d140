"""Build the offline (air-gapped) archive: fabricmon's wheel and the wheel of every runtime dependency, for
every supported Python (3.10-3.13, CPython) on x86_64 and aarch64 manylinux, with an install script, in one
tar.gz. A node with no package index installs it with `pip install --no-index --find-links wheels/`.

    python packaging/offline.py dist/fabricmon-0.1.0-py3-none-any.whl      (what `make offline` runs)

`pip download --only-binary=:all: --python-version X --platform P` picks the wheels for each target, but
pip evaluates environment markers against the Python that runs it, not the target's: a dependency that only
an older Python needs (`typing-extensions; python_version < "3.11"`, of structlog and cryptography) would
be missing for 3.10. So the closure is checked here for each target, with the markers evaluated for that
target and each wheel's tags matched against it, and whatever is missing is downloaded for it; the build
fails, naming target and requirement, when that does not close it. The archive is checked and written only
when every target is complete.

Development tool (not shipped): it needs pip and `packaging` (pip's own copy where none is installed).
"""

from __future__ import annotations

import argparse
import email.parser
import hashlib
import os
import re
import shutil
import subprocess
import sys
import tarfile
import tempfile
import zipfile
from dataclasses import dataclass
from pathlib import Path

try:
    from packaging.markers import Marker
    from packaging.requirements import Requirement
    from packaging.tags import Tag, compatible_tags, cpython_tags
    from packaging.utils import canonicalize_name, parse_wheel_filename
except ImportError:                       # a bare venv: pip's vendored copy is the same library
    from pip._vendor.packaging.markers import Marker  # type: ignore[no-redef]
    from pip._vendor.packaging.requirements import Requirement  # type: ignore[no-redef]
    from pip._vendor.packaging.tags import Tag, compatible_tags, cpython_tags  # type: ignore[no-redef]
    from pip._vendor.packaging.utils import canonicalize_name, parse_wheel_filename  # type: ignore[no-redef]

PYTHONS = ("3.10", "3.11", "3.12", "3.13")
ARCHES = ("x86_64", "aarch64")
# glibc 2.17 (manylinux2014) up to 2.28 (RHEL 8, Debian 10, Ubuntu 20.04 and every newer one): pip prefers
# the first listed, so a wheel that runs on the oldest glibc is taken where the project publishes one
GLIBCS = ("2_17", "2_28")
ROUNDS = 4                                 # closure rounds per target before giving up
DOWNLOAD_TIMEOUT = 900.0


class BuildError(Exception):
    """The archive cannot be built complete: one line naming what is missing."""


@dataclass(frozen=True)
class Target:
    python: str                            # "3.10"
    arch: str                              # "x86_64"

    @property
    def name(self) -> str:
        return f"cp{self.python.replace('.', '')}-manylinux-{self.arch}"

    @property
    def platforms(self) -> list[str]:
        out = []
        for g in GLIBCS:
            out.append(f"manylinux_{g}_{self.arch}")
            if g == "2_17":
                out.append(f"manylinux2014_{self.arch}")
        return out

    def tags(self) -> set[Tag]:
        """Every wheel tag a CPython of this version on this platform installs (all glibcs up to the newest listed)."""
        major, minor = (int(x) for x in self.python.split("."))
        plats = [f"manylinux_2_{m}_{self.arch}" for m in range(28, 4, -1)]
        plats += [f"manylinux2014_{self.arch}", f"manylinux2010_{self.arch}", f"manylinux1_{self.arch}",
                  f"linux_{self.arch}"]
        tags = set(cpython_tags((major, minor), platforms=plats))
        tags |= set(compatible_tags((major, minor), f"cp{major}{minor}", plats))
        return tags

    def environment(self) -> dict[str, str]:
        """The marker environment of this target (PEP 508)."""
        return {"python_version": self.python, "python_full_version": f"{self.python}.0",
                "implementation_name": "cpython", "platform_python_implementation": "CPython",
                "sys_platform": "linux", "platform_system": "Linux", "os_name": "posix",
                "platform_machine": self.arch, "extra": ""}


TARGETS = tuple(Target(py, arch) for py in PYTHONS for arch in ARCHES)


@dataclass(frozen=True)
class Wheel:
    path: Path
    name: str                              # canonical
    version: str
    tags: frozenset[Tag]

    def requires(self) -> list[Requirement]:
        with zipfile.ZipFile(self.path) as z:
            meta = next(n for n in z.namelist() if n.endswith(".dist-info/METADATA") and n.count("/") == 1)
            msg = email.parser.Parser().parsestr(z.read(meta).decode("utf-8"))
        return [Requirement(r) for r in msg.get_all("Requires-Dist") or []]


def read_wheel(path: Path) -> Wheel:
    name, version, _build, tags = parse_wheel_filename(path.name)
    return Wheel(path, canonicalize_name(name), str(version), frozenset(tags))


def wheels_in(d: Path) -> list[Wheel]:
    return [read_wheel(p) for p in sorted(d.glob("*.whl"))]


def missing_for(target: Target, root: Wheel, wheels: list[Wheel]) -> list[Requirement]:
    """The requirements of `root`'s closure that no wheel in `wheels` satisfies for `target`
    (markers evaluated for the target; a wheel counts only when one of its tags installs there)."""
    env = target.environment()
    ok_tags = target.tags()
    seen: set[str] = set()
    todo = list(root.requires())
    missing: list[Requirement] = []
    while todo:
        req = todo.pop()
        if req.marker is not None and not Marker(str(req.marker)).evaluate(env):
            continue
        name = canonicalize_name(req.name)
        if name in seen:
            continue
        seen.add(name)
        fits = [w for w in wheels if w.name == name and w.tags & ok_tags
                and req.specifier.contains(w.version, prereleases=True)]
        if not fits:
            missing.append(req)
            continue
        best = max(fits, key=lambda w: tuple(int(x) if x.isdigit() else 0 for x in re.split(r"[.+-]", w.version)))
        todo.extend(best.requires())
    return missing


def pip_download(target: Target, requirements: list[str], dest: Path) -> None:
    argv = [sys.executable, "-m", "pip", "download", "--disable-pip-version-check", "--quiet",
            "--only-binary=:all:", "--implementation", "cp", "--python-version", target.python,
            "--abi", f"cp{target.python.replace('.', '')}", "--abi", "abi3", "--abi", "none",
            *(a for p in target.platforms for a in ("--platform", p)), "--dest", str(dest), *requirements]
    res = subprocess.run(argv, capture_output=True, text=True, timeout=DOWNLOAD_TIMEOUT)
    if res.returncode != 0:
        tail = (res.stderr.strip().splitlines() or ["(no output)"])[-1]
        raise BuildError(f"pip download for {target.name} failed: {tail}")


def collect(root: Wheel, wheels_dir: Path) -> dict[str, list[str]]:
    """Download every target's closure into wheels_dir; {target name: the wheel files it installs}."""
    base = [str(r) for r in root.requires() if r.marker is None or "extra" not in str(r.marker)]
    per_target: dict[str, list[str]] = {}
    for target in TARGETS:
        pip_download(target, base, wheels_dir)
        for _ in range(ROUNDS):
            missing = missing_for(target, root, wheels_in(wheels_dir))
            if not missing:
                break
            pip_download(target, [f"{m.name}{m.specifier}" for m in missing], wheels_dir)
        else:
            missing = missing_for(target, root, wheels_in(wheels_dir))
            if missing:
                raise BuildError(f"{target.name}: no wheel for {', '.join(str(m) for m in missing)}")
        ok = target.tags()
        per_target[target.name] = sorted(w.path.name for w in wheels_in(wheels_dir) if w.tags & ok)
    return per_target


def min_glibc(wheel_names: list[str]) -> str:
    """The newest glibc any of these wheels needs (each wheel needs its oldest manylinux tag's)."""
    need = (2, 5)
    for n in wheel_names:
        _, _, _, tags = parse_wheel_filename(n)
        versions = []
        for t in tags:
            m = re.match(r"manylinux_(\d+)_(\d+)_", t.platform)
            if m:
                versions.append((int(m.group(1)), int(m.group(2))))
            elif t.platform.startswith("manylinux2014_"):
                versions.append((2, 17))
        if versions:
            need = max(need, min(versions))
    return f"{need[0]}.{need[1]}"


INSTALL_SH = """#!/bin/sh
# Install fabricmon {version} from the wheels beside this script, with no package index:
#   ./install.sh [VENV]            (default /opt/fabricmon; run it again to upgrade in place)
# then, as root: VENV/bin/fabricmon install   (README, "Install"; docs/install-offline.md)
# PYTHON picks the interpreter (default /usr/bin/python3: a pyenv or conda Python under /home or /root is
# hidden from the service by its sandbox). Needs python3-venv on Debian and Ubuntu.
set -eu
here=$(cd "$(dirname "$0")" && pwd)
venv=${{1:-/opt/fabricmon}}
python=${{PYTHON:-/usr/bin/python3}}
if ! "$python" -c 'import sys; sys.exit(sys.version_info < (3, 10))' 2>/dev/null; then
    echo "install.sh: $python is not Python 3.10 or newer (set PYTHON=/path/to/python3)" >&2
    exit 2
fi
[ -x "$venv/bin/python" ] || "$python" -m venv "$venv"
PIP_DISABLE_PIP_VERSION_CHECK=1 "$venv/bin/python" -m pip install --quiet --no-index \\
    --find-links "$here/wheels" --upgrade fabricmon=={version}
"$venv/bin/fabricmon" --version
echo "installed in $venv; next, as root: $venv/bin/fabricmon install"
"""

README = """fabricmon {version}: offline install (no package index needed)

wheels/      fabricmon and every runtime dependency, for CPython {pythons} on
             {arches} Linux with glibc {glibc} or newer (manylinux)
install.sh   makes a venv (default /opt/fabricmon) and installs from wheels/ only
MANIFEST     which wheels each target installs; SHA256SUMS: every file's checksum

    tar xzf fabricmon-{version}-offline.tar.gz
    cd fabricmon-{version}-offline && sha256sum -c SHA256SUMS && ./install.sh /opt/fabricmon
    /opt/fabricmon/bin/fabricmon install          # as root: user, udev rule, config, unit

By hand, with the distribution's Python (a pyenv or conda one is hidden from the service by its sandbox):
    /usr/bin/python3 -m venv /opt/fabricmon && /opt/fabricmon/bin/pip install --no-index --find-links wheels fabricmon
More: docs/install-offline.md in the source.
"""


def build(wheel: Path, out_dir: Path, workdir: Path) -> Path:
    root = read_wheel(wheel)
    version = root.version
    stem = f"fabricmon-{version}-offline"
    tree = workdir / stem
    wheels_dir = tree / "wheels"
    wheels_dir.mkdir(parents=True)
    shutil.copy2(wheel, wheels_dir / wheel.name)
    per_target = collect(root, wheels_dir)
    names = sorted({n for ws in per_target.values() for n in ws})
    stray = [p.name for p in wheels_dir.iterdir() if p.name not in names]
    for n in stray:                        # a wheel no target installs (a platform tag none of ours takes)
        (wheels_dir / n).unlink()
    glibc = max((min_glibc(ws) for ws in per_target.values()), key=lambda v: tuple(int(x) for x in v.split(".")))
    (tree / "install.sh").write_text(INSTALL_SH.format(version=version))
    (tree / "install.sh").chmod(0o755)
    (tree / "README").write_text(README.format(version=version, pythons=", ".join(PYTHONS),
                                                arches=" and ".join(ARCHES), glibc=glibc))
    manifest = [f"# fabricmon {version} offline archive: {len(names)} wheels; per target (CPython, manylinux)"]
    for t, ws in per_target.items():
        manifest.append(f"{t}: {' '.join(ws)}")
    (tree / "MANIFEST").write_text("\n".join(manifest) + "\n")
    sums = []
    for p in sorted(tree.rglob("*")):
        if p.is_file():
            sums.append(f"{hashlib.sha256(p.read_bytes()).hexdigest()}  {p.relative_to(tree)}")
    (tree / "SHA256SUMS").write_text("\n".join(sums) + "\n")
    out_dir.mkdir(parents=True, exist_ok=True)
    archive = out_dir / f"{stem}.tar.gz"
    partial = archive.with_name(archive.name + ".part")
    with tarfile.open(partial, "w:gz") as tar:
        tar.add(tree, arcname=stem, filter=_normalise)
    os.replace(partial, archive)
    return archive


def _normalise(info: tarfile.TarInfo) -> tarfile.TarInfo:
    info.uid = info.gid = 0
    info.uname = info.gname = "root"
    return info


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("wheel", type=Path, help="fabricmon's wheel (make wheel)")
    ap.add_argument("--out", type=Path, default=Path("dist"), help="where the archive goes (default dist/)")
    args = ap.parse_args(argv)
    with tempfile.TemporaryDirectory(prefix="fabricmon-offline-") as work:
        try:
            archive = build(args.wheel, args.out, Path(work))
        except BuildError as exc:
            print(f"make offline: {exc}", file=sys.stderr)
            return 1
    size = archive.stat().st_size
    print(f"{archive} ({size / 1e6:.1f} MB)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
