"""Helpers for the shipped artefacts' tests (rules, dashboards, units): the real promtool, prometheus,
alertmanager and systemd-analyze, and fabricmon daemons replaying the fixture bundles.
(A module of its own, not conftest.py, so that `from ship_helpers import ...` never picks up another
directory's conftest.)"""

from __future__ import annotations

import json
import os
import re
import shutil
import signal
import subprocess
import sys
import threading
import time
import urllib.parse
import urllib.request
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import yaml

from fabricmon.deploy import ALERTMANAGER, SCALE_DEPLOYMENT
from helpers import free_port, unavailable, wait_until as _wait_until

ROOT = Path(__file__).resolve().parents[2]
BUNDLES = ROOT / "tests" / "fixtures" / "bundles"
FABRIC_BUNDLE = ROOT / "tests" / "fixtures" / "fabric" / "fat-tree"
ETHERNET_BUNDLE = ROOT / "tests" / "fixtures" / "fabric" / "ethernet"
BUNDLE_NAMES = ("dgx-h100", "dgx-h100-miswired", "roce-pfc-prio3", "roce-pfc-off-storm", "no-peermem")
FABRICMON = [sys.executable, "-m", "fabricmon"]


def require_tool(tool: str, package: str) -> str:
    """The tool's path; skips when it is missing, and fails instead when $CI is set."""
    path = shutil.which(tool)
    if path:
        return path
    unavailable(f"{tool} not found: install the Debian package {package} (make test does)")


def http_get(url: str, timeout: float = 5) -> bytes:
    with urllib.request.urlopen(url, timeout=timeout) as r:
        return r.read()


def wait_until(pred, timeout: float, what, interval: float = 0.2, **kw):
    """helpers.wait_until, with an OSError (a service not listening yet) counted as not yet."""
    return _wait_until(pred, timeout, what, interval=interval, ignore=(OSError,), **kw)


class Processes:
    """Processes started by a test, each stopped by its PID (SIGTERM, then SIGKILL) at teardown."""

    def __init__(self, logdir: Path):
        self.logdir = logdir
        self.procs: list[tuple[subprocess.Popen, Path]] = []

    def start(self, name: str, argv: list[str], **kw) -> subprocess.Popen:
        log = self.logdir / f"{name}.log"
        with open(log, "wb") as out:
            p = subprocess.Popen(argv, stdin=subprocess.DEVNULL, stdout=out, stderr=subprocess.STDOUT,
                                 start_new_session=True, **kw)
        self.procs.append((p, log))
        return p

    def log(self, p: subprocess.Popen) -> str:
        for q, log in self.procs:
            if q is p:
                return log.read_text(errors="replace")[-4000:]
        return ""

    def stop(self, p: subprocess.Popen) -> None:
        if p.poll() is None:
            os.kill(p.pid, signal.SIGTERM)
            try:
                p.wait(timeout=10)
            except subprocess.TimeoutExpired:
                os.kill(p.pid, signal.SIGKILL)
                p.wait(timeout=10)

    def stop_all(self) -> None:
        for p, _ in reversed(self.procs):
            self.stop(p)


class Prometheus:
    def __init__(self, url: str):
        self.url = url

    def api(self, path: str, **params) -> dict:
        q = urllib.parse.urlencode(params)
        body = json.loads(http_get(f"{self.url}/api/v1/{path}" + (f"?{q}" if q else ""), timeout=15))
        assert body["status"] == "success", body
        return body["data"]

    def query(self, expr: str) -> list:
        return self.api("query", query=expr)["result"]


def start_prometheus(processes: Processes, tmp_path: Path, scrape_configs: list[dict], rule_files=(),
                     alertmanager_port: int | None = None, interval: str = "1s") -> Prometheus:
    """The real prometheus on a loopback port with a tmp data dir."""
    exe = require_tool("prometheus", "prometheus")
    cfg = {"global": {"scrape_interval": interval, "evaluation_interval": interval,
                      "scrape_timeout": interval},
           "rule_files": [str(f) for f in rule_files],
           "scrape_configs": scrape_configs}
    if alertmanager_port:
        cfg["alerting"] = {"alertmanagers": [{"static_configs": [{"targets": [f"127.0.0.1:{alertmanager_port}"]}]}]}
    path = tmp_path / "prometheus.yml"
    path.write_text(json.dumps(cfg))           # JSON is YAML
    port = free_port()
    p = processes.start("prometheus", [exe, f"--config.file={path}", f"--storage.tsdb.path={tmp_path / 'tsdb'}",
                                       f"--web.listen-address=127.0.0.1:{port}", "--log.level=warn"])
    prom = Prometheus(f"http://127.0.0.1:{port}")

    def ready():
        if p.poll() is not None:
            raise AssertionError(f"prometheus exited {p.returncode}: {processes.log(p)}")
        return http_get(f"{prom.url}/-/ready").startswith(b"Prometheus")
    wait_until(ready, 30, "prometheus ready")
    return prom



