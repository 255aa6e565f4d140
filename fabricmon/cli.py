"""Command line: run, once, check, inventory, capture, fabric, topology, demo, actions, install, uninstall."""

from __future__ import annotations

import argparse
import dataclasses
import errno
import math
import os
import shutil
import signal
import socket
import sys
import time
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import TYPE_CHECKING, TypedDict

from fabricmon import __version__
from fabricmon.exporter import counter_sets
from fabricmon.model import gc_pause
from fabricmon import healthcheck
from fabricmon import install as installer
from fabricmon import log as logsetup
from fabricmon.config import DEFAULT_CONFIG_PATH, Config, ConfigError, from_dict, load, yaml_document
from fabricmon.exporter import render
from fabricmon.fsutil import write_atomic
from fabricmon.pipeline.scheduler import Pipeline
from fabricmon.stores.learned import LearnedStore, inventory_path
from fabricmon.remediation import cli as remediation_cli
from fabricmon.host import BundleError, HostIO, LiveIO, RecordingIO, ReplayIO

if TYPE_CHECKING:
    from fabricmon.model.fabric import Topology
    from fabricmon.model.snapshot import Snapshot
    from fabricmon.model.slurm_topology import SlurmTree

EXIT_CONFIG = 2
# a bind failure that a later boot stage or a moment cures: the listen port held by another process (a
# previous instance still stopping, a clash), or the listen address not assigned yet (a management
# interface still coming up). Not a config error: the units restart on it (RestartForceExitStatus=75;
# EX_TEMPFAIL, sysexits.h)
EXIT_TEMPFAIL = 75
TEMPFAIL_BIND = {errno.EADDRINUSE: "another process holds the port",
                 errno.EADDRNOTAVAIL: "the address is not assigned to an interface (yet)"}


class UsageError(ValueError):
    """A bad command-line value: one line on stderr, exit 2 (3 for `check`)."""


@dataclasses.dataclass(frozen=True)
class Number:
    """The `type=` of every numeric option: the text as a finite `kind` within [low, high] (above low
    when `low_open`), or argparse's own usage error naming the option and its range, in one line
    (`fabricmon check: error: argument --sample-window: must be a number of seconds, 0 or more, got
    '-5'`), before anything runs: never a traceback, never a value the command cannot use."""
    kind: type[int] | type[float]
    low: int | float
    high: int | float | None = None
    low_open: bool = False
    what: str = ""          # "a number of seconds"; by default "a whole number" or "a number"
    note: str = ""          # what the range means, in brackets after it

    def __call__(self, text: str) -> int | float:
        try:
            value = self.kind(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"must be {self.describe()}, got {text!r}") from None
        if not math.isfinite(value) or value < self.low or (self.low_open and value == self.low) \
                or (self.high is not None and value > self.high):
            raise argparse.ArgumentTypeError(f"must be {self.describe()}, got {text!r}")
        return value

    def describe(self) -> str:
        what = self.what or ("a whole number" if self.kind is int else "a number")
        if self.high is not None:
            span = f" from {self.low:g} to {self.high:g}"
        else:
            span = f" above {self.low:g}" if self.low_open else f", {self.low:g} or more"
        return what + span + (f" ({self.note})" if self.note else "")


SECONDS = Number(float, 0, what="a number of seconds")
POSITIVE_SECONDS = Number(float, 0, low_open=True, what="a number of seconds")
COUNT = Number(int, 1)
# the demo listens on P (the node daemon), P+2 and P+3 (its two fabric collectors)
DEMO_PORT = Number(int, 0, 65535 - 3, what="a port number", note="0: any free ports; the demo also listens on "
                                                                 "P+2 and P+3")


def _config_path(args: argparse.Namespace) -> str | None:
    if args.config:
        return str(args.config)
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
    return LiveIO(cfg.sysfs, cfg.procfs, tool_dirs=cfg.tool_dirs)


def parse_listen(value: str) -> tuple[str | None, int]:
    """`ADDR:PORT`, `[V6ADDR]:PORT` or `:PORT` (the configured address) -> (address or None, port)."""
    host, sep, p = value.rpartition(":")
    if not sep or not p.isdigit() or not 0 <= int(p) <= 65535:
        raise UsageError(f"bad --listen {value!r}: expected ADDR:PORT with a port 0-65535 "
                         "(e.g. 127.0.0.1:9879, [::1]:9879 or :9879)")
    if host.startswith("[") != host.endswith("]") or (":" in host and not host.startswith("[")):
        raise UsageError(f"bad --listen {value!r}: write an IPv6 address in brackets, e.g. [::1]:9879")
    return host.strip("[]") or None, int(p)


