"""The declarative config layer: a section of the YAML is a Schema, a tuple of Fields (name, type,
bounds, default, one doc line). A Schema validates its mapping (unknown keys refused with a
suggestion, every value checked), fills in the defaults, builds its typed dataclass and renders its
rows of the reference in docs/configuration.md. Every error is a ConfigError naming the full key
(a dotted path, `[i]` for list items) and the reason.

It imports nothing of fabricmon, so a package that reads a section declares it beside its code
(a check's thresholds in its module, fabric.ethernet in fabricmon/sources/ethernet/settings.py,
server in fabricmon/serve/settings.py) and the config (fabricmon/config/__init__.py) composes the sections.
A Schema is generic in what it builds (`Schema[RoceConfig]`), so a composed section keeps its type.
"""

from __future__ import annotations

import difflib
import fnmatch
import os
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Generic, TypeVar, cast

T = TypeVar("T")


class ConfigError(ValueError):
    """A configuration problem at `key`."""

    def __init__(self, key: str, reason: str):
        self.key = key
        self.reason = reason
        super().__init__(f"config error at {key or '<top>'}: {reason}")


@dataclass(slots=True)
class Context:
    """What a parse may need beyond the value: whether host paths are checked (not for --replay),
    the sections already built (e.g. paths.state_dir for fabric.cache_dir's default), and the typed
    settings a section shares with what is built after it (`provide`, `take`: the node's device filter,
    the fabric's MAD settings, each read by the sources' settings as they are built)."""
    check_paths: bool = True
    built: dict[str, Any] = field(default_factory=dict)
    shared: dict[type, object] = field(default_factory=dict)

    def provide(self, value: object) -> None:
        """Share `value` with what is built later, by its type (one value of each type)."""
        self.shared[type(value)] = value

    def take(self, cls: type[T]) -> T:
        """The value of type `cls` an earlier section provided."""
        value = self.shared.get(cls)
        if not isinstance(value, cls):
            raise LookupError(f"{cls.__name__} is read before it is built (the config builds it first)")
        return value


@dataclass(frozen=True, slots=True)
class DeviceFilter:
    """`exclude_devices`: the device names (HCAs, PCI functions) never read, as globs."""
    globs: tuple[str, ...] = ()

    def excluded(self, device: str) -> bool:
        return matches_any(device, self.globs)


def suggest(key: str, allowed: tuple[str, ...] | list[str]) -> str:
    close = difflib.get_close_matches(key, allowed, n=1)
    return f" (did you mean {close[0]!r}?)" if close else f" (allowed: {', '.join(allowed)})"


def mapping(value: Any, key: str, allowed: tuple[str, ...], known: frozenset[str] | None = None) -> dict[str, Any]:
    """`value` as a mapping whose keys are all in `allowed` (None: empty); `known`: the same as a set."""
    if value is None:
        return {}
    if not isinstance(value, dict):
        raise ConfigError(key, f"expected a mapping, got {type(value).__name__}")
    if value.keys() <= (known if known is not None else frozenset(allowed)):
        return value
    for k in value:
        if not isinstance(k, str) or k not in allowed:
            raise ConfigError(f"{key}.{k}" if key else str(k), "unknown key" + suggest(str(k), allowed))
    return value


def join(prefix: str, name: str) -> str:
    return f"{prefix}.{name}" if prefix else name


Parse = Callable[[Any, str, Context], Any]


@dataclass(frozen=True, slots=True)
class Field:
    """One key: `parse(value, full key, context)` checks and converts a value given in the YAML;
    `default` is the value when the key is absent (already in its built form). `kind` and
    `default_doc` are how the reference table shows its type and default."""
    name: str
    parse: Parse
    default: Any
    doc: str
    kind: str
    default_doc: str | None = None
    schema: Schema[Any] | None = None   # a nested section: its rows follow in the reference


Build = Callable[[dict[str, Any], str, Context], T]
Check = Callable[[dict[str, Any], Mapping[str, Any], str, Context], None]