def deployment_argv(component: str, **values: str) -> list[str]:
    """The reference deployment's (fabricmon/deploy/scale/deployment.yml) command line of a component, its
    {placeholders} filled, the program found."""
    line = yaml.safe_load(SCALE_DEPLOYMENT.read_text())[component]
    args = [a.format(**values) for a in line[1:]]
    if line[0] == "fabricmon":
        return [*FABRICMON, *args]
    return [require_tool(line[0], {"prometheus-alertmanager": "prometheus-alertmanager"}.get(line[0],
                                                                                           "victoria-metrics")), *args]


def start_victoriametrics(processes: Processes, tmp_path: Path, scrape_configs: list[dict], rule_files=(),
                          interval: str = "1s") -> Prometheus:
    """The reference deployment's store and evaluator on loopback ports: VictoriaMetrics (deployment.yml's
    command line) scraping `scrape_configs` itself (-promscrape.config: the scraping is vmagent's in the
    deployment, the same promscrape code) and vmalert evaluating `rule_files` on it, the recording rules'
    results written back (deployment.yml's line, no Alertmanager). Queries see samples after 1 s
    (-search.latencyOffset: 30 s by default)."""
    scrape = tmp_path / "vm-scrape.yml"
    scrape.write_text(json.dumps({"global": {"scrape_interval": interval, "scrape_timeout": interval},
                                  "scrape_configs": scrape_configs}))
    port = free_port()
    vm = processes.start("victoria-metrics", [
        *deployment_argv("victoria-metrics", listen=f"127.0.0.1:{port}", data=str(tmp_path / "vm"),
                         scrape_interval=interval),
        f"-promscrape.config={scrape}", "-search.latencyOffset=1s", "-loggerLevel=WARN"])
    store = Prometheus(f"http://127.0.0.1:{port}")

    def ready() -> bool:
        if vm.poll() is not None:
            raise AssertionError(f"victoria-metrics exited {vm.returncode}: {processes.log(vm)}")
        return http_get(f"{store.url}/health") == b"OK"
    wait_until(ready, 30, "victoria-metrics ready")
    # no Alertmanager: the notifiers are a loopback port nobody listens on (this vmalert has no
    # -notifier.blackhole), refused at once; the alerts are read from vmalert's own API where wanted
    nobody = f"http://127.0.0.1:{free_port()}"
    for i, rules in enumerate(rule_files):
        processes.start(f"vmalert{i}", [
            *deployment_argv("vmalert", listen=f"127.0.0.1:{free_port()}", rules=str(rules), store=store.url,
                             alertmanager_a=nobody, alertmanager_b=nobody, scrape_interval=interval),
            "-loggerLevel=WARN"])
    return store


def start_alertmanager(processes: Processes, tmp_path: Path, cfg: dict) -> int:
    """The real prometheus-alertmanager with `cfg` on a loopback port, no cluster; its port once ready."""
    exe = require_tool("prometheus-alertmanager", "prometheus-alertmanager")
    path = tmp_path / "alertmanager.yml"
    path.write_text(json.dumps(cfg))           # JSON is YAML
    port = free_port()
    p = processes.start("alertmanager", [exe, f"--config.file={path}", f"--storage.path={tmp_path / 'am'}",
                                         f"--web.listen-address=127.0.0.1:{port}", "--cluster.listen-address=",
                                         "--log.level=warn"])

    def ready():
        assert p.poll() is None, processes.log(p)
        return http_get(f"http://127.0.0.1:{port}/-/ready") is not None
    wait_until(ready, 30, "alertmanager ready")
    return port



