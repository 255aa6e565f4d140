"""What one rail costs a store, measured, and what a collector's start costs (issue 49; docs/scale.md):

- the start-up: one `fabricmon fabric run` (a cold start: no topology cache, discovery included) on a
  simulator already running (`--attach`: bench/sim_hold.py's environment, the SuperPOD-size fabric by
  default), the wall and CPU seconds until /readyz says 200 (the first sweep read a switch) and until its
  first exposition holds the sweep, then its second sweep's;
- the series: after two sweeps, one scrape of every counter set on its own (`collect[]=SET`), each series
  counted by what it is about: a switch port (it has `switch_guid` and `port`), a switch (`switch_guid`, no
  `port`) or the collector (neither); divided by the cabled switch ports and the switches of the fabric;
- the node daemon's series a host port, from `fabricmon run --replay` of a recorded DGX H100 (8 compute
  ports and their HCAs) for every set;
- the table for a cluster of `--rails` rails of `--host-ports` host ports each with `--switch-ports`
  cabled switch ports and `--switches` switches a rail (defaults: the issue's 100,000-GPU cluster: 8 x
  100,000 host ports, 270,000 cabled switch ports and 6,750 40-port switches a rail, 100,000 hosts of 8 compute
  ports, one a rail), and samples/s at
  `--interval` (15 s).

    python bench/scale_cardinality.py --attach /tmp/superpod-env.json [--json OUT]
"""

from __future__ import annotations

import argparse
import json
import os
import re
import signal
import subprocess
import sys
import tempfile
import time
import urllib.request
from collections import Counter
from pathlib import Path

import psutil

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
sys.path.insert(0, str(ROOT))

from fabricmon.exporter.counter_sets import SETS  # noqa: E402

BUNDLE = ROOT / "tests" / "fixtures" / "bundles" / "dgx-h100"
SERIES = re.compile(r"^([a-zA-Z_:][a-zA-Z0-9_:]*)(\{.*\})? \S+$")


def free_port() -> int:
    import socket
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def get(port: int, path: str) -> tuple[int, bytes]:
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}{path}", timeout=120) as r:
            return r.status, bytes(r.read())
    except urllib.error.HTTPError as e:
        return e.code, b""
    except OSError:             # not listening yet
        return 0, b""


def kinds(body: str, what: tuple[str, ...]) -> Counter:
    """Series counted by what each is about: the first label of `what` it carries ('' if none)."""
    out: Counter = Counter()
    for line in body.splitlines():
        m = SERIES.match(line)
        if not m:
            continue
        labels = m[2] or ""
        out[next((w for w in what if all(f'{x}="' in labels for x in w.split("+"))), "")] += 1
    return out


def value(body: str, name: str) -> float | None:
    m = re.search(rf"^{re.escape(name)} (\S+)$", body, re.M)
    return float(m[1]) if m else None


def stop(proc: subprocess.Popen) -> None:
    os.killpg(proc.pid, signal.SIGTERM)
    try:
        proc.wait(20)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait()


def collector(env: dict[str, str], work: Path) -> dict:
    port = free_port()
    cfg = work / "fabricmon.yml"
    (work / "cache").mkdir(parents=True)
    cfg.write_text(json.dumps({"paths": {"state_dir": str(work)}, "logging": {"level": "warning"},
                               "fabric": {"cache_dir": str(work / "cache"), "sweep_method": "mad",
                                          "sweep_interval": 15.0}}))
    t0 = time.monotonic()
    proc = subprocess.Popen([sys.executable, "-m", "fabricmon", "fabric", "run", "--config", str(cfg), "--listen",
                             f"127.0.0.1:{port}"], env=env, cwd=work, stdout=open(work / "log", "wb"),
                            stderr=subprocess.STDOUT, start_new_session=True)
    ps = psutil.Process(proc.pid)
    out: dict = {}
    try:
        while "ready_s" not in out or "first_s" not in out:
            if proc.poll() is not None:
                raise SystemExit(f"the collector exited: {(work / 'log').read_text()[-3000:]}")
            code, _ = get(port, "/readyz") if "ready_s" not in out else (0, b"")
            if code == 200:
                out["ready_s"], out["ready_cpu_s"] = time.monotonic() - t0, sum(ps.cpu_times()[:2])
            if code != 0 or "ready_s" in out:
                _, body = get(port, "/metrics")
                if value(body.decode(), "fabricmon_fabric_sweep_duration_seconds") is not None and "first_s" not in out:
                    out["first_s"], out["first_cpu_s"] = time.monotonic() - t0, sum(ps.cpu_times()[:2])
                    out["first_sweep_s"] = value(body.decode(), "fabricmon_fabric_sweep_duration_seconds")
            if time.monotonic() - t0 > 900:
                raise SystemExit("no sweep in 900 s")
            time.sleep(0.2)
        while True:         # the second sweep: what a steady scrape holds
            _, body = get(port, "/metrics")
            if (value(body.decode(), 'fabricmon_source_runs_total{source="sweep"}') or 0) >= 2:
                break
            time.sleep(1)
        out["rss_mib"] = ps.memory_info().rss / 2**20
        text = body.decode()
        out["ports"] = int(value(text, "fabricmon_fabric_ports") or 0)
        out["cabled"] = len(re.findall(r'^fabricmon_fabric_link_info\{[^}]*role="(?!unconnected")', text, re.M))
        out["switches"] = int(value(text, "fabricmon_fabric_switches") or 0)
        out["sets"] = {}
        for name in SETS:
            code, b = get(port, f"/metrics?collect[]={name}")
            if code == 200:
                out["sets"][name] = dict(kinds(b.decode(), ("switch_guid+port", "switch_guid")))
        return out
    finally:
        stop(proc)


