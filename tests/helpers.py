"""Helpers shared by the tests (one place; import as `from helpers import ...`)."""

from __future__ import annotations

import contextlib
import errno
import importlib.util
import json
import math
import os
import shutil
import sys
import time
from pathlib import Path
from typing import Any, Callable, NoReturn, TypeVar

import yaml

from fabricmon.checks import Finding
from fabricmon.host import ReplayIO
from fabricmon.host.runner import CommandResult
from fabricmon.model.ports import DeviceView, Inventory, PortView
from fabricmon.model.roce import RoceTarget
from fabricmon.pipeline.source import Inputs
from fabricmon.sim.ports import free_port, free_ports      # noqa: F401  (the suite's one way to find a port)

REPO = Path(__file__).resolve().parents[1]          # the repository
ROOT = REPO
FIXTURES = REPO / "tests" / "fixtures"
BUNDLES = FIXTURES / "bundles"
CAPTURES = REPO.parent / "shared" / "captures"       # real captures, beside the checkout (not shipped)

T = TypeVar("T")


def recorded_tool(name: str) -> tuple[int, str, str]:
    """A tool's run recorded against ibsim (tests/fixtures/fabric/tools/<name>.txt, make_tool_outputs.py):
    (exit code, stdout, stderr)."""
    text = (FIXTURES / "fabric" / "tools" / f"{name}.txt").read_text()
    _, _, rest = text.partition("\n# rc ")
    rc, _, rest = rest.partition("\n")
    stdout, _, stderr = rest.partition("# stderr\n")
    return int(rc), stdout, stderr


def run_inputs(inventory: Inventory | None = None, deadline: float = math.inf) -> Inputs:
    """What the pipeline hands a source: here no deadline unless one is given."""
    return Inputs(deadline=deadline, inventory=inventory if inventory is not None else Inventory())


def roce_inputs(targets: list[RoceTarget]) -> Inputs:
    """Inputs whose inventory makes the RoCE sources look at exactly these netdevs."""
    inv = Inventory()
    for t in targets:
        d = inv.devices.setdefault(t.device, DeviceView(device=t.device))
        if t.netdev:
            d.netdev = ",".join(sorted({*filter(None, d.netdev.split(",")), t.netdev}))
        inv.ports[(t.device, t.port)] = PortView(device=t.device, port=t.port, link_layer="Ethernet")
    return Inputs(deadline=math.inf, inventory=inv)


def all_sources_ran(samples: dict) -> bool:
    """Every active source (enabled, and its tool installed) has completed a run, in scraped
    samples keyed by (name, tuple(sorted(labels.items())))."""
    enabled = {dict(lbl)["source"] for (n, lbl), v in samples.items() if n == "fabricmon_source_active" and v == 1}
    runs = {dict(lbl)["source"]: v for (n, lbl), v in samples.items() if n == "fabricmon_source_runs_total"}
    return bool(enabled) and all(runs.get(s, 0) >= 1 for s in enabled)


def scrape_text(port: int, timeout: float = 5.0) -> str:
    """GET /metrics on 127.0.0.1:port: the exposition as served."""
    import http.client
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=timeout)
    try:
        conn.request("GET", "/metrics")
        return conn.getresponse().read().decode()
    finally:
        conn.close()


def duplicate_series(body: str) -> list[tuple[str, tuple]]:
    """The series of an exposition that appear more than once with one label set (Prometheus
    keeps one of them silently; fabricmon must never write two)."""
    from prometheus_client.parser import text_string_to_metric_families
    seen: set[tuple[str, tuple]] = set()
    dups = []
    for fam in text_string_to_metric_families(body):
        for s in fam.samples:
            key = (s.name, tuple(sorted(s.labels.items())))
            if key in seen:
                dups.append(key)
            seen.add(key)
    return dups


