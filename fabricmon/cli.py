"""Command line: run, once, check, capture, demo."""

from __future__ import annotations

import argparse
import os
import shutil
import signal
import socket
import sys
import time
from pathlib import Path

import structlog

from fabricmon import __version__
from fabricmon import log as logsetup
from fabricmon.checks import OK, STATUS_NAMES, WARNING, Finding
from fabricmon.config import DEFAULT_CONFIG_PATH, Config, ConfigError, load
from fabricmon.exporter import render
from fabricmon.fsutil import write_atomic
from fabricmon.model.history import CounterHistory
from fabricmon.model.snapshot import Snapshot
from fabricmon.pipeline import Pipeline
from fabricmon.host import BundleError, HostIO, LiveIO, RecordingIO, ReplayIO

EXIT_CONFIG = 2


def _config_path(args: argparse.Namespace) -> str | None:
    if args.config:
        return args.config
    replay = getattr(args, "replay", None)
    if replay and (Path(replay) / "config.yml").is_file():
        return str(Path(replay) / "config.yml")
    return DEFAULT_CONFIG_PATH if Path(DEFAULT_CONFIG_PATH).is_file() else None


def _load(args: argparse.Namespace) -> Config:
    cfg = load(_config_path(args), check_paths=not getattr(args, "replay", None))
    logsetup.setup(getattr(args, "log_level", None) or cfg.log_level, cfg.log_format)
    return cfg


def _io(args: argparse.Namespace, cfg: Config) -> HostIO:
    if getattr(args, "replay", None):
        return ReplayIO(args.replay)
    return LiveIO(cfg.sysfs, cfg.procfs)


def source_findings(snap: Snapshot) -> list[Finding]:
    """A failing enabled source is a WARNING in `check`: silence must never read as healthy."""
    out = []
    for name, s in sorted(snap.sources.items()):
        if s.enabled and s.ran and s.active_errors:
            first = sorted(s.active_errors)[0]
            more = f" (+{len(s.active_errors) - 1} more)" if len(s.active_errors) > 1 else ""
            out.append(Finding("source", name, None, WARNING,
                               f"source {name}: {first}{more}: fix it or disable sources.{name}"))
    return out


def cmd_run(args: argparse.Namespace) -> int:
    from fabricmon.serve.daemon import Daemon
    cfg = _load(args)
    address, port = None, None
    if args.listen:
        host, _, p = args.listen.rpartition(":")
        address, port = host.strip("[]") or None, int(p)
    daemon = Daemon(cfg, _io(args, cfg), port=port, address=address)

    def _stop(signum: int, frame: object) -> None:
        daemon._stop.set()
    signal.signal(signal.SIGTERM, _stop)
    signal.signal(signal.SIGINT, _stop)
    daemon.start()
    daemon.wait()
    daemon.stop()
    return 0


def cmd_once(args: argparse.Namespace) -> int:
    cfg = _load(args)
    pipe = Pipeline(cfg, _io(args, cfg))
    try:
        body = render(pipe.collect())
    finally:
        pipe.close()
    if args.output:
        write_atomic(args.output, body)
    else:
        sys.stdout.write(body.decode())
    return 0


def cmd_check(args: argparse.Namespace) -> int:
    cfg = _load(args)
    log = structlog.get_logger("fabricmon.check")
    state_path = None if args.no_state or args.replay else (args.state or os.path.join(cfg.state_dir, "check-state.json"))
    history = None
    if state_path and os.path.exists(state_path):
        try:
            history = CounterHistory.from_json(Path(state_path).read_text(),
                                               max(c.window for c in cfg.checks.counters.values()))
        except (OSError, ValueError, KeyError) as exc:
            log.warning("ignoring unreadable check state", path=state_path, error=str(exc))
    pipe = Pipeline(cfg, _io(args, cfg), history=history)
    try:
        # Every source at once under one deadline (the largest timeout): a hung tool costs
        # its own data and a WARNING line, never an unbounded check.
        snap = pipe.collect()
        if args.sample_window:
            time.sleep(args.sample_window)
            snap = pipe.collect()
    finally:
        pipe.close()
    if state_path:
        try:
            pipe.history.save(state_path)
        except OSError as exc:
            log.warning("cannot save check state; rate checks need --sample-window", path=state_path,
                        error=exc.strerror or str(exc))
    findings = snap.findings + source_findings(snap)
    status = max((f.status for f in findings), default=OK)
    bad = [f for f in findings if f.status != OK]
    nports = len(snap.ib.ports)
    counts = {n: sum(1 for f in bad if f.status == s) for s, n in ((2, "critical"), (1, "warning"))}
    print(f"FABRICMON {STATUS_NAMES[status]} - {counts['critical']} critical, {counts['warning']} warning "
          f"on {nports} port(s)")
    for f in sorted(bad, key=lambda f: (-f.status, f.device, f.port or 0, f.check)):
        print(f.line())
    if args.verbose:
        for f in findings:
            if f.status == OK:
                print(f.line())
    return status