@dataclass(frozen=True, slots=True)
class Schema(Generic[T]):
    """A section: its fields, how its values become the typed object T (`build(values, key, ctx)`;
    `values()` below builds the values as a dict), and `check(values, m, key, ctx)` for rules across
    fields (it may fill in values that depend on others). `extra` are keys accepted and read by
    `check` only (e.g. the `_file` variants of a secret); `extra_doc` documents them as (name, kind,
    default, doc); `doc` is the section's line above its table in the reference."""
    fields: tuple[Field, ...]
    build: Build[T]
    check: Check | None = None
    extra: tuple[str, ...] = ()
    extra_doc: tuple[tuple[str, str, str, str], ...] = ()
    # what an absent section builds does not depend on the context or on other sections: built once
    pure: bool = True
    doc: str = ""
    allowed: tuple[str, ...] = field(init=False, default=())
    _known: frozenset[str] = field(init=False, default=frozenset(), repr=False, compare=False)
    # (field, its key below the section, whether it is a nested section): what _load walks
    _walk: tuple[tuple[Field, str, bool], ...] = field(init=False, default=(), repr=False, compare=False)
    _absent: list[T] = field(init=False, default_factory=list, repr=False, compare=False)

    def __post_init__(self) -> None:
        object.__setattr__(self, "allowed", tuple(f.name for f in self.fields) + self.extra)
        object.__setattr__(self, "_known", frozenset(self.allowed))
        object.__setattr__(self, "_walk", tuple((f, f.name, f.schema is not None) for f in self.fields))

    def load(self, raw: Any, key: str, ctx: Context) -> T:
        if self.pure and not raw and isinstance(raw, (dict, type(None))):
            if not self._absent:
                self._absent.append(self._load({}, key, ctx))
            out = self._absent[0]
            if isinstance(out, dict):
                return cast(T, dict(out))       # a dict is copied (a check may fill it in)
            return out                          # a frozen dataclass is shared as is
        return self._load(raw, key, ctx)

    def _load(self, raw: Any, key: str, ctx: Context) -> T:
        m = mapping(raw, key, self.allowed, self._known)
        values: dict[str, Any] = {}
        for f, name, nested in self._walk:
            if name in m or nested:     # an absent section is built from its defaults
                values[name] = f.parse(m.get(name), f"{key}.{name}" if key else name, ctx)
            else:
                values[name] = f.default
        if self.check is not None:
            self.check(values, m, key, ctx)
        return self.build(values, key, ctx)

    def field(self, name: str) -> Field:
        return next(f for f in self.fields if f.name == name)

    def defaults(self) -> dict[str, Any]:
        return {f.name: f.default for f in self.fields}

    def default_object(self) -> T:
        """What the section builds from its defaults alone, nested sections included (no check:
        e.g. fabric.ethernet's defaults when the fabric is not Ethernet)."""
        values = {f.name: f.schema.default_object() if f.schema is not None else f.default for f in self.fields}
        return self.build(values, "", Context(check_paths=False))

    def rows(self, prefix: str) -> list[tuple[str, str, str, str]]:
        """(key, type, default, meaning) for the reference, nested sections flattened."""
        out = []
        for f in self.fields:
            if f.schema is not None:
                if f.doc:
                    out.append((join(prefix, f.name), f.kind, f.default_doc or "", f.doc))
                out.extend(f.schema.rows(join(prefix, f.name)))
            else:
                out.append((join(prefix, f.name), f.kind, f.default_doc if f.default_doc is not None
                            else show(f.default), f.doc))
        out.extend((join(prefix, n), k, d, doc) for n, k, d, doc in self.extra_doc)
        return out


def from_class(cls: Callable[..., T]) -> Build[T]:
    """A build that passes the values to the dataclass as keyword arguments."""
    return lambda values, key, ctx: cls(**values)


def values(values: dict[str, Any], key: str, ctx: Context) -> dict[str, Any]:
    """The build of a section read as its values (a dict), e.g. `paths`, whose keys land in Config."""
    return values


def show(value: Any) -> str:
    """A default as the YAML an operator would write."""
    if value is None:
        return "`null`"
    if isinstance(value, bool):
        return "`true`" if value else "`false`"
    if isinstance(value, float) and value.is_integer():
        return f"`{int(value)}`"
    if isinstance(value, (tuple, list)):
        return "`[" + ", ".join(str(v) for v in value) + "]`"
    if value == "":
        return "unset"
    return f"`{value}`"