def repeated_series(body: str | bytes) -> list[str]:
    """duplicate_series for fabricmon's own renderer, cheap enough to run on every render: it writes a
    series as `name{labels sorted by name} value`, so one label set is one line prefix."""
    text = body.decode() if isinstance(body, bytes) else body
    seen: set[str] = set()
    dups = []
    for line in text.splitlines():
        if not line or line[0] == "#":
            continue
        series = line[:line.rindex(" ")]
        if series in seen:
            dups.append(series)
        seen.add(series)
    return dups


def scrape_samples(port: int, timeout: float = 5.0) -> dict:
    """GET /metrics on 127.0.0.1:port, parsed into {(name, sorted label items): value}. Every
    exposition scraped this way is also checked: no series twice with one label set."""
    body = scrape_text(port, timeout)
    dups = duplicate_series(body)
    assert not dups, f"{len(dups)} series written twice with one label set, e.g. {dups[:3]}"
    return exposition_samples(body)


def exposition_samples(body: str) -> dict:
    """An exposition's text parsed into {(name, sorted label items): value}."""
    from prometheus_client.parser import text_string_to_metric_families
    return {(s.name, tuple(sorted(s.labels.items()))): s.value
            for fam in text_string_to_metric_families(body) for s in fam.samples}


def sample_value(samples: dict, name: str, **labels: object) -> float | None:
    return samples.get((name, tuple(sorted((k, str(v)) for k, v in labels.items()))))


def scrape_until(port: int, *want: tuple[str, dict, float], timeout: float = 15.0) -> dict:
    """The port's samples once each (name, labels, value) of `want` is in one scrape: a scrape serves the
    last build, which follows what a test waited for (an action's record, a log line) by up to a build."""
    def ok(s: dict) -> bool:
        return all(sample_value(s, n, **labels) == v for n, labels, v in want)
    return wait_until(lambda: scrape_samples(port), timeout, f"the scrape to carry {want}", until=ok,
                      interval=0.2, ignore=(OSError,))


# --- RoCE / GPU bundles ---------------------------------------------------------------------

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
    from fabricmon.pipeline.scheduler import Pipeline
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


def captures_absent(path: Path) -> str:
    """Why a compatibility test cannot run without its real capture."""
    return (f"real captures not present ({path}): ../shared/captures is public test data kept beside "
            "the repository, not shipped with fabricmon; CI has it")


def skip_without_captures(path: Path) -> None:
    """A compatibility test whose real capture is absent skips, and fails instead under $CI (which
    has ../shared/captures, public test data kept beside the repository, never shipped), like
    every other missing prerequisite (`unavailable`)."""
    if not Path(path).exists():
        unavailable(captures_absent(path))


H100 = CAPTURES / "sysfs" / "leptonai-gpud__sys-class-infiniband-h100.0"   # 8 NDR HCAs and a RoCE bond

# `ibstat` of one healthy NDR port (mlx5_0 port 1): what a fake ibstat tool prints
IBSTAT_ONE_PORT = """\
CA 'mlx5_0'
\tCA type: MT4129
\tNumber of ports: 1
\tFirmware version: 28.40.1000
\tHardware version: 0
\tNode GUID: 0xb83fd20300120000
\tSystem image GUID: 0xb83fd20300120000
\tPort 1:
\t\tState: Active
\t\tPhysical state: LinkUp
\t\tRate: 400
\t\tBase lid: 17
\t\tLMC: 0
\t\tSM lid: 1
\t\tCapability mask: 0xa751e84a
\t\tPort GUID: 0xb83fd20300120000
\t\tLink layer: InfiniBand
"""


def h100_copy(tmp_path: Path) -> Path:
    """A writable copy of the recorded H100 node's sysfs (8 NDR HCAs and a RoCE bond) under
    tmp_path/sys; skips (fails under CI) without the captures."""
    skip_without_captures(H100)
    sysfs = tmp_path / "sys"
    shutil.copytree(H100, sysfs / "class" / "infiniband")
    for d, _, _ in os.walk(sysfs):                     # the captures are read-only
        os.chmod(d, 0o755)
    return sysfs