def cmd_capture(args: argparse.Namespace) -> int:
    cfg = _load(args)
    out = Path(args.dir)
    if out.exists() and any(out.iterdir()):
        print(f"fabricmon: {out} exists and is not empty", file=sys.stderr)
        return 1
    out.mkdir(parents=True, exist_ok=True)
    rec = RecordingIO(LiveIO(cfg.sysfs, cfg.procfs), out, meta={
        "hostname": socket.gethostname(), "fabricmon_version": __version__, "argv": sys.argv,
    })
    pipe = Pipeline(cfg, rec)
    try:
        snap = pipe.collect()
    finally:
        pipe.close()
    if cfg.path:
        shutil.copy(cfg.path, out / "config.yml")
    else:
        (out / "config.yml").write_text("# built-in defaults were used\n{}\n")
    rec.save()
    (out / "metrics.prom").write_bytes(render(snap))
    print(f"captured {len(rec.commands)} command(s) and {len(list((out / 'files').rglob('*')))} path(s) "
          f"into {out}; replay with: fabricmon once --replay {out}")
    return 0


# --- the fabric collector (`fabricmon fabric run|once|capture`) ------------------------------

def _fabric_config(args: argparse.Namespace) -> Config:
    """The config with --shard applied; for a live run the topology cache dir exists."""
    from dataclasses import replace

    from fabricmon.config import parse_shard
    cfg = _load(args)
    if getattr(args, "shard", None):
        cfg = replace(cfg, fabric=replace(cfg.fabric, shard=parse_shard(args.shard, "--shard")))
    if not getattr(args, "replay", None):
        try:
            os.makedirs(cfg.fabric.cache_dir, exist_ok=True)
        except OSError as exc:
            raise ConfigError("fabric.cache_dir", f"cannot create {cfg.fabric.cache_dir}: {exc.strerror or exc}") from exc
    return cfg


def _fabric_sweeps(pipe: Pipeline, sweeps: int, interval: float) -> Snapshot:
    """Discovery and a first sweep under one deadline, then the further sweeps `interval` apart."""
    snap = pipe.collect()
    for _ in range(max(1, sweeps) - 1):
        time.sleep(interval)
        snap = pipe.collect(["sweep"])
    return snap


def cmd_fabric_run(args: argparse.Namespace) -> int:
    from fabricmon.pipeline.fabric import fabric_pipeline
    from fabricmon.serve.daemon import Daemon
    cfg = _fabric_config(args)
    address, port = None, cfg.fabric.port
    if args.listen:
        host, _, p = args.listen.rpartition(":")
        address, port = host.strip("[]") or None, int(p)
    io = _io(args, cfg)
    daemon = Daemon(cfg, io, port=port, address=address, pipeline=fabric_pipeline(cfg, io))

    def _stop(signum: int, frame: object) -> None:
        daemon._stop.set()
    signal.signal(signal.SIGTERM, _stop)
    signal.signal(signal.SIGINT, _stop)
    daemon.start()
    daemon.wait()
    daemon.stop()
    return 0


def cmd_fabric_once(args: argparse.Namespace) -> int:
    from fabricmon.pipeline.fabric import fabric_pipeline
    cfg = _fabric_config(args)
    pipe = fabric_pipeline(cfg, _io(args, cfg))
    try:
        snap = _fabric_sweeps(pipe, args.sweeps, args.interval)
    finally:
        pipe.close()
    body = render(snap)
    if args.output:
        write_atomic(args.output, body)
    else:
        sys.stdout.write(body.decode())
    for f in sorted(snap.findings, key=lambda f: -f.status):
        print(f.line(), file=sys.stderr)
    return 0


def cmd_fabric_capture(args: argparse.Namespace) -> int:
    from fabricmon.pipeline.fabric import fabric_pipeline
    cfg = _fabric_config(args)
    out = Path(args.dir)
    if out.exists() and any(out.iterdir()):
        print(f"fabricmon: {out} exists and is not empty", file=sys.stderr)
        return 1
    out.mkdir(parents=True, exist_ok=True)
    rec = RecordingIO(LiveIO(cfg.sysfs, cfg.procfs), out, meta={
        "hostname": socket.gethostname(), "fabricmon_version": __version__, "argv": sys.argv,
    })
    pipe = fabric_pipeline(cfg, rec)
    try:
        snap = pipe.collect()
    finally:
        pipe.close()
    if cfg.path:
        shutil.copy(cfg.path, out / "config.yml")
    else:
        (out / "config.yml").write_text("# built-in defaults were used\n{}\n")
    rec.save()
    (out / "metrics.prom").write_bytes(render(snap))
    print(f"captured {len(rec.commands)} command(s) into {out}; replay with: fabricmon fabric once --replay {out}")
    return 0