def cannot_listen(exc: OSError, where: str, moves: str, service: bool = True) -> int:
    """The one line on stderr for a listener that could not be bound (or its TLS files loaded): the
    address:port it tried, why, and what moves it (`moves`: the option and config keys). Exit 75 for
    what a moment or a later boot stage cures (the port held, the address not up yet; for a service,
    `service`, the line says that systemd retries: the units restart on 75), else 2 (a config error)."""
    why = exc.strerror or str(exc)
    if exc.errno in TEMPFAIL_BIND:
        retries = f" (not a config error: exit {EXIT_TEMPFAIL}, systemd retries)" if service else ""
        print(f"fabricmon: cannot listen on {where}: {why}: {TEMPFAIL_BIND[exc.errno]}; {moves}{retries}",
              file=sys.stderr)
        return EXIT_TEMPFAIL
    print(f"fabricmon: cannot listen on {where}: {why}; {moves}", file=sys.stderr)
    return EXIT_CONFIG


def _serve(cfg: Config, io: HostIO, address: str | None, port: int | None, pipeline: Pipeline | None = None,
           remediate: bool = True, port_key: str = "server.port") -> int:
    """Run a Daemon (the node pipeline, or the one given) until SIGTERM/SIGINT; `remediate`: with its
    Remediator (not for a replay); `port_key`: the config key of its port (fabric.port for a collector)."""
    from fabricmon.serve.daemon import Daemon
    from fabricmon.serve.server import ListenError
    try:
        daemon = Daemon(cfg, io, port=port, address=address, pipeline=pipeline, remediate=remediate)
    except OSError as exc:      # cannot bind (in use, no such address, bad name) or load the TLS files
        io.close()
        where = exc.where if isinstance(exc, ListenError) else \
            f"{address or cfg.address}:{cfg.port if port is None else port}"
        return cannot_listen(exc, where, f"another address or port: --listen ADDR:PORT, or server.address and "
                                         f"{port_key} in the config")

    gc_pause.freeze_between_pauses()        # a long-running process: its model frozen between builds

    def _stop(signum: int, frame: object) -> None:
        daemon._stop.set()
    signal.signal(signal.SIGTERM, _stop)
    signal.signal(signal.SIGINT, _stop)
    daemon.start()
    daemon.wait()
    daemon.stop()
    return 0


def _web_config(args: argparse.Namespace, cfg: Config) -> Config:
    """`--web.config.file` (as node_exporter spells it) overrides server.web_config_file."""
    path = getattr(args, "web_config_file", None)
    if not path:
        return cfg
    if not Path(path).is_file():
        raise UsageError(f"bad --web.config.file {path!r}: not a readable file")
    return dataclasses.replace(cfg, serve=dataclasses.replace(cfg.serve, web_config_file=path))


def cmd_run(args: argparse.Namespace) -> int:
    address, port = parse_listen(args.listen) if args.listen else (None, None)
    cfg = _web_config(args, _load(args))
    io = _io(args, cfg)
    # the learned inventory lives in state_dir (systemd's StateDirectory); a replay learns in memory
    learned = LearnedStore(None if args.replay else inventory_path(cfg.state_dir))
    return _serve(cfg, io, address, port, Pipeline(cfg, io, learned=learned), remediate=not args.replay)


def _check_output(path: str) -> None:
    d = os.path.dirname(os.path.abspath(path))
    if not os.path.isdir(d):
        raise UsageError(f"bad --output {path!r}: directory {d} does not exist")
    if os.path.isdir(path):
        raise UsageError(f"bad --output {path!r}: it is a directory")


def cmd_once(args: argparse.Namespace) -> int:
    if args.output:
        _check_output(args.output)
    cfg = _load(args)
    pipe = Pipeline(cfg, _io(args, cfg))
    try:
        body = render(pipe.collect())
    finally:
        pipe.close()
    if args.output:
        try:
            write_atomic(args.output, body, make_dirs=False)
        except OSError as exc:
            print(f"fabricmon: cannot write {args.output}: {exc.strerror or exc}", file=sys.stderr)
            return 1
    else:
        sys.stdout.write(body.decode())
    return 0


class _DaemonAuth(TypedDict, total=False):
    """healthcheck.fetch_verdict's keywords for reaching a daemon behind basic auth or a private CA."""
    auth: tuple[str, str]
    ca_file: str


