"""The `remediation` section: what fabricmon may do on its own about a finding, declared beside the code
that does it (fabricmon/remediation/). Off by default, action by action; `dry_run` makes, logs, counts
and shows every decision and touches nothing ([remediation.md](remediation.md))."""

from __future__ import annotations

import datetime
import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from fabricmon.model.finding import CLASSES, FATAL
from fabricmon.model.remediation import ACT, DRY_RUN, OFF
from fabricmon.schema import (ConfigError, Context, Schema, choice, custom, glob_pattern, integer, listing, mapping,
                              number, section, string)

MODE_DOC = ("`off`: nothing new is decided or touched (what fabricmon already put out of service is still "
            "returned after its clean window, and `actions undo` works); `dry_run`: every decision is made, logged, "
            "counted and shown (`fabricmon actions`), nothing is touched; `act`: the decisions are carried out")


@dataclass(frozen=True, slots=True)
class EthernetCommand:
    """How one Ethernet switch's port is shut and opened again: argv templates ({switch}, {address},
    {port}), never run through a shell."""
    switch: str                              # a glob of switch names (sysName) or addresses
    disable: tuple[str, ...]
    enable: tuple[str, ...]


@dataclass(frozen=True, slots=True)
class IsolateSettings:
    mode: str = OFF
    checks: tuple[str, ...] = ("symbol_errors", "link_flap")
    classes: tuple[str, ...] = (FATAL,)
    min_cap: int = 10
    max_fraction: float = 0.005
    clean_window: float | None = None        # None: the condemning check's window
    max_returns: int = 3
    method: str = "auto"                     # auto (MAD engine, else ibportstate), mad, tools
    ibportstate: str = "ibportstate"
    timeout: float = 10.0
    ethernet: tuple[EthernetCommand, ...] = ()


@dataclass(frozen=True, slots=True)
class DrainSettings:
    mode: str = OFF
    checks: tuple[str, ...] = ()             # empty: a finding of any check
    classes: tuple[str, ...] = (FATAL,)
    max_fraction: float = 0.05
    min_cap: int = 1
    clean_window: float = 3600.0
    scontrol: str = "scontrol"
    sinfo: str = "sinfo"
    timeout: float = 10.0


@dataclass(frozen=True, slots=True)
class Exclusion:
    """A port or node remediation never touches, until `until` (epoch seconds; None: for ever)."""
    port: str = ""                           # "<switch name or GUID>:<port>" (globs)
    node: str = ""                           # a node name (glob)
    until: float | None = None
    reason: str = ""

    def covers(self, now: float) -> bool:
        return self.until is None or now < self.until


@dataclass(frozen=True, slots=True)
class LeaseSettings:
    kind: str = "single"                     # single: this collector holds it; file: an flock on `path`
    path: str | None = None                  # file: default <state_dir>/remediation.lease


@dataclass(frozen=True, slots=True)
class RemediationConfig:
    isolate_port: IsolateSettings = field(default_factory=IsolateSettings)
    drain_node: DrainSettings = field(default_factory=DrainSettings)
    exclude: tuple[Exclusion, ...] = ()
    retry_first: float = 5.0
    retry_max: float = 300.0
    keep_closed: int = 200
    lease: LeaseSettings = field(default_factory=LeaseSettings)


# YAML 1.1 reads a bare `off` as false: that is `off` too
_MODES = choice("mode", OFF, MODE_DOC, (OFF, DRY_RUN, ACT), reason="expected off, dry_run or act",
                fold=lambda v: OFF if v is False else v)


def _check_name(value: Any, key: str, ctx: Context) -> str:
    if not isinstance(value, str) or not re.fullmatch(r"[a-z][a-z0-9_]*", value):
        raise ConfigError(key, f"expected a check name (e.g. symbol_errors), got {value!r}")
    return value


def _klass(value: Any, key: str, ctx: Context) -> str:
    if value not in CLASSES:
        raise ConfigError(key, f"expected one of {', '.join(CLASSES)}, got {value!r}")
    return str(value)


def _program(value: Any, key: str, ctx: Context) -> str:
    if not isinstance(value, str) or not value or value.startswith("-") or any(c.isspace() for c in value):
        raise ConfigError(key, f"expected a program name or an absolute path, got {value!r}")
    return value


def _argv(value: Any, key: str) -> tuple[str, ...]:
    if not isinstance(value, list) or not value or not all(isinstance(a, str) and a for a in value):
        raise ConfigError(key, f"expected an argv list of non-empty strings (never run through a shell), got {value!r}")
    for i, a in enumerate(value):
        for name in re.findall(r"\{([^}]*)\}", a):
            if name not in ("switch", "address", "port"):
                raise ConfigError(f"{key}[{i}]", f"unknown placeholder {{{name}}} (allowed: {{switch}}, {{address}}, "
                                  "{port})")
    return tuple(value)


