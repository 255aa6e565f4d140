"""The source interface and its registry (node_exporter's `registerCollector`, in our words).

A source is one module with one class: it declares its name, its defaults (enabled, interval,
timeout, command), what it reads as input (`needs`: "inventory" for the port inventory) and
one `collect(io, inputs)` that returns typed records in a SourceOutput. The module registers
the class once with `@register(...)`; the pipeline knows no source by name: it walks the
registry, runs each source on its own schedule, and gives every source the same timeout,
error counting and self-metrics.

A source never raises: problems are returned as (kind, message) errors, so one failing source
costs only its own data.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, ClassVar, TypeVar

from fabricmon.host.runner import CommandResult, safe_arg
from fabricmon.model.snapshot import ERROR_KINDS
from fabricmon.parsers.errors import ParseError
from fabricmon.registry import SourceConfig, SourceSpec, register, registry

if TYPE_CHECKING:
    from fabricmon.host.io import HostIO

T = TypeVar("T")

# Inputs a source may declare in `needs`.
INVENTORY = "inventory"


@dataclass(slots=True)
class SourceOutput:
    data: Any = None
    errors: list[tuple[str, str]] = field(default_factory=list)

    def error(self, kind: str, message: str) -> None:
        self.errors.append((kind, message))

    def parsed(self, res: CommandResult, parse: Callable[[str], T], what: str | None = None,
               partial: bool = False) -> T | None:
        """`parse` of a tool's output, or None: a failed run (command_error) and output the
        parser rejects are recorded here as errors, named by `what` (default: the argv).
        `partial`: output that a failed run still printed is parsed too."""
        err = command_error(res)
        if err:
            self.error(err[0], err[1] if what is None else what + err[1])
            if not (partial and res.stdout.strip()):
                return None
        try:
            return parse(res.stdout)
        except ParseError as exc:
            self.error("parse", f"{' '.join(res.argv)}: {exc}" if what is None else f"{what}{exc}")
            return None

    @property
    def up(self) -> bool:
        """The source produced usable data (partial output counts; errors are still counted)."""
        return self.data is not None


@dataclass(slots=True)
class Inputs:
    """What the pipeline hands a source: the latest port inventory it has (never waiting for a
    hung inventory source) and the monotonic deadline of this run."""
    deadline: float
    inventory: Any = None       # model.ports.Inventory for sources that need it
    cancel: threading.Event | None = None     # set when the daemon stops
    # run by the daemon's worker, again and again (False: one collection, `once`, `check`, `capture`): a
    # source that lives between runs (a subscription, a watch) sets itself up only then
    continuous: bool = False

    def remaining(self, cap: float) -> float:
        """Seconds left for one command, at most `cap` (the source's timeout); 0 once the
        daemon is stopping, so no new tool starts."""
        if self.cancel is not None and self.cancel.is_set():
            return 0.0
        return max(0.0, min(cap, self.deadline - time.monotonic()))


class Source:
    """Base class. Subclasses implement collect(); `spec` is set by @register."""

    spec: ClassVar[SourceSpec]

    def __init__(self, sc: SourceConfig):
        self.sc = sc            # its keys and its typed settings (sc.settings): never the whole config
        self._pool: ThreadPoolExecutor | None = None

    def pool(self) -> ThreadPoolExecutor:
        """The source's own workers for concurrent commands (spec.concurrency), kept for its
        lifetime so that the thread count stays flat."""
        if self._pool is None:
            self._pool = ThreadPoolExecutor(max_workers=max(1, self.spec.concurrency),
                                            thread_name_prefix=f"fabricmon-{self.spec.name}")
        return self._pool

    def close(self) -> None:
        if self._pool is not None:
            self._pool.shutdown(wait=False, cancel_futures=True)

    @property
    def name(self) -> str:
        return self.spec.name

    def collect(self, io: HostIO, inputs: Inputs) -> SourceOutput:   # pragma: no cover - abstract
        raise NotImplementedError


def command_error(res: CommandResult) -> tuple[str, str] | None:
    """Classify a failed command into an error kind, or None when it succeeded."""
    if res.error in ("not_found", "not_recorded", "exec_error"):
        return ("not_found", res.describe())
    if res.error == "timeout":
        return ("timeout", res.describe())
    if res.returncode != 0:
        return ("exit_code", res.describe())
    if res.truncated:               # output cut at the host's bound: never taken as the whole answer
        return ("read", res.describe())
    return None


@dataclass(slots=True)
class PerNameRun:
    results: list[tuple[str, CommandResult]] = field(default_factory=list)
    tool_missing: bool = False     # enabled: auto and the tool is not installed
    asked: int = 0                 # the names there were to run for

    def publish(self, out: SourceOutput, data: object, read: bool) -> None:
        """The one rule of a per-name run's record: `data` is the run's data when it `read` something, the
        tool is missing (enabled: auto), there was nothing to read, or nothing failed; a run in which every
        name failed is no data (its errors say why), never an empty record that reads as "nothing there"."""
        if read or self.tool_missing or not self.asked or not out.errors:
            out.data = data


def run_per_name(io: HostIO, source: Source, inputs: Inputs, out: SourceOutput, names: Iterable[str],
                 args_for: Callable[[str], list[str]]) -> PerNameRun:
    """Run `command + args_for(name)` for each discovered name (a port, a netdev), at most
    `spec.concurrency` at once, all under the run's one deadline: a hung tool costs the run
    its timeout once, never timeout x names.

    Names are validated before they become arguments. With `enabled: auto` a missing tool is
    `tool_missing` (not an error) and a command absent from a replayed bundle is skipped;
    otherwise every result is returned, in name order, for the caller to classify and parse.
    """
    sc = source.sc
    argvs: list[tuple[str, list[str]]] = []
    names = list(names)
    run = PerNameRun(asked=len(names))
    for name in names:
        try:
            argvs.append((name, [*sc.command, *args_for(safe_arg(name))]))
        except ValueError as exc:
            out.error("parse", str(exc))
    if not argvs:
        return run

    def one(item: tuple[str, list[str]]) -> tuple[str, CommandResult]:
        return item[0], io.run(item[1], inputs.remaining(sc.timeout))

    workers = max(1, min(source.spec.concurrency, len(argvs)))
    if workers == 1:
        results = [one(a) for a in argvs]
    else:
        results = list(source.pool().map(one, argvs))
    auto = sc.enabled == "auto"
    for name, res in results:
        if auto and res.error == "not_found":
            run.tool_missing = True
            continue
        if auto and res.error == "not_recorded":
            continue
        run.results.append((name, res))
    return run


__all__ = ["ERROR_KINDS", "INVENTORY", "Inputs", "PerNameRun", "Source", "SourceOutput", "SourceSpec",
           "command_error", "register", "registry", "run_per_name"]