class Pager:
    """Alertmanager's webhook receiver: every notification, and which groups paged a new firing alert."""

    def __init__(self):
        self.notifications: list[dict] = []
        self.receiver: dict[str, str] = {}      # groupKey -> the receiver Alertmanager sent it to
        self.lock = threading.Lock()
        pager = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self):
                body = self.rfile.read(int(self.headers.get("Content-Length", 0)))
                with pager.lock:
                    note = {"at": time.monotonic(), **json.loads(body)}
                    pager.notifications.append(note)
                    pager.receiver[note["groupKey"]] = note["receiver"]
                self.send_response(200)
                self.end_headers()

            def log_message(self, *a):
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.port = self.server.server_address[1]
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def paged(self, since: float, before: set) -> dict[str, list[dict]]:
        """groupKey -> the firing alerts it paged after `since` that were not paged before."""
        out: dict[str, list[dict]] = {}
        with self.lock:
            for n in self.notifications:
                if n["at"] < since:
                    continue
                for a in n["alerts"]:
                    key = json.dumps(a["labels"], sort_keys=True)
                    if a["status"] == "firing" and key not in before:
                        out.setdefault(n["groupKey"], []).append(a)
        return out

    def first(self, alertname: str) -> tuple[float, dict, str] | None:
        """The first notification that paged `alertname` firing: when it came, the alert, its receiver."""
        with self.lock:
            for n in self.notifications:
                for a in n["alerts"]:
                    if a["status"] == "firing" and a["labels"].get("alertname") == alertname:
                        return n["at"], a, n["receiver"]
        return None

    def find(self, status: str, **labels: str) -> dict | None:
        """The first alert notified with `status` ("firing", "resolved") and these labels."""
        with self.lock:
            for n in self.notifications:
                for a in n["alerts"]:
                    if a["status"] == status and all(a["labels"].get(k) == v for k, v in labels.items()):
                        return a
        return None

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()

    def seen(self) -> set:
        with self.lock:
            return {json.dumps(a["labels"], sort_keys=True) for n in self.notifications for a in n["alerts"]
                    if a["status"] == "firing"}

    def last(self) -> float:
        with self.lock:
            return max((n["at"] for n in self.notifications), default=0.0)

    def close(self):
        self.server.shutdown()
        self.server.server_close()


def shipped_alertmanager_config(webhook_port: int, waits: str | None = None) -> dict:
    """The shipped Alertmanager example with its receivers pointed at the test's webhook; `waits` (e.g. "2s")
    cuts every route's group_wait and group_interval to it, None keeps them as shipped."""
    cfg = yaml.safe_load(ALERTMANAGER.read_text())
    cfg["receivers"] = [{"name": r["name"], "webhook_configs": [
        {"url": f"http://127.0.0.1:{webhook_port}/", "send_resolved": True}]} for r in cfg["receivers"]]
    if waits is not None:
        cfg["route"].update(group_wait=waits, group_interval=waits, repeat_interval="1h")
        for r in cfg["route"]["routes"]:
            r.update(group_wait=waits, group_interval=waits)
    return cfg


def shipped_alertmanager(processes: Processes, tmp_path: Path, webhook_port: int, waits: str | None = None) -> int:
    """shipped_alertmanager_config in one Alertmanager; its port once ready."""
    return start_alertmanager(processes, tmp_path, shipped_alertmanager_config(webhook_port, waits))


def start_sim_node(processes: Processes, fabric, host: str, tmp_path: Path, interval: float,
                   ready: bytes = b'fabricmon_ib_port_up{device="ibsim0",port="1"}', timeout: float = 30) -> int:
    """`fabricmon run` as one host of a simulated fabric (its sysfs, ibstat, perfquery and iblinkinfo
    every `interval` seconds, expecting 4X HDR); its port once its /metrics holds `ready`."""
    work = tmp_path / host.split()[0]
    (work / "sys").mkdir(parents=True)
    (work / "state").mkdir()
    cfg = {"paths": {"sysfs": str(work / "sys"), "state_dir": str(work / "state")},
           "sources": {n: {"interval": interval} for n in ("sysfs", "ibstat", "perfquery", "iblinkinfo")},
           "expected_links": [{"device": "*", "width": "4X", "speed": "HDR"}]}
    (work / "fabricmon.yml").write_text(json.dumps(cfg))           # JSON is YAML
    port = free_port()
    p = processes.start(f"fabricmon-{host.split()[0]}",
                        [*FABRICMON, "run", "--config", str(work / "fabricmon.yml"), "--listen", f"127.0.0.1:{port}",
                         "--log-level", "warning"], env=fabric.env(host), cwd=ROOT)

    def polled():
        assert p.poll() is None, processes.log(p)
        return ready in http_get(f"http://127.0.0.1:{port}/metrics")
    wait_until(polled, timeout, f"fabricmon on {host}")
    return port

