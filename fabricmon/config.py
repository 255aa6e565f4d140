"""Configuration: YAML in, validated frozen dataclasses out.

Each section is a declarative Schema (fabricmon.schema: field, type, bounds, default, doc line)
that validates its mapping and builds its dataclass; a section read by one package is declared
there (fabric.ethernet in fabricmon/sources/ethernet/settings.py, found through the registry), and
the sources' own keys come from the source registry. docs/configuration.md's reference is rendered
from the same schemas (`make config-doc`). Every error names the key (as a dotted path) and the
reason, so `fabricmon run` can refuse to start with exit 2 and a message an operator can act on.
"""

from __future__ import annotations

import fnmatch
import functools
import os
import re
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any, Mapping

import yaml

from fabricmon import ibspec
from fabricmon.host.runner import DEFAULT_TOOL_DIRS
from fabricmon.registry import SOURCE_PACKAGES, SourceSpec, registry, section
from fabricmon.schema import (ConfigError, Context, Field, Schema, boolean, choice, custom, integer, listing,
                              mapping, number, string, table)
from fabricmon.schema import section as subsection

DEFAULT_PORT = 9879
DEFAULT_FABRIC_PORT = 9881      # the fabric collector (9880 is fluentd's in_http default)
DEFAULT_CONFIG_PATH = "/etc/fabricmon/fabricmon.yml"


@dataclass(frozen=True, slots=True)
class SourceConfig:
    name: str
    enabled: bool | str      # True, False or "auto"
    interval: float
    timeout: float
    command: tuple[str, ...]
    options: Any = None      # what the source's own keys built (its registered options schema), else None


@dataclass(frozen=True, slots=True)
class ExpectedLink:
    device: str
    port: str
    width: int | None
    speed: str | None
    rate_gbps: float | None
    link_layer: str          # "InfiniBand" (default), "Ethernet" or "any"
    count: int | None = None  # how many ports must match (expected_inventory); None: at least one

    @property
    def sets_rate(self) -> bool:
        """The entry says what its ports should train at (not only how many there are)."""
        return self.width is not None or self.speed is not None or self.rate_gbps is not None

    def matches(self, device: str, port: int, link_layer: str | None) -> bool:
        if not fnmatch.fnmatchcase(device, self.device):
            return False
        if not fnmatch.fnmatchcase(str(port), self.port):
            return False
        if self.link_layer == "any":
            return True
        return (link_layer or "InfiniBand") == self.link_layer


@dataclass(frozen=True, slots=True)
class CounterCheckConfig:
    """Thresholds on how much a counter rose within a trailing window."""
    window: float
    warning: float | None
    critical: float | None
    # symbol_errors only: budgets as bit error ratios (errors / bits the link carried in the window,
    # from its rate), docs/optics.md#ber-budget. None: the counts above are the thresholds.
    ber_warning: float | None = None
    ber_critical: float | None = None


@dataclass(frozen=True, slots=True)
class OpticsCheckConfig:
    """The optics checks' settings (docs/optics.md)."""
    lane_spread_db: float = 4.0     # a lane this far below its siblings' median: a dirty/damaged connector
    dimming_db: float = 3.0         # receive power this far below the lane's learned baseline: dimming
    no_light_dbm: float = -30.0     # at or below: no light at all


@dataclass(frozen=True, slots=True)
class ChecksConfig:
    compare_with_supported: bool
    down_severity: int
    degraded_severity: int
    saturation_severity: int
    counters: dict[str, CounterCheckConfig]
    optics: OpticsCheckConfig = field(default_factory=OpticsCheckConfig)


@dataclass(frozen=True, slots=True)
class RoceConfig:
    """RoCE lossless expectations (docs/roce-gpudirect.md)."""
    priority: int = 3                              # the priority that carries RDMA traffic
    lossless_priorities: tuple[int, ...] = (3,)    # PFC must be on exactly for these
    trust: str | None = "dscp"                     # expected trust state; None: not checked
    mtu: int = 4096                                # expected active RoCE (IB) MTU in bytes
    pause_window: float = 300.0                    # pause rates/fractions are averaged over this
    pause_rate_warning: float | None = 1000.0      # pause frames/s (one priority, one direction)
    pause_rate_critical: float | None = None
    pause_fraction_warning: float | None = 0.1     # fraction of time paused
    pause_fraction_critical: float | None = 0.5
    storm_window: float = 3600.0                   # a pause-storm event within it is a finding
    drop_window: float = 3600.0                    # loss on a lossless priority
    drop_warning: float | None = 1.0
    drop_critical: float | None = None
    cnp_window: float = 3600.0                     # rp_cnp_ignored rising: DCQCN off
    cnp_ignored_warning: float | None = 1.0

    def windows(self) -> tuple[float, ...]:
        return (self.pause_window, self.storm_window, self.drop_window, self.cnp_window)


@dataclass(frozen=True, slots=True)
class GpuConfig:
    nccl_env_file: str | None = None               # env file whose NCCL_IB_HCA is checked


@dataclass(frozen=True, slots=True)
class TLSConfig:
    cert_file: str | None = None
    key_file: str | None = None
    client_ca_file: str | None = None


@dataclass(frozen=True, slots=True)
class ServeConfig:
    """The HTTP server's bounds (serve/server.py) and its exporter-toolkit web config."""
    web_config_file: str | None = None      # tls_server_config, basic_auth_users (bcrypt), http_server_config
    unauthenticated_paths: tuple[str, ...] = ("/healthz", "/readyz")     # served without basic auth
    max_connections: int = 512              # open connections (fewer when RLIMIT_NOFILE is low)
    header_timeout: float = 5.0             # TLS handshake plus the whole request head, however slowly sent
    idle_timeout: float = 60.0              # a keep-alive connection between requests
    write_timeout: float = 10.0             # the client must take its answer within this
    backlog: int = 1024                     # listen backlog (the kernel caps it at net.core.somaxconn)
    access_log: bool = False                # one structured log line per request
    page_renders_per_second: float = 2.0    # uncached page renders, one at a time
    page_render_budget: float = 2.0         # refuse (503) a render not expected to end within this