def _daemon_auth(args: argparse.Namespace) -> _DaemonAuth:
    """--daemon-user with --daemon-password-file (never a password on the command line), and
    --daemon-ca-file for an https daemon whose certificate a private CA signed."""
    out: _DaemonAuth = {}
    if bool(args.daemon_user) != bool(args.daemon_password_file):
        raise UsageError("--daemon-user and --daemon-password-file go together")
    if args.daemon_user:
        try:
            password = Path(args.daemon_password_file).read_text().rstrip("\r\n")
        except OSError as exc:
            raise UsageError(f"bad --daemon-password-file: {exc.strerror or exc}") from exc
        out["auth"] = (args.daemon_user, password)
    if args.daemon_ca_file:
        if not Path(args.daemon_ca_file).is_file():
            raise UsageError(f"bad --daemon-ca-file {args.daemon_ca_file!r}: not a readable file")
        out["ca_file"] = args.daemon_ca_file
    return out


def _can_write_dir(path: str) -> bool:
    """This user can write `path`, or create it (its nearest existing ancestor is writable)."""
    d = os.path.abspath(path)
    while not os.path.exists(d) and os.path.dirname(d) != d:
        d = os.path.dirname(d)
    return os.path.isdir(d) and os.access(d, os.W_OK | os.X_OK)


def user_state_dir() -> str | None:
    """The user's own state directory for fabricmon: $XDG_STATE_HOME/fabricmon, by default
    ~/.local/state/fabricmon (None without a home)."""
    base = os.environ.get("XDG_STATE_HOME") or (
        os.path.join(os.path.expanduser("~"), ".local", "state") if os.path.isabs(os.path.expanduser("~")) else "")
    return os.path.join(base, "fabricmon") if os.path.isabs(base) else None


def _check_state_dir(state_dir: str) -> str | None:
    """Where `check` keeps its counter history and learned inventory: paths.state_dir, or, for a user
    who cannot write it (an ordinary user beside the daemon's /var/lib/fabricmon), the user state
    directory, silently. None (no state, said in one plain line) when neither can be written."""
    if _can_write_dir(state_dir):
        return state_dir
    user = user_state_dir()
    if user and _can_write_dir(user):
        return user
    print(f"fabricmon: note: no state kept between runs ({state_dir} and {user or 'the home directory'} are not "
          "writable by this user): rate checks need --sample-window", file=sys.stderr)
    return None


def cmd_check(args: argparse.Namespace) -> int:
    """Exit 0 OK, 1 WARNING, 2 CRITICAL, 3 UNKNOWN (main() turns errors into UNKNOWN)."""
    note = ""
    if args.daemon:
        if args.replay:
            raise UsageError("--daemon and --replay exclude each other")
        try:
            doc = healthcheck.fetch_verdict(args.daemon, args.daemon_timeout, **_daemon_auth(args))
        except healthcheck.DaemonUnavailable as exc:
            note = f"the daemon at {args.daemon} did not answer: {exc}; polled locally"
        else:
            print("\n".join(healthcheck.check_lines(doc, args.verbose, healthcheck.daemon_note(args.daemon, doc))))
            return healthcheck.status_of(doc)
    cfg = _load(args)
    stateless = args.no_state or args.replay
    state_dir = cfg.state_dir if stateless or args.state else _check_state_dir(cfg.state_dir)
    stateless = stateless or state_dir is None
    state_path = None if stateless or state_dir is None else (args.state or os.path.join(state_dir, "check-state.json"))
    doc = healthcheck.local_verdict(cfg, _io(args, cfg), state_path, args.sample_window,
                                    None if stateless or state_dir is None else inventory_path(state_dir))
    print("\n".join(healthcheck.check_lines(doc, args.verbose, note)))
    return healthcheck.status_of(doc)


def cmd_inventory_accept(args: argparse.Namespace) -> int:
    """Replace the learned inventory with the ports healthy now (after planned maintenance)."""
    from fabricmon.model.ports import Inventory
    cfg = _load(args)
    pipe = Pipeline(cfg, _io(args, cfg))           # one poll; it learns in memory only
    try:
        snap = pipe.collect()
    finally:
        pipe.close()
    from fabricmon.pipeline.node import unlisted
    failed = unlisted(snap.sources)
    if failed:
        errors = "; ".join(sorted(e for n in failed for e in snap.sources[n].active_errors)) or "no answer"
        print(f"fabricmon: not accepted: the port inventory could not be read ({', '.join(failed)}: {errors})",
              file=sys.stderr)
        return 1
    path = inventory_path(cfg.state_dir)
    inv = Inventory(snap.ib.devices, snap.ib.ports)
    try:
        before, after = LearnedStore(path, create_dir=True).accept(inv, time.time())
    except (OSError, ValueError) as exc:
        print(f"fabricmon: cannot write {path}: {getattr(exc, 'strerror', None) or exc}", file=sys.stderr)
        return 1
    print(f"accepted: {len(after.ports)} port(s) seen healthy now are the learned inventory in {path}")
    for rec in before.gone(inv):
        print(f"  forgotten: {rec.device} port {rec.port} ({rec.describe()})")
    for rec in sorted(after.ports.values(), key=lambda r: (r.device, r.port)):
        print(f"  learned: {rec.device} port {rec.port} ({rec.describe()})")
    for key, p in sorted(snap.ib.ports.items()):
        if not p.up:
            print(f"  not learned (not ACTIVE/LinkUp now): {p.label()}")
    if not after.ports:
        print("  nothing learned: with no port and no expected_links, fabricmon check answers UNKNOWN here")
    return 0