def start_replay_daemon(processes: Processes, bundle: str) -> int:
    """`fabricmon run --replay <bundle>` on a free loopback port; returns the port once /metrics answers."""
    port = free_port()
    p = processes.start(f"fabricmon-{bundle}", [*FABRICMON, "run", "--replay", str(BUNDLES / bundle),
                                                 "--listen", f"127.0.0.1:{port}", "--log-level", "warning"],
                        cwd=ROOT)

    def up():
        if p.poll() is not None:
            raise AssertionError(f"fabricmon exited {p.returncode}: {processes.log(p)}")
        return b"fabricmon_snapshot_timestamp_seconds" in http_get(f"http://127.0.0.1:{port}/metrics")
    wait_until(up, 30, f"fabricmon replaying {bundle}")
    return port


def bundle_expositions() -> dict[str, str]:
    """`fabricmon once --replay` of every fixture bundle: the real exposition the rules and panels read."""
    out = {}
    for name in BUNDLE_NAMES:
        res = subprocess.run([*FABRICMON, "once", "--replay", str(BUNDLES / name)], cwd=ROOT,
                             capture_output=True, text=True, timeout=60)
        assert res.returncode == 0, res.stderr
        out[name] = res.stdout
    return out


def fabric_exposition() -> str:
    """`fabricmon fabric once --replay` of the recorded fat tree, two sweeps (the ECMP families need rates)."""
    res = subprocess.run([*FABRICMON, "fabric", "once", "--replay", str(FABRIC_BUNDLE), "--sweeps", "2",
                          "--interval", "0.1"], cwd=ROOT, capture_output=True, text=True, timeout=60)
    assert res.returncode == 2 and "\nfabricmon_health_status 2.0\n" in res.stdout, res.stderr   # its 1X link
    return res.stdout


def ethernet_exposition() -> str:
    """`fabricmon fabric once --replay` of the recorded Ethernet leaf/spine (snmpsim), two sweeps."""
    res = subprocess.run([*FABRICMON, "fabric", "once", "--replay", str(ETHERNET_BUNDLE), "--sweeps", "2",
                          "--interval", "0.1"], cwd=ROOT, capture_output=True, text=True, timeout=60)
    assert f"\nfabricmon_health_status {float(res.returncode)}\n" in res.stdout, res.stderr   # exit = its health
    return res.stdout


def nccl_exposition() -> str:
    """A node daemon's exposition of one slow NCCL network measure, joined and judged, and one RAS answer
    with a dead peer (the bundles hold no Inspector files, no RAS): what the NCCL alerts and panels read,
    from the real catalogue."""
    from fabricmon.exporter.render import render
    from fabricmon.model.nccl import (COLLECTIVE, NcclMeasure, NcclPath, NcclSection, RasComm, RasData, RasMismatch,
                                      RasPeer, RasRank)
    from fabricmon.model.snapshot import BuildStats, Snapshot
    m = NcclMeasure(COLLECTIVE, "4242", "node001", "GPU0", "DP Group 0", 4, 32, "AllReduce", "4-5GB", 4 << 30,
                    "RING_SIMPLE", 20.0, 9498.47)
    p = NcclPath(m, "GPU-5a3e", 0, "mlx5_0", 1, "0xa088c20398b16e14", "leaf03", 17, 50.0, 1.0)
    sec = NcclSection(paths=[p], files=1, baseline_gbs={p.baseline_key: 40.0}, slow={p.baseline_key: "50%"})
    ras = RasData("2.29.7", [RasComm("0000000000005f3a", 4, 1, (RasPeer(3, "node07", 5151, 3, 3, True, True),),
                                     (RasMismatch("AllReduce", ((1200, 2), (1199, 1)), (RasRank(2, 1199, "node06"),)),))])
    return render(Snapshot(time=1.0, findings=[], sources={}, builds=BuildStats(), nccl=sec, ras=ras)).decode()


def ber_exposition() -> str:
    """A node daemon's exposition of one port's physical-layer BER as judged (a rate needs two samples, which a
    bundle's one replay never has): what the BER alert reads, from the real catalogue."""
    from fabricmon.exporter.render import render
    from fabricmon.model.ber import BerPort, BerSection, BerVerdict, PhyCounters
    from fabricmon.model.ber_budget import DEFAULT_BUDGETS, find
    from fabricmon.model.snapshot import BuildStats, Snapshot
    p = BerPort("mlx5_0", 1, "mlx5_0 port 1", "mlxlink", PhyCounters({"raw_errors": 10 ** 9, "effective_errors": 0,
                                                                       "symbol_errors": 0}),
                "IB", "NDR", 400.0, "rs544_plr", "optical", "7nm")
    v = BerVerdict({("raw", "short"): 6e-6, ("effective", "short"): 0.0, ("symbol", "short"): 0.0},
                   find(DEFAULT_BUDGETS, "IB", "NDR", "rs544_plr", "optical", "7nm"))
    sec = BerSection([p], {p.key: v})
    return render(Snapshot(time=1.0, findings=[], sources={}, builds=BuildStats(), ber=sec)).decode()


