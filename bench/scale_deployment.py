"""The reference deployment's store side at SuperPOD size (issue 49; docs/scale.md): two shards x two replicas of
`fabricmon fabric run` on a simulator already running (`--attach`: bench/sim_hold.py's environment, the
SuperPOD-size fabric by default), scraped by vmagent members with replication factor 2 into one
VictoriaMetrics with -dedup.minScrapeInterval, from fabricmon/deploy/scale's files (vmagent.yml, its
inventory, deployment.yml's command lines: the addresses and `--interval` filled in, nothing else changed).
tests/ship/test_scale_e2e.py runs the whole deployment (rules, the Alertmanager pair, a killed replica) on a
7-switch fabric; this runs its series side where the series are many:

- per shard, the series in the store (the job's, less the scraper's own and the recording rules') against
  one of its collectors' own exposition: the same set, and the sum of both shards within 1 % of the two
  shards' default sets;
- the samples the store kept per series over a window, against the four written (two replicas, two scrapers);
- the collectors' RSS and CPU per interval, vmagent's and VictoriaMetrics' RSS.

    python bench/scale_deployment.py --attach /tmp/superpod-env.json [--interval 15] [--windows 4]
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
import urllib.parse
import urllib.request
from collections import Counter
from pathlib import Path

import psutil
import yaml

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
sys.path.insert(0, str(ROOT))

from fabricmon.deploy import SCALE_DEPLOYMENT, SCALE_FABRIC_TARGETS, SCALE_NODE_TARGETS, SCALE_VMAGENT  # noqa: E402

SCRAPER = {"up", "scrape_duration_seconds", "scrape_samples_scraped", "scrape_samples_post_metric_relabeling",
           "scrape_series_added", "scrape_timeout_seconds"}
LINE = re.compile(r"^([a-zA-Z_:][a-zA-Z0-9_:]*)(?:\{(.*)\})? \S+$")
LABEL = re.compile(r'([a-zA-Z_][a-zA-Z0-9_]*)="((?:[^"\\]|\\.)*)"')


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def get(url: str, timeout: float = 300) -> bytes:
    with urllib.request.urlopen(url, timeout=timeout) as r:
        return bytes(r.read())


def exposition_series(body: str, extra: dict[str, str]) -> set[tuple]:
    out = set()
    for line in body.splitlines():
        m = LINE.match(line)
        if m:
            labels = {k: v.replace('\\"', '"').replace("\\\\", "\\") for k, v in LABEL.findall(m[2] or "") if v != ""}
            out.add((m[1], tuple(sorted({**labels, **extra}.items()))))
    return out


def argv(component: str, **values: str) -> list[str]:
    line = yaml.safe_load(SCALE_DEPLOYMENT.read_text())[component]
    args = [a.format(**values) for a in line[1:]]
    if line[0] == "fabricmon":
        return [sys.executable, "-m", "fabricmon", *args]
    exe = shutil.which(line[0])
    if exe is None:
        raise SystemExit(f"{line[0]} not found (Debian package victoria-metrics)")
    return [exe, *args]


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--attach", required=True, help="the simulator's client environment (JSON)")
    ap.add_argument("--interval", type=float, default=15.0, help="sweep, scrape and dedup interval (s)")
    ap.add_argument("--windows", type=int, default=4, help="intervals measured once every series is in")
    args = ap.parse_args()
    env = dict(os.environ, **{k: v for k, v in json.loads(Path(args.attach).read_text()).items()
                              if k in ("IBSIM_SOCKNAME", "SIM_HOST", "LD_PRELOAD", "PATH")})
    interval = f"{args.interval:g}s"
    procs: list[subprocess.Popen] = []
    with tempfile.TemporaryDirectory() as tmp:
        work = Path(tmp)

        def start(name: str, cmd: list[str], **kw) -> subprocess.Popen:
            p = subprocess.Popen(cmd, stdout=open(work / f"{name}.log", "wb"), stderr=subprocess.STDOUT,
                                 start_new_session=True, **kw)
            procs.append(p)
            return p
        try:
            collectors: dict[tuple[int, str], tuple[int, subprocess.Popen]] = {}
            for shard in (0, 1):
                for replica in ("a", "b"):
                    d = work / f"shard{shard}{replica}"
                    (d / "fabric").mkdir(parents=True)
                    cfg = d / "fabricmon.yml"
                    cfg.write_text(json.dumps({"paths": {"state_dir": str(d)}, "logging": {"level": "warning"},
                                               "fabric": {"cache_dir": str(d / "fabric"), "sweep_method": "mad",
                                                          "sweep_interval": args.interval}}))
                    port = free_port()
                    collectors[(shard, replica)] = (port, start(f"shard{shard}{replica}", [
                        *argv("fabricmon-fabric", shard=str(shard), shards="2", listen=f"127.0.0.1:{port}"),
                        "--config", str(cfg)], env=env, cwd=d))
            conf = work / "conf"
            conf.mkdir()
            targets = json.loads(SCALE_FABRIC_TARGETS.read_text())
            for group in targets:
                shard = int(group["labels"]["instance"].rsplit("shard", 1)[1])
                group["targets"] = [f"127.0.0.1:{collectors[(shard, group['labels']['replica'])][0]}"]
            (conf / SCALE_FABRIC_TARGETS.name).write_text(json.dumps(targets))
            (conf / SCALE_NODE_TARGETS.name).write_text("[]")
            scrape = yaml.safe_load(SCALE_VMAGENT.read_text())
            scrape["global"].update(scrape_interval=interval, scrape_timeout=interval)
            (conf / SCALE_VMAGENT.name).write_text(json.dumps(scrape))
            vm_port = free_port()
            store = f"http://127.0.0.1:{vm_port}"
            vm = start("victoria-metrics", [*argv("victoria-metrics", listen=f"127.0.0.1:{vm_port}",
                                                  data=str(work / "vm"), scrape_interval=interval),
                                            "-search.latencyOffset=1s", "-search.maxUniqueTimeseries=2000000", "-search.maxSeries=2000000",
                                            "-loggerLevel=WARN"])
            agents = [start(f"vmagent{m}", [*argv("vmagent", listen=f"127.0.0.1:{free_port()}", config_dir=str(conf),
                                                  members="2", member=str(m), store=store,
                                                  data=str(work / f"vmagent{m}")), "-loggerLevel=WARN"])
                      for m in (0, 1)]
            t0 = time.monotonic()
            while True:         # every collector swept
                done = 0
                for (shard, replica), (port, p) in collectors.items():
                    if p.poll() is not None:
                        raise SystemExit(f"collector {shard}{replica} exited: {(work / f'shard{shard}{replica}.log').read_text()[-2000:]}")
                    try:
                        done += b"fabricmon_fabric_sweep_duration_seconds " in get(f"http://127.0.0.1:{port}/metrics")
                    except OSError:
                        pass
                if done == 4:
                    break
                if time.monotonic() - t0 > 900:
                    raise SystemExit("the collectors did not sweep in 900 s")
                time.sleep(2)
            print(f"# four collectors swept after {time.monotonic() - t0:.0f} s", file=sys.stderr)
            time.sleep(3 * args.interval)
            ps = {k: psutil.Process(p.pid) for k, (_, p) in collectors.items()}
            cpu0 = {k: sum(x.cpu_times()[:2]) for k, x in ps.items()}
            w0 = time.monotonic()
            time.sleep(args.windows * args.interval)
            cpu = {k: (sum(x.cpu_times()[:2]) - cpu0[k]) * args.interval / (time.monotonic() - w0) for k, x in ps.items()}
            up = json.loads(get(f"{store}/api/v1/query?" + urllib.parse.urlencode({"query": 'up{job="fabricmon-fabric"}'})))
            print("# up: " + ", ".join(f"{r['metric']['instance']}/{r['metric'].get('replica')}={r['value'][1]}"
                                       for r in up["data"]["result"]), file=sys.stderr)
            rows = []
            owns = {}
            t_own = time.time()
            for shard in (0, 1):
                owns[shard] = exposition_series(get(f"http://127.0.0.1:{collectors[(shard, 'a')][0]}/metrics").decode(),
                                                {"instance": f"rail0-shard{shard}", "job": "fabricmon-fabric",
                                                 "fabric": "rail0"})
            time.sleep(2 * args.interval)           # what the expositions held is in the store after its next scrapes
            for shard in (0, 1):
                own = owns[shard]
                q = urllib.parse.urlencode({"match[]": f'{{job="fabricmon-fabric",instance="rail0-shard{shard}"}}',
                                            "start": f"{t_own:.0f}"})
                held = set()
                for m in json.loads(get(f"{store}/api/v1/series?{q}"))["data"]:
                    name = m.pop("__name__")
                    if name not in SCRAPER and ":" not in name:
                        held.add((name, tuple(sorted(m.items()))))
                rows.append((shard, len(own), len(held), len(own - held), len(held - own)))
                missing = Counter(name for name, _ in own - held)
                if missing:
                    print(f"# shard {shard}: in its exposition, not in the store: {missing.most_common(6)}", file=sys.stderr)
            # the raw samples the store kept of one series over the measured windows
            span = args.windows * args.interval
            q = urllib.parse.urlencode({"match[]": 'fabricmon_fabric_switches{instance="rail0-shard1"}',
                                        "start": f"{time.time() - span:.0f}"})
            rows_ts = [json.loads(ln)["timestamps"] for ln in get(f"{store}/api/v1/export?{q}").decode().splitlines()]
            kept = len(rows_ts[0]) if len(rows_ts) == 1 else f"{len(rows_ts)} series"
            print(f"two shards x two replicas of the SuperPOD-size fabric, {len(agents)} vmagent members "
                  f"(replication factor 2), one VictoriaMetrics, every {interval}; load average "
                  f"{' '.join(f'{x:.1f}' for x in os.getloadavg())}\n")
            print("| shard | series in one collector's exposition | in the store | only in the exposition | only in the store |")
            print("|---|---|---|---|---|")
            for r in rows:
                print("| " + " | ".join(f"{x:,}" for x in r) + " |")
            own_sum, held_sum = sum(r[1] for r in rows), sum(r[2] for r in rows)
            print(f"\nthe store holds {held_sum:,} series for the two shards' {own_sum:,} "
                  f"({100 * (held_sum - own_sum) / own_sum:+.2f} %); samples kept of fabricmon_fabric_switches over "
                  f"{args.windows} intervals: {kept} (four written an interval)")
            print("\n| process | RSS MiB | CPU s per interval |\n|---|---|---|")
            for k, x in ps.items():
                print(f"| collector shard {k[0]} replica {k[1]} | {x.memory_info().rss / 2**20:.0f} | {cpu[k]:.2f} |")
            for name, p in [("victoria-metrics", vm), *((f"vmagent{i}", a) for i, a in enumerate(agents))]:
                print(f"| {name} | {psutil.Process(p.pid).memory_info().rss / 2**20:.0f} | |")
        finally:
            for p in reversed(procs):
                if p.poll() is None:
                    os.killpg(p.pid, signal.SIGTERM)
            for p in procs:
                try:
                    p.wait(20)
                except subprocess.TimeoutExpired:
                    os.killpg(p.pid, signal.SIGKILL)
                    p.wait()
    return 0


if __name__ == "__main__":
    sys.exit(main())