def cmd_inventory_show(args: argparse.Namespace) -> int:
    """Print the learned inventory (the file; nothing is polled)."""
    cfg = _load(args)
    store = LearnedStore(inventory_path(cfg.state_dir))
    store.refresh()
    inv = store.inventory
    accepted = (f", accepted {time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime(inv.accepted_at))}"
                if inv.accepted_at else "")
    print(f"{store.path}: {len(inv.ports)} port(s) learned as healthy{accepted}")
    for rec in sorted(inv.ports.values(), key=lambda r: (r.device, r.port)):
        when = time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime(rec.learned_at))
        print(f"  {rec.device} port {rec.port}: {rec.describe()}; learned {when}")
    return 0


def _capture(args: argparse.Namespace, cfg: Config, pipeline: Callable[[Config, HostIO], Pipeline], replay: str) -> int:
    """One collection through a RecordingIO into args.dir (which must be new or empty): the bundle, the
    config without its secrets, and the exposition it gave; `replay` is the command that replays it."""
    out = Path(args.dir)
    if out.exists() and any(out.iterdir()):
        print(f"fabricmon: {out} exists and is not empty", file=sys.stderr)
        return 1
    out.mkdir(parents=True, exist_ok=True)
    rec = RecordingIO(LiveIO(cfg.sysfs, cfg.procfs, tool_dirs=cfg.tool_dirs), out, meta={
        "hostname": socket.gethostname(), "fabricmon_version": __version__, "argv": sys.argv,
    })
    pipe = pipeline(cfg, rec)
    try:
        snap = pipe.collect()
    finally:
        pipe.close()
    if cfg.path:
        _copy_config_without_secrets(cfg.path, out / "config.yml")
    else:
        (out / "config.yml").write_text("# built-in defaults were used\n{}\n")
    rec.save()
    (out / "metrics.prom").write_bytes(render(snap))
    print(f"captured {len(rec.commands)} command(s) and {len(list((out / 'files').rglob('*')))} path(s) "
          f"into {out}; replay with: {replay} --replay {out}")
    return 0


def cmd_capture(args: argparse.Namespace) -> int:
    return _capture(args, _load(args), Pipeline, "fabricmon once")


# --- the fabric collector (`fabricmon fabric run|once|capture`) ------------------------------

def _fabric_config(args: argparse.Namespace) -> Config:
    """The config with --shard applied; for a live run the topology cache dir exists."""
    from fabricmon.config.fabric import parse_shard
    cfg = _load(args)
    if getattr(args, "shard", None):
        i, n = parse_shard(args.shard, "--shard")
        # built again with the shard, so that every source's settings hold it (they are built as the config loads)
        cfg = from_dict({**cfg.raw, "fabric": {**(cfg.raw.get("fabric") or {}), "shard": f"{i}/{n}"}}, cfg.path,
                        check_paths=not getattr(args, "replay", None))
    if not getattr(args, "replay", None):
        try:
            os.makedirs(cfg.fabric.cache_dir, exist_ok=True)
        except OSError as exc:
            raise ConfigError("fabric.cache_dir", f"cannot create {cfg.fabric.cache_dir}: {exc.strerror or exc}") from exc
    return cfg


def _quiet_fabric_config(args: argparse.Namespace) -> Config:
    """The fabric config for a command whose stderr is its answer (`fabric once`, one discovery): the
    sources' own logs quiet unless --log-level asks for them, but what `fabric run` warns about at start
    said all the same, one `fabricmon: warning:` line each (a group- or world-readable SNMP secret file:
    sources.ethernet.snmp.warn_loose, as the collector's first walk logs it)."""
    args.log_level = args.log_level or "error"
    cfg = _fabric_config(args)
    if cfg.fabric.kind == "ethernet":
        from fabricmon.sources.ethernet.snmp import warn_loose
        warn_loose(cfg.fabric.ethernet.snmp,
                   lambda what, files: print(f"fabricmon: warning: {what}: {', '.join(files)}", file=sys.stderr))
    return cfg