@dataclass(frozen=True, slots=True)
class FabricThresholds:
    """ECMP imbalance judgement: operational defaults, not standards (docs/fabric-collector.md)."""
    ecmp_ratio: float = 1.2              # max/mean transmit rate of a group
    ecmp_cv: float | None = None         # coefficient of variation; None: not used to flag
    consecutive_sweeps: int = 3          # over the threshold this many sweeps in a row
    utilisation_floor: float = 0.3       # judge a group only while its mean is above this share of link rate


@dataclass(frozen=True, slots=True)
class FabricConfig:
    """The fabric collector (`fabricmon fabric`)."""
    port: int = DEFAULT_FABRIC_PORT
    sweep_interval: float = 15.0
    discovery_interval: float = 300.0
    concurrency: int = 2                 # ibqueryerrors passes in flight at once (1 or 2)
    shard: tuple[int, int] = (0, 1)      # (index, count): sweep the switches whose GUID hash % count == index
    cache_dir: str = "/var/lib/fabricmon/fabric"
    mad_timeout_ms: int = 200            # ibqueryerrors/ibroute/sminfo -t: one switch that does not answer costs this per MAD
    thresholds: FabricThresholds = field(default_factory=FabricThresholds)
    routing_interval: float = 300.0      # seconds between forwarding-table reads (routes change on SM sweeps)
    sm_interval: float = 30.0            # seconds between subnet manager polls
    routing_imbalance_threshold: float = 1.5     # route imbalance (max/mean over active uplinks) above which a switch is flagged
    sm_stalled_polls: int = 2            # polls in a row with the master's activity count unchanged: a hung SM
    down_port_max_age: float | None = 604800.0   # seconds a cabled port that went down stays reported; None: until restart
    link_state_max_ports: int = 512      # PortInfo SMP reads per sweep when the SM's records do not cover the ports (0: none)
    unresponsive_sweeps: int = 5         # a switch that did not answer in this many ...
    unresponsive_window: int = 7         # ... of its last this many sweeps is unresponsive (OpenSM's rule)
    sweep_method: str = "auto"           # InfiniBand sweep: mad (in process), tools (infiniband-diags), auto (mad where a umad port opens)
    mad_window: int = 32                 # MADs in flight at once (the engine's global window; docs/mad-engine.md)
    mad_window_per_switch: int = 4       # MADs in flight to one switch at once
    mad_retries: int = 2                 # tries after the first of a MAD left unanswered (each fabric.mad_timeout_ms)
    uplinks_critical_fraction: float = 0.5   # share of a switch's expected uplinks down from which its uplinks check is CRITICAL
    sources: dict[str, SourceConfig] = field(default_factory=dict)
    kind: str = "infiniband"             # or "ethernet": which sources the collector runs
    # fabric.ethernet as configured (kind: ethernet), else None: read it as `ethernet`
    _ethernet: Any = None

    @property
    def ethernet(self) -> Any:
        """fabric.ethernet (fabricmon.sources.ethernet.settings.EthernetConfig): as configured with
        kind: ethernet, else its defaults; the Ethernet package is imported only when this is read."""
        return self._ethernet if self._ethernet is not None else _ethernet_defaults()


@dataclass(frozen=True, slots=True)
class SlurmConfig:
    node_name: str | None = None         # this node's Slurm name; None: the short host name
    lookup_retry: float = 60.0           # seconds before a failed job lookup (slurmctld down) is tried again
    max_job_switch_series: int = 20000   # fabricmon_fabric_job_switch_info series at most (the rest counted)


@dataclass(frozen=True, slots=True)
class Config:
    address: str
    port: int
    tls: TLSConfig
    sysfs: str
    procfs: str
    state_dir: str
    sources: dict[str, SourceConfig]
    exclude_devices: tuple[str, ...]
    expected_links: tuple[ExpectedLink, ...]
    checks: ChecksConfig
    log_level: str
    log_format: str
    path: str | None = None
    raw: dict[str, Any] = field(default_factory=dict, compare=False)
    roce: RoceConfig = field(default_factory=RoceConfig)
    gpu: GpuConfig = field(default_factory=GpuConfig)
    tool_dirs: tuple[str, ...] = DEFAULT_TOOL_DIRS    # looked in for tools after PATH
    fabric: FabricConfig = field(default_factory=FabricConfig)
    slurm: SlurmConfig = field(default_factory=SlurmConfig)
    serve: ServeConfig = field(default_factory=ServeConfig)

    def device_excluded(self, device: str) -> bool:
        return any(fnmatch.fnmatchcase(device, pat) for pat in self.exclude_devices)


# Counter checks: name -> (counters summed, window s, warning, critical)
COUNTER_CHECKS: dict[str, tuple[tuple[str, ...], float, float | None, float | None]] = {
    "symbol_errors": (("symbol_errors",), 3600.0, 120.0, 1200.0),
    "link_flap": (("link_downed",), 43200.0, 1.0, 3.0),
    "link_error_recovery": (("link_error_recovery",), 3600.0, 10.0, 100.0),
    "link_integrity": (("local_link_integrity_errors", "excessive_buffer_overrun_errors"),
                       3600.0, None, 1.0),
    "receive_errors": (("receive_errors", "receive_remote_physical_errors"), 3600.0, 120.0, 1200.0),
    "transmit_discards": (("transmit_discards",), 3600.0, 1000.0, None),
}
# symbol_errors as a bit error ratio (warning, critical): IBTA's 1e-12 BER target, and ten times it
# (the ratio of the count defaults above). Used when the link's rate is known and no count
# threshold is configured; docs/optics.md#ber-budget.
SYMBOL_BER_DEFAULTS = (1e-12, 1e-11)

SEVERITIES = {"ok": 0, "warning": 1, "critical": 2}
ROCE_MTUS = (256, 512, 1024, 2048, 4096)
# the registry's collector for each source package (its names are the registry's, not typed here):
# the node daemon's, and the fabric collector's for each fabric.kind (fabricmon.sources.<kind>)
NODE_COLLECTOR = next(c for c, pkg in SOURCE_PACKAGES.items() if pkg == "fabricmon.sources")
FABRIC_COLLECTORS = {kind: next(c for c, pkg in SOURCE_PACKAGES.items() if pkg == f"fabricmon.sources.{kind}")
                     for kind in ("infiniband", "ethernet")}


