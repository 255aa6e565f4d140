"""The registry of sources (node_exporter's `registerCollector`, in our words): each source
module registers its class once with `@register(...)` and its defaults. It lives below the
config and the pipeline, which both read it (the config validates `sources.<name>` against it,
with the schema `source_schema` makes of each spec; the pipeline runs what it holds), and it imports
nothing of fabricmon but the declarative schema layer (fabricmon.schema, which imports nothing):
types flow down.

A collector's sources are registered when its package is imported: `fabricmon.sources` (the node's),
`fabricmon.sources.infiniband`, `fabricmon.sources.ethernet`. The config imports them, through each
package's `settings` module, before it validates their keys; `registry(collector)` only reads what
is registered, and says so when nothing is.

A source receives its SourceConfig and nothing else: its own keys, and what it reads of other sections
(the node's device filter, the fabric's MAD settings and shard), built into its typed settings
(`register(options=Schema[T])`, read with `SourceConfig.settings(T)`) as the config loads.
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, TypeVar

from fabricmon.schema import Build, ConfigError, Context, Schema, custom, mapping, number, table

T = TypeVar("T")


@dataclass(frozen=True, slots=True)
class SourceSpec:
    name: str
    cls: type                       # the pipeline.source.Source subclass
    enabled: bool | str             # True, False or "auto" (a missing tool is not an error)
    interval: float
    timeout: float
    command: tuple[str, ...]        # () for sources that read files only
    needs: tuple[str, ...]
    provides_inventory: bool        # its records list devices and ports
    collector: str                  # "node", "infiniband" or "ethernet": which configuration runs it
    concurrency: int                # commands in flight at once within one run
    records: type | None            # the record type its SourceOutput.data holds
    # its own config keys beside enabled/interval/timeout/command: validated under sources.<name>
    # (or fabric.sources.<name>), built into SourceConfig.options (read with SourceConfig.settings)
    options: Schema[Any] | None = None
    # a run that returns its last record again (the same object) found nothing new: the pipeline rebuilds no
    # snapshot for it, and its interval does not set the publisher's tick (the node's port state poll every
    # second, the fabric's events source waiting for the SM's reports)
    quiet: bool = False


_REGISTRY: dict[tuple[str, str], SourceSpec] = {}     # (collector, name) -> spec: a name is unique per collector
_SHARED: set[type] = set()      # the kind-neutral sources: registered for more than one collector
S = TypeVar("S", bound=type)


def register(name: str, *, enabled: bool | str = True, interval: float = 15.0, timeout: float = 5.0,
             command: tuple[str, ...] = (), needs: tuple[str, ...] = (), provides_inventory: bool = False,
             collector: str | tuple[str, ...] = "node", concurrency: int = 1,
             records: type | None = None, options: Schema[Any] | None = None,
             quiet: bool = False) -> Callable[[S], S]:
    """Class decorator: register a source once, with its defaults; a kind-neutral source names
    every collector that runs it (`collector=("infiniband", "ethernet")`)."""
    collectors = (collector,) if isinstance(collector, str) else tuple(collector)

    def deco(cls: S) -> S:
        for c in collectors:
            key = (c, name)
            if key in _REGISTRY and _REGISTRY[key].cls is not cls:
                raise ValueError(f"source {name!r} registered twice for the {c} collector")
            spec = SourceSpec(name, cls, enabled, float(interval), float(timeout), tuple(command), tuple(needs),
                              provides_inventory, c, concurrency, records, options, quiet)
            _REGISTRY[key] = spec
            if c == collectors[0]:
                setattr(cls, "spec", spec)      # the same defaults for every collector; `collector` names the first
        if len(collectors) > 1:
            _SHARED.add(cls)
        return cls
    return deco


# The configurations that run sources: the node daemon, and the fabric collector (`fabricmon fabric`) of
# each fabric kind (fabric.kind names its collector).
NODE = "node"
FABRIC_KINDS = ("infiniband", "ethernet")
COLLECTORS = (NODE, *FABRIC_KINDS)


def registry(collector: str = NODE) -> dict[str, SourceSpec]:
    """The registered sources of one configuration: its own in registration order, then the kind-neutral
    ones it shares with another (the same order whichever collector was imported first)."""
    if collector not in COLLECTORS:
        raise ValueError(f"no collector {collector!r} (one of {', '.join(COLLECTORS)})")
    specs = [s for (c, _), s in _REGISTRY.items() if c == collector]
    own = [s for s in specs if s.cls not in _SHARED]
    if not own:         # its package was not imported (the kind-neutral sources alone are registered)
        raise LookupError(f"the {collector} collector's sources are not registered: the config imports their "
                          "package (fabricmon.config.load with its fabric.kind) before anything runs them")
    return {s.name: s for s in own + [s for s in specs if s.cls in _SHARED]}


def taking(build: Build[T], **shared: type) -> Build[T]:
    """A source's settings build that also fills each named field with the value of that type the sections
    before the sources provided: `taking(from_class(PcieOptions), exclude=DeviceFilter)` (its schema is
    then not pure: each config builds it anew)."""
    return lambda v, key, ctx: build({**v, **{name: ctx.take(cls) for name, cls in shared.items()}}, key, ctx)


def shared_settings(build: Callable[[Context], T], doc: str = "") -> Schema[T]:
    """A source's settings that take no keys of their own: built from what the sections before the
    sources provided (`ctx.take(DeviceFilter)`, say), for every config anew."""
    return Schema(fields=(), build=lambda v, key, ctx: build(ctx), pure=False, doc=doc)


# A collector's failure hints: what its own tools' errors mean when nothing could be read (the umad
# device of InfiniBand, say), registered by its source package so that the pipeline reads no tool's
# error text and knows no device. A hint takes (snapshot, [(source name, error)]) -> one line or None.
_HINTS: dict[str, list[Callable[..., str | None]]] = {}
F = TypeVar("F", bound=Callable[..., "str | None"])


def failure_hint(collector: str) -> Callable[[F], F]:
    """Decorator: register a failure hint of `collector`'s sources."""
    def deco(fn: F) -> F:
        hints = _HINTS.setdefault(collector, [])
        if fn not in hints:
            hints.append(fn)
        return fn
    return deco