def require_writable_kmsg() -> None:
    """A test that writes this machine's real kernel ring buffer (/dev/kmsg) needs root: without it the
    test skips, and fails under $CI, which runs as root (`unavailable`)."""
    if os.geteuid() != 0:
        unavailable("writing the real kernel ring buffer (/dev/kmsg) needs root: run as root, as CI does")
    try:
        with open("/dev/kmsg", "w"):
            pass
    except OSError as exc:
        unavailable(f"/dev/kmsg cannot be written: {exc.strerror}")


def unavailable(why: str) -> NoReturn:
    """Skip a test whose system package is missing; under $CI (which installs every package) fail
    instead, so a broken CI image never passes as green."""
    import pytest
    if os.environ.get("CI", "").strip().lower() not in ("", "0", "false", "no"):
        pytest.fail(f"CI is set but {why}")
    pytest.skip(why)



def as_ordinary_user(argv: list[str], env: dict[str, str], timeout: float = 60):
    """`python -m fabricmon argv` as an ordinary user: `nobody` (setpriv) when the tests run as root,
    else ourselves; cwd /. Unavailable (skipped, failed under CI) where nobody cannot run this checkout."""
    import subprocess
    prefix: list[str] = []
    if os.geteuid() == 0:
        setpriv = shutil.which("setpriv") or unavailable("setpriv (Debian package util-linux) is needed")
        prefix = [setpriv, "--reuid=65534", "--regid=65534", "--clear-groups"]
        probe = subprocess.run([*prefix, sys.executable, "-c", "import fabricmon.cli, fabricmon.install as i; "
                                "i.ROLES['node'].unit_src.read_text()"], capture_output=True, text=True, timeout=60,
                               cwd="/")
        if probe.returncode != 0:
            unavailable("an ordinary user (nobody) cannot run this checkout's fabricmon (a checkout or Python "
                        f"under a private directory?): {probe.stderr.strip()[-300:]}")
    return subprocess.run([*prefix, sys.executable, "-m", "fabricmon", *argv], capture_output=True, text=True,
                          timeout=timeout, env=env, cwd="/")


class FakeIO:
    """A HostIO for source unit tests: commands by argv ((rc, stdout, stderr) or a CommandResult; an
    unknown argv is not_found), files by (root, rel) (an errno value raises OSError), realpaths, NVML."""

    def __init__(self, commands=None, files=None, realpaths=None, nvml=None):
        self.commands = commands or {}
        self.files = files or {}
        self.realpaths = realpaths or {}
        self.nvml = nvml
        self.ran: list[tuple[str, ...]] = []

    def run(self, argv, timeout):
        self.ran.append(tuple(argv))
        c = self.commands.get(tuple(argv))
        if c is None:
            return CommandResult(tuple(argv), None, "", "", 0.0, "not_found")
        if isinstance(c, CommandResult):
            return c
        rc, out, err = c
        return CommandResult(tuple(argv), rc, out, err, 0.01)

    def read(self, root, rel):
        v = self.files.get((root, rel), errno.ENOENT)
        if isinstance(v, int):
            raise OSError(v, os.strerror(v), rel)
        return v

    def listdir(self, root, rel):
        raise OSError(errno.ENOENT, "no", rel)

    def realpath(self, root, rel):
        if rel in self.realpaths:
            return self.realpaths[rel]
        raise OSError(errno.ENOENT, "no", rel)

    def nvml_gpus(self):
        if isinstance(self.nvml, Exception):
            raise self.nvml
        return self.nvml or []

    def mad_open(self, settings):
        from fabricmon.host.umad import UmadUnavailable
        raise UmadUnavailable(errno.ENODEV, "no umad port (FakeIO)")     # a host without one: the tools

    def mad_run(self, requests, deadline, times=None):
        return [None] * len(requests)

    def close(self):
        pass



def community_file(directory: Path) -> Path:
    """An SNMP community file (`public`, mode 0600, as the config requires) in `directory`."""
    comm = Path(directory) / "community"
    comm.write_text("public\n")
    comm.chmod(0o600)
    return comm


