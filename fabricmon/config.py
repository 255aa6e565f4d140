"""Configuration: YAML in, validated frozen dataclasses out.

Every error names the key (as a dotted path) and the reason, so `fabricmon run` can refuse to
start with exit 2 and a message an operator can act on.
"""

from __future__ import annotations

import difflib
import fnmatch
import os
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from fabricmon import ibspec
from fabricmon.host.runner import DEFAULT_TOOL_DIRS
from fabricmon.registry import registry

DEFAULT_PORT = 9879
DEFAULT_FABRIC_PORT = 9881      # the fabric collector (9880 is fluentd's in_http default)
DEFAULT_CONFIG_PATH = "/etc/fabricmon/fabricmon.yml"


class ConfigError(ValueError):
    """A configuration problem at `key`."""

    def __init__(self, key: str, reason: str):
        self.key = key
        self.reason = reason
        super().__init__(f"config error at {key or '<top>'}: {reason}")


@dataclass(frozen=True, slots=True)
class SourceConfig:
    name: str
    enabled: bool | str      # True, False or "auto"
    interval: float
    timeout: float
    command: tuple[str, ...]


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


@dataclass(frozen=True, slots=True)
class ChecksConfig:
    compare_with_supported: bool
    down_severity: int
    degraded_severity: int
    saturation_severity: int
    counters: dict[str, CounterCheckConfig]


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
    unauthenticated_paths: tuple[str, ...] = ("/healthz",)     # served without basic auth
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
    """ECMP imbalance judgement (GUIDE.md section 3: defaults, not standards)."""
    ecmp_ratio: float = 1.2              # max/mean transmit rate of a group
    ecmp_cv: float | None = None         # coefficient of variation; None: not used to flag
    consecutive_sweeps: int = 3          # over the threshold this many sweeps in a row
    utilisation_floor: float = 0.3       # judge a group only while its mean is above this share of link rate


SNMP_AUTH_PROTOCOLS = ("MD5", "SHA", "SHA224", "SHA256", "SHA384", "SHA512")
SNMP_PRIV_PROTOCOLS = ("DES", "AES", "AES192", "AES256", "AES192C", "AES256C")   # C: Cisco's key extension
SNMP_SECRETS = ("community", "auth_password", "priv_password")


@dataclass(frozen=True, slots=True)
class SnmpConfig:
    """How the Ethernet collector reads its switches (fabric.ethernet.snmp). Secrets are read
    from their files when the config loads and never shown (repr=False): v2c's community only into
    the request datagrams (host.snmp), v3's to net-snmp in a private config file; never in argv, a
    log line or an error message."""
    version: str = "2c"                  # "2c" or "3"
    community: str = field(default="", repr=False)
    user: str = ""
    auth_protocol: str = "SHA"
    auth_password: str = field(default="", repr=False)
    priv_protocol: str = "AES"
    priv_password: str = field(default="", repr=False)
    context: str = ""
    timeout: float = 2.0                 # seconds per request (net-snmp -t)
    retries: int = 1                     # net-snmp -r
    max_repetitions: int = 25            # GETBULK: values per answer (net-snmp -Cr)
    max_rows: int = 50000                # rows of one table column a walk reads at most (a broken agent's end)
    # secret files found group- or world-readable (warned about once at start)
    loose_files: tuple[str, ...] = ()


@dataclass(frozen=True, slots=True)
class EthernetConfig:
    """fabric.ethernet: the switches of an Ethernet (RoCE) fabric, read over SNMP."""
    switches: tuple[str, ...] = ()       # host[:port]
    snmp: SnmpConfig = field(default_factory=SnmpConfig)
    concurrency: int = 16                # switches read at once
    pfc_storm_rate: float = 1000.0       # pause frames/s on one port, priority and direction ...
    pfc_storm_sweeps: int = 2            # ... for this many sweeps in a row: a PFC storm


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
    stale_sweeps: int = 3                # sweeps (of the last stale_sweeps + 2) with unanswered queries: a switch is stale
    sources: dict[str, SourceConfig] = field(default_factory=dict)
    kind: str = "infiniband"             # or "ethernet": which sources the collector runs
    ethernet: EthernetConfig = field(default_factory=EthernetConfig)


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


# Counter checks: name -> (counters summed, window s, warning, critical, what to do)
COUNTER_CHECKS: dict[str, tuple[tuple[str, ...], float, float | None, float | None]] = {
    "symbol_errors": (("symbol_errors",), 3600.0, 120.0, 1200.0),
    "link_flap": (("link_downed",), 43200.0, 1.0, 3.0),
    "link_error_recovery": (("link_error_recovery",), 3600.0, 10.0, 100.0),
    "link_integrity": (("local_link_integrity_errors", "excessive_buffer_overrun_errors"),
                       3600.0, None, 1.0),
    "receive_errors": (("receive_errors", "receive_remote_physical_errors"), 3600.0, 120.0, 1200.0),
    "transmit_discards": (("transmit_discards",), 3600.0, 1000.0, None),
}