def _ethernet(value: Any, key: str, ctx: Context) -> tuple[EthernetCommand, ...]:
    if not isinstance(value, list):
        raise ConfigError(key, f"expected a list of {{switch, disable, enable}}, got {value!r}")
    out = []
    for i, item in enumerate(value):
        k = f"{key}[{i}]"
        m = mapping(item, k, ("switch", "disable", "enable"))
        for need in ("switch", "disable", "enable"):
            if need not in m:
                raise ConfigError(f"{k}.{need}", "missing")
        out.append(EthernetCommand(glob_pattern(m["switch"], f"{k}.switch"), _argv(m["disable"], f"{k}.disable"),
                                   _argv(m["enable"], f"{k}.enable")))
    return tuple(out)


def _when(value: Any, key: str) -> float | None:
    """An expiry: epoch seconds, an ISO 8601 time (YAML's timestamp included), or null (for ever)."""
    if value is None:
        return None
    if isinstance(value, bool):
        raise ConfigError(key, f"expected an ISO 8601 time or epoch seconds, got {value!r}")
    if isinstance(value, (int, float)):
        return float(value)
    if isinstance(value, datetime.date) and not isinstance(value, datetime.datetime):
        value = datetime.datetime(value.year, value.month, value.day, tzinfo=datetime.timezone.utc)
    if isinstance(value, str):
        try:
            value = datetime.datetime.fromisoformat(value.strip().replace("Z", "+00:00"))
        except ValueError:
            raise ConfigError(key, f"expected an ISO 8601 time (2026-12-31T08:00:00Z) or epoch seconds, "
                              f"got {value!r}") from None
    if isinstance(value, datetime.datetime):
        if value.tzinfo is None:
            value = value.replace(tzinfo=datetime.timezone.utc)
        return float(value.timestamp())
    raise ConfigError(key, f"expected an ISO 8601 time or epoch seconds, got {value!r}")


def _exclusions(value: Any, key: str, ctx: Context) -> tuple[Exclusion, ...]:
    if not isinstance(value, list):
        raise ConfigError(key, f"expected a list of {{port or node, until, reason}}, got {value!r}")
    out = []
    for i, item in enumerate(value):
        k = f"{key}[{i}]"
        m = mapping(item, k, ("port", "node", "until", "reason"))
        if ("port" in m) == ("node" in m):
            raise ConfigError(k, "give exactly one of `port` (\"<switch>:<port>\") or `node`")
        port = node = ""
        if "port" in m:
            v = m["port"]
            if not isinstance(v, str) or not re.fullmatch(r".+:[0-9*?\[\]-]+", v):
                raise ConfigError(f"{k}.port", f"expected \"<switch name or GUID>:<port>\" (globs allowed), got {v!r}")
            port = glob_pattern(v, f"{k}.port")
        else:
            node = glob_pattern(m["node"], f"{k}.node")
        reason = m.get("reason", "")
        if not isinstance(reason, str):
            raise ConfigError(f"{k}.reason", f"expected a string, got {reason!r}")
        out.append(Exclusion(port, node, _when(m.get("until"), f"{k}.until"), reason))
    return tuple(out)


def _fraction(name: str, default: float, doc: str) -> Any:
    return number(name, default, doc, lo=0, hi=1)


_D_ISO, _D_DRAIN, _D = IsolateSettings(), DrainSettings(), RemediationConfig()

ISOLATE: Schema[IsolateSettings] = Schema(fields=(
    _MODES,
    listing("checks", _D_ISO.checks, "the checks whose findings condemn a fabric port (the counter checks: "
            "their window is the port's clean window)", _check_name, "check names"),
    listing("classes", _D_ISO.classes, "the finding classes that condemn (model/finding.py: fatal, degraded, watch)",
            _klass, "classes"),
    integer("min_cap", _D_ISO.min_cap, "the circuit breaker: at most max(min_cap, max_fraction x the fabric's "
            "cabled switch ports) links out of service at once, fabricmon's and those found down or disabled by "
            "others (UFM PDR's max(10, 0.5%))", lo=0),
    _fraction("max_fraction", _D_ISO.max_fraction, "see `min_cap`"),
    number("clean_window", _D_ISO.clean_window, "seconds without a new error before an isolated port is "
           "re-enabled", lo=1, null=True, default_doc="the condemning check's window"),
    integer("max_returns", _D_ISO.max_returns, "returns of one port that failed again (each doubles its window) "
            "after which it stays isolated until `fabricmon actions undo`", lo=0),
    choice("method", _D_ISO.method, "InfiniBand: `mad` sends SubnSet(PortInfo) through the collector's MAD engine, "
           "`tools` runs ibportstate; `auto` the engine where its umad port opens, else ibportstate",
           ("auto", "mad", "tools"), reason="expected auto, mad or tools"),
    custom("ibportstate", _D_ISO.ibportstate, "the ibportstate program (a name on PATH/paths.tool_dirs, or an "
           "absolute path)", _program, "program"),
    number("timeout", _D_ISO.timeout, "seconds for one port command (then its process group is killed)", lo=0.1),
    custom("ethernet", _D_ISO.ethernet, "Ethernet: per switch glob, the argv that shuts a port and the one that "
           "opens it again (`{switch}`, `{address}`, `{port}`); a switch no entry matches is dry run. SNMP write "
           "(ifAdminStatus) is rarely allowed on production switches: use the vendor's CLI or API",
           _ethernet, "list of {switch, disable, enable}", default_doc="`[]`"),
), build=lambda v, key, ctx: IsolateSettings(**v), doc="")

