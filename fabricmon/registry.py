"""The registry of sources (node_exporter's `registerCollector`, in our words): each source
module registers its class once with `@register(...)` and its defaults. It lives below the
config and the pipeline, which both read it (the config validates `sources.<name>` against it,
the pipeline runs what it holds), and it imports nothing of fabricmon: types flow down.

`registry(collector)` imports the collector's source package (registering its sources) on
first use.
"""

from __future__ import annotations

import importlib
from collections.abc import Callable
from dataclasses import dataclass
from typing import TypeVar


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
    # its own config keys beside enabled/interval/timeout/command (a fabricmon.schema.Schema, untyped
    # here): validated under sources.<name>, built into SourceConfig.options
    options: object | None = None


_REGISTRY: dict[tuple[str, str], SourceSpec] = {}     # (collector, name) -> spec: a name is unique per collector
S = TypeVar("S", bound=type)


def register(name: str, *, enabled: bool | str = True, interval: float = 15.0, timeout: float = 5.0,
             command: tuple[str, ...] = (), needs: tuple[str, ...] = (), provides_inventory: bool = False,
             collector: str | tuple[str, ...] = "node", concurrency: int = 1,
             records: type | None = None, options: object | None = None) -> Callable[[S], S]:
    """Class decorator: register a source once, with its defaults; a kind-neutral source names
    every collector that runs it (`collector=("infiniband", "ethernet")`)."""
    collectors = (collector,) if isinstance(collector, str) else tuple(collector)

    def deco(cls: S) -> S:
        for c in collectors:
            key = (c, name)
            if key in _REGISTRY and _REGISTRY[key].cls is not cls:
                raise ValueError(f"source {name!r} registered twice for the {c} collector")
            spec = SourceSpec(name, cls, enabled, float(interval), float(timeout), tuple(command), tuple(needs),
                              provides_inventory, c, concurrency, records, options)
            _REGISTRY[key] = spec
            if c == collectors[0]:
                cls.spec = spec      # the same defaults for every collector; `collector` names the first
        return cls
    return deco


# The package whose import registers each configuration's sources: the node daemon, and the fabric
# collector (`fabricmon fabric`) of each fabric kind (fabric.kind names its collector).
SOURCE_PACKAGES = {"node": "fabricmon.sources", "infiniband": "fabricmon.sources.infiniband",
                   "ethernet": "fabricmon.sources.ethernet"}


def registry(collector: str = "node") -> dict[str, SourceSpec]:
    """The registered sources of one configuration: its own package's in registration order, then
    the kind-neutral ones it shares (the same order whichever collector was imported first)."""
    package = SOURCE_PACKAGES[collector]
    importlib.import_module(package)      # importing registers them
    specs = [s for (c, _), s in _REGISTRY.items() if c == collector]
    own = [s for s in specs if s.cls.__module__.startswith(package + ".")]
    return {s.name: s for s in own + [s for s in specs if s not in own]}


# A collector's failure hints: what its own tools' errors mean when nothing could be read (the umad
# device of InfiniBand, say), registered by its source package so that the pipeline reads no tool's
# error text and knows no device. A hint takes (snapshot, [(source name, error)]) -> one line or None.
_HINTS: dict[str, list[Callable]] = {}
F = TypeVar("F", bound=Callable)


def failure_hint(collector: str) -> Callable[[F], F]:
    """Decorator: register a failure hint of `collector`'s sources."""
    def deco(fn: F) -> F:
        hints = _HINTS.setdefault(collector, [])
        if fn not in hints:
            hints.append(fn)
        return fn
    return deco


def failure_hints(collector: str) -> list[Callable]:
    """The failure hints of one configuration, in registration order."""
    importlib.import_module(SOURCE_PACKAGES[collector])
    return list(_HINTS.get(collector, ()))


# Config sections declared by the package that reads them (a fabricmon.schema.Schema each, held
# untyped here): dotted key -> the module whose import declares it with declare_section().
SECTION_MODULES = {"fabric.ethernet": SOURCE_PACKAGES["ethernet"] + ".settings"}
_SECTIONS: dict[str, object] = {}


def declare_section(key: str, schema: object) -> None:
    """Declare the schema of the config section at `key` (once, by the module that reads it)."""
    if key in _SECTIONS and _SECTIONS[key] is not schema:
        raise ValueError(f"config section {key!r} declared twice")
    _SECTIONS[key] = schema


def section(key: str) -> object:
    """The schema of the config section at `key` (its module imported on first use)."""
    if key not in _SECTIONS:
        importlib.import_module(SECTION_MODULES[key])
    return _SECTIONS[key]


__all__ = ["SECTION_MODULES", "SOURCE_PACKAGES", "SourceSpec", "declare_section", "failure_hint", "failure_hints",
           "register", "registry", "section"]
