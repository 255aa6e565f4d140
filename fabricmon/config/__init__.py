"""Configuration: YAML in, validated frozen dataclasses out. This module composes the sections; each
is a Schema (fabricmon.schema) declared beside the code that reads it: `server` in serve/settings.py,
`checks` in checks/settings.py, `expected_links` in checks/inventory.py, `roce` in checks/roce.py,
`fabric` in config/fabric.py (with the fabric checks' sections and `fabric.ethernet`), each source's
keys in the registry, `gpu` and `slurm` in sources/settings.py (what the sources read beyond their
own keys). Only the node daemon's paths, logging and exclude_devices are declared here. The sections
a source reads (exclude_devices, gpu, slurm; the fabric's scope) are built before the sources and
provided to their typed settings (schema.Context.provide): no source sees this Config. docs/configuration.md is rendered from the same schemas (`make
config-doc`). Every error names the key and the reason: `fabricmon run` refuses to start (exit 2).
"""

from __future__ import annotations

import os
from collections.abc import Hashable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from fabricmon.checks.inventory import EXPECTED_LINK, ExpectedLink, expected_links
from fabricmon.checks.roce import ROCE, RoceConfig
from fabricmon.checks.settings import CHECKS, ChecksConfig
from fabricmon.config.fabric import (DEFAULT_FABRIC_PORT, FABRIC, SOURCE_INTERVALS, FabricConfig,
                                       import_sources)
from fabricmon.host.runner import DEFAULT_TOOL_DIRS
from fabricmon.remediation.settings import SCHEMA as REMEDIATION, RemediationConfig
from fabricmon.registry import FABRIC_KINDS, NODE, SourceConfig, SourceSpec, load_sources, registry, source_rows, source_tables
from fabricmon.schema import (ConfigError, Context, DeviceFilter, Schema, absolute_dir, choice, existing_dir,
                              from_class, glob_list, join, listing, mapping, matches_any, string, table)
from fabricmon.serve.settings import DEFAULT_PORT, SERVER, ServeConfig, TLSConfig
# importing it registers the node's sources (fabricmon.sources), whose keys `sources` validates
from fabricmon.sources.settings import GPU, SLURM, GpuConfig, SlurmConfig

DEFAULT_CONFIG_PATH = "/etc/fabricmon/fabricmon.yml"
NODE_COLLECTOR = NODE       # the node daemon's collector in the source registry (fabricmon.sources)


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
    remediation: RemediationConfig = field(default_factory=RemediationConfig)

    def device_excluded(self, device: str) -> bool:
        return matches_any(device, self.exclude_devices)


@dataclass(frozen=True, slots=True)
class PathsSection:
    """The `paths` section (its keys land in Config as they are)."""
    sysfs: str
    procfs: str
    state_dir: str
    tool_dirs: tuple[str, ...]


@dataclass(frozen=True, slots=True)
class LoggingSection:
    """The `logging` section (Config.log_level, Config.log_format)."""
    level: str
    format: str


PATHS: Schema[PathsSection] = Schema(fields=(
    string("sysfs", "/sys", "sysfs root (`/host/sys` in a container; a recorded tree in tests)",
           check=existing_dir, kind="directory"),
    string("procfs", "/proc", "procfs root", check=existing_dir, kind="directory"),
    string("state_dir", "/var/lib/fabricmon", "`check`'s counter history between runs, the learned inventory "
           "(`inventory.json`, [inventory.md](inventory.md)) and the fabric topology cache", kind="directory"),
    listing("tool_dirs", DEFAULT_TOOL_DIRS, "where tools are looked for after `PATH` (each program is resolved "
            "once; a missing one is looked for again every 60 s)", absolute_dir, "absolute directories"),
), build=from_class(PathsSection))

LOGGING: Schema[LoggingSection] = Schema(fields=(
    choice("level", "info", "structlog level", ("debug", "info", "warning", "error"),
           reason="expected debug, info, warning or error"),
    choice("format", "auto", "`auto` is JSON when stderr is not a TTY", ("auto", "json", "console"),
           reason="expected auto, json or console"),
), build=from_class(LoggingSection))

# top-level key -> its schema (None: validated by its own function), in the order they are built
SECTIONS: dict[str, Schema[Any] | None] = {
    "server": SERVER, "paths": PATHS, "sources": None, "exclude_devices": None, "expected_links": None,
    "checks": CHECKS, "logging": LOGGING, "roce": ROCE, "gpu": GPU, "fabric": FABRIC, "slurm": SLURM,
    "remediation": REMEDIATION,
}
_TOP_KEYS = tuple(SECTIONS)