def _fabric_sweeps(pipe: Pipeline, sweeps: int, interval: float) -> Snapshot:
    """Discovery and a first sweep under one deadline, then the further sweeps `interval` apart, each with
    the sources whose records went stale meanwhile (the job list, say: nothing is judged on stale records)."""
    snap = pipe.collect()
    for _ in range(max(1, sweeps) - 1):
        time.sleep(interval)
        snap = pipe.collect(sorted({"sweep", *pipe.stale()}))
    return snap


def cmd_fabric_run(args: argparse.Namespace) -> int:
    from fabricmon.pipeline.fabric import fabric_pipeline
    cfg = _web_config(args, _fabric_config(args))
    address, port = parse_listen(args.listen) if args.listen else (None, cfg.fabric.port)
    io = _io(args, cfg)
    return _serve(cfg, io, address, port, fabric_pipeline(cfg, io), remediate=not args.replay, port_key="fabric.port")


def cmd_fabric_once(args: argparse.Namespace) -> int:
    """Exit with the exposition's fabricmon_health_status (the one health rule, model.health: 0 OK, 1
    WARNING, 2 CRITICAL, 3 UNKNOWN); its findings on stderr, and when it read no switch, one line saying why
    (no umad device, no permission, no SM, ...); 2 on a config error. The exposition is written either way (its
    fabricmon_source_up says what failed); the sources' own error logs stay quiet unless --log-level asks
    for them."""
    from fabricmon.model.health import health_status, unjudged, verdict_findings
    from fabricmon.pipeline.fabric import fabric_pipeline
    cfg = _quiet_fabric_config(args)
    pipe = fabric_pipeline(cfg, _io(args, cfg))
    try:
        snap = _fabric_sweeps(pipe, args.sweeps, args.interval)
    finally:
        pipe.close()
    body = render(snap, counter_sets.parse(cfg.serve.collect))     # what the daemon's plain scrape serves
    if args.output:
        write_atomic(args.output, body)
    else:
        sys.stdout.write(body.decode())
    if snap.unknown:        # one line saying why, never the raw tool errors (the exposition has them)
        print(f"fabricmon: no switch could be read: {snap.unknown}", file=sys.stderr)
        return health_status(snap)
    if why := unjudged(snap):
        print(f"fabricmon: UNKNOWN: {why}", file=sys.stderr)
    for f in sorted(verdict_findings(snap), key=lambda f: -f.status):
        print(f.line(), file=sys.stderr)
    return health_status(snap)


def _copy_config_without_secrets(src: str, dst: Path) -> None:
    """The config into a bundle; an inline SNMP secret (fabric.ethernet.snmp.community, ...) is
    replaced by "<redacted>" (a bundle is shared for bug reports; secret files are not copied)."""
    import yaml

    from fabricmon.sources.ethernet.settings import SNMP_SECRETS
    raw = yaml_document(Path(src).read_text(), src) or {}
    snmp = ((raw.get("fabric") or {}).get("ethernet") or {}).get("snmp") if isinstance(raw, dict) else None
    if isinstance(snmp, dict) and any(k in snmp for k in SNMP_SECRETS):
        for k in SNMP_SECRETS:
            if k in snmp:
                snmp[k] = "<redacted>"
        dst.write_text("# fabricmon fabric capture: inline SNMP secrets redacted\n" + yaml.safe_dump(raw, sort_keys=False))
    else:
        shutil.copy(src, dst)


def cmd_fabric_capture(args: argparse.Namespace) -> int:
    from fabricmon.pipeline.fabric import fabric_pipeline
    return _capture(args, _fabric_config(args), fabric_pipeline, "fabricmon fabric once")


def _discover_once(args: argparse.Namespace, consequence: str = "") -> tuple[Topology | None, list[str]]:
    """One discovery of the live fabric (the fabric config of `args`): its topology and the discovery's
    errors; the topology None when the discovery read no switch, said on stderr in the line `fabric once`
    says (FabricModel.why_unread: no umad device, no permission, ...), never the tools' raw errors."""
    from fabricmon.model.fabric import Topology as FabricTopology
    from fabricmon.pipeline.fabric import FabricModel, fabric_pipeline
    cfg = _quiet_fabric_config(args)
    pipe = fabric_pipeline(cfg, _io(args, cfg))
    try:
        pipe.collect(["discovery"])
        topo = pipe.model.inventory(pipe.states)
        errors = sorted(pipe.states["discovery"].active_errors)
    finally:
        pipe.close()
    if not isinstance(topo, FabricTopology) or not topo.switches:
        assert isinstance(pipe.model, FabricModel)
        why = pipe.model.why_unread(pipe.states) or "the discovery found none"
        print(f"fabricmon: no switch could be read: {why}{consequence}", file=sys.stderr)
        return None, errors
    return topo, errors