SEVERITIES = {"ok": 0, "warning": 1, "critical": 2}

_TOP_KEYS = ("server", "paths", "sources", "exclude_devices", "expected_links", "checks", "logging",
             "roce", "gpu", "fabric", "slurm")


def _suggest(key: str, allowed: tuple[str, ...] | list[str]) -> str:
    close = difflib.get_close_matches(key, allowed, n=1)
    return f" (did you mean {close[0]!r}?)" if close else f" (allowed: {', '.join(allowed)})"


def _mapping(value: Any, key: str, allowed: tuple[str, ...]) -> dict[str, Any]:
    if value is None:
        return {}
    if not isinstance(value, dict):
        raise ConfigError(key, f"expected a mapping, got {type(value).__name__}")
    for k in value:
        if not isinstance(k, str) or k not in allowed:
            raise ConfigError(f"{key}.{k}" if key else str(k), "unknown key" + _suggest(str(k), allowed))
    return value


def _number(value: Any, key: str, minimum: float | None = None, allow_none: bool = False) -> float | None:
    if value is None and allow_none:
        return None
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise ConfigError(key, f"expected a number, got {value!r}")
    if minimum is not None and value < minimum:
        raise ConfigError(key, f"must be >= {minimum}, got {value!r}")
    return float(value)


def _string(value: Any, key: str) -> str:
    if not isinstance(value, str) or not value:
        raise ConfigError(key, f"expected a non-empty string, got {value!r}")
    return value


def _glob(value: Any, key: str) -> str:
    pat = _string(value, key) if not isinstance(value, int) else str(value)
    depth = 0
    for ch in pat:   # fnmatch silently treats an unclosed '[' as a literal: refuse it instead
        if ch == "[":
            depth += 1
        elif ch == "]" and depth:
            depth -= 1
    if depth:
        raise ConfigError(key, f"bad glob {pat!r}: unclosed '['")
    return pat


def _bool_or_auto(value: Any, key: str) -> bool | str:
    if isinstance(value, bool) or value == "auto":
        return value
    raise ConfigError(key, f"expected true, false or 'auto', got {value!r}")


def _severity(value: Any, key: str) -> int:
    if value not in SEVERITIES:
        raise ConfigError(key, f"expected one of {', '.join(SEVERITIES)}, got {value!r}")
    return SEVERITIES[value]


def _dir(value: Any, key: str, must_exist: bool) -> str:
    path = _string(value, key)
    if must_exist and not Path(path).is_dir():
        raise ConfigError(key, f"{path} is not an existing directory")
    return path


def _sources(raw: Any, collector: str = "node", prefix: str = "sources",
             defaults: dict[str, dict[str, Any]] | None = None) -> dict[str, SourceConfig]:
    """Validate `<prefix>.<name>` against the sources registered for `collector` and their
    defaults (`defaults` overrides a registered default, e.g. fabric.sweep_interval)."""
    specs = registry(collector)
    m = _mapping(raw, prefix, tuple(specs))
    out = {}
    for name, spec in specs.items():
        key = f"{prefix}.{name}"
        dflt = {"enabled": spec.enabled, "interval": spec.interval, "timeout": spec.timeout,
                "command": list(spec.command), **(defaults or {}).get(name, {})}
        takes_command = bool(spec.command)
        allowed = ("enabled", "interval", "timeout", "command") if takes_command else ("enabled", "interval", "timeout")
        s = _mapping(m.get(name), key, allowed)
        cmd = s.get("command", dflt["command"])
        if takes_command:
            if isinstance(cmd, str):
                cmd = [cmd]
            if not isinstance(cmd, list) or not cmd or not all(isinstance(c, str) and c for c in cmd):
                raise ConfigError(f"{key}.command", f"expected a program name or an argv list, got {cmd!r}")
        out[name] = SourceConfig(
            name=name,
            enabled=_bool_or_auto(s.get("enabled", dflt["enabled"]), f"{key}.enabled"),
            interval=_number(s.get("interval", dflt["interval"]), f"{key}.interval", 0.1),
            timeout=_number(s.get("timeout", dflt["timeout"]), f"{key}.timeout", 0.1),
            command=tuple(cmd) if takes_command else (),
        )
    return out