# --- field types ----------------------------------------------------------------------------

def _bounds(lo: float | None, hi: float | None) -> str:
    if lo is not None and hi is not None:
        return f"{lo:g}-{hi:g}"
    if lo is not None:
        return f">= {lo:g}"
    return f"<= {hi:g}" if hi is not None else ""


def integer(name: str, default: int | None, doc: str, lo: int | None = None, hi: int | None = None,
            null: bool = False, default_doc: str | None = None) -> Field:
    """A whole number within lo..hi (bools refused); null allowed when `null`."""
    span = _bounds(lo, hi)

    def parse(v: Any, key: str, ctx: Context) -> int | None:
        if v is None and null:
            return None
        if isinstance(v, bool) or not isinstance(v, int) or (lo is not None and v < lo) or (hi is not None and v > hi):
            raise ConfigError(key, f"expected an integer {span}, got {v!r}")
        return v
    return Field(name, parse, default, doc, f"integer {span}".strip() + (" or null" if null else ""), default_doc)


def number(name: str, default: float | None, doc: str, lo: float | None = None, hi: float | None = None,
           null: bool = False, hi_reason: str = "must be", default_doc: str | None = None) -> Field:
    """A number >= lo (and <= hi); null allowed when `null` (e.g. a threshold level switched off)."""
    def parse(v: Any, key: str, ctx: Context) -> float | None:
        if v is None and null:
            return None
        if isinstance(v, bool) or not isinstance(v, (int, float)):
            raise ConfigError(key, f"expected a number, got {v!r}")
        if lo is not None and v < lo:
            raise ConfigError(key, f"must be >= {lo}, got {v!r}")
        if hi is not None and v > hi:
            raise ConfigError(key, f"{hi_reason} <= {hi:g}, got {v!r}")
        return float(v)
    kind = ("number " + _bounds(lo, hi)).strip() + (" or null" if null else "")
    return Field(name, parse, default, doc, kind, default_doc)


def boolean(name: str, default: bool, doc: str) -> Field:
    def parse(v: Any, key: str, ctx: Context) -> bool:
        if not isinstance(v, bool):
            raise ConfigError(key, f"expected true or false, got {v!r}")
        return v
    return Field(name, parse, default, doc, "true or false")


def choice(name: str, default: Any, doc: str, choices: Mapping[Any, Any] | tuple[Any, ...],
           reason: str | None = None, fold: Callable[[Any], Any] | None = None) -> Field:
    """One of `choices` (a tuple, or a mapping from what is written to what is built);
    `fold` normalises a value before the lookup (e.g. str.lower); `reason` replaces the
    default "expected one of ..."."""
    table = dict(choices) if isinstance(choices, Mapping) else {c: c for c in choices}
    names = ", ".join("null" if c is None else str(c) for c in table)

    def parse(v: Any, key: str, ctx: Context) -> Any:
        k = fold(v) if fold is not None else v
        try:
            if k in table and not isinstance(k, bool):
                return table[k]
        except TypeError:       # unhashable (a list or a mapping)
            pass
        raise ConfigError(key, f"{reason or 'expected one of ' + names}, got {v!r}")
    back = {v: k for k, v in table.items()}
    return Field(name, parse, default, doc, "one of " + names.replace(", ", " \\| "),
                 show(back.get(default, default)))


def string(name: str, default: str | None, doc: str, null: bool = False,
           check: Callable[[str, str, Context], str] | None = None, kind: str = "string",
           default_doc: str | None = None) -> Field:
    """A non-empty string (null allowed when `null`); `check(value, key, ctx)` may refuse or convert it."""
    def parse(v: Any, key: str, ctx: Context) -> str | None:
        if v is None and null:
            return None
        if not isinstance(v, str) or not v:
            raise ConfigError(key, f"expected a non-empty string, got {v!r}")
        return check(v, key, ctx) if check is not None else v
    return Field(name, parse, default, doc, kind + (" or null" if null else ""), default_doc)