# --- value checks shared by several keys ---------------------------------------------------

def _glob(value: Any, key: str, ctx: Context | None = None) -> str:
    if isinstance(value, int) and not isinstance(value, bool):
        pat = str(value)
    elif not isinstance(value, str) or not value:
        raise ConfigError(key, f"expected a non-empty string, got {value!r}")
    else:
        pat = value
    depth = 0
    for ch in pat:   # fnmatch silently treats an unclosed '[' as a literal: refuse it instead
        if ch == "[":
            depth += 1
        elif ch == "]" and depth:
            depth -= 1
    if depth:
        raise ConfigError(key, f"bad glob {pat!r}: unclosed '['")
    return pat


def _bool_or_auto(value: Any, key: str, ctx: Context) -> bool | str:
    if isinstance(value, bool) or value == "auto":
        return value
    raise ConfigError(key, f"expected true, false or 'auto', got {value!r}")


def _existing_dir(value: str, key: str, ctx: Context) -> str:
    if ctx.check_paths and not Path(value).is_dir():
        raise ConfigError(key, f"{value} is not an existing directory")
    return value


def _existing_file(value: str, key: str, ctx: Context) -> str:
    if ctx.check_paths and not Path(value).is_file():
        raise ConfigError(key, f"{value} is not a readable file")
    return value


def _absolute_dir(value: Any, key: str, ctx: Context) -> str:
    if not isinstance(value, str) or not os.path.isabs(value):
        raise ConfigError(key, f"expected an absolute directory, got {value!r}")
    return value


def _absolute(value: str, key: str, ctx: Context) -> str:
    if not os.path.isabs(value):
        raise ConfigError(key, f"expected an absolute path, got {value!r}")
    return value


def parse_shard(value: Any, key: str, ctx: Context | None = None) -> tuple[int, int]:
    """`i/n` (0 <= i < n): this collector sweeps the switches whose GUID hash % n == i."""
    text = str(value).strip() if isinstance(value, (str, int)) and not isinstance(value, bool) else ""
    m = re.fullmatch(r"(\d+)\s*/\s*(\d+)", text)
    if not m or int(m.group(2)) < 1 or int(m.group(1)) >= int(m.group(2)):
        raise ConfigError(key, f"expected 'i/n' with 0 <= i < n (e.g. '0/4'), got {value!r}")
    return int(m.group(1)), int(m.group(2))


def _warning_below_critical(values: dict[str, Any], m: Mapping[str, Any], key: str, ctx: Context) -> None:
    w, c = values["warning"], values["critical"]
    if w is not None and c is not None and w > c:
        raise ConfigError(f"{key}.warning", f"{w:g} is above critical ({c:g})")


# --- sources.<name> (and fabric.sources.<name>): from the source registry -------------------

def _command(value: Any, key: str, ctx: Context) -> tuple[str, ...]:
    cmd = [value] if isinstance(value, str) else value
    if not isinstance(cmd, list) or not cmd or not all(isinstance(c, str) and c for c in cmd):
        raise ConfigError(key, f"expected a program name or an argv list, got {value!r}")
    return tuple(cmd)


def source_schema(spec: SourceSpec) -> Schema:
    """A registered source's keys, with its registered defaults."""
    fields = [custom("enabled", spec.enabled, "`auto`: run when its program is installed, quietly off when not "
                     "(no run, no error, `fabricmon_source_active` 0); `true` makes a missing tool a source error",
                     _bool_or_auto, "true, false or auto"),
              number("interval", spec.interval, "seconds between runs", lo=0.1),
              number("timeout", spec.timeout, "seconds; then the tool's whole process group is killed", lo=0.1)]
    if spec.command:
        fields.append(custom("command", spec.command, "program name or argv list (e.g. a full path); never run "
                             "through a shell", _command, "program or argv list"))
    options: Schema | None = spec.options       # the source's own keys, declared where it is registered
    own = tuple(f.name for f in options.fields) if options is not None else ()

    def build(v: dict[str, Any], key: str, ctx: Context) -> SourceConfig:
        opts = None
        if options is not None:
            o = {n: v[n] for n in own}
            if options.check is not None:
                options.check(o, o, key, ctx)
            opts = options.build(o, key, ctx) if options.build is not None else o
        return SourceConfig(name=spec.name, enabled=v["enabled"], interval=v["interval"], timeout=v["timeout"],
                            command=v.get("command", ()), options=opts)
    return Schema(tuple(fields) + (options.fields if options is not None else ()), build=build,
                  extra=options.extra if options is not None else ())


@functools.lru_cache(maxsize=None)
def source_schemas(collector: str) -> dict[str, Schema]:
    return {name: source_schema(spec) for name, spec in registry(collector).items()}


def _sources(raw: Any, key: str, collector: str, ctx: Context) -> tuple[dict[str, SourceConfig], dict[str, Any]]:
    """`key.<name>` for every source of `collector`; also the mapping given (to tell a default from a setting)."""
    schemas = source_schemas(collector)
    m = mapping(raw, key, tuple(schemas))
    return {name: s.load(m.get(name), f"{key}.{name}", ctx) for name, s in schemas.items()}, m


# --- server ---------------------------------------------------------------------------------

def _tls_check(values: dict[str, Any], m: Mapping[str, Any], key: str, ctx: Context) -> None:
    if bool(values["cert_file"]) != bool(values["key_file"]):
        raise ConfigError(key, "cert_file and key_file must be set together")
    if values["client_ca_file"] and not values["cert_file"]:
        raise ConfigError(f"{key}.client_ca_file", "needs cert_file and key_file")
    for k in ("cert_file", "key_file", "client_ca_file"):
        if values[k]:
            _existing_file(values[k], f"{key}.{k}", ctx)