def parse_shard(value: Any, key: str) -> tuple[int, int]:
    """`i/n` (0 <= i < n): this collector sweeps the switches whose GUID hash % n == i."""
    text = str(value).strip() if isinstance(value, (str, int)) and not isinstance(value, bool) else ""
    m = re.fullmatch(r"(\d+)\s*/\s*(\d+)", text)
    if not m or int(m.group(2)) < 1 or int(m.group(1)) >= int(m.group(2)):
        raise ConfigError(key, f"expected 'i/n' with 0 <= i < n (e.g. '0/4'), got {value!r}")
    return int(m.group(1)), int(m.group(2))


def _int(value: Any, key: str, lo: int, hi: int) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or not lo <= value <= hi:
        raise ConfigError(key, f"expected an integer {lo}-{hi}, got {value!r}")
    return value


def _secret(m: dict[str, Any], key: str, name: str, check_paths: bool, loose: list[str]) -> str:
    """A secret inline (`name`) or from `name_file` (first line). The value never appears in an
    error; a file readable by group or others is noted in `loose` (a warning at start)."""
    inline, path = m.get(name), m.get(f"{name}_file")
    if inline is not None and path is not None:
        raise ConfigError(f"{key}.{name}", f"give {name} or {name}_file, not both")
    if inline is not None:
        if not isinstance(inline, str) or not inline:
            raise ConfigError(f"{key}.{name}", "expected a non-empty string")
        return inline
    if path is None:
        return ""
    path = _string(path, f"{key}.{name}_file")
    if not check_paths:
        return ""
    try:
        st = os.stat(path)
        with open(path, encoding="utf-8") as fh:
            text = fh.readline().strip()
    except OSError as exc:
        raise ConfigError(f"{key}.{name}_file", f"cannot read {path}: {exc.strerror or exc}") from None
    except UnicodeDecodeError:
        raise ConfigError(f"{key}.{name}_file", f"{path} is not UTF-8 text") from None
    if not text:
        raise ConfigError(f"{key}.{name}_file", f"{path} is empty")
    if st.st_mode & 0o077:
        loose.append(f"{path} (mode {st.st_mode & 0o777:o})")
    return text


def _snmp(raw: Any, check_paths: bool) -> SnmpConfig:
    key = "fabric.ethernet.snmp"
    d = SnmpConfig()
    m = _mapping(raw, key, ("version", "community", "community_file", "user", "auth_protocol", "auth_password",
                            "auth_password_file", "priv_protocol", "priv_password", "priv_password_file", "context",
                            "timeout", "retries", "max_repetitions", "max_rows"))
    version = str(m.get("version", d.version))
    if version not in ("2c", "3"):
        raise ConfigError(f"{key}.version", f"expected \"2c\" or \"3\", got {m.get('version')!r}")
    loose: list[str] = []
    secrets = {n: _secret(m, key, n, check_paths, loose) for n in SNMP_SECRETS}
    auth = str(m.get("auth_protocol", d.auth_protocol)).upper()
    priv = str(m.get("priv_protocol", d.priv_protocol)).upper()
    if auth not in SNMP_AUTH_PROTOCOLS:
        raise ConfigError(f"{key}.auth_protocol", f"expected one of {', '.join(SNMP_AUTH_PROTOCOLS)}, got {auth!r}")
    if priv not in SNMP_PRIV_PROTOCOLS:
        raise ConfigError(f"{key}.priv_protocol", f"expected one of {', '.join(SNMP_PRIV_PROTOCOLS)}, got {priv!r}")
    user = _string(m.get("user", ""), f"{key}.user") if "user" in m else ""
    if version == "2c":
        if not secrets["community"] and "community_file" not in m:
            raise ConfigError(f"{key}.community_file", "SNMP v2c needs a community (community_file, or community)")
        for n in ("user", "auth_password", "auth_password_file", "priv_password", "priv_password_file"):
            if n in m:
                raise ConfigError(f"{key}.{n}", "only for SNMP version 3")
    else:
        if not user:
            raise ConfigError(f"{key}.user", "SNMP v3 needs a user (security name)")
        for n in ("auth_password", "priv_password"):
            if not secrets[n] and f"{n}_file" not in m:
                raise ConfigError(f"{key}.{n}_file", "SNMP v3 authPriv needs it (or " + n + ")")
            if check_paths and len(secrets[n]) < 8:
                raise ConfigError(f"{key}.{n}_file" if f"{n}_file" in m else f"{key}.{n}",
                                  "an SNMPv3 pass phrase has at least 8 characters")
        if "community" in m or "community_file" in m:
            raise ConfigError(f"{key}.community", "only for SNMP version 2c")
    context = _string(m.get("context", ""), f"{key}.context") if m.get("context") else ""
    for n, v in (("user", user), ("context", context)):
        if any(c.isspace() or not c.isprintable() for c in v):
            raise ConfigError(f"{key}.{n}", "must not contain spaces or control characters")
    return SnmpConfig(
        version=version, community=secrets["community"], user=user, auth_protocol=auth,
        auth_password=secrets["auth_password"], priv_protocol=priv, priv_password=secrets["priv_password"],
        context=context, timeout=_number(m.get("timeout", d.timeout), f"{key}.timeout", 0.1),
        retries=_int(m.get("retries", d.retries), f"{key}.retries", 0, 10),
        max_repetitions=_int(m.get("max_repetitions", d.max_repetitions), f"{key}.max_repetitions", 1, 1000),
        max_rows=_int(m.get("max_rows", d.max_rows), f"{key}.max_rows", 1, 10_000_000),
        loose_files=tuple(loose))