def vitals_exposition() -> str:
    """A fabric collector's exposition of one switch's vitals as judged (the recorded fabric bundles predate
    the vitals source): what the vitals alert reads, from the real catalogue."""
    from fabricmon.exporter.render import render
    from fabricmon.model.fabric import FabricSection, SwitchNode
    from fabricmon.model.snapshot import BuildStats, Snapshot
    from fabricmon.model.vitals import Vital
    sec = FabricSection(kind="ethernet")
    sec.switches["0c42a1000100"] = SwitchNode("0c42a1000100", "leaf01", 0, None, kind="ethernet", address="10.0.0.1")
    sec.vitals["0c42a1000100"] = [Vital("100602111", "Fan Tray 2 Fan 1 Sensor 1", "fan", "ENTITY-SENSOR-MIB",
                                        "nonoperational", 2, 0.0, "rpm"),
                                  Vital("100006001", "Cpu temp sensor", "temperature", "ENTITY-SENSOR-MIB", "ok", 0,
                                        53.3, "celsius")]
    return render(Snapshot(time=1.0, findings=[], sources={}, builds=BuildStats(), fabric=sec)).decode()


def remediation_exposition() -> str:
    """A collector's exposition with remediation acting (a port isolated, the breaker tripped, a step failing):
    what the remediation alerts read (the bundles are replays: no Remediator runs on them)."""
    from fabricmon.exporter.render import render
    from fabricmon.model.remediation import Action, Breaker, RemediationSection
    from fabricmon.model.snapshot import BuildStats, Snapshot
    a = Action("p1", "isolate_port", "0000000000200002:3", "leaf01 port 3", "act", "done", "CRITICAL symbol_errors",
               "symbol_errors", 3600.0, 1.0, 1.0, effective=1.0, clean_since=1.0, guid="0000000000200002", port=3,
               switch="leaf01")
    b = Action("p2", "isolate_port", "0000000000200002:4", "leaf01 port 4", "act", "todo", "CRITICAL symbol_errors",
               "symbol_errors", 3600.0, 1.0, 1.0, attempts=2, error="unanswered", guid="0000000000200002", port=4)
    rem = RemediationSection("fabric", {"isolate_port": "act", "drain_node": "off"}, actions=(a, b),
                             counts={("isolate_port", "act", "done"): 1},
                             breakers={"isolate_port": Breaker(10, 10, 1, True, "max(10, ...)")})
    return render(Snapshot(time=1.0, findings=[], sources={}, builds=BuildStats(), remediation=rem)).decode()


def exported_names(text: str) -> set[str]:
    """Every sample name in an exposition (histograms give _bucket/_sum/_count)."""
    return set(re.findall(r"^([a-zA-Z_:][a-zA-Z0-9_:]*)[{ ]", text, re.M))


def load_generator(relpath: str):
    """Import one of the committed generator scripts (prometheus/build_rules.py,
    grafana/build_dashboards.py) by its path, without touching sys.path."""
    import importlib.util
    import sys
    path = ROOT / relpath
    name = f"fabricmon_{path.stem}"
    if name in sys.modules:
        return sys.modules[name]
    spec = importlib.util.spec_from_file_location(name, path)
    mod = importlib.util.module_from_spec(spec)
    sys.modules[name] = mod
    spec.loader.exec_module(mod)
    return mod


def make_apt_packages(target: str, **variables: str) -> set[str]:
    """The apt packages `make TARGET` checks with dpkg and installs when missing (read through make's own
    dry run, `make -n`, not by parsing the Makefile). CI (.ci/run) runs `make test`."""
    exe = shutil.which("make")
    if not exe:
        unavailable("make (Debian package make) is needed")
    argv = [exe, "-n", "-B", "-C", str(ROOT), target, *(f"{k}={v}" for k, v in variables.items())]
    out = subprocess.run(argv, capture_output=True, text=True, timeout=60, check=True).stdout
    m = re.search(r"for p in ([^;]*); do dpkg -s", out)
    assert m, out
    return set(m.group(1).split())
