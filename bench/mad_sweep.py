"""The MAD engine's sweep on the 400-switch director in ibsim, in one run (one simulator, one opensm):

- a whole sweep (counters of every switch port and the link state of every cabled one, through the
  in-process engine) against one `ibqueryerrors --data` pass, alternated, medians;
- the tools' sweep (fabric.sweep_method tools: the infiniband-diags path) in the same run, for reference;
- each 1/4 shard against the whole sweep, and that the four shards together report every switch
  exactly once;
- wall, CPU (the collector process's own: the engine runs in it; the tools path adds its children's),
  RSS, series count and exposition size, each mode in its own collector process;
- 30% MAD loss (ibsim console `Error "switch"[port] 30` on every port of one switch): over several
  sweeps no cabled port reads down and no switch loses its name;
- the far ends of the host links (one PortInfo MAD per CA port, once): how many a sweep sends.

The collector processes run under umad2sim (LD_PRELOAD and IBSIM_SOCKNAME from the simulator), as
a collector must for its own libibumad to reach ibsim (docs/mad-engine.md).

    python bench/mad_sweep.py [--repeat 5] [--net FILE]

Without ../shared/captures a generated 300-switch fat tree stands in for the director."""

from __future__ import annotations

import argparse
import json
import re
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

CAPTURE = Path(__file__).resolve().parents[1].parent / "shared" / "captures" / "ibnetdiscover" / "director-hdr-400sw.ibsim.net"