_HOST_PORT = re.compile(r"^(?:\[[0-9A-Fa-f:.]+\]|[A-Za-z0-9][A-Za-z0-9.-]*)(?::[0-9]{1,5})?$")


def _switch_list(values: Any, key: str) -> tuple[str, ...]:
    if not isinstance(values, list):
        raise ConfigError(key, f"expected a list of host[:port], got {values!r}")
    out = []
    for i, v in enumerate(values):
        if not isinstance(v, str) or not _HOST_PORT.match(v.strip()):
            raise ConfigError(f"{key}[{i}]", f"expected host[:port] (e.g. 10.0.0.11 or spine01:161), got {v!r}")
        port = v.strip().rsplit(":", 1)[1] if ":" in v.strip().rsplit("]", 1)[-1] else "161"
        if not 1 <= int(port) <= 65535:
            raise ConfigError(f"{key}[{i}]", f"UDP port {port} is not 1-65535")
        out.append(v.strip())
    if len(set(out)) != len(out):
        dup = next(x for x in out if out.count(x) > 1)
        raise ConfigError(key, f"{dup} is listed twice")
    return tuple(out)


def _ethernet(raw: Any, kind: str, check_paths: bool) -> EthernetConfig:
    key = "fabric.ethernet"
    d = EthernetConfig()
    m = _mapping(raw, key, ("switches", "switches_file", "snmp", "concurrency", "pfc_storm_rate", "pfc_storm_sweeps"))
    if kind != "ethernet":
        if m:
            raise ConfigError(key, "set fabric.kind: ethernet to use it")
        return d
    if "switches" in m and "switches_file" in m:
        raise ConfigError(f"{key}.switches", "give switches or switches_file, not both")
    if "switches_file" in m:
        path = _string(m["switches_file"], f"{key}.switches_file")
        try:
            lines = [ln.split("#", 1)[0].strip() for ln in Path(path).read_text().splitlines()]
        except OSError as exc:
            if check_paths:
                raise ConfigError(f"{key}.switches_file", f"cannot read {path}: {exc.strerror or exc}") from None
            lines = []
        switches = _switch_list([ln for ln in lines if ln], f"{key}.switches_file")
    else:
        switches = _switch_list(m.get("switches", []), f"{key}.switches")
    if not switches and check_paths:
        raise ConfigError(f"{key}.switches", "an Ethernet fabric needs at least one switch (switches or switches_file)")
    return EthernetConfig(
        switches=switches, snmp=_snmp(m.get("snmp"), check_paths),
        concurrency=_int(m.get("concurrency", d.concurrency), f"{key}.concurrency", 1, 256),
        pfc_storm_rate=_number(m.get("pfc_storm_rate", d.pfc_storm_rate), f"{key}.pfc_storm_rate", 0),
        pfc_storm_sweeps=_int(m.get("pfc_storm_sweeps", d.pfc_storm_sweeps), f"{key}.pfc_storm_sweeps", 1, 1000))


