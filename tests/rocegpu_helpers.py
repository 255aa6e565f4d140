"""Helpers for the RoCE / GPUDirect / GPU-NIC affinity tests.

- make_bundles(): the fixture generator module (tests/fixtures/make_bundles.py);
- SequenceIO: serves bundle 0, then bundle 1 after advance(): two samples for rate checks;
- Clock: a settable clock for the Collector;
- materialize(): turn a bundle into a live tree (sysfs/procfs files, realpath symlinks, stub
  commands) so that LiveIO, `fabricmon check --state` and `fabricmon capture` run on it;
- fake_nvml(): replace pynvml's functions (the NVML boundary) with a fake GPU list.
"""

from __future__ import annotations

import importlib.util
import json
import os
import shutil
import sys
from pathlib import Path
from typing import Any

import yaml

from fabricmon.checks import Finding
from fabricmon.host import ReplayIO

ROOT = Path(__file__).resolve().parents[1]
BUNDLES = ROOT / "tests" / "fixtures" / "bundles"


def make_bundles() -> Any:
    mod = sys.modules.get("make_bundles")
    if mod is None:
        spec = importlib.util.spec_from_file_location("make_bundles", ROOT / "tests" / "fixtures" / "make_bundles.py")
        mod = importlib.util.module_from_spec(spec)
        sys.modules["make_bundles"] = mod
        spec.loader.exec_module(mod)
    return mod


class SequenceIO:
    """A HostIO over several bundles: the current one answers everything."""

    def __init__(self, *bundles: Path):
        self.ios = [ReplayIO(b) for b in bundles]
        self.i = 0

    def advance(self) -> None:
        self.i += 1

    def __getattr__(self, name: str) -> Any:
        return getattr(self.ios[self.i], name)


class Clock:
    def __init__(self, t: float = 1_000_000.0):
        self.t = t

    def __call__(self) -> float:
        return self.t


def by_check(findings: list[Finding], check: str) -> dict[str, Finding]:
    """Findings of one check keyed by device (or GPU name)."""
    return {f.device: f for f in findings if f.check == check}


def two_samples(name: str, tmp: Path, config=None, dt: float = 60.0):
    """Poll bundle `name` at tick 0, then at tick 1 dt seconds later; returns the collector's
    second snapshot (close() is done)."""
    from fabricmon.pipeline import Pipeline
    from fabricmon.config import load
    mb = make_bundles()
    a = mb.generate(tmp / "t0", 0, [name])[0]
    b = mb.generate(tmp / "t1", 1, [name])[0]
    cfg = config or load(a / "config.yml", check_paths=False)
    io, clock = SequenceIO(a, b), Clock()
    col = Pipeline(cfg, io, clock=clock)
    try:
        col.collect()
        io.advance()
        clock.t += dt
        return col.collect([n for n, s in col.states.items() if s.enabled])
    finally:
        col.close()


STUB = '''import json, sys
cmds = json.load(open(sys.argv[1]))
key = "\\0".join(sys.argv[2:])
c = cmds.get(key)
if c is None:
    sys.stderr.write("stub: not recorded: " + " ".join(sys.argv[2:]) + "\\n")
    sys.exit(127)
sys.stdout.write(c["stdout"])
sys.stderr.write(c["stderr"])
sys.exit(c["returncode"])
'''


def materialize(bundle: Path, root: Path) -> Path:
    """Build a live host tree from a bundle under root; returns the path of a config file that
    points fabricmon's paths and tool commands at it."""
    manifest = json.loads((bundle / "bundle.json").read_text())
    if root.exists():
        shutil.rmtree(root)
    sysfs, procfs = root / "sysfs", root / "procfs"
    sysfs.mkdir(parents=True)
    procfs.mkdir(parents=True)
    for key, real in sorted(manifest.get("realpaths", {}).items()):
        rootname, rel = key.split("/", 1)
        assert rootname == "sysfs" and real.startswith("/sys/")
        target = sysfs / real[len("/sys/"):]
        target.mkdir(parents=True, exist_ok=True)
        link = sysfs / rel
        link.parent.mkdir(parents=True, exist_ok=True)
        link.symlink_to(os.path.relpath(target, link.parent))
    for key, names in manifest.get("listings", {}).items():
        rootname, rel = key.split("/", 1)
        for n in names if isinstance(names, list) else []:
            (root / rootname / rel / n).mkdir(parents=True, exist_ok=True)
    for src in sorted((bundle / "files").rglob("*")):
        if src.is_file():
            rel = src.relative_to(bundle / "files")
            dst = root / rel
            dst.parent.mkdir(parents=True, exist_ok=True)
            dst.write_bytes(src.read_bytes())
    cmds = {"\0".join(c["argv"]): c for c in manifest.get("commands", [])}
    (root / "commands.json").write_text(json.dumps(cmds))
    (root / "stub.py").write_text(STUB)
    cfg = yaml.safe_load((bundle / "config.yml").read_text()) or {}
    cfg.setdefault("paths", {}).update({"sysfs": str(sysfs), "procfs": str(procfs),
                                        "state_dir": str(root / "state")})
    sources = cfg.setdefault("sources", {})
    for tool in ("ibstat", "perfquery", "iblinkinfo", "mlnx_qos", "ethtool"):
        sources.setdefault(tool, {})["command"] = [sys.executable, str(root / "stub.py"),
                                                   str(root / "commands.json"), tool]
    if (cfg.get("gpu") or {}).get("nccl_env_file"):
        cfg["gpu"]["nccl_env_file"] = str(root / "host" / cfg["gpu"]["nccl_env_file"].lstrip("/"))
    path = root / "config.yml"
    path.write_text(yaml.safe_dump(cfg))
    return path


class _Pci:
    def __init__(self, bus: Any):
        self.busId = bus


def fake_nvml(monkeypatch, gpus: list[dict], driver: str = "535.161.08", as_bytes: bool = False) -> list[str]:
    """Fake pynvml's functions; `gpus` are dicts with uuid and bus_id (NVML form). Returns the
    list of calls made, so tests can see init/shutdown pairing."""
    import pynvml
    calls: list[str] = []
    enc = (lambda s: s.encode()) if as_bytes else (lambda s: s)
    monkeypatch.setattr(pynvml, "nvmlInit", lambda: calls.append("init"))
    monkeypatch.setattr(pynvml, "nvmlShutdown", lambda: calls.append("shutdown"))
    monkeypatch.setattr(pynvml, "nvmlSystemGetDriverVersion", lambda: enc(driver))
    monkeypatch.setattr(pynvml, "nvmlDeviceGetCount", lambda: len(gpus))
    monkeypatch.setattr(pynvml, "nvmlDeviceGetHandleByIndex", lambda i: ("handle", i))
    monkeypatch.setattr(pynvml, "nvmlDeviceGetUUID", lambda h: enc(gpus[h[1]]["uuid"]))
    monkeypatch.setattr(pynvml, "nvmlDeviceGetPciInfo", lambda h: _Pci(enc(gpus[h[1]]["bus_id"])))
    return calls


def bundle_nvml(bundle: Path) -> list[dict]:
    return json.loads((bundle / "bundle.json").read_text()).get("nvml", [])