def node(work: Path) -> dict:
    port = free_port()
    proc = subprocess.Popen([sys.executable, "-m", "fabricmon", "run", "--replay", str(BUNDLE), "--listen",
                             f"127.0.0.1:{port}", "--log-level", "warning"], cwd=ROOT,
                            stdout=open(work / "node.log", "wb"), stderr=subprocess.STDOUT, start_new_session=True)
    try:
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            try:
                code, body = get(port, "/metrics")
                if b"fabricmon_snapshot_timestamp_seconds" in body:
                    break
            except OSError:
                pass
            time.sleep(0.5)
        ports = len(set(re.findall(r'^fabricmon_ib_port_up\{device="([^"]+)",port="(\d+)"\}', body.decode(), re.M)))
        sets = {}
        for name in SETS:
            code, b = get(port, f"/metrics?collect[]={name}")
            if code == 200:
                sets[name] = dict(kinds(b.decode(), ("device+port", "device")))
        return {"ib_ports": ports, "sets": sets}
    finally:
        stop(proc)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--attach", required=True, help="the simulator's client environment (JSON)")
    ap.add_argument("--rails", type=int, default=8)
    ap.add_argument("--host-ports", type=int, default=100_000)
    ap.add_argument("--switch-ports", type=int, default=270_000, help="cabled switch ports a rail")
    ap.add_argument("--switches", type=int, default=6_750, help="switches a rail")
    ap.add_argument("--hosts", type=int, default=100_000, help="hosts (node daemons) in the cluster: 8 compute ports "
                                                              "each, one a rail, by default")
    ap.add_argument("--interval", type=float, default=15.0)
    ap.add_argument("--json", help="write the measurements here too")
    args = ap.parse_args()
    env = dict(os.environ, **{k: v for k, v in json.loads(Path(args.attach).read_text()).items()
                              if k in ("IBSIM_SOCKNAME", "SIM_HOST", "LD_PRELOAD", "PATH")})
    with tempfile.TemporaryDirectory() as tmp:
        c = collector(env, Path(tmp) / "collector")
        n = node(Path(tmp))
    print(f"start-up (cold: discovery included), {c['switches']} switches, {c['ports']} switch ports, {c['cabled']} "
          "cabled: "
          f"/readyz 200 after {c['ready_s']:.1f} s ({c['ready_cpu_s']:.1f} CPU-s), the first sweep served after "
          f"{c['first_s']:.1f} s ({c['first_cpu_s']:.1f} CPU-s; the sweep itself {c['first_sweep_s']:.1f} s); RSS "
          f"after two sweeps {c['rss_mib']:.0f} MiB\n")
    print("| set | switch-port series a cabled port | switch series a switch | collector series | node series a host "
          "port | node series a host (not a port) |")
    print("|---|---|---|---|---|---|")
    totals = {}
    for name in SETS:
        s, h = c["sets"].get(name, {}), n["sets"].get(name, {})
        per_port = s.get("switch_guid+port", 0) / max(c["cabled"], 1)
        per_switch = s.get("switch_guid", 0) / max(c["switches"], 1)
        per_host_port = h.get("device+port", 0) / max(n["ib_ports"], 1)
        per_host = h.get("device", 0) + h.get("", 0)
        totals[name] = (per_port, per_switch, s.get("", 0), per_host_port, per_host)
        print(f"| `{name}` | {per_port:.2f} | {per_switch:.2f} | {s.get('', 0)} | {per_host_port:.2f} | {per_host} |")
    host_ports_per_host = args.host_ports * args.rails / args.hosts
    print(f"\nthe cluster: {args.rails} rails x {args.host_ports:,} host ports, {args.switch_ports:,} cabled switch "
          f"ports and {args.switches:,} switches a rail, {args.hosts:,} hosts ({host_ports_per_host:.0f} compute "
          f"ports each), one scrape each {args.interval:g} s\n")
    print("| set | switch ports | switches | node daemons | series in all | samples/s |")
    print("|---|---|---|---|---|---|")
    for name, (pp, ps_, fixed, php, ph) in totals.items():
        sw_ports = pp * args.switch_ports * args.rails
        sw = ps_ * args.switches * args.rails + fixed * args.rails
        nodes = php * args.host_ports * args.rails + ph * args.hosts
        total = sw_ports + sw + nodes
        print(f"| `{name}` | {sw_ports:,.0f} | {sw:,.0f} | {nodes:,.0f} | {total:,.0f} | {total / args.interval:,.0f} |")
    # what the shipped recording rules write, by what each output series is about (its name's level prefix:
    # one series per such thing per rule, counted from the rules file)
    import yaml
    from fabricmon.deploy import RULES
    levels: Counter = Counter()
    for group in yaml.safe_load(RULES.read_text())["groups"]:
        for rule in group["rules"]:
            if "record" in rule:
                levels[rule["record"].split(":", 1)[0]] += 1
    print("\nrecording rules (their output series per thing, from the rules file): "
          + ", ".join(f"{k} {v}" for k, v in sorted(levels.items())))
    if args.json:
        Path(args.json).write_text(json.dumps({"collector": c, "node": n}, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