def _fabric(raw: Any, state_dir: str, check_paths: bool = True) -> FabricConfig:
    d = FabricConfig()
    m = _mapping(raw, "fabric", ("port", "sweep_interval", "discovery_interval", "timeouts", "concurrency",
                                 "shard", "cache_dir", "mad_timeout_ms", "thresholds", "sources",
                                 "routing_interval", "sm_interval", "routing_imbalance_threshold",
                                 "sm_stalled_polls", "down_port_max_age", "link_state_max_ports",
                                 "stale_sweeps", "kind", "ethernet"))
    kind = m.get("kind", d.kind)
    if kind not in ("infiniband", "ethernet"):
        raise ConfigError("fabric.kind", f"expected infiniband or ethernet, got {kind!r}")
    port = m.get("port", d.port)
    if isinstance(port, bool) or not isinstance(port, int) or not 0 <= port <= 65535:
        raise ConfigError("fabric.port", f"expected a TCP port number 0-65535, got {port!r}")
    sweep = _number(m.get("sweep_interval", d.sweep_interval), "fabric.sweep_interval", 0.1)
    disc = _number(m.get("discovery_interval", d.discovery_interval), "fabric.discovery_interval", 0.1)
    routing = _number(m.get("routing_interval", d.routing_interval), "fabric.routing_interval", 0.1)
    sm = _number(m.get("sm_interval", d.sm_interval), "fabric.sm_interval", 0.1)
    imb = _number(m.get("routing_imbalance_threshold", d.routing_imbalance_threshold),
                  "fabric.routing_imbalance_threshold", 1.0)
    stalled = m.get("sm_stalled_polls", d.sm_stalled_polls)
    if isinstance(stalled, bool) or not isinstance(stalled, int) or stalled < 1:
        raise ConfigError("fabric.sm_stalled_polls", f"expected an integer >= 1, got {stalled!r}")
    max_age = _number(m.get("down_port_max_age", d.down_port_max_age), "fabric.down_port_max_age", 1,
                      allow_none=True)
    timeouts = _mapping(m.get("timeouts"), "fabric.timeouts", ("sweep", "discovery", "routing", "sm"))
    ls_max = m.get("link_state_max_ports", d.link_state_max_ports)
    if isinstance(ls_max, bool) or not isinstance(ls_max, int) or ls_max < 0:
        raise ConfigError("fabric.link_state_max_ports", f"expected an integer >= 0, got {ls_max!r}")
    stale = m.get("stale_sweeps", d.stale_sweeps)
    if isinstance(stale, bool) or not isinstance(stale, int) or stale < 1:
        raise ConfigError("fabric.stale_sweeps", f"expected an integer >= 1, got {stale!r}")
    conc = m.get("concurrency", d.concurrency)
    if isinstance(conc, bool) or not isinstance(conc, int) or not 1 <= conc <= 2:
        raise ConfigError("fabric.concurrency", f"expected 1 (the two sweep passes one after the other) or 2 "
                                                f"(in parallel), got {conc!r}")
    mad = m.get("mad_timeout_ms", d.mad_timeout_ms)
    if isinstance(mad, bool) or not isinstance(mad, int) or not 10 <= mad <= 60000:
        raise ConfigError("fabric.mad_timeout_ms", f"expected milliseconds 10-60000, got {mad!r}")
    th = _mapping(m.get("thresholds"), "fabric.thresholds",
                  ("ecmp_ratio", "ecmp_cv", "consecutive_sweeps", "utilisation_floor"))
    dt = FabricThresholds()
    n = th.get("consecutive_sweeps", dt.consecutive_sweeps)
    if isinstance(n, bool) or not isinstance(n, int) or n < 1:
        raise ConfigError("fabric.thresholds.consecutive_sweeps", f"expected an integer >= 1, got {n!r}")
    floor = _number(th.get("utilisation_floor", dt.utilisation_floor), "fabric.thresholds.utilisation_floor", 0)
    if floor > 1:
        raise ConfigError("fabric.thresholds.utilisation_floor", f"a share of link rate must be <= 1, got {floor!r}")
    thresholds = FabricThresholds(
        ecmp_ratio=_number(th.get("ecmp_ratio", dt.ecmp_ratio), "fabric.thresholds.ecmp_ratio", 1.0),
        ecmp_cv=_number(th.get("ecmp_cv", dt.ecmp_cv), "fabric.thresholds.ecmp_cv", 0, allow_none=True),
        consecutive_sweeps=n, utilisation_floor=floor)
    defaults = {
        "sweep": {"interval": sweep, **({"timeout": _number(timeouts["sweep"], "fabric.timeouts.sweep", 0.1)}
                                        if "sweep" in timeouts else {})},
        "discovery": {"interval": disc, **({"timeout": _number(timeouts["discovery"], "fabric.timeouts.discovery", 0.1)}
                                           if "discovery" in timeouts else {})},
        "routing": {"interval": routing, **({"timeout": _number(timeouts["routing"], "fabric.timeouts.routing", 0.1)}
                                            if "routing" in timeouts else {})},
        "sm": {"interval": sm, **({"timeout": _number(timeouts["sm"], "fabric.timeouts.sm", 0.1)}
                                  if "sm" in timeouts else {})},
        "slurm_jobs": {"interval": sweep},       # the running jobs, once per sweep
    }
    return FabricConfig(
        port=port, sweep_interval=sweep, discovery_interval=disc, concurrency=conc,
        shard=parse_shard(m["shard"], "fabric.shard") if "shard" in m else d.shard,
        cache_dir=_string(m.get("cache_dir", f"{state_dir.rstrip('/')}/fabric"), "fabric.cache_dir"),
        mad_timeout_ms=mad, thresholds=thresholds, routing_interval=routing, sm_interval=sm,
        routing_imbalance_threshold=imb, sm_stalled_polls=stalled, down_port_max_age=max_age,
        link_state_max_ports=ls_max, stale_sweeps=stale,
        # an Ethernet fabric runs its own two sources (SNMP), named and timed as InfiniBand's
        sources=_sources(m.get("sources"), "ethernet" if kind == "ethernet" else "fabric", "fabric.sources",
                         defaults),
        kind=kind, ethernet=_ethernet(m.get("ethernet"), kind, check_paths),
    )