def cmd_fabric_design_save(args: argparse.Namespace) -> int:
    """`fabric design save FILE`: one discovery of the live fabric written as its design (docs/design.md), an
    ibnetdiscover topology file or, for a .csv FILE or --format csv, the CSV of cable ends. Exit 0 written;
    1 when the discovery read no switch."""
    from fabricmon.model import design
    fmt = args.format or ("csv" if args.file.lower().endswith(".csv") else "ibnetdiscover")
    topo, errors = _discover_once(args, ": no design written")
    if topo is None:
        return 1
    header = f"the fabric's design: written by fabricmon {__version__} (fabricmon fabric design save) from the live fabric"
    body = design.design_csv(topo) if fmt == "csv" else design.design_ibnetdiscover(topo, header)
    write_atomic(args.file, body.encode())
    cables = design.cable_count(topo)
    print(f"wrote the design of {len(topo.switches)} switches, {len(topo.hosts)} host CAs and {cables} cables to "
          f"{args.file} ({fmt}); compare with it: fabric.sources.design.path: {args.file}", file=sys.stderr)
    if errors:
        print(f"fabricmon: the discovery was partial ({', '.join(errors)} error): check the design before use",
              file=sys.stderr)
    return 0


def cmd_topology_slurm(args: argparse.Namespace) -> int:
    """Slurm's topology.conf / topology.yaml for one rail, from one discovery of the live fabric
    (docs/slurm-topology.md). Exit 0 with the file on stdout (or --output), what was left out on
    stderr; 1 when the discovery read no switch or the rail holds no node; 2 on a bad option."""
    from fabricmon.model import slurm_topology as st
    try:
        rail = st.parse_rail(args.rail or ())
        sizes = [int(x) for x in args.block_sizes.split(",")] if args.block_sizes else []
    except ValueError as exc:
        raise UsageError(str(exc) if "--rail" in str(exc) else f"--block-sizes {args.block_sizes!r}: "
                         "expected numbers, comma-separated") from exc
    if any(n < 1 for n in sizes):
        raise UsageError("--block-sizes: every size must be 1 or more")
    topo, _ = _discover_once(args)
    if topo is None:
        return 1
    tree = st.build_tree(topo, rail)
    for note in tree.notes:
        print(f"fabricmon: {note}", file=sys.stderr)
    if not tree.nodes:
        print(f"fabricmon: no host of the rail ({' '.join(args.rail or ()) or 'every host CA'}) is cabled to a "
              f"leaf of the {len(topo.switches)} switches discovered", file=sys.stderr)
        return 1
    nodes = len(set().union(*tree.nodes.values()))
    if args.check:
        return _topology_check(args.check, tree, st.switch_names(topo, topo.switches).values(), nodes)
    header = (f"generated by fabricmon {__version__} (fabricmon topology slurm) from the live fabric\n"
              f"rail: {' '.join(args.rail or ()) or 'every host CA'}; {len(tree.levels)} switches, {nodes} nodes")
    if args.format == "conf":
        body = st.topology_conf(tree, header)
    else:
        body = st.topology_yaml(tree, args.name, block=args.block, block_sizes=sizes, header=header)
    if args.output:
        write_atomic(args.output, body.encode())
    else:
        sys.stdout.write(body)
    return 0


def _topology_check(path: str, tree: SlurmTree, fabric_switches: Iterable[str], nodes: int) -> int:
    """`topology slurm --check FILE`: one line per drift between FILE and the rail; exit 0 none, 1 some."""
    from fabricmon.model import slurm_topology as st
    from fabricmon.parsers.errors import ParseError
    from fabricmon.parsers.slurm import parse_topology
    try:
        conf = parse_topology(Path(path).read_text(), path)
    except (OSError, UnicodeDecodeError) as exc:
        raise UsageError(f"--check {path}: {getattr(exc, 'strerror', None) or exc}") from exc
    except ParseError as exc:
        raise UsageError(f"--check {path}: {exc}") from exc
    found = st.drift(tree, conf, fabric_switches)
    for d in found:
        print(f"DRIFT {d.kind}: {d.message}")
    if found:
        print(f"{path}: {st.drifted_nodes(found)} of {nodes} nodes drifted, {len(found)} finding(s)")
        return 1
    print(f"{path}: matches the fabric ({len(tree.levels)} switches, {nodes} nodes of the rail)")
    return 0