TLS = Schema(
    fields=(string("cert_file", None, "HTTPS: the server certificate (PEM), with `key_file`", null=True,
                   kind="path", default_doc="unset"),
            string("key_file", None, "HTTPS: its private key", null=True, kind="path", default_doc="unset"),
            string("client_ca_file", None, "clients must present a certificate signed by this CA", null=True,
                   kind="path", default_doc="unset")),
    check=_tls_check, build=lambda v, key, ctx: TLSConfig(**v))


def _url_path(value: Any, key: str, ctx: Context) -> str:
    if not isinstance(value, str) or not value.startswith("/"):
        raise ConfigError(key, f"expected a path such as /healthz, got {value!r}")
    return value


_D_SERVE = ServeConfig()
SERVER = Schema(fields=(
    string("address", "0.0.0.0", "listen address for `/metrics`, `/healthz` and the pages"),
    integer("port", DEFAULT_PORT, "the node daemon's TCP port", lo=0, hi=65535),
    subsection("tls", TLS, ""),
    string("web_config_file", None, "exporter-toolkit web config (`tls_server_config`, `basic_auth_users` "
           "with bcrypt hashes, `http_server_config`); see [serving.md](serving.md)", null=True,
           check=_existing_file, kind="path", default_doc="unset"),
    listing("unauthenticated_paths", _D_SERVE.unauthenticated_paths, "served without basic auth", _url_path, "paths"),
    integer("max_connections", _D_SERVE.max_connections, "open connections at most (fewer when RLIMIT_NOFILE is low)",
            lo=8, hi=65536),
    number("header_timeout", _D_SERVE.header_timeout, "seconds for the TLS handshake plus the whole request head",
           lo=0.1),
    number("idle_timeout", _D_SERVE.idle_timeout, "seconds a keep-alive connection may idle between requests", lo=0.1),
    boolean("access_log", _D_SERVE.access_log, "one structured log line per request"),
    number("page_renders_per_second", _D_SERVE.page_renders_per_second,
           "uncached page renders per second, one at a time", lo=0.01),
))
SERVE_KEYS = tuple(f.name for f in SERVER.fields if f.name not in ("address", "port", "tls"))

PATHS = Schema(fields=(
    string("sysfs", "/sys", "sysfs root (`/host/sys` in a container; a recorded tree in tests)",
           check=_existing_dir, kind="directory"),
    string("procfs", "/proc", "procfs root", check=_existing_dir, kind="directory"),
    string("state_dir", "/var/lib/fabricmon", "`check`'s counter history between runs, the learned inventory "
           "(`inventory.json`, [inventory.md](inventory.md)) and the fabric topology cache", kind="directory"),
    listing("tool_dirs", DEFAULT_TOOL_DIRS, "where tools are looked for after `PATH` (each program is resolved "
            "once; a missing one is looked for again every 60 s)", _absolute_dir, "absolute directories"),
))


# --- expected_links[] -----------------------------------------------------------------------

def _width(value: Any, key: str, ctx: Context) -> int:
    width = ibspec.parse_width(str(value))
    if width is None:
        raise ConfigError(key, f"expected a width like 4X, got {value!r}")
    return width


def _speed(value: Any, key: str, ctx: Context) -> str:
    gen = ibspec.generation(str(value))
    if gen is None:
        names = ", ".join(g.name for g in ibspec.GENERATIONS)
        raise ConfigError(key, f"unknown speed {value!r} (one of {names})")
    return gen.name


def _expected_check(values: dict[str, Any], m: Mapping[str, Any], key: str, ctx: Context) -> None:
    if "device" not in m:
        raise ConfigError(f"{key}.device", "required (a glob on the HCA name, e.g. 'mlx5_*')")
    if all(values[k] is None for k in ("width", "speed", "rate_gbps", "count")):
        raise ConfigError(key, "needs at least one of width, speed, rate_gbps or count")


EXPECTED_LINK = Schema(
    fields=(custom("device", None, "glob on the HCA name (required)", _glob, "glob", default_doc="required"),
            custom("port", "*", "glob on the port number", _glob, "glob"),
            custom("width", None, "expected width (`4X`)", _width, "width", default_doc="unset"),
            custom("speed", None, "expected speed (`NDR`, `HDR`, ...)", _speed, "speed", default_doc="unset"),
            number("rate_gbps", None, "expected rate in Gb/s (e.g. 400 for RoCE)", lo=0.1, default_doc="unset"),
            choice("link_layer", "InfiniBand", "which ports the entry applies to",
                   {"infiniband": "InfiniBand", "ethernet": "Ethernet", "any": "any"},
                   reason="expected InfiniBand, Ethernet or any",
                   fold=lambda v: v.lower() if isinstance(v, str) else v),
            integer("count", None, "how many ports must match (`expected_inventory`)", lo=1, default_doc="unset")),
    check=_expected_check, build=lambda v, key, ctx: ExpectedLink(**v))


def _expected(value: Any, key: str, ctx: Context) -> tuple[ExpectedLink, ...]:
    if not isinstance(value, list):
        raise ConfigError(key, f"expected a list, got {type(value).__name__}")
    return tuple(EXPECTED_LINK.load(item, f"{key}[{i}]", ctx) for i, item in enumerate(value))


# --- checks ---------------------------------------------------------------------------------

def _counter_check(name: str, window: float, warning: float | None, critical: float | None) -> Schema:
    return Schema(fields=(number("window", window, "seconds of the trailing window", lo=1),
                          number("warning", warning, "increase within the window that is a WARNING", lo=0, null=True),
                          number("critical", critical, "... a CRITICAL", lo=0, null=True)),
                  check=_warning_below_critical, build=lambda v, key, ctx: CounterCheckConfig(**v))


def _symbol_ber_check(values: dict[str, Any], m: Mapping[str, Any], key: str, ctx: Context) -> None:
    """checks.symbol_errors: a configured count keeps working (the BER defaults apply only while no
    count is set); a bit error ratio is between 0 and 1, its warning not above its critical."""
    _warning_below_critical(values, m, key, ctx)
    if ("warning" in m or "critical" in m):
        for k in ("ber_warning", "ber_critical"):
            if k not in m:
                values[k] = None
    for k in ("ber_warning", "ber_critical"):
        v = values[k]
        if v is not None and not 0 < v < 1:
            raise ConfigError(f"{key}.{k}", f"expected a bit error ratio between 0 and 1, got {v!r}")
    w, c = values["ber_warning"], values["ber_critical"]
    if w is not None and c is not None and w > c:
        raise ConfigError(f"{key}.ber_warning", f"{w:g} is above ber_critical ({c:g})")