def _expected(raw: Any) -> tuple[ExpectedLink, ...]:
    if raw is None:
        return ()
    if not isinstance(raw, list):
        raise ConfigError("expected_links", f"expected a list, got {type(raw).__name__}")
    out = []
    for i, item in enumerate(raw):
        key = f"expected_links[{i}]"
        e = _mapping(item, key, ("device", "port", "width", "speed", "rate_gbps", "link_layer", "count"))
        if "device" not in e:
            raise ConfigError(f"{key}.device", "required (a glob on the HCA name, e.g. 'mlx5_*')")
        width = None
        if "width" in e:
            width = ibspec.parse_width(str(e["width"]))
            if width is None:
                raise ConfigError(f"{key}.width", f"expected a width like 4X, got {e['width']!r}")
        speed = None
        if "speed" in e:
            if ibspec.generation(str(e["speed"])) is None:
                names = ", ".join(g.name for g in ibspec.GENERATIONS)
                raise ConfigError(f"{key}.speed", f"unknown speed {e['speed']!r} (one of {names})")
            speed = ibspec.generation(str(e["speed"])).name
        rate = _number(e["rate_gbps"], f"{key}.rate_gbps", 0.1) if "rate_gbps" in e else None
        count = e.get("count")
        if count is not None and (isinstance(count, bool) or not isinstance(count, int) or count < 1):
            raise ConfigError(f"{key}.count", f"expected a number of ports >= 1, got {count!r}")
        if width is None and speed is None and rate is None and count is None:
            raise ConfigError(key, "needs at least one of width, speed, rate_gbps or count")
        layer = e.get("link_layer", "InfiniBand")
        layers = {"infiniband": "InfiniBand", "ethernet": "Ethernet", "any": "any"}
        if not isinstance(layer, str) or layer.lower() not in layers:
            raise ConfigError(f"{key}.link_layer", f"expected InfiniBand, Ethernet or any, got {layer!r}")
        out.append(ExpectedLink(
            device=_glob(e["device"], f"{key}.device"),
            port=_glob(e.get("port", "*"), f"{key}.port"),
            width=width, speed=speed, rate_gbps=rate, link_layer=layers[layer.lower()], count=count,
        ))
    return tuple(out)


def _checks(raw: Any) -> ChecksConfig:
    allowed = ("compare_with_supported", "down_severity", "degraded_severity",
               "saturation_severity", *COUNTER_CHECKS)
    m = _mapping(raw, "checks", allowed)
    cws = m.get("compare_with_supported", True)
    if not isinstance(cws, bool):
        raise ConfigError("checks.compare_with_supported", f"expected true or false, got {cws!r}")
    counters = {}
    for name, (_, window, warn, crit) in COUNTER_CHECKS.items():
        key = f"checks.{name}"
        c = _mapping(m.get(name), key, ("window", "warning", "critical"))
        cc = CounterCheckConfig(
            window=_number(c.get("window", window), f"{key}.window", 1),
            warning=_number(c.get("warning", warn), f"{key}.warning", 0, allow_none=True),
            critical=_number(c.get("critical", crit), f"{key}.critical", 0, allow_none=True),
        )
        if cc.warning is not None and cc.critical is not None and cc.warning > cc.critical:
            raise ConfigError(f"{key}.warning", f"{cc.warning:g} is above critical ({cc.critical:g})")
        counters[name] = cc
    return ChecksConfig(
        compare_with_supported=cws,
        down_severity=_severity(m.get("down_severity", "critical"), "checks.down_severity"),
        degraded_severity=_severity(m.get("degraded_severity", "critical"), "checks.degraded_severity"),
        saturation_severity=_severity(m.get("saturation_severity", "ok"),
                                      "checks.saturation_severity"),
        counters=counters,
    )


ROCE_MTUS = (256, 512, 1024, 2048, 4096)


def _priority(value: Any, key: str) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or not 0 <= value <= 7:
        raise ConfigError(key, f"expected a priority 0-7, got {value!r}")
    return value