def api_findings(port: int) -> list[dict]:
    """The findings a daemon or collector on 127.0.0.1:port serves at /api/v1/findings."""
    import urllib.request
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/api/v1/findings", timeout=5) as r:
        return json.loads(r.read())["findings"]

def fabricmon_script() -> str:
    """The `fabricmon` console script of the environment the tests run in (beside sys.executable: the venv
    `make venv` made, or any other the package is installed in); unavailable (skipped, failed under $CI)
    where that environment has none."""
    exe = Path(sys.executable).parent / "fabricmon"
    if exe.exists():
        return str(exe)
    unavailable(f"no fabricmon command beside {sys.executable}: install the package in this environment "
                "(make venv does)")


def fabricmon_command() -> list[str]:
    """fabricmon as a command: the environment's console script (fabricmon_script), else `python -m fabricmon`
    with the interpreter the tests run in."""
    exe = Path(sys.executable).parent / "fabricmon"
    return [str(exe)] if exe.exists() else [sys.executable, "-m", "fabricmon"]


def promtool() -> str:
    """The path of promtool (Debian package prometheus); skips without it, fails under $CI."""
    path = shutil.which("promtool")
    if path is None:
        unavailable("promtool not installed: it lints expositions (apt-get install prometheus, as make test does)")
    return path


def wait_until(probe: Callable[[], T], timeout: float, what: str | Callable[[], str] = "the condition", *,
               until: Callable[[T], object] = bool, interval: float = 0.05,
               ignore: tuple[type[BaseException], ...] = ()) -> T:
    """Calls probe() until what it returns holds (is true; with `until`, until(value) is true), and returns
    that value; fails (AssertionError naming `what`, or what `what()` says then) when `timeout` seconds
    pass first. The one way a test waits for something to happen: never a fixed sleep that hopes it has.
    An exception of a type in `ignore` (e.g. OSError: not listening yet) counts as not yet, and is named
    if the wait fails."""
    deadline = time.monotonic() + timeout
    last: BaseException | None = None
    while True:
        try:
            got = probe()
            if until(got):
                return got
        except ignore as exc:
            last = exc
        if time.monotonic() > deadline:
            said = what() if callable(what) else what
            raise AssertionError(f"not within {timeout:g} s: {said}" + (f" (last: {last!r})" if last else ""))
        time.sleep(interval)


def wait_for_scrape(port: int, pred, timeout: float) -> dict:
    """Scrapes /metrics on 127.0.0.1:port until pred(samples) holds; returns those samples."""
    return wait_until(lambda: scrape_samples(port), timeout, "a scrape that meets the condition", until=pred,
                      interval=0.2)


def stop_process(proc, timeout: float = 10.0) -> None:
    """SIGTERM, then SIGKILL if it has not exited within `timeout` seconds (a test's own child)."""
    import subprocess
    proc.terminate()
    try:
        proc.wait(timeout)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait()


@contextlib.contextmanager
def fabric_collector(fab, tmp_path: Path, fabric: dict, traffic: dict | None = None, host: str | None = None,
                     journal: bool = True):
    """`fabricmon fabric run`'s daemon on a simulated fabric, listening on a free port of
    127.0.0.1: `fabric` is its fabric: config (port 0 added), `traffic` a TrafficDriver plan kept
    running meanwhile, `host` the simulated host it runs as (the first by default). Yields the
    started Daemon; stops it and the traffic on exit."""
    from fabricmon.config import from_dict
    from fabricmon.host import LiveIO
    from fabricmon.pipeline.fabric import fabric_pipeline
    from fabricmon.serve.daemon import Daemon
    from fabricmon.sim.fabric import TrafficDriver

    # every counter set: these tests read the collector's values, the opt-in rate gauges included
    cfg = from_dict({"server": {"address": "127.0.0.1", "collect": ["all"]},
                     "paths": {"state_dir": str(tmp_path / "state")}, "fabric": {"port": 0, **fabric}})
    (tmp_path / "state" / "fabric").mkdir(parents=True, exist_ok=True)
    driver = TrafficDriver(fab, traffic) if traffic is not None else None
    if driver is not None:
        driver.start()
    io = LiveIO(cfg.sysfs, cfg.procfs, env=fab.env(host or fab.hosts[0]))
    d = Daemon(cfg, io, port=0, pipeline=fabric_pipeline(cfg, io), journal=journal)
    d.start()
    try:
        yield d
    finally:
        if driver is not None:
            driver.stop()
        d.stop()