def registered(collector: str) -> dict[str, SourceSpec]:
    """A collector's registered sources, its package imported first (what the config validates and the
    pipeline runs; the node's are imported with this module)."""
    if collector != NODE_COLLECTOR:
        import_sources(collector)
    return registry(collector)


def from_dict(raw: Any, path: str | None = None, check_paths: bool = True) -> Config:
    """Validate a parsed YAML document. Raises ConfigError naming the bad key."""
    top = mapping(raw, "", _TOP_KEYS)
    ctx = Context(check_paths=check_paths)
    server = SERVER.load(top.get("server"), "server", ctx)
    paths = PATHS.load(top.get("paths"), "paths", ctx)
    ctx.built["state_dir"] = paths.state_dir
    # what the sources read of the other sections, built first and provided to their settings
    exclude = glob_list(top["exclude_devices"], "exclude_devices", ctx) if top.get("exclude_devices") is not None else ()
    ctx.provide(DeviceFilter(exclude))
    gpu, slurm = GPU.load(top.get("gpu"), "gpu", ctx), SLURM.load(top.get("slurm"), "slurm", ctx)
    ctx.provide(gpu)
    ctx.provide(slurm)
    sources, _ = load_sources(top.get("sources"), "sources", NODE_COLLECTOR, ctx)
    logging_ = LOGGING.load(top.get("logging"), "logging", ctx)
    return Config(
        address=server.address, port=server.port, tls=server.tls,
        sysfs=paths.sysfs, procfs=paths.procfs, state_dir=paths.state_dir,
        sources=sources,
        exclude_devices=exclude,
        expected_links=expected_links(top["expected_links"], "expected_links", ctx) if top.get("expected_links")
        is not None else (),
        checks=CHECKS.load(top.get("checks"), "checks", ctx),
        log_level=logging_.level, log_format=logging_.format,
        path=path, raw=top,
        roce=ROCE.load(top.get("roce"), "roce", ctx),
        gpu=gpu,
        tool_dirs=paths.tool_dirs,
        fabric=FABRIC.load(top.get("fabric"), "fabric", ctx),
        slurm=slurm,
        serve=server.serve,
        remediation=REMEDIATION.load(top.get("remediation"), "remediation", ctx),
    )


def load(path: str | os.PathLike[str] | None, check_paths: bool = True) -> Config:
    """Load and validate a YAML config file; None gives the built-in defaults."""
    if path is None:
        return from_dict({}, None, check_paths)
    try:
        text = Path(path).read_text()
    except OSError as exc:
        raise ConfigError("", f"cannot read config file {path}: {exc.strerror or exc}") from exc
    return loads(text, str(path), check_paths)


class DuplicateKey(yaml.constructor.ConstructorError):
    """A key given twice in one mapping (`node`): PyYAML keeps the last without a word."""

    def __init__(self, node: yaml.MappingNode, key: Any, first: int, second: int):
        super().__init__(None, None, f"duplicate key {key!r} (lines {first} and {second})", None)
        self.node, self.key, self.lines = node, key, (first, second)


class Loader(yaml.SafeLoader):
    """yaml.safe_load's loader, but a key given twice in one mapping, at any depth, is an error
    (DuplicateKey) instead of the last one winning. A key that overrides one merged in (`<<: *x`) is
    not a duplicate. The one loop is SafeConstructor's own, so loading costs what it did."""

    def construct_mapping(self, node: yaml.MappingNode, deep: bool = False) -> dict[Hashable, Any]:
        if not isinstance(node, yaml.MappingNode):      # `!!map` on a scalar: SafeConstructor's error
            return super().construct_mapping(node, deep=deep)
        own = sum(k.tag != "tag:yaml.org,2002:merge" for k, _ in node.value)
        self.flatten_mapping(node)              # merged pairs first, then the mapping's own keys
        merged = len(node.value) - own
        mapping: dict[Hashable, Any] = {}
        lines: dict[Hashable, int] = {}
        for i, (key_node, value_node) in enumerate(node.value):
            key = self.construct_object(key_node, deep=deep)
            if not isinstance(key, Hashable):
                raise yaml.constructor.ConstructorError("while constructing a mapping", node.start_mark,
                                                        "found unhashable key", key_node.start_mark)
            if i >= merged:
                if key in lines:
                    raise DuplicateKey(node, key, lines[key], key_node.start_mark.line + 1)
                lines[key] = key_node.start_mark.line + 1
            mapping[key] = self.construct_object(value_node, deep=deep)
        return mapping

    def construct_document(self, node: yaml.Node) -> Any:
        self.root = node
        return super().construct_document(node)