def cmd_demo(args: argparse.Namespace) -> int:
    from fabricmon.sim.demo import run_demo
    logsetup.setup(args.log_level or "warning", "console")
    return run_demo(port=args.port, duration=args.duration, fault_after=args.fault_after,
                    workdir=args.workdir)


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="fabricmon", description="InfiniBand/RoCE fabric health monitor.")
    p.add_argument("--version", action="version", version=f"fabricmon {__version__}")
    sub = p.add_subparsers(dest="command", required=True)

    def common(sp: argparse.ArgumentParser, replay: bool = True) -> None:
        sp.add_argument("--config", "-c", help=f"YAML config (default {DEFAULT_CONFIG_PATH} if present)")
        sp.add_argument("--log-level", choices=["debug", "info", "warning", "error"])
        if replay:
            sp.add_argument("--replay", metavar="DIR", help="drive the pipeline from a capture bundle")

    sp = sub.add_parser("run", help="run the daemon: poll and serve /metrics")
    common(sp)
    sp.add_argument("--listen", metavar="ADDR:PORT", help="override server.address/port")
    sp.set_defaults(func=cmd_run)

    sp = sub.add_parser("once", help="one full poll, printed as Prometheus text exposition")
    common(sp)
    sp.add_argument("--output", "-o", metavar="FILE", help="write atomically (node_exporter textfile collector)")
    sp.set_defaults(func=cmd_once)

    sp = sub.add_parser("check", help="one poll; one line per finding; exit 0 OK, 1 WARNING, 2 CRITICAL")
    common(sp)
    sp.add_argument("--state", metavar="FILE", help="counter history between runs (default <state_dir>/check-state.json)")
    sp.add_argument("--no-state", action="store_true", help="do not read or write the state file")
    sp.add_argument("--sample-window", type=float, metavar="SECONDS", default=0.0,
                    help="poll twice this many seconds apart, so rate checks work without state")
    sp.add_argument("--verbose", "-v", action="store_true", help="also print the OK results")
    sp.set_defaults(func=cmd_check)

    sp = sub.add_parser("capture", help="record every raw source output into a bundle directory")
    common(sp, replay=False)
    sp.add_argument("dir")
    sp.set_defaults(func=cmd_capture)

    fp = sub.add_parser("fabric", help="the fabric collector: discover the topology, sweep every switch port")
    fsub = fp.add_subparsers(dest="fabric_command", required=True)

    def fabric_common(sp: argparse.ArgumentParser, replay: bool = True) -> None:
        common(sp, replay)
        sp.add_argument("--shard", metavar="I/N", help="sweep only the switches whose GUID hash %% N == I "
                                                       "(overrides fabric.shard)")

    sp = fsub.add_parser("run", help="the collector daemon: sweep on a schedule, serve /metrics and /healthz")
    fabric_common(sp)
    sp.add_argument("--listen", metavar="ADDR:PORT", help="override server.address and fabric.port "
                                                         "(default 0.0.0.0:9881)")
    sp.set_defaults(func=cmd_fabric_run)

    sp = fsub.add_parser("once", help="N sweeps, then the exposition of the last one on stdout (findings on stderr)")
    fabric_common(sp)
    sp.add_argument("--sweeps", type=int, default=1, help="sweeps to run (rates and imbalance need 2 or more)")
    sp.add_argument("--interval", type=float, default=1.0, help="seconds between sweeps")
    sp.add_argument("--output", "-o", metavar="FILE", help="write atomically instead of stdout")
    sp.set_defaults(func=cmd_fabric_once)

    sp = fsub.add_parser("capture", help="record one discovery and sweep into a bundle directory")
    fabric_common(sp, replay=False)
    sp.add_argument("dir")
    sp.set_defaults(func=cmd_fabric_capture)

    sp = sub.add_parser("demo", help="run the daemon on a built-in simulated fat-tree fabric")
    sp.add_argument("--port", type=int, default=9879)
    sp.add_argument("--duration", type=float, default=0, help="stop after this many seconds (0: until Ctrl-C)")
    sp.add_argument("--fault-after", type=float, default=20.0, help="inject a fault after this many seconds")
    sp.add_argument("--workdir", help="where the simulator keeps its files (default: a temp dir)")
    sp.add_argument("--log-level", choices=["debug", "info", "warning", "error"])
    sp.set_defaults(func=cmd_demo)
    return p


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    try:
        return args.func(args)
    except ConfigError as exc:
        print(f"fabricmon: {exc}", file=sys.stderr)
        return EXIT_CONFIG
    except BundleError as exc:
        print(f"fabricmon: {exc}", file=sys.stderr)
        return EXIT_CONFIG
    except OSError as exc:
        if getattr(exc, "errno", None) == 98 or "Address already in use" in str(exc):
            print(f"fabricmon: cannot listen: {exc}", file=sys.stderr)
            return EXIT_CONFIG
        raise


if __name__ == "__main__":
    sys.exit(main())