def _symbol_errors_check(window: float, warning: float | None, critical: float | None) -> Schema:
    """The symbol_errors counter check: counts as the others, plus its budget as a bit error
    ratio of the bits the link carried in the window (docs/optics.md#ber-budget)."""
    return Schema(fields=(
        number("window", window, "seconds of the trailing window", lo=1),
        number("warning", warning, "increase within the window that is a WARNING (used as is when the link's "
               "rate is unknown, or when ber_warning is null)", lo=0, null=True),
        number("critical", critical, "... a CRITICAL", lo=0, null=True),
        number("ber_warning", SYMBOL_BER_DEFAULTS[0], "bit error ratio over the bits the link carried in the "
               "window that is a WARNING (IBTA's 1e-12; unset when `warning` or `critical` is configured and "
               "this is not); [optics.md](optics.md#ber-budget)", lo=0, hi=1, null=True),
        number("ber_critical", SYMBOL_BER_DEFAULTS[1], "... a CRITICAL (ten times IBTA's target)", lo=0, hi=1,
               null=True),
    ), check=_symbol_ber_check, build=lambda v, key, ctx: CounterCheckConfig(**v))


_D_OPTICS = OpticsCheckConfig()
OPTICS_CHECKS = Schema(fields=(
    number("lane_spread_db", _D_OPTICS.lane_spread_db, "dB a lane's receive power may sit below its siblings' "
           "median before `optics_lane_imbalance` (a dirty or damaged connector)", lo=0.1),
    number("dimming_db", _D_OPTICS.dimming_db, "dB a lane's receive power may fall below its learned baseline "
           "before `optics_dimming`", lo=0.1),
    number("no_light_dbm", _D_OPTICS.no_light_dbm, "receive power (dBm) at or below which an up port has no "
           "light (`optics_no_light`)", lo=-60),
), build=lambda v, key, ctx: OpticsCheckConfig(**v))


def _severity(name: str, default: str, doc: str) -> Field:
    return choice(name, SEVERITIES[default], doc, SEVERITIES)


CHECKS = Schema(fields=(
    boolean("compare_with_supported", True, "without an expectation, compare an IB port with what both ends could do"),
    _severity("down_severity", "critical", "a port that is down"),
    _severity("degraded_severity", "critical", "a port below its expected width or speed"),
    _severity("saturation_severity", "ok", "a saturated port"),
    *(subsection(name, (_symbol_errors_check if name == "symbol_errors" else functools.partial(_counter_check, name))(
                     w, warn, crit), f"the `{name}` counter check (thresholds on the "
                 "increase within the trailing window; `null` disables a level)")
      for name, (_, w, warn, crit) in COUNTER_CHECKS.items()),
    subsection("optics", OPTICS_CHECKS, "the optics checks ([optics.md](optics.md#checks))"),
), build=lambda v, key, ctx: ChecksConfig(
    compare_with_supported=v["compare_with_supported"], down_severity=v["down_severity"],
    degraded_severity=v["degraded_severity"], saturation_severity=v["saturation_severity"],
    counters={n: v[n] for n in COUNTER_CHECKS}, optics=v["optics"]))

LOGGING = Schema(fields=(
    choice("level", "info", "structlog level", ("debug", "info", "warning", "error"),
           reason="expected debug, info, warning or error"),
    choice("format", "auto", "`auto` is JSON when stderr is not a TTY", ("auto", "json", "console"),
           reason="expected auto, json or console"),
))


# --- roce, gpu, slurm -----------------------------------------------------------------------

def _priority(value: Any, key: str, ctx: Context | None = None) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or not 0 <= value <= 7:
        raise ConfigError(key, f"expected a priority 0-7, got {value!r}")
    return value


def _roce_check(values: dict[str, Any], m: Mapping[str, Any], key: str, ctx: Context) -> None:
    prio = values["priority"]
    if "lossless_priorities" not in m:
        values["lossless_priorities"] = (prio,)
    lossless = tuple(sorted(set(values["lossless_priorities"])))
    if lossless and prio not in lossless:
        raise ConfigError(f"{key}.lossless_priorities",
                          f"must include roce.priority ({prio}), or be [] for lossy RoCE; "
                          f"got {list(m['lossless_priorities'])!r}")
    values["lossless_priorities"] = lossless


_D_ROCE = RoceConfig()
ROCE = Schema(fields=(
    custom("priority", _D_ROCE.priority, "the priority that carries RDMA traffic", _priority, "priority 0-7"),
    listing("lossless_priorities", _D_ROCE.lossless_priorities, "PFC must be on exactly for these; `[]`: lossy RoCE",
            _priority,
            "priorities 0-7", default_doc="`[roce.priority]`"),
    choice("trust", _D_ROCE.trust, "expected trust state; `null`: not checked", ("dscp", "pcp", None),
           reason="expected dscp, pcp or null (not checked)"),
    choice("mtu", _D_ROCE.mtu, "expected active RoCE (IB) MTU in bytes, not the netdev MTU", ROCE_MTUS,
           reason=f"expected the RoCE (IB) MTU, one of {', '.join(map(str, ROCE_MTUS))} (not the netdev MTU)"),
    number("pause_window", _D_ROCE.pause_window, "seconds pause rates and fractions are averaged over", lo=1),
    number("pause_rate_warning", _D_ROCE.pause_rate_warning, "pause frames/s (one priority, one direction)",
           lo=0, null=True),
    number("pause_rate_critical", _D_ROCE.pause_rate_critical, "pause frames/s", lo=0, null=True),
    number("pause_fraction_warning", _D_ROCE.pause_fraction_warning, "fraction of time paused", lo=0, hi=1,
           null=True, hi_reason="a fraction of time must be"),
    number("pause_fraction_critical", _D_ROCE.pause_fraction_critical, "fraction of time paused", lo=0, hi=1,
           null=True, hi_reason="a fraction of time must be"),
    number("storm_window", _D_ROCE.storm_window, "seconds: a pause-storm event within it is a finding", lo=1),
    number("drop_window", _D_ROCE.drop_window, "seconds: loss on a lossless priority within it", lo=1),
    number("drop_warning", _D_ROCE.drop_warning, "drops within the window", lo=0, null=True),
    number("drop_critical", _D_ROCE.drop_critical, "drops within the window", lo=0, null=True),
    number("cnp_window", _D_ROCE.cnp_window, "seconds: `rp_cnp_ignored` rising within it (DCQCN off)", lo=1),
    number("cnp_ignored_warning", _D_ROCE.cnp_ignored_warning, "ignored CNPs within the window", lo=0, null=True),
), check=_roce_check, build=lambda v, key, ctx: RoceConfig(**v))