def key_path(root: yaml.Node, target: yaml.Node) -> str | None:
    """The dotted key (`fabric.ethernet.switches[1]`) of `target` under `root`; None if absent."""
    todo: list[tuple[yaml.Node, str]] = [(root, "")]
    seen: set[int] = set()
    while todo:
        node, at = todo.pop()
        if node is target:
            return at
        if id(node) in seen:        # an alias met again
            continue
        seen.add(id(node))
        if isinstance(node, yaml.MappingNode):
            todo += [(v, join(at, str(k.value))) for k, v in node.value]
        elif isinstance(node, yaml.SequenceNode):
            todo += [(v, f"{at}[{i}]") for i, v in enumerate(node.value)]
    return None


def yaml_document(text: str, path: str, key: str = "") -> Any:
    """A YAML document's value (Loader: no key twice in a mapping); ConfigError (at `key`) naming the
    line and column where it is not YAML, or the dotted key given twice and both its lines."""
    loader = Loader(text)
    try:
        return loader.get_single_data()
    except DuplicateKey as exc:
        root = getattr(loader, "root", None)
        at = join(key_path(root, exc.node) or "", str(exc.key)) if root is not None else str(exc.key)
        where = f"{key}: {at}" if key else at
        raise ConfigError(where, f"duplicate key (lines {exc.lines[0]} and {exc.lines[1]})") from None
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        where = f" line {mark.line + 1} column {mark.column + 1}" if mark else ""
        raise ConfigError(key, f"{path}: invalid YAML{where}: {getattr(exc, 'problem', exc)}") from exc
    except RecursionError:      # a document nested deeper than the parser's stack (PyYAML recurses)
        raise ConfigError(key, f"{path}: invalid YAML: nested too deep") from None
    finally:
        loader.dispose()


def loads(text: str, path: str = "<config>", check_paths: bool = True) -> Config:
    """A config file's text, validated (load without the file). Raises ConfigError naming the bad key."""
    return from_dict(yaml_document(text, path) or {}, path, check_paths)


# --- the reference in docs/configuration.md -------------------------------------------------

def reference() -> str:
    """The generated part of docs/configuration.md: one table per section, from the sections' schemas
    (each with its doc line), fabric.ethernet's and the source registry's."""
    from fabricmon.sources.ethernet.settings import SCHEMA as ethernet
    for kind in FABRIC_KINDS:
        import_sources(kind)        # both fabric kinds' sources are listed
    collectors = {NODE_COLLECTOR: ("node (`sources.`)", "sources"),
                  **{k: (f"fabric, {k} (`fabric.sources.`)", "fabric.sources") for k in FABRIC_KINDS}}
    fabric_intervals = {c: {n: f"`fabric.{k}`" for n, k in SOURCE_INTERVALS.items()} for c in FABRIC_KINDS}
    out = []
    for name, schema in SECTIONS.items():
        out.append(f"### {name}\n")
        if name == "sources":
            out.append("Every node source (table below) takes these keys; a source that runs no program takes no "
                       "`command`.\n\n" + table(source_rows(NODE_COLLECTOR)) + "\n"
                       + source_tables(collectors, fabric_intervals))
        elif name == "exclude_devices":
            out.append(table([("exclude_devices", "list of globs", "`[]`", "HCA names never read")]))
        else:
            schema = EXPECTED_LINK if schema is None else schema
            out += [schema.doc + "\n"] if schema.doc else []
            out.append(table(schema.rows("expected_links[]" if name == "expected_links" else name)))
        if name == "fabric":
            out.append("`fabric.ethernet`, only with `fabric.kind: ethernet` ([ethernet.md](ethernet.md)):\n\n"
                       + table(ethernet.rows("fabric.ethernet")))
    return "\n".join(out)

__all__ = ["DEFAULT_CONFIG_PATH", "DEFAULT_FABRIC_PORT", "DEFAULT_PORT", "SECTIONS", "ChecksConfig", "Config",
           "ConfigError", "ExpectedLink", "FabricConfig", "GpuConfig", "RemediationConfig", "RoceConfig", "ServeConfig", "SlurmConfig", "SourceConfig",
           "TLSConfig", "from_dict", "load", "loads", "reference", "registered", "yaml_document"]