def fabric_once(fab, tmp_path: Path, name: str, fabric: dict, *args: str, config: dict | None = None):
    """`fabricmon fabric once` as its own process under the simulator's preload (so its own libibumad
    reaches ibsim: the MAD engine runs where fabric.sweep_method allows), state in tmp_path/<name>.
    Returns the CompletedProcess (exposition on stdout, findings on stderr); asserts that it exits with its
    exposition's fabricmon_health_status (the one health rule)."""
    return fabricmon_on_fabric(fab, tmp_path, name, fabric, "fabric", "once", *args, config=config, rc=None)


def exposition_health(text: str) -> int | None:
    """The fabricmon_health_status an exposition says (None: it has none)."""
    import re
    m = re.search(r"^fabricmon_health_status (\S+)$", text, re.M)
    return int(float(m.group(1))) if m else None


def fabricmon_on_fabric(fab, tmp_path: Path, name: str, fabric: dict, *argv: str, rc: int | None = 0,
                        config: dict | None = None):
    """`fabricmon ARGV... --config C` as its own process under the simulator's preload, with the
    `fabric` section given (and the other top-level sections of `config`) and its state in
    tmp_path/<name>; asserts exit `rc` (None: the exposition's fabricmon_health_status on stdout)."""
    import subprocess
    state = tmp_path / name
    state.mkdir()
    cfg = tmp_path / f"{name}.yml"
    cfg.write_text(json.dumps({**(config or {}), "paths": {"state_dir": str(state)}, "fabric": fabric}))
    r = subprocess.run([sys.executable, "-m", "fabricmon", *argv, "--config", str(cfg)],
                       env=fab.env(fab.hosts[0]), capture_output=True, text=True, timeout=120)
    want = exposition_health(r.stdout) if rc is None else rc
    assert want is not None and r.returncode == want, r.stderr
    return r


def extract_ttar(ttar: Path, root: Path) -> Path:
    """Write a ttar archive (procfs/node_exporter's text fixture format: `Directory:`, `Path:` with
    `Lines: N` and N lines, `SymlinkTo:`) under root; returns root."""
    lines = Path(ttar).read_text().splitlines()
    i = 0
    while i < len(lines):
        line = lines[i]
        if line.startswith("Directory: "):
            (root / line[11:]).mkdir(parents=True, exist_ok=True)
        elif line.startswith("Path: "):
            target = root / line[6:]
            target.parent.mkdir(parents=True, exist_ok=True)
            nxt = lines[i + 1] if i + 1 < len(lines) else ""
            if nxt.startswith("Lines: "):
                n = int(nxt.split()[1])
                target.write_text("".join(f"{body}\n" for body in lines[i + 2:i + 2 + n]))
                i += 1 + n
            elif nxt.startswith("SymlinkTo: "):
                target.symlink_to(nxt[11:])
                i += 1
        i += 1
    return root


# --- processes the suite leaves behind (issue 41.5) -------------------------------------------------

#: set in the suite's environment for the whole session: every process a test starts inherits it
SESSION_MARK = "FABRICMON_TEST_SESSION"
#: the services and jobs tests start; one of them running from the session's temp dirs is the suite's
SUITE_PROGRAMS = frozenset({"slurmstepd", "srun", "slurmctld", "slurmd", "munged", "ibsim", "opensm", "snmpsimd",
                            "snmpsim-command-responder", "prometheus", "alertmanager", "prometheus-alertmanager"})


