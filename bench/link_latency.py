"""How long a dead inter-switch cable takes to reach the collector's exposition on the SuperPOD-size fabric
(issue 51), and what a faster state-only read would cost.

ibsim with the three-tier SuperPOD-size fat tree (bench/superpod_net.py: 650 switches, 26,000 switch ports,
4,420 CAs) and a running opensm; `fabricmon fabric run` under umad2sim on a CA at its defaults (15 s sweeps;
`--sweep-interval` to change). ibsim drops the SM's reports (docs/latency.md), so what is measured is the
sweep path: the subscription is accepted, the first change no report announced demotes the mode to sweep
(the collector's log says so), and the next sweep publishes the port.

Per trial: a random leaf-spine cable, pulled (`Unlink` at the leaf's end) at a random moment (a uniform wait
of up to one sweep interval after the last trial settled); the findings API (`/api/v1/findings`, the same
snapshot as the exposition) is asked every `--poll` s until the leaf's port is reported down, and the state
set (`/metrics?collect[]=state`) is scraped once then to confirm `fabricmon_fabric_port_up` reads 0 for it.
The latency is the first sight less the Unlink; then the cable goes back (`ReLink`) and the trial waits for
the port to read up again.

Then the cost of a state-only pass, the fast path a shorter interval would need: PortInfo of every cabled
switch port (what the sweep's link state reads: sources.infiniband.mad.plan_targets' state ports), one MAD
engine run, in a process of its own under umad2sim, `--state-passes` times: its wall and CPU seconds.

    python bench/link_latency.py [--trials 10] [--sweep-interval 15] [--poll 0.2] [--state-passes 5]
        [--net superpod|FILE]

Prints each trial, the median and max, and the state-only pass's cost; docs/latency.md has the numbers.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import re
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
import urllib.request
from pathlib import Path

import psutil

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
sys.path.insert(0, str(HERE.parent))

from superpod_net import superpod_netfile  # noqa: E402

from fabricmon.sim.fabric import SimFabric  # noqa: E402
from fabricmon.sim.ports import free_port  # noqa: E402

LEAF_LINK = re.compile(r'^\[(\d+)\]\t"(pod\d+-spine\d+)"\[(\d+)\]', re.M)


def leaf_uplinks(net: str) -> list[tuple[str, int, str, int]]:
    """(leaf, its port, spine, the spine's port) of every leaf-spine cable of the net file."""
    out = []
    leaf = None
    for line in net.splitlines():
        m = re.match(r'^Switch\t\d+ "([^"]+)"', line)
        if m:
            leaf = m.group(1) if "-leaf" in m.group(1) else None
            continue
        if leaf:
            m = LEAF_LINK.match(line)
            if m:
                out.append((leaf, int(m.group(1)), m.group(2), int(m.group(3))))
    return out


def get(url: str, timeout: float = 60) -> bytes:
    with urllib.request.urlopen(url, timeout=timeout) as r:
        return r.read()


def reported_down(base: str, guid: str, port: int) -> bool:
    """Whether the findings name that switch port down (degraded_link)."""
    doc = json.loads(get(f"{base}/api/v1/findings"))
    return any(f.get("check") == "degraded_link" and f.get("device") == guid and f.get("port") == port
               and "down" in f.get("message", "") for f in doc.get("findings", []))


def port_up(base: str, guid: str, port: int) -> float | None:
    body = get(f"{base}/metrics?collect[]=state", timeout=120).decode()
    m = re.search(rf'^fabricmon_fabric_port_up\{{port="{port}",switch_guid="{guid}"\}} (\S+)$', body, re.M)
    return float(m.group(1)) if m else None


def guids(base: str) -> dict[str, str]:
    """Switch name -> GUID, from the state set's switch_info."""
    body = get(f"{base}/metrics?collect[]=state", timeout=120).decode()
    return {m.group(1): m.group(2) for m in re.finditer(
        r'^fabricmon_fabric_switch_info\{level="\d+",switch="([^"]+)",switch_guid="([0-9a-f]+)"\}', body, re.M)}


def demotions(log_text: str) -> dict[str, int]:
    """The reasons the collector's log gives for link state from the sweep (the events source's, and the model's
    demotion when a sweep saw a change no report announced), each with how often."""
    out: dict[str, int] = {}
    for ln in log_text.splitlines():
        if "the subnet manager reported nothing" in ln:
            out["the sweep saw a change no report announced"] = out.get("the sweep saw a change no report announced", 0) + 1
            continue
        if "link state from the sweep" not in ln:
            continue
        try:
            why = str(json.loads(ln).get("reason") or "")
        except ValueError:
            why = ln.split("reason=", 1)[-1].strip()
        why = re.sub(r"\b\d+(\.\d+)?\b", "N", why)[:160]
        out[why] = out.get(why, 0) + 1
    return out


def state_pass_child(topology: str, passes: int) -> int:
    """Under umad2sim: PortInfo of every cabled switch port (the sweep's state ports), one engine run a pass."""
    from fabricmon.host.io import LiveIO
    from fabricmon.host.mad import MadSettings, Request
    from fabricmon.model.fabric import build_topology
    from fabricmon.parsers.ibnetdiscover import parse_ibnetdiscover
    from fabricmon.sources.infiniband.mad import codec

    topo = build_topology(parse_ibnetdiscover(Path(topology).read_text()))
    io = LiveIO()
    io.mad_open(MadSettings(32, 4, 200, 2))
    reqs = [Request(g, topo.switches[g].lid or 0, bytes(codec.encode_port_info(p, 0)))
            for (g, p), info in sorted(topo.ports.items()) if info.link is not None and topo.switches[g].lid]
    rows = []
    for _ in range(passes):
        t0, c0 = time.monotonic(), time.process_time()
        answers = io.mad_run(reqs, time.monotonic() + 60)
        rows.append({"wall": time.monotonic() - t0, "cpu": time.process_time() - c0, "mads": len(reqs),
                     "answered": sum(a is not None for a in answers)})
    print(json.dumps(rows))
    return 0


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--net", default="superpod")
    ap.add_argument("--trials", type=int, default=10)
    ap.add_argument("--sweep-interval", type=float, default=15.0)
    ap.add_argument("--poll", type=float, default=0.2, help="seconds between the findings API's reads")
    ap.add_argument("--state-passes", type=int, default=5)
    ap.add_argument("--seed", type=int, default=None)
    ap.add_argument("--state-pass-child", nargs=2, help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.state_pass_child:
        return state_pass_child(args.state_pass_child[0], int(args.state_pass_child[1]))
    rng = random.Random(args.seed)
    net = superpod_netfile() if args.net == "superpod" else Path(args.net).read_text()
    cables = leaf_uplinks(net)
    work = Path(tempfile.mkdtemp(prefix="fabricmon-latency-"))
    t0 = time.monotonic()
    fab = SimFabric(net, work / "sim").start(timeout=1800)
    proc = log = None
    rows = []
    try:
        fab.start_sm(timeout=1800)
        host = fab.hosts[-1]
        print(f"# ibsim and opensm up in {time.monotonic() - t0:.0f} s; {len(cables)} leaf-spine cables; "
              f"the collector on {host}", file=sys.stderr, flush=True)
        (work / "state").mkdir()
        cfg = work / "fabricmon.yml"
        cfg.write_text(json.dumps({"paths": {"state_dir": str(work / "state")},
                                   "fabric": {"sweep_interval": args.sweep_interval, "cache_dir": str(work)}}))
        port = free_port()
        log = open(work / "collector.log", "wb")
        proc = subprocess.Popen([sys.executable, "-m", "fabricmon", "fabric", "run", "--config", str(cfg), "--listen",
                                 f"127.0.0.1:{port}"], env=fab.env(host), stdout=log, stderr=subprocess.STDOUT,
                                start_new_session=True, cwd=work)
        base = f"http://127.0.0.1:{port}"
        ps = psutil.Process(proc.pid)
        deadline = time.monotonic() + 900
        names: dict[str, str] = {}
        while len(names) < 600:
            if time.monotonic() > deadline or proc.poll() is not None:
                raise SystemExit(f"the collector did not publish the fabric; its log {work / 'collector.log'}")
            try:
                names = guids(base)
            except OSError:
                pass
            time.sleep(2)
        time.sleep(2 * args.sweep_interval)                          # past the first full sweeps
        c0, w0 = ps.cpu_times(), time.monotonic()
        for i in range(args.trials):
            leaf, lport, spine, sport = rng.choice(cables)
            time.sleep(rng.uniform(0, args.sweep_interval))
            t = time.monotonic()
            fab.unlink(leaf, lport)
            while not reported_down(base, names[leaf], lport):
                if time.monotonic() - t > 4 * args.sweep_interval + 30:
                    raise SystemExit(f"{leaf} port {lport} never reported down; log {work / 'collector.log'}")
                time.sleep(args.poll)
            took = time.monotonic() - t
            up = port_up(base, names[leaf], lport)
            rows.append({"trial": i + 1, "cable": f"{leaf}[{lport}] - {spine}[{sport}]", "latency": took, "port_up": up,
                         "load": os.getloadavg()[0]})
            print(f"trial {i + 1}: {leaf}[{lport}] - {spine}[{sport}] down after {took:.2f} s (port_up {up}); "
                  f"load {rows[-1]['load']:.2f}", file=sys.stderr, flush=True)
            fab.console(f'ReLink "{leaf}"[{lport}]')
            t = time.monotonic()
            while reported_down(base, names[leaf], lport):
                if time.monotonic() - t > 4 * args.sweep_interval + 60:
                    raise SystemExit(f"{leaf} port {lport} never came back; log {work / 'collector.log'}")
                time.sleep(1.0)
        c1, w1 = ps.cpu_times(), time.monotonic()
        collector_cpu = (c1.user + c1.system - c0.user - c0.system) / (w1 - w0) * args.sweep_interval
        demoted = demotions((work / "collector.log").read_text(errors="replace"))
        proc.terminate()
        proc.wait(30)
        topo = work / "topology.txt"
        r = fab.run_tool(host, "ibnetdiscover", timeout=900)
        topo.write_text(r.stdout)
        child = subprocess.run([sys.executable, __file__, "--state-pass-child", str(topo), str(args.state_passes)],
                               env=fab.env(host), capture_output=True, text=True, timeout=1800)
        passes = json.loads(child.stdout.strip().splitlines()[-1]) if child.returncode == 0 else []
        if child.returncode != 0:
            print(child.stderr[-2000:], file=sys.stderr)
    finally:
        if proc is not None and proc.poll() is None:
            proc.kill()
            proc.wait()
        if log is not None:
            log.close()
        fab.stop()
        shutil.rmtree(work, ignore_errors=True)
    lat = [r["latency"] for r in rows]
    print(f"\n{args.net} fabric, `fabricmon fabric run` sweeping every {args.sweep_interval:g} s, the findings API read "
          f"every {args.poll:g} s; the collector's CPU over the trials {collector_cpu:.2f} CPU-s per "
          f"{args.sweep_interval:g} s\n")
    print("link state from the sweep, the collector's log says why (how often): "
          + ("; ".join(f"{why} ({n})" for why, n in demoted.items()) if demoted else "never") + "\n")
    print("| trial | cable | Unlink -> reported down, s | port_up then | load |")
    print("|---|---|---|---|---|")
    for r in rows:
        print(f"| {r['trial']} | {r['cable']} | {r['latency']:.2f} | {r['port_up']} | {r['load']:.2f} |")
    if lat:
        print(f"\nmedian {statistics.median(lat):.2f} s, max {max(lat):.2f} s, min {min(lat):.2f} s over {len(lat)} trials")
    if passes:
        print(f"\nstate-only pass (PortInfo of every cabled switch port, {passes[0]['mads']} MADs, one engine run), "
              f"{len(passes)} passes: wall " + ", ".join(f"{p['wall']:.2f}" for p in passes) + " s; CPU "
              + ", ".join(f"{p['cpu']:.2f}" for p in passes) + " s; answered "
              + ", ".join(str(p["answered"]) for p in passes))
        cpu = statistics.median(p["cpu"] for p in passes)
        wall = statistics.median(p["wall"] for p in passes)
        for every in (1.0, 2.0, 5.0):
            print(f"  every {every:g} s: {cpu / every * 100:.0f} % of a core, published within {every + wall:.1f} s "
                  f"(median about {every / 2 + wall:.1f} s)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