GPU = Schema(fields=(
    string("nccl_env_file", None, "env file whose `NCCL_IB_HCA` is checked against the GPU/HCA affinity "
           "(e.g. `/etc/nccl.conf`)", null=True, check=_absolute, kind="absolute path"),
), build=lambda v, key, ctx: GpuConfig(**v))


def _slurm_node(value: str, key: str, ctx: Context) -> str:
    if not re.fullmatch(r"[A-Za-z0-9][A-Za-z0-9._-]{0,254}", value):
        raise ConfigError(key, f"expected a Slurm node name (letters, digits, '.', '_', '-'), got {value!r}")
    return value


_D_SLURM = SlurmConfig()
SLURM = Schema(fields=(
    string("node_name", None, "this node's Slurm name", null=True, check=_slurm_node,
           default_doc="the short host name"),
    number("lookup_retry", _D_SLURM.lookup_retry,
           "seconds before a failed job lookup (slurmctld down or slow) is tried again", lo=1),
    integer("max_job_switch_series", _D_SLURM.max_job_switch_series,
            "fabric collector: `fabricmon_fabric_job_switch_info` series at most "
            "(the rest counted)", lo=0),
), build=lambda v, key, ctx: SlurmConfig(**v))


# --- fabric ---------------------------------------------------------------------------------

# a fabric source's interval is set once, by the fabric key; slurm_jobs runs once per sweep
SOURCE_INTERVALS = {"sweep": "sweep_interval", "discovery": "discovery_interval", "routing": "routing_interval",
                    "sm": "sm_interval", "slurm_jobs": "sweep_interval"}
_TIMED = ("sweep", "discovery", "routing", "sm")

_D_THRESHOLDS = FabricThresholds()
THRESHOLDS = Schema(fields=(
    number("ecmp_ratio", _D_THRESHOLDS.ecmp_ratio, "max/mean transmit rate of a group above which it is over", lo=1.0),
    number("ecmp_cv", _D_THRESHOLDS.ecmp_cv,
           "coefficient of variation above which a group is over too (e.g. `0.2`); `null`: not used",
           lo=0, null=True),
    integer("consecutive_sweeps", _D_THRESHOLDS.consecutive_sweeps,
            "sweeps in a row over the threshold before a group is flagged", lo=1),
    number("utilisation_floor", _D_THRESHOLDS.utilisation_floor,
           "judge a group only while its mean is above this share of link rate", lo=0, hi=1,
           hi_reason="a share of link rate must be"),
), build=lambda v, key, ctx: FabricThresholds(**v))

TIMEOUTS = Schema(fields=tuple(
    number(n, None, f"seconds: a `{n}` run still going then is killed (its process group) and counted; "
           f"the same setting as `fabric.sources.{n}.timeout`", lo=0.1,
           default_doc="the source's (below)")
    for n in _TIMED))


def _fabric_check(values: dict[str, Any], m: Mapping[str, Any], key: str, ctx: Context) -> None:
    kind = values["kind"]
    if values["unresponsive_sweeps"] > values["unresponsive_window"]:
        raise ConfigError(f"{key}.unresponsive_sweeps", f"{values['unresponsive_sweeps']} is more than "
                          f"{key}.unresponsive_window ({values['unresponsive_window']})")
    if values["cache_dir"] is None:
        values["cache_dir"] = f"{ctx.built['state_dir'].rstrip('/')}/fabric"
    sources, given = _sources(m.get("sources"), f"{key}.sources", FABRIC_COLLECTORS[kind], ctx)
    timeouts = values.pop("timeouts")
    for name, sc in sources.items():
        own = given.get(name) if isinstance(given.get(name), dict) else {}
        if name in SOURCE_INTERVALS:        # one key per setting: the fabric key
            fkey = SOURCE_INTERVALS[name]
            want = values[fkey]
            if "interval" in own and sc.interval != want:
                raise ConfigError(f"{key}.sources.{name}.interval",
                                  f"{sc.interval:g} contradicts {key}.{fkey} ({want:g}): set it once, "
                                  f"as {key}.{fkey}")
            if sc.interval != want:
                sc = replace(sc, interval=want)
        if timeouts.get(name) is not None and sc.timeout != timeouts[name]:
            if "timeout" in own and sc.timeout != timeouts[name]:
                raise ConfigError(f"{key}.sources.{name}.timeout",
                                  f"{sc.timeout:g} contradicts {key}.timeouts.{name} ({timeouts[name]:g}): "
                                  f"set it once")
            sc = replace(sc, timeout=timeouts[name])
        sources[name] = sc
    values["sources"] = sources
    eth = m.get("ethernet")
    if kind == "ethernet":
        values["_ethernet"] = section("fabric.ethernet").load(eth, f"{key}.ethernet", ctx)
    elif eth:
        raise ConfigError(f"{key}.ethernet", "set fabric.kind: ethernet to use it")