def _roce(raw: Any) -> RoceConfig:
    d = RoceConfig()
    allowed = ("priority", "lossless_priorities", "trust", "mtu", "pause_window", "pause_rate_warning",
               "pause_rate_critical", "pause_fraction_warning", "pause_fraction_critical", "storm_window",
               "drop_window", "drop_warning", "drop_critical", "cnp_window", "cnp_ignored_warning")
    m = _mapping(raw, "roce", allowed)
    prio = _priority(m.get("priority", d.priority), "roce.priority")
    lossless = m.get("lossless_priorities", [prio])
    if not isinstance(lossless, list):
        raise ConfigError("roce.lossless_priorities", f"expected a list of priorities 0-7, got {lossless!r}")
    lossless_t = tuple(sorted({_priority(p, f"roce.lossless_priorities[{i}]") for i, p in enumerate(lossless)}))
    if lossless_t and prio not in lossless_t:
        raise ConfigError("roce.lossless_priorities",
                          f"must include roce.priority ({prio}), or be [] for lossy RoCE; got {lossless!r}")
    trust = m.get("trust", d.trust)
    if trust not in ("dscp", "pcp", None):
        raise ConfigError("roce.trust", f"expected dscp, pcp or null (not checked), got {trust!r}")
    mtu = m.get("mtu", d.mtu)
    if mtu not in ROCE_MTUS or isinstance(mtu, bool):
        raise ConfigError("roce.mtu", f"expected the RoCE (IB) MTU, one of {', '.join(map(str, ROCE_MTUS))} "
                                      f"(not the netdev MTU), got {mtu!r}")

    def num(k: str, minimum: float, allow_none: bool) -> Any:
        return _number(m.get(k, getattr(d, k)), f"roce.{k}", minimum, allow_none=allow_none)

    frac = {k: num(k, 0, True) for k in ("pause_fraction_warning", "pause_fraction_critical")}
    for k, v in frac.items():
        if v is not None and v > 1:
            raise ConfigError(f"roce.{k}", f"a fraction of time must be <= 1, got {v!r}")
    return RoceConfig(
        priority=prio, lossless_priorities=lossless_t, trust=trust, mtu=mtu,
        pause_window=num("pause_window", 1, False),
        pause_rate_warning=num("pause_rate_warning", 0, True),
        pause_rate_critical=num("pause_rate_critical", 0, True),
        pause_fraction_warning=frac["pause_fraction_warning"],
        pause_fraction_critical=frac["pause_fraction_critical"],
        storm_window=num("storm_window", 1, False),
        drop_window=num("drop_window", 1, False),
        drop_warning=num("drop_warning", 0, True),
        drop_critical=num("drop_critical", 0, True),
        cnp_window=num("cnp_window", 1, False),
        cnp_ignored_warning=num("cnp_ignored_warning", 0, True),
    )


def _gpu(raw: Any) -> GpuConfig:
    m = _mapping(raw, "gpu", ("nccl_env_file",))
    env = m.get("nccl_env_file")
    if env is not None:
        env = _string(env, "gpu.nccl_env_file")
        if not os.path.isabs(env):
            raise ConfigError("gpu.nccl_env_file", f"expected an absolute path, got {env!r}")
    return GpuConfig(nccl_env_file=env)


def _slurm(raw: Any) -> SlurmConfig:
    d = SlurmConfig()
    m = _mapping(raw, "slurm", ("node_name", "lookup_retry", "max_job_switch_series"))
    node = m.get("node_name")
    if node is not None:
        node = _string(node, "slurm.node_name")
        if not re.fullmatch(r"[A-Za-z0-9][A-Za-z0-9._-]{0,254}", node):
            raise ConfigError("slurm.node_name", f"expected a Slurm node name (letters, digits, '.', '_', '-'), got {node!r}")
    cap = m.get("max_job_switch_series", d.max_job_switch_series)
    if isinstance(cap, bool) or not isinstance(cap, int) or cap < 0:
        raise ConfigError("slurm.max_job_switch_series", f"expected a whole number >= 0, got {cap!r}")
    return SlurmConfig(node_name=node, lookup_retry=_number(m.get("lookup_retry", d.lookup_retry), "slurm.lookup_retry", 1),
                       max_job_switch_series=cap)


def _tool_dirs(value: Any) -> tuple[str, ...]:
    if not isinstance(value, list):
        raise ConfigError("paths.tool_dirs", f"expected a list of absolute directories, got {value!r}")
    for i, d in enumerate(value):
        if not isinstance(d, str) or not os.path.isabs(d):
            raise ConfigError(f"paths.tool_dirs[{i}]", f"expected an absolute directory, got {d!r}")
    return tuple(value)


SERVE_KEYS = ("web_config_file", "unauthenticated_paths", "max_connections", "header_timeout", "idle_timeout",
              "access_log", "page_renders_per_second")