DRAIN: Schema[DrainSettings] = Schema(fields=(
    _MODES,
    listing("checks", _D_DRAIN.checks, "the checks whose findings drain a node (empty: any check's)", _check_name,
            "check names", default_doc="`[]` (any)"),
    listing("classes", _D_DRAIN.classes, "the finding classes that drain (model/finding.py)", _klass, "classes"),
    _fraction("max_fraction", _D_DRAIN.max_fraction, "the circuit breaker: at most max(min_cap, max_fraction x "
              "the partition's nodes) nodes of a partition drained by fabricmon at once"),
    integer("min_cap", _D_DRAIN.min_cap, "see `max_fraction` (a fraction of a small partition rounds down to none)",
            lo=0),
    number("clean_window", _D_DRAIN.clean_window, "seconds without the condemning finding before fabricmon "
           "resumes a node it drained (a counter check's own window where that is longer)", lo=1),
    custom("scontrol", _D_DRAIN.scontrol, "the scontrol program", _program, "program"),
    custom("sinfo", _D_DRAIN.sinfo, "the sinfo program", _program, "program"),
    number("timeout", _D_DRAIN.timeout, "seconds for one Slurm command (then its process group is killed)", lo=0.1),
), build=lambda v, key, ctx: DrainSettings(**v))

LEASE: Schema[LeaseSettings] = Schema(fields=(
    choice("kind", "single", "who acts among collectors of one fabric: `single` (this one: the only collector), "
           "`file` (the holder of an flock on `path`: collectors on one host); issue 49 adds `etcd`",
           ("single", "file"), reason="expected single or file"),
    string("path", None, "the lock file of `kind: file`", null=True, default_doc="`<paths.state_dir>/remediation.lease`"),
), build=lambda v, key, ctx: LeaseSettings(**v))


def _check(values: dict[str, Any], m: Mapping[str, Any], key: str, ctx: Context) -> None:
    if values["retry_max"] < values["retry_first"]:
        raise ConfigError(f"{key}.retry_max", f"{values['retry_max']:g} is below retry_first ({values['retry_first']:g})")


SCHEMA: Schema[RemediationConfig] = Schema(fields=(
    section("isolate_port", ISOLATE, "the fabric collector: disable a failing link's switch port (the SM routes "
            "around it)"),
    section("drain_node", DRAIN, "the node daemon (its own fatal findings) and the collector (the host behind a "
            "failing host port): `scontrol update state=drain`"),
    custom("exclude", _D.exclude, "ports (`port: \"<switch>:<port>\"`) and nodes (`node: NAME`) never touched, each "
           "with an optional `until` (ISO 8601 or epoch seconds) and `reason`", _exclusions,
           "list of {port or node, until, reason}", default_doc="`[]`"),
    number("retry_first", _D.retry_first, "seconds before a failed action is tried again (doubling each time)", lo=0.1),
    number("retry_max", _D.retry_max, "the longest wait between tries of a failed action", lo=0.1),
    integer("keep_closed", _D.keep_closed, "closed actions kept in the record (`fabricmon actions`)", lo=0),
    section("lease", LEASE, "only the holder of the lease acts (an HA pair of collectors never both act)"),
), build=lambda v, key, ctx: RemediationConfig(**v), check=_check,
    doc="What fabricmon does about a finding by itself: off by default; `dry_run` first "
        "([remediation.md](remediation.md)).")


def exclusion_for(excl: tuple[Exclusion, ...], now: float, port: tuple[str, str, int] | None = None,
                  node: str = "") -> Exclusion | None:
    """The exclusion covering a port ((guid, switch name, port)) or a node now, if any."""
    import fnmatch
    for e in excl:
        if not e.covers(now):
            continue
        if port is not None and e.port:
            sw, _, p = e.port.rpartition(":")
            if fnmatch.fnmatchcase(str(port[2]), p) and (fnmatch.fnmatchcase(port[1], sw) or
                                                        fnmatch.fnmatchcase(port[0], sw.removeprefix("0x"))):
                return e
        if node and e.node and fnmatch.fnmatchcase(node, e.node):
            return e
    return None


def effective_modes(cfg: RemediationConfig) -> Mapping[str, str]:
    return {"isolate_port": cfg.isolate_port.mode, "drain_node": cfg.drain_node.mode}


__all__ = ["DRAIN", "DrainSettings", "EthernetCommand", "Exclusion", "ISOLATE", "IsolateSettings", "LEASE",
           "LeaseSettings", "RemediationConfig", "SCHEMA", "effective_modes", "exclusion_for"]