_D_FABRIC = FabricConfig()
FABRIC = Schema(
    fields=(
        choice("kind", "infiniband", "`infiniband` (MADs, infiniband-diags) or `ethernet` (a RoCE fabric's switches "
               "over SNMP, [ethernet.md](ethernet.md))", tuple(FABRIC_COLLECTORS),
               reason="expected infiniband or ethernet"),
        integer("port", DEFAULT_FABRIC_PORT, "the collector's port (`server.address` and `server.tls` apply; "
                "`--listen` overrides both)", lo=0, hi=65535),
        number("sweep_interval", _D_FABRIC.sweep_interval, "seconds between sweeps of every switch port's counters "
               "(the `sweep` and `slurm_jobs` sources' interval)", lo=0.1),
        number("discovery_interval", _D_FABRIC.discovery_interval, "seconds between discoveries (the `discovery` "
               "source's interval)", lo=0.1),
        number("routing_interval", _D_FABRIC.routing_interval, "seconds between forwarding-table reads (the "
               "`routing` source's interval)", lo=0.1),
        number("sm_interval", _D_FABRIC.sm_interval, "seconds between subnet manager polls (the `sm` source's "
               "interval)", lo=0.1),
        subsection("timeouts", TIMEOUTS, ""),
        integer("concurrency", _D_FABRIC.concurrency, "the two ibqueryerrors passes in parallel (2) or one after the "
                "other (1)", lo=1, hi=2),
        custom("shard", _D_FABRIC.shard, "`i/n`: sweep only the switches whose GUID hash % n == i (`--shard` "
               "overrides)", parse_shard, "`i/n`", default_doc='`"0/1"`'),
        string("cache_dir", None, "where the topology cache lives (created on start)", kind="directory",
               default_doc="`<paths.state_dir>/fabric`"),
        integer("mad_timeout_ms", _D_FABRIC.mad_timeout_ms, "ibqueryerrors/dump_fts/sminfo `-t`, and the MAD "
                "engine's timeout per MAD: what a switch that does not answer costs per query", lo=10, hi=60000),
        subsection("thresholds", THRESHOLDS, ""),
        number("routing_imbalance_threshold", _D_FABRIC.routing_imbalance_threshold, "route imbalance (max/mean "
               "remote destinations over active uplinks) above which a switch is flagged", lo=1.0),
        integer("sm_stalled_polls", _D_FABRIC.sm_stalled_polls, "SM polls in a row with the master's activity count "
                "unchanged: a hung SM", lo=1),
        number("down_port_max_age", _D_FABRIC.down_port_max_age, "seconds a cabled port that went down stays "
               "reported down; `null`: until the collector restarts", lo=1, null=True),
        integer("link_state_max_ports", _D_FABRIC.link_state_max_ports, "PortInfo reads per sweep of ports a lossy "
                "state pass did not reach; 0: no per-sweep link state", lo=0),
        integer("unresponsive_sweeps", _D_FABRIC.unresponsive_sweeps, "a switch that did not answer in this many "
                "of its last `unresponsive_window` sweeps is unresponsive (OpenSM's rule: 5 of 7)", lo=1),
        integer("unresponsive_window", _D_FABRIC.unresponsive_window, "the sweeps `unresponsive_sweeps` counts in",
                lo=1),
        choice("sweep_method", _D_FABRIC.sweep_method, "`mad`: the in-process [MAD engine](mad-engine.md); `tools`: "
               "the infiniband-diags processes; `auto`: the engine where the collector's process opens a umad port, "
               "else the tools (`fabricmon_fabric_sweep_method` says which ran)", ("auto", "mad", "tools"),
               reason="expected auto, mad or tools"),
        integer("mad_window", _D_FABRIC.mad_window, "MADs in flight at once (the MAD engine's global window)",
                lo=1, hi=1024),
        integer("mad_window_per_switch", _D_FABRIC.mad_window_per_switch, "MADs in flight to one switch at once "
                "(the MAD engine)", lo=1, hi=64),
        integer("mad_retries", _D_FABRIC.mad_retries, "further tries of a MAD left unanswered (each "
                "`mad_timeout_ms`), while the sweep's deadline allows", lo=0, hi=10),
        number("uplinks_critical_fraction", _D_FABRIC.uplinks_critical_fraction, "share of a switch's expected "
               "uplinks missing from which its `uplinks` check is CRITICAL (fewer missing: WARNING)", lo=0.0, hi=1.0),
    ),
    extra=("sources", "ethernet"),
    extra_doc=(
        ("sources.<name>.{enabled,timeout,command}", "see `sources.<name>`", "below",
         "the fabric sources (table below), validated like `sources.*`; their interval is the `fabric.*_interval` "
         "key (a `fabric.sources.<name>.interval` that differs from it is an error naming both), and "
         "`fabric.timeouts.<name>` and `fabric.sources.<name>.timeout` are one setting"),
        ("ethernet", "mapping", "unset", "only with `kind: ethernet`: the switches and SNMP (below)"),
    ),
    check=_fabric_check,
    build=lambda v, key, ctx: FabricConfig(**v),
    pure=False,         # cache_dir follows paths.state_dir; the sources follow the fabric keys
)


@functools.lru_cache(maxsize=1)
def _ethernet_defaults() -> Any:
    return section("fabric.ethernet").default_object()


# --- the whole file -------------------------------------------------------------------------

def _device_globs(value: Any, key: str, ctx: Context) -> tuple[str, ...]:
    if not isinstance(value, list):
        raise ConfigError(key, f"expected a list of globs, got {value!r}")
    return tuple(_glob(p, f"{key}[{i}]") for i, p in enumerate(value))


# top-level key -> its schema (None: validated by its own function), in the order they are built
SECTIONS: dict[str, Schema | None] = {
    "server": SERVER, "paths": PATHS, "sources": None, "exclude_devices": None, "expected_links": None,
    "checks": CHECKS, "logging": LOGGING, "roce": ROCE, "gpu": GPU, "fabric": FABRIC, "slurm": SLURM,
}
_TOP_KEYS = tuple(SECTIONS)