def _serve(server: dict[str, Any], check_paths: bool) -> ServeConfig:
    kw: dict[str, Any] = {}
    web = server.get("web_config_file")
    if web is not None:
        web = _string(web, "server.web_config_file")
        if check_paths and not Path(web).is_file():
            raise ConfigError("server.web_config_file", f"{web} is not a readable file")
        kw["web_config_file"] = web
    if "unauthenticated_paths" in server:
        paths = server["unauthenticated_paths"]
        if not isinstance(paths, list) or not all(isinstance(p, str) and p.startswith("/") for p in paths):
            raise ConfigError("server.unauthenticated_paths", f"expected a list of paths such as /healthz, got {paths!r}")
        kw["unauthenticated_paths"] = tuple(paths)
    if "max_connections" in server:
        n = server["max_connections"]
        if isinstance(n, bool) or not isinstance(n, int) or not 8 <= n <= 65536:
            raise ConfigError("server.max_connections", f"expected a whole number 8-65536, got {n!r}")
        kw["max_connections"] = n
    for k, lo in (("header_timeout", 0.1), ("idle_timeout", 0.1), ("page_renders_per_second", 0.01)):
        if k in server:
            kw[k] = _number(server[k], f"server.{k}", lo)
    if "access_log" in server:
        if not isinstance(server["access_log"], bool):
            raise ConfigError("server.access_log", f"expected true or false, got {server['access_log']!r}")
        kw["access_log"] = server["access_log"]
    return ServeConfig(**kw)


def from_dict(raw: Any, path: str | None = None, check_paths: bool = True) -> Config:
    """Validate a parsed YAML document. Raises ConfigError naming the bad key."""
    top = _mapping(raw, "", _TOP_KEYS)
    server = _mapping(top.get("server"), "server", ("address", "port", "tls", *SERVE_KEYS))
    port = server.get("port", DEFAULT_PORT)
    if isinstance(port, bool) or not isinstance(port, int) or not 0 <= port <= 65535:
        raise ConfigError("server.port", f"expected a TCP port number 0-65535, got {port!r}")
    tls_raw = _mapping(server.get("tls"), "server.tls", ("cert_file", "key_file", "client_ca_file"))
    tls = TLSConfig(**{k: _string(v, f"server.tls.{k}") for k, v in tls_raw.items()})
    if bool(tls.cert_file) != bool(tls.key_file):
        raise ConfigError("server.tls", "cert_file and key_file must be set together")
    if tls.client_ca_file and not tls.cert_file:
        raise ConfigError("server.tls.client_ca_file", "needs cert_file and key_file")
    for k in ("cert_file", "key_file", "client_ca_file"):
        v = getattr(tls, k)
        if v and check_paths and not Path(v).is_file():
            raise ConfigError(f"server.tls.{k}", f"{v} is not a readable file")
    paths = _mapping(top.get("paths"), "paths", ("sysfs", "procfs", "state_dir", "tool_dirs"))
    excl = top.get("exclude_devices") or []
    if not isinstance(excl, list):
        raise ConfigError("exclude_devices", f"expected a list of globs, got {excl!r}")
    logging_ = _mapping(top.get("logging"), "logging", ("level", "format"))
    level = logging_.get("level", "info")
    if level not in ("debug", "info", "warning", "error"):
        raise ConfigError("logging.level", f"expected debug, info, warning or error, got {level!r}")
    fmt = logging_.get("format", "auto")
    if fmt not in ("auto", "json", "console"):
        raise ConfigError("logging.format", f"expected auto, json or console, got {fmt!r}")
    state_dir = _string(paths.get("state_dir", "/var/lib/fabricmon"), "paths.state_dir")
    return Config(
        address=_string(server.get("address", "0.0.0.0"), "server.address"),
        port=port,
        tls=tls,
        sysfs=_dir(paths.get("sysfs", "/sys"), "paths.sysfs", check_paths),
        procfs=_dir(paths.get("procfs", "/proc"), "paths.procfs", check_paths),
        state_dir=state_dir,
        sources=_sources(top.get("sources")),
        exclude_devices=tuple(_glob(p, f"exclude_devices[{i}]") for i, p in enumerate(excl)),
        expected_links=_expected(top.get("expected_links")),
        checks=_checks(top.get("checks")),
        log_level=level,
        log_format=fmt,
        path=path,
        raw=top,
        roce=_roce(top.get("roce")),
        gpu=_gpu(top.get("gpu")),
        tool_dirs=_tool_dirs(paths.get("tool_dirs", list(DEFAULT_TOOL_DIRS))),
        fabric=_fabric(top.get("fabric"), state_dir, check_paths),
        slurm=_slurm(top.get("slurm")),
        serve=_serve(server, check_paths),
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