def cmd_demo(args: argparse.Namespace) -> int:
    from fabricmon.serve.server import ListenError
    from fabricmon.sim.demo import run_demo
    logsetup.setup(args.log_level or "warning", "console")
    try:
        return run_demo(port=args.port, duration=args.duration, fault_after=args.fault_after,
                        workdir=args.workdir)
    except ListenError as exc:      # its simulators are stopped already (run_demo's cleanup)
        p = args.port
        whose = {p: "the node daemon's port, --port", p + 2: "the fabric collector's port, --port + 2",
                 p + 3: "the Ethernet collector's port, --port + 3"}.get(exc.port) if p else None
        return cannot_listen(exc, f"{exc.where} ({whose})" if whose else exc.where,
                             f"the demo listens on --port P, P+2 and P+3 ({p}, {p + 2}, {p + 3}): start it with "
                             "another --port (make demo DEMO_ARGS='--port P'), or --port 0 for any free ports",
                             service=False)


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
    sp.add_argument("--web.config.file", dest="web_config_file", metavar="FILE",
                    help="exporter-toolkit web config (TLS, basic auth); overrides server.web_config_file")
    sp.set_defaults(func=cmd_run)

    sp = sub.add_parser("once", help="one full poll, printed as Prometheus text exposition")
    common(sp)
    sp.add_argument("--output", "-o", metavar="FILE", help="write atomically (node_exporter textfile collector)")
    sp.set_defaults(func=cmd_once)

    sp = sub.add_parser("check", help="one poll; one line per finding; exit 0 OK, 1 WARNING, 2 CRITICAL, 3 UNKNOWN")
    common(sp)
    sp.add_argument("--daemon", metavar="URL", help="ask the running daemon (e.g. http://127.0.0.1:9879); "
                    "poll locally when it does not answer")
    sp.add_argument("--daemon-timeout", type=POSITIVE_SECONDS, metavar="SECONDS", default=healthcheck.DEFAULT_DAEMON_TIMEOUT,
                    help=f"how long to wait for the daemon (default {healthcheck.DEFAULT_DAEMON_TIMEOUT:g})")
    sp.add_argument("--daemon-user", metavar="USER", help="basic auth user for --daemon (server.web_config_file's "
                    "basic_auth_users)")
    sp.add_argument("--daemon-password-file", metavar="FILE", help="file holding that user's password")
    sp.add_argument("--daemon-ca-file", metavar="FILE", help="CA certificate to verify an https daemon with")
    sp.add_argument("--state", metavar="FILE", help="counter history between runs (default <state_dir>/check-state.json; ~/.local/state/fabricmon/ for a user who cannot write state_dir)")
    sp.add_argument("--no-state", action="store_true", help="do not read or write the state file")
    sp.add_argument("--sample-window", type=SECONDS, metavar="SECONDS", default=0.0,
                    help="poll twice this many seconds apart, so rate checks work without state")
    sp.add_argument("--verbose", "-v", action="store_true", help="also print the OK results")
    sp.set_defaults(func=cmd_check)

    ip = sub.add_parser("inventory", help="the learned inventory: the RDMA ports seen healthy on this node")
    isub = ip.add_subparsers(dest="inventory_command", required=True)
    sp = isub.add_parser("accept", help="after planned maintenance: poll once and make the ports healthy now "
                                        "the learned inventory (forgetting those that are gone)")
    common(sp, replay=False)
    sp.set_defaults(func=cmd_inventory_accept)
    sp = isub.add_parser("show", help="print the learned inventory (<state_dir>/inventory.json)")
    common(sp, replay=False)
    sp.set_defaults(func=cmd_inventory_show)

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
    sp.add_argument("--web.config.file", dest="web_config_file", metavar="FILE",
                    help="exporter-toolkit web config (TLS, basic auth); overrides server.web_config_file")
    sp.set_defaults(func=cmd_fabric_run)

    sp = fsub.add_parser("once", help="N sweeps, then the exposition of the last one on stdout (findings on stderr); "
                                      "exit 3 (UNKNOWN) with one line saying why when no switch could be read")
    fabric_common(sp)
    sp.add_argument("--sweeps", type=COUNT, default=1, help="sweeps to run (rates and imbalance need 2 or more)")
    sp.add_argument("--interval", type=SECONDS, default=1.0, help="seconds between sweeps")
    sp.add_argument("--output", "-o", metavar="FILE", help="write atomically instead of stdout")
    sp.set_defaults(func=cmd_fabric_once)

    sp = fsub.add_parser("capture", help="record one discovery and sweep into a bundle directory")
    fabric_common(sp, replay=False)
    sp.add_argument("dir")
    sp.set_defaults(func=cmd_fabric_capture)

    dp = fsub.add_parser("design", help="the fabric as designed (docs/design.md)")
    dsub = dp.add_subparsers(dest="design_command", required=True)
    sp = dsub.add_parser("save", help="write the live fabric (one discovery) as its design: an ibnetdiscover topology "
                                      "file, or a CSV of cable ends for a .csv FILE")
    fabric_common(sp)
    sp.add_argument("file", metavar="FILE")
    sp.add_argument("--format", choices=("ibnetdiscover", "csv"), help="the design's form (default: csv for a .csv "
                                                                        "FILE, else ibnetdiscover)")
    sp.set_defaults(func=cmd_fabric_design_save)

    tp = sub.add_parser("topology", help="the fabric's topology for other tools")
    tsub = tp.add_subparsers(dest="topology_command", required=True)
    sp = tsub.add_parser("slurm", help="Slurm's topology.conf (topology/tree) or topology.yaml (tree, block) for one "
                                       "rail, from one discovery of the live fabric")
    common(sp)
    sp.add_argument("--format", choices=["conf", "yaml"], default="conf",
                    help="topology.conf (default) or topology.yaml (Slurm 25.05+)")
    sp.add_argument("--rail", action="append", metavar="KEY=VALUE",
                    help="which CAs and switches: hca=PATTERN (the HCA in the CA's node description, e.g. mlx5_0), "
                         "switch=PATTERN (switch names), guid=GUID[,GUID...] (CA node GUIDs); repeat to combine")
    sp.add_argument("--block", action="store_true", help="yaml: a topology/block (a block per leaf) instead of a tree")
    sp.add_argument("--block-sizes", metavar="N[,N...]", help="yaml --block: block_sizes (default: the smallest "
                                                              "leaf's node count)")
    sp.add_argument("--name", default="fabric", help="yaml: the topology's name (default fabric)")
    sp.add_argument("--check", metavar="TOPOLOGY_CONF", help="instead of printing: compare this topology.conf (or "
                                                           "topology.yaml's tree) with the rail, one line per drift; "
                                                           "exit 1 on drift")
    sp.add_argument("--output", "-o", metavar="FILE", help="write atomically instead of stdout")
    sp.set_defaults(func=cmd_topology_slurm)

    sp = sub.add_parser("demo", help="run the daemon on a built-in simulated fat-tree fabric")
    sp.add_argument("--port", type=DEMO_PORT, default=9879,
                    help="the node daemon's port; the fabric collectors listen on P+2 and P+3 (default 9879)")
    sp.add_argument("--duration", type=SECONDS, default=0, help="stop after this many seconds (0: until Ctrl-C)")
    sp.add_argument("--fault-after", type=SECONDS, default=20.0, help="inject a fault after this many seconds")
    sp.add_argument("--workdir", help="where the simulator keeps its files (default: a temp dir)")
    sp.add_argument("--log-level", choices=["debug", "info", "warning", "error"])
    sp.set_defaults(func=cmd_demo)

    remediation_cli.add_parsers(sub, _load)
    installer.add_parsers(sub)
    return p