def from_dict(raw: Any, path: str | None = None, check_paths: bool = True) -> Config:
    """Validate a parsed YAML document. Raises ConfigError naming the bad key."""
    top = mapping(raw, "", _TOP_KEYS)
    ctx = Context(check_paths=check_paths)
    server = SERVER.load(top.get("server"), "server", ctx)
    paths = PATHS.load(top.get("paths"), "paths", ctx)
    ctx.built["state_dir"] = paths["state_dir"]
    sources, _ = _sources(top.get("sources"), "sources", NODE_COLLECTOR, ctx)
    logging_ = LOGGING.load(top.get("logging"), "logging", ctx)
    return Config(
        address=server["address"], port=server["port"], tls=server["tls"],
        sysfs=paths["sysfs"], procfs=paths["procfs"], state_dir=paths["state_dir"],
        sources=sources,
        exclude_devices=_device_globs(top["exclude_devices"], "exclude_devices", ctx) if top.get("exclude_devices")
        is not None else (),
        expected_links=_expected(top["expected_links"], "expected_links", ctx) if top.get("expected_links")
        is not None else (),
        checks=CHECKS.load(top.get("checks"), "checks", ctx),
        log_level=logging_["level"], log_format=logging_["format"],
        path=path, raw=top,
        roce=ROCE.load(top.get("roce"), "roce", ctx),
        gpu=GPU.load(top.get("gpu"), "gpu", ctx),
        tool_dirs=paths["tool_dirs"],
        fabric=FABRIC.load(top.get("fabric"), "fabric", ctx),
        slurm=SLURM.load(top.get("slurm"), "slurm", ctx),
        serve=ServeConfig(**{k: server[k] for k in SERVE_KEYS}),
    )


def load(path: str | os.PathLike[str] | None, check_paths: bool = True) -> Config:
    """Load and validate a YAML config file; None gives the built-in defaults."""
    if path is None:
        return from_dict({}, None, check_paths)
    try:
        text = Path(path).read_text()
    except OSError as exc:
        raise ConfigError("", f"cannot read config file {path}: {exc.strerror or exc}") from exc
    try:
        raw = yaml.safe_load(text)
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        where = f" line {mark.line + 1} column {mark.column + 1}" if mark else ""
        raise ConfigError("", f"{path}: invalid YAML{where}: {getattr(exc, 'problem', exc)}") from exc
    return from_dict(raw or {}, str(path), check_paths)


# --- the reference in docs/configuration.md -------------------------------------------------

_SECTION_DOCS = {
    "server": "The HTTP server of both daemons (the node daemon's port here, the fabric collector's in `fabric.port`).",
    "paths": "",
    "sources": "Every node source (table below) takes these keys; a source that runs no program takes no `command`.",
    "exclude_devices": "",
    "expected_links": "A list; at least one of width, speed, rate_gbps or count per entry. The first entry that "
                      "sets a width, speed or rate applies to a port; every entry is also an inventory check "
                      "(`expected_inventory`). The example config ships with none active and one commented example "
                      "per fabric (NDR, HDR, RoCE 400G/200G).",
    "checks": "Every check with its thresholds: [checks.md](checks.md).",
    "logging": "",
    "roce": "RoCE lossless expectations ([roce-gpudirect.md](roce-gpudirect.md#configuration)).",
    "gpu": "",
    "fabric": "The fabric collector (`fabricmon fabric`, [fabric-collector.md](fabric-collector.md)); the node daemon "
              "ignores this section.",
    "slurm": "Which jobs a finding hurts ([jobs.md](jobs.md)).",
}
def _generic_source_rows() -> list[tuple[str, str, str, str]]:
    """The keys every source takes, as source_schema declares them (default: per source)."""
    spec = next(s for s in registry(NODE_COLLECTOR).values() if s.command)
    rows = source_schema(spec).rows("sources.<name>")
    return [(k, kind, "per source", doc) for k, kind, _, doc in rows
            if k.rsplit(".", 1)[1] in ("enabled", "interval", "timeout", "command")]


def _source_table() -> str:
    lines = ["| source | collector | enabled | interval | timeout | command |", "|---|---|---|---|---|---|"]
    where = {NODE_COLLECTOR: "node (`sources.`)",
             **{c: f"fabric, {kind} (`fabric.sources.`)" for kind, c in FABRIC_COLLECTORS.items()}}
    for collector in where:
        for name, spec in registry(collector).items():
            fabric_key = collector != NODE_COLLECTOR and name in SOURCE_INTERVALS
            interval = f"`fabric.{SOURCE_INTERVALS[name]}`" if fabric_key else f"{spec.interval:g}"
            lines.append(f"| `{name}` | {where[collector]} | `{str(spec.enabled).lower()}` | {interval} | "
                         f"{spec.timeout:g} | {'`' + ' '.join(spec.command) + '`' if spec.command else 'none'} |")
    return "\n".join(lines) + "\n"


def reference() -> str:
    """The generated part of docs/configuration.md: one table per section, from the schemas above,
    the fabric.ethernet section's and the source registry."""
    out = []
    for name in SECTIONS:
        out.append(f"### {name}\n")
        if _SECTION_DOCS[name]:
            out.append(_SECTION_DOCS[name] + "\n")
        if name == "sources":
            rows = _generic_source_rows()
        elif name == "exclude_devices":
            rows = [("exclude_devices", "list of globs", "`[]`", "HCA names never read")]
        elif name == "expected_links":
            rows = EXPECTED_LINK.rows("expected_links[]")
        else:
            rows = SECTIONS[name].rows(name)
        out.append(table(rows))
        if name == "sources":
            out.append("The registered sources and their defaults:\n\n" + _source_table())
            for collector in (NODE_COLLECTOR, *FABRIC_COLLECTORS.values()):
                prefix = "sources" if collector == NODE_COLLECTOR else "fabric.sources"
                for sname, spec in registry(collector).items():
                    if spec.options is not None:
                        out.append(f"`{prefix}.{sname}`'s own keys:\n\n"
                                   + table(spec.options.rows(f"{prefix}.{sname}")))
        if name == "fabric":
            eth = section("fabric.ethernet")
            out.append("`fabric.ethernet`, only with `fabric.kind: ethernet` ([ethernet.md](ethernet.md)):\n\n"
                       + table(eth.rows("fabric.ethernet")))
    return "\n".join(out)