def leftover_processes(mark: str, since: float, test_dirs: tuple[str, ...]) -> list[str]:
    """The processes this test session started that still run, one line each (pid, name, command, and the
    test that started it, from the PYTEST_CURRENT_TEST it inherited): this process's descendants, the
    other members of its process group but its siblings (what the shell started beside pytest: `| tail`),
    every process carrying the session's mark in its environment (orphans that started a session of
    their own included), and any of SUITE_PROGRAMS started since `since` whose command line or working
    directory is under one of `test_dirs`."""
    import psutil

    from fabricmon.sim.procs import processes_with_environment
    me = psutil.Process()
    skip = {me.pid, *(p.pid for p in me.parents())}
    found = {p.pid: p for p in me.children(recursive=True)}
    found.update((p.pid, p) for p in processes_with_environment(SESSION_MARK, mark))
    group = os.getpgid(0)
    for p in psutil.process_iter(["name", "cmdline", "create_time"]):
        if p.pid in skip or p.pid in found or (p.info["create_time"] or 0) < since:
            continue
        try:
            if os.getpgid(p.pid) == group and p.ppid() != me.ppid():
                found[p.pid] = p
            elif p.info["name"] in SUITE_PROGRAMS:
                where = " ".join(p.info["cmdline"] or ()) + " " + os.path.join(p.cwd(), "")
                if any(d in where for d in test_dirs):
                    found[p.pid] = p
        except (psutil.Error, OSError):
            continue
    lines = []
    for pid, p in sorted(found.items()):
        if pid in skip:
            continue
        try:
            if p.status() == psutil.STATUS_ZOMBIE:
                continue
            cmd = " ".join(p.cmdline())[:160] or p.name()
            try:
                test = p.environ().get("PYTEST_CURRENT_TEST", "?")
            except (psutil.Error, OSError):
                test = "?"
        except (psutil.Error, OSError):
            continue            # ended meanwhile
        lines.append(f"pid {pid} {p.name()}: {cmd} (started under {test})")
    return lines


# --- NCCL Inspector files, as NCCL writes them (tests/fixtures/nccl_inspector/PROVENANCE.md) ----------
NCCL_UUID = "5a3e1f9c-0b2d-4e6f-8a1b-2c3d4e5f6a7b"
NCCL_UUID2 = "0f0e0d0c-0b0a-0908-0706-050403020100"


def nccl_prom_lines(comm: str, bw: float, job: str = "4242", n_nodes: int = 4, gpu: str = "GPU0") -> str:
    """One communicator's lines of an NCCL Inspector Prometheus file (v5.1 labels, as inspector_prom.cc prints)."""
    labels = (f'version="v5.1",slurm_job_id="{job}",node="node001",gpu="{gpu}",comm_name="{comm}",'
              f'n_nodes="{n_nodes}",nranks="{8 * n_nodes}",collective="AllReduce",message_size="4-5GB",'
              'algo_proto="RING_SIMPLE"')
    return f"nccl_bus_bandwidth_gbs{{{labels}}} {bw:.6g}\nnccl_collective_exec_time_microseconds{{{labels}}} 9498.47\n"


def nccl_dump(path: Path, comms: dict[str, float], job: str = "4242") -> None:
    """As inspectorPromCommInfoListDump does: fopen(name, "w"), then per communicator one write + fflush."""
    with open(path, "w") as fh:
        for comm, bw in comms.items():
            fh.write(nccl_prom_lines(comm, bw, job))
            fh.flush()


def fabric_optics(model: Any, states: dict, sec: Any, now: float) -> list:
    """The fabric model's optics checks alone (checks.optics, registered by pipeline.fabric_checks), run by
    its runner as a build runs them on `sec` (their outcome written into it), and the check status of what
    ran. Returns their findings."""
    from fabricmon.checks.fabric_inputs import FabricInputs
    from fabricmon.model.fabric import Topology
    inputs = FabricInputs(states, Topology(), sec, now, model.history)
    findings, ran = model.checks.run_ports(inputs, model.checks.present(states, False) & {"transceiver_readings"})
    model.checks.check_status(sec, findings, ran)
    return findings