def failure_hints(collector: str) -> list[Callable[..., str | None]]:
    """The failure hints of one configuration, in registration order."""
    registry(collector)     # its sources (and so its hints) are registered
    return list(_HINTS.get(collector, ()))


# --- sources.<name> (and fabric.sources.<name>): the keys of a registered source ------------------

def _command(value: Any, key: str, ctx: Context) -> tuple[str, ...]:
    cmd = [value] if isinstance(value, str) else value
    if not isinstance(cmd, list) or not cmd or not all(isinstance(c, str) and c for c in cmd):
        raise ConfigError(key, f"expected a program name or an argv list, got {value!r}")
    return tuple(cmd)


def source_schema(spec: SourceSpec) -> Schema[SourceConfig]:
    """A registered source's keys, with its registered defaults."""
    fields = [custom("enabled", spec.enabled, "`auto`: run when its program is installed, quietly off when not "
                     "(no run, no error, `fabricmon_source_active` 0); `true` makes a missing tool a source error",
                     _bool_or_auto, "true, false or auto"),
              number("interval", spec.interval, "seconds between runs", lo=0.1),
              number("timeout", spec.timeout, "seconds; then the tool's whole process group is killed", lo=0.1),
              number("stale_after", None, "seconds after which the source's last records are no longer fresh: its "
                     "checks have no status and it reports itself failing until a run succeeds again (default: two "
                     "intervals plus the timeout, so one failed run is ridden out)", lo=0.1, null=True,
                     default_doc="2 x interval + timeout")]
    if spec.command:
        fields.append(custom("command", spec.command, "program name or argv list (e.g. a full path); never run "
                             "through a shell", _command, "program or argv list"))
    options = spec.options       # the source's own keys, declared where it is registered
    own = tuple(f.name for f in options.fields) if options is not None else ()

    def build(v: dict[str, Any], key: str, ctx: Context) -> SourceConfig:
        opts = None
        if options is not None:
            o = {n: v[n] for n in own}
            if options.check is not None:
                options.check(o, o, key, ctx)
            opts = options.build(o, key, ctx)
        return SourceConfig(name=spec.name, enabled=v["enabled"], interval=v["interval"], timeout=v["timeout"],
                            command=v.get("command", ()), options=opts, stale_after=v["stale_after"])
    return Schema(tuple(fields) + (options.fields if options is not None else ()), build=build,
                  extra=options.extra if options is not None else (),
                  pure=options is None or options.pure)     # settings read from other sections: built anew