def _is_check(argv: list[str]) -> bool:
    return next((a for a in argv if not a.startswith("-")), None) == "check"


def main(argv: list[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    try:
        args = build_parser().parse_args(argv)
    except SystemExit as exc:
        if exc.code not in (0, None) and _is_check(argv):
            print(healthcheck.unknown_line("bad command line (see stderr)"))
            return healthcheck.UNKNOWN          # could not check: never read as CRITICAL
        raise
    if args.command == "check":
        return _main_check(args)
    try:
        rc: int = args.func(args)
        return rc
    except (ConfigError, BundleError, UsageError, installer.InstallError) as exc:
        print(f"fabricmon: {exc}", file=sys.stderr)
        return EXIT_CONFIG


def _main_check(args: argparse.Namespace) -> int:
    """`check` never crashes and never answers CRITICAL for its own failures: Nagios/NHC read 3
    (UNKNOWN) as "could not check"."""
    try:
        rc: int = args.func(args)
        return rc
    except (ConfigError, BundleError, UsageError) as exc:
        reason = str(exc)
    except Exception as exc:        # an internal error: the traceback goes to stderr
        import traceback
        traceback.print_exc()
        reason = f"internal error: {exc!r}"
    print(healthcheck.unknown_line(reason))
    print(f"fabricmon: {reason}", file=sys.stderr)
    return healthcheck.UNKNOWN


if __name__ == "__main__":
    sys.exit(main())

