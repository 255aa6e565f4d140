"""Sources fetch raw text and files from the host (through a HostIO), with timeouts, and hand
them to the pure parsers in fabricmon.parsers. A source never raises: problems are returned as
(kind, message) errors so that one failing source costs only its own data."""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import Any

from fabricmon.runner import CommandResult

# Error kinds exported in fabricmon_source_errors_total{kind}; all are pre-declared at 0.
ERROR_KINDS = ("not_found", "timeout", "exit_code", "parse", "read")


@dataclass(slots=True)
class SourceOutput:
    data: Any = None
    errors: list[tuple[str, str]] = field(default_factory=list)

    def error(self, kind: str, message: str) -> None:
        self.errors.append((kind, message))

    @property
    def up(self) -> bool:
        """The source produced usable data (partial output counts; errors are still counted)."""
        return self.data is not None


def command_error(res: CommandResult) -> tuple[str, str] | None:
    """Classify a failed command into an error kind, or None when it succeeded."""
    if res.error in ("not_found", "not_recorded", "exec_error"):
        return ("not_found", res.describe())
    if res.error == "timeout":
        return ("timeout", res.describe())
    if res.returncode != 0:
        return ("exit_code", res.describe())
    return None


@dataclass(slots=True)
class PerNameRun:
    results: list[tuple[str, CommandResult]] = field(default_factory=list)
    tool_missing: bool = False     # enabled: auto and the tool is not installed


def run_per_name(io: Any, sc: Any, out: SourceOutput, names: Iterable[str],
                 args_for: Callable[[str], list[str]]) -> PerNameRun:
    """Run `sc.command + args_for(name)` for each discovered name (a netdev, a device).

    Names are validated before they become arguments. With `enabled: auto` a missing tool
    stops the loop quietly (tool_missing), and a command absent from a replayed bundle is
    skipped; otherwise every result is returned for the caller to classify and parse.
    """
    from fabricmon.config import safe_arg
    run = PerNameRun()
    auto = sc.enabled == "auto"
    for name in names:
        try:
            argv = [*sc.command, *args_for(safe_arg(name))]
        except ValueError as exc:
            out.error("parse", str(exc))
            continue
        res = io.run(argv, sc.timeout)
        if auto and res.error == "not_found":
            run.tool_missing = True
            break
        if auto and res.error == "not_recorded":
            continue
        run.results.append((name, res))
    return run