@functools.lru_cache(maxsize=None)
def source_schemas(collector: str) -> dict[str, Schema[SourceConfig]]:
    return {name: source_schema(spec) for name, spec in registry(collector).items()}


def load_sources(raw: Any, key: str, collector: str, ctx: Context) -> tuple[dict[str, SourceConfig], dict[str, Any]]:
    """`key.<name>` for every source of `collector`; also the mapping given (to tell a default from a setting)."""
    schemas = source_schemas(collector)
    m = mapping(raw, key, tuple(schemas))
    return {name: s.load(m.get(name), f"{key}.{name}", ctx) for name, s in schemas.items()}, m


def _bool_or_auto(value: Any, key: str, ctx: Context) -> bool | str:
    if isinstance(value, bool) or value == "auto":
        return value if isinstance(value, bool) else "auto"
    raise ConfigError(key, f"expected true, false or 'auto', got {value!r}")


@dataclass(frozen=True, slots=True)
class SourceConfig:
    name: str
    enabled: bool | str      # True, False or "auto"
    interval: float
    timeout: float
    command: tuple[str, ...]
    options: object = None   # what the source's own keys built (its registered options schema), else None
    stale_after: float | None = None     # None: 2 x interval + timeout (stale_bound)

    @property
    def stale_bound(self) -> float:
        """Seconds its last records stay fresh: `stale_after`, else two intervals plus the timeout (the next
        run may fail once, or be late by up to its timeout, before its records go stale)."""
        return self.stale_after if self.stale_after is not None else 2 * self.interval + self.timeout

    def settings(self, cls: type[T]) -> T:
        """The source's own settings (`register(options=Schema[cls])`), as the type it declared."""
        if not isinstance(self.options, cls):
            raise TypeError(f"source {self.name}: its options are {type(self.options).__name__}, not {cls.__name__}")
        return self.options


# --- the sources' part of docs/configuration.md ----------------------------------------------

def source_rows(collector: str) -> list[tuple[str, str, str, str]]:
    """The keys every source takes, as source_schema declares them (default: per source)."""
    spec = next(s for s in registry(collector).values() if s.command)
    rows = source_schema(spec).rows("sources.<name>")
    return [(k, kind, "per source", doc) for k, kind, _, doc in rows
            if k.rsplit(".", 1)[1] in ("enabled", "interval", "timeout", "stale_after", "command")]


def source_tables(collectors: dict[str, tuple[str, str]], intervals: dict[str, dict[str, str]]) -> str:
    """The registered sources of `collectors` (collector -> (where, key prefix)) and their defaults,
    an interval another key sets shown as that key (`intervals[collector][source]`), then each
    source's own keys (`register(options=...)`)."""
    lines = ["| source | collector | enabled | interval | timeout | command |", "|---|---|---|---|---|---|"]
    own = []
    for collector, (where, prefix) in collectors.items():
        for name, spec in registry(collector).items():
            interval = intervals.get(collector, {}).get(name, f"{spec.interval:g}")
            lines.append(f"| `{name}` | {where} | `{str(spec.enabled).lower()}` | {interval} | "
                         f"{spec.timeout:g} | {'`' + ' '.join(spec.command) + '`' if spec.command else 'none'} |")
            if spec.options is not None and spec.options.fields:
                own.append(f"`{prefix}.{name}`'s own keys:\n\n" + table(spec.options.rows(f"{prefix}.{name}")))
    return "\n".join(["The registered sources and their defaults:\n\n" + "\n".join(lines) + "\n", *own])


__all__ = ["COLLECTORS", "FABRIC_KINDS", "NODE", "SourceConfig", "SourceSpec", "failure_hint", "failure_hints", "load_sources",
           "register", "registry", "shared_settings", "taking", "source_rows", "source_schema", "source_schemas", "source_tables"]