def listing(name: str, default: tuple[Any, ...], doc: str, item: Parse, what: str,
            kind: str | None = None, default_doc: str | None = None) -> Field:
    """A list whose items each pass `item(value, key[i], ctx)`; built as a tuple."""
    def parse(v: Any, key: str, ctx: Context) -> tuple[Any, ...]:
        if not isinstance(v, list):
            raise ConfigError(key, f"expected a list of {what}, got {v!r}")
        return tuple(item(x, f"{key}[{i}]", ctx) for i, x in enumerate(v))
    return Field(name, parse, default, doc, kind or f"list of {what}", default_doc)


def custom(name: str, default: Any, doc: str, parse: Parse, kind: str, default_doc: str | None = None) -> Field:
    """A key whose check is its own (a shard spec, a glob, ...)."""
    return Field(name, parse, default, doc, kind, default_doc)


def section(name: str, schema: Schema[Any], doc: str = "", kind: str = "mapping") -> Field:
    """A nested mapping with its own schema; absent, it is built from its defaults (at load time:
    a default may depend on another section, e.g. fabric.cache_dir on paths.state_dir)."""
    return Field(name, lambda v, key, ctx: schema.load(v, key, ctx), None, doc, kind, schema=schema)


# --- value checks several packages' keys share (a `check` of string(), or a custom() parse) -------

def glob_pattern(value: Any, key: str, ctx: Context | None = None) -> str:
    """A non-empty fnmatch glob (a number is its text); an unclosed '[' is refused, not taken literally."""
    if isinstance(value, int) and not isinstance(value, bool):
        pat = str(value)
    elif not isinstance(value, str) or not value:
        raise ConfigError(key, f"expected a non-empty string, got {value!r}")
    else:
        pat = value
    depth = 0
    for ch in pat:
        if ch == "[":
            depth += 1
        elif ch == "]" and depth:
            depth -= 1
    if depth:
        raise ConfigError(key, f"bad glob {pat!r}: unclosed '['")
    return pat


def glob_list(value: Any, key: str, ctx: Context) -> tuple[str, ...]:
    if not isinstance(value, list):
        raise ConfigError(key, f"expected a list of globs, got {value!r}")
    return tuple(glob_pattern(p, f"{key}[{i}]") for i, p in enumerate(value))


def matches_any(name: str, globs: tuple[str, ...]) -> bool:
    return any(fnmatch.fnmatchcase(name, pat) for pat in globs)


def existing_dir(value: str, key: str, ctx: Context) -> str:
    if ctx.check_paths and not Path(value).is_dir():
        raise ConfigError(key, f"{value} is not an existing directory")
    return value


def existing_file(value: str, key: str, ctx: Context) -> str:
    if ctx.check_paths and not Path(value).is_file():
        raise ConfigError(key, f"{value} is not a readable file")
    return value


def absolute(value: str, key: str, ctx: Context) -> str:
    if not os.path.isabs(value):
        raise ConfigError(key, f"expected an absolute path, got {value!r}")
    return value


def absolute_dir(value: Any, key: str, ctx: Context) -> str:
    if not isinstance(value, str) or not os.path.isabs(value):
        raise ConfigError(key, f"expected an absolute directory, got {value!r}")
    return value


def warning_below_critical(values: dict[str, Any], m: Mapping[str, Any], key: str, ctx: Context) -> None:
    """A check's `warning` not above its `critical` (either may be null: that level is off)."""
    w, c = values["warning"], values["critical"]
    if w is not None and c is not None and w > c:
        raise ConfigError(f"{key}.warning", f"{w:g} is above critical ({c:g})")


def table(rows: list[tuple[str, str, str, str]]) -> str:
    """A markdown reference table."""
    lines = ["| key | type | default | meaning |", "|---|---|---|---|"]
    for key, kind, default, doc in rows:
        lines.append(f"| `{key}` | {kind} | {default} | {doc} |")
    return "\n".join(lines) + "\n"


__all__ = ["Build", "Check", "ConfigError", "Context", "DeviceFilter", "Field", "Schema", "absolute", "absolute_dir", "boolean",
           "choice", "custom", "existing_dir", "existing_file", "from_class", "glob_list", "glob_pattern", "integer",
           "join", "listing", "mapping", "matches_any", "number", "section", "show", "string", "suggest", "table",
           "values", "warning_below_critical"]