def inner(mode: str, repeat: int, state: str, baseline: bool) -> dict:
    """One collector (this process, started under umad2sim): discovery once, then `repeat` sweeps,
    each followed by one `ibqueryerrors --data` pass when `baseline`."""
    from fabricmon.config import from_dict
    from fabricmon.exporter import render
    from fabricmon.host import LiveIO
    from fabricmon.pipeline.fabric import fabric_pipeline
    fabric = {"cache_dir": state, "shard": "0/1", "sweep_method": "mad"}
    if mode == "tools":
        fabric["sweep_method"] = "tools"
    elif mode.startswith("shard"):
        fabric["shard"] = mode[5:]
    cfg = from_dict({"paths": {"state_dir": state}, "fabric": fabric, "logging": {"level": "error"}})
    io = LiveIO()
    pipe = fabric_pipeline(cfg, io)
    pipe.collect(["discovery"])
    sweeps, cpus, passes, sources, snap = [], [], [], [], None
    loss = mode == "loss"
    down_seen, names0 = [], None
    sweep_source = pipe.sources["sweep"]
    peer_reads: list[int] = []              # far-end PortInfo MADs (what a CA port enables) per sweep

    def far_end_reads() -> int:
        reader = getattr(sweep_source, "_reader", None)
        return reader.peer_reads if reader is not None else 0
    for _ in range(repeat):
        t, c = time.monotonic(), time.process_time()
        before = far_end_reads()
        snap = pipe.collect(["sweep"])
        peer_reads.append(far_end_reads() - before)
        sweeps.append(time.monotonic() - t)
        cpus.append(time.process_time() - c)
        sources.append(snap.sources["sweep"].duration)
        if loss:
            fab = snap.fabric
            names = {g: sw.name for g, sw in fab.switches.items()}
            names0 = names0 or names
            down_seen += [k for k, p in fab.ports.items() if p.link is not None and not p.up]
            assert names == names0, "a switch lost its name under loss"
        if baseline:
            t = time.monotonic()
            r = subprocess.run(["ibqueryerrors", "--data"], capture_output=True, text=True, timeout=300)
            passes.append(time.monotonic() - t)
            if "Query SA failed" in r.stderr + r.stdout or "Summary" not in r.stdout:
                raise RuntimeError(f"ibqueryerrors --data failed: {r.stderr[-300:]}")
    body = render(snap)
    pipe.close()
    engine = io.mad_host.totals()
    sw = snap.sources["sweep"]
    text = body.decode()
    swept = sorted(set(re.findall(r'^fabricmon_fabric_port_receive_bytes_total\{port="\d+",switch_guid="(\w+)"\}', text, re.M)))
    method = re.search(r'^fabricmon_fabric_sweep_method\{method="(\w+)"\} 1\.0$', text, re.M)
    unanswered = re.search(r'^fabricmon_source_errors_total\{kind="unanswered",source="sweep"\} (\S+)$', text, re.M)
    return {
        "mode": mode, "method": method[1] if method else "", "switches": len(snap.fabric.switches),
        "ports": len(snap.fabric.ports), "swept": swept, "sweep_s": statistics.median(sweeps),
        "source_s": statistics.median(sources), "sweep_min": min(sweeps), "source_min": min(sources),
        "cpu_s": statistics.median(cpus), "data_pass_s": statistics.median(passes) if passes else None,
        "data_pass_min": min(passes) if passes else None,
        "series": body.count(b"\n") - body.count(b"\n#"), "exposition_kib": len(body) / 1024,
        "rss_mib": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024,
        "source_up": sw.up, "down_under_loss": len(down_seen), "names": len(names0 or ()),
        "unanswered": float(unanswered[1]) if unanswered else 0.0, "engine": engine, "peer_reads": peer_reads,
        "host_links": sum(1 for p in snap.fabric.ports.values() if p.role == "host" and p.link is not None),
        "degraded": sum(1 for p in snap.fabric.ports.values() if p.degraded.get("width") or p.degraded.get("speed")),
    }


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--repeat", type=int, default=5)
    ap.add_argument("--net", help="an ibsim net file (default: the 400-switch director capture)")
    ap.add_argument("--inner", help=argparse.SUPPRESS)
    ap.add_argument("--state", help=argparse.SUPPRESS)
    ap.add_argument("--baseline", action="store_true", help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.inner:
        print(json.dumps(inner(args.inner, args.repeat, args.state, args.baseline)))
        return 0
    from fabricmon.parsers.ibnetdiscover import parse_ibnetdiscover
    from fabricmon.sim.fabric import SimFabric, fat_tree_netfile
    if args.net:
        label, text = args.net, Path(args.net).read_text()
    elif CAPTURE.exists():
        label, text = "real 400-switch HDR director (capture)", CAPTURE.read_text()
    else:
        label, text = "fat tree 100 spines x 200 leaves", fat_tree_netfile(spines=100, leaves=200, hosts_per_leaf=8)
    rows = {}
    with tempfile.TemporaryDirectory() as tmp:
        fab = SimFabric(text, Path(tmp) / "sim").start(timeout=600)     # opensm on 400 switches: slow when loaded
        with fab:
            fab.start_sm(timeout=300)
            env = fab.env(fab.sm_host)

            def run(mode: str, baseline: bool = False, repeat: int = args.repeat) -> dict:
                state = Path(tmp) / mode.replace("/", "_")
                state.mkdir()
                r = subprocess.run([sys.executable, __file__, "--inner", mode, "--repeat", str(repeat), "--state", str(state),
                                    *(["--baseline"] if baseline else [])], env=env, capture_output=True, text=True, timeout=1800)
                if r.returncode != 0:
                    raise SystemExit(f"{mode}: {r.stderr[-3000:]}")
                return json.loads(r.stdout.strip().splitlines()[-1])

            rows["whole"] = run("whole", baseline=True)
            rows["tools"] = run("tools")
            for i in range(4):
                rows[f"shard{i}/4"] = run(f"shard{i}/4")
            # 30% loss on every port of one switch (the switch with the most cabled ports: a spine)
            disc = parse_ibnetdiscover(fab.run_tool(fab.sm_host, "ibnetdiscover", timeout=300, check=True).stdout)
            victim = max(disc.switches.values(), key=lambda s: len(s.links))
            # ibsim names a node by its net file id ("S-<guid>" in ibnetdiscover's syntax, the name in ours)
            node = f"S-{victim.guid}" if f"S-{victim.guid}" in fab.nodes else victim.name

            def set_loss(rate: int) -> None:
                for p in range(1, victim.nports + 1):
                    answer = fab.console(f'Error "{node}"[{p}] {rate}').split("sim>", 1)[0]
                    if any(line.startswith("#") for line in answer.splitlines()):
                        raise SystemExit(f"ibsim rejected the loss: {answer.strip()}")
            set_loss(30)
            rows["loss"] = run("loss", repeat=max(3, args.repeat))
            set_loss(0)
    whole = rows["whole"]
    shards = [rows[f"shard{i}/4"] for i in range(4)]
    print(f"{label}: {whole['switches']} switches, {whole['ports']} switch ports; {args.repeat} sweeps a mode, one run\n")
    print("Read: the sweep source alone (the MADs or the tools, and their decoding); collect: the whole sweep as the "
          "collector runs it (the source, the model, the checks and the snapshot; the latter are the same for both methods).\n")
    print("Each time as min / median of the sweeps: on a shared machine the minimum is the cost with the least "
          "interference, the median what a sweep takes amid it.\n")
    print("| sweep | method | switches | read s | collect s | CPU s (collect, median) | read vs `ibqueryerrors --data` "
          "| collect vs `ibqueryerrors --data` | collect vs whole | series | exposition KiB | RSS MiB |")
    print("|---|---|---|---|---|---|---|---|---|---|---|---|")
    bmin, bmed = whole["data_pass_min"], whole["data_pass_s"]

    def pair(a: float, b: float) -> str:
        return f"{a:.2f} / {b:.2f}"
    print(f"| `ibqueryerrors --data` (one pass, SA and discovery included) | tools | {whole['switches']} | "
          f"{pair(bmin, bmed)} | | | 1.00 | | | | | |")
    for name, x in rows.items():
        if name == "loss":
            continue
        label2 = {"whole": "whole, MAD engine", "tools": "whole, infiniband-diags tools"}.get(name, name)
        print(f"| {label2} | {x['method']} | {len(x['swept'])} | {pair(x['source_min'], x['source_s'])} | "
              f"{pair(x['sweep_min'], x['sweep_s'])} | {x['cpu_s']:.2f} | "
              f"{pair(x['source_min'] / bmin, x['source_s'] / bmed)} | {pair(x['sweep_min'] / bmin, x['sweep_s'] / bmed)} | "
              f"{pair(x['sweep_min'] / whole['sweep_min'], x['sweep_s'] / whole['sweep_s'])} | {x['series']} | "
              f"{x['exposition_kib']:.0f} | {x['rss_mib']:.0f} |")
    together = sorted(g for x in shards for g in x["swept"])
    once = together == sorted(whole["swept"]) and len(set(together)) == len(together)
    print()
    print(f"- the four shards together: {sum(x['sweep_s'] for x in shards):.2f} s of sweeps, "
          f"{sum(x['cpu_s'] for x in shards):.2f} s CPU; every switch exactly once: {'yes' if once else 'NO'} "
          f"({len(together)} swept, {len(set(together))} distinct, {len(whole['swept'])} in the whole sweep)")
    print(f"- largest 1/4 shard vs the whole sweep (min / median): collect "
          f"{max(x['sweep_min'] for x in shards) / whole['sweep_min']:.2f}x / {max(x['sweep_s'] for x in shards) / whole['sweep_s']:.2f}x, "
          f"read {max(x['source_min'] for x in shards) / whole['source_min']:.2f}x / "
          f"{max(x['source_s'] for x in shards) / whole['source_s']:.2f}x")
    print(f"- far ends of the host links (what each CA port enables, docs/fabric-collector.md): PortInfo MADs per "
          f"sweep {whole['peer_reads']} for {whole['host_links']} host links (read once, again only when a link "
          f"changes); links degraded (width or speed): {whole['degraded']}")
    loss = rows["loss"]
    print(f"- 30% MAD loss on every port of one switch ({loss['mode']}, {max(3, args.repeat)} sweeps): "
          f"cabled ports read down: {loss['down_under_loss']}, switches named: {loss['names']} of {loss['switches']}, "
          f"MADs sent {loss['engine'].get('sent', 0)}, retried {loss['engine'].get('retried', 0)}, unanswered after "
          f"every try {loss['engine'].get('unanswered', 0)} (switches with some unanswered, summed over sweeps: "
          f"{loss['unanswered']:.0f}), read {loss['source_s']:.2f} s")
    ok = (once and loss["down_under_loss"] == 0 and loss["names"] == loss["switches"] and whole["method"] == "mad"
          and loss["engine"].get("retried", 0) > 0)       # the loss happened
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
