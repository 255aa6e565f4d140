"""Every numeric option of every subcommand is checked by argparse (issue 53, item 3): a value out of
range (`check --sample-window -5`, `check --daemon-timeout -1`, `fabric once --sweeps 0`, `demo --port
70000`), not a number, or not finite is argparse's own usage error, one `error:` line naming the option
and what it must be, exit 2 (3, UNKNOWN, for `check`: its Nagios contract), never a traceback and never
accepted. The table is the parser itself: an option added later with a number for its type or default
is in it, and fails here unless it takes the shared bounded type (cli.Number)."""

from __future__ import annotations

import argparse
import subprocess
import sys

import pytest
from helpers import BUNDLES

from fabricmon import cli


def _walk(parser: argparse.ArgumentParser, path: tuple[str, ...]):
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for name, sub in action.choices.items():
                yield from _walk(sub, (*path, name))
        else:
            yield path, action


def _numeric(action: argparse.Action) -> bool:
    """An option that takes a number: a number's type (the shared one, or a bare int/float) or default."""
    if not action.option_strings or action.nargs == 0:
        return False
    default = action.default
    return isinstance(action.type, cli.Number) or action.type in (int, float) or (
        isinstance(default, (int, float)) and not isinstance(default, bool))


OPTIONS = [(path, action) for path, action in _walk(cli.build_parser(), ()) if _numeric(action)]


def bad_values(t: cli.Number) -> list[str]:
    """Below its range, above it, not a number, and (for a float) not finite; a fraction for an integer."""
    bad = [str(t.low if t.low_open else t.low - 1), "abc", ""]
    if t.high is not None:
        bad.append(str(t.high + 1))
    bad += ["1.5"] if t.kind is int else ["nan", "inf", "-inf"]
    return bad


def test_the_table_holds_the_options_the_issue_names() -> None:
    named = {(" ".join(path), action.option_strings[0]) for path, action in OPTIONS}
    assert {("check", "--sample-window"), ("check", "--daemon-timeout"), ("fabric once", "--sweeps"),
            ("fabric once", "--interval"), ("demo", "--port"), ("demo", "--duration"),
            ("demo", "--fault-after")} <= named, named


@pytest.mark.parametrize("path, action", OPTIONS, ids=[f"{' '.join(p)} {a.option_strings[0]}" for p, a in OPTIONS])
def test_a_bad_value_is_one_usage_error_line(path: tuple[str, ...], action: argparse.Action, capsys) -> None:
    assert isinstance(action.type, cli.Number), \
        f"{' '.join(path)} {action.option_strings[0]}: a numeric option must take a bounded cli.Number type"
    opt = action.option_strings[0]
    for bad in bad_values(action.type):
        try:
            rc = cli.main([*path, f"{opt}={bad}"])
        except SystemExit as exc:
            rc = exc.code
        out, err = capsys.readouterr()
        assert "Traceback" not in out + err, err
        errors = [ln for ln in err.splitlines() if ": error: " in ln]
        assert errors == [err.splitlines()[-1]], err           # one error line, argparse's last one
        assert errors[0] == (f"fabricmon {' '.join(path)}: error: argument {opt}: must be {action.type.describe()}, "
                             f"got {bad!r}"), err
        if path[0] == "check":          # Nagios: could not check is UNKNOWN, never CRITICAL (2)
            assert rc == 3 and out == "FABRICMON UNKNOWN - bad command line (see stderr)\n", (rc, out)
        else:
            assert rc == 2 and out == "", (rc, out)


@pytest.mark.parametrize("path, action", OPTIONS, ids=[f"{' '.join(p)} {a.option_strings[0]}" for p, a in OPTIONS])
def test_the_edges_of_the_range_are_accepted(path: tuple[str, ...], action: argparse.Action) -> None:
    t = action.type
    assert isinstance(t, cli.Number)
    edges = [t.low + (1 if t.kind is int else 0.5) if t.low_open else t.low]
    if t.high is not None:
        edges.append(t.high)
    for edge in edges:
        args, _ = cli.build_parser().parse_known_args([*path, action.option_strings[0], str(edge)])
        value = getattr(args, action.dest)
        assert value == edge and type(value) is t.kind, (edge, value)
    default = action.default
    assert default is None or t(str(default)) == default        # its default is in its own range


@pytest.mark.parametrize("argv", [["--sample-window", "-5"], ["--daemon-timeout", "-1"],
                                  ["--daemon-timeout", "0"]])
def test_check_says_unknown_with_no_traceback(argv: list[str]) -> None:
    """The issue's own cases, as Nagios runs them: before, `--sample-window -5` was a traceback and
    `FABRICMON UNKNOWN - internal error: ValueError('sleep length must be non-negative')`, and
    `--daemon-timeout -1` was accepted."""
    res = subprocess.run([sys.executable, "-m", "fabricmon", "check", "--replay", str(BUNDLES / "dgx-h100"), *argv],
                         capture_output=True, text=True, timeout=60)
    assert res.returncode == 3, (res.returncode, res.stdout, res.stderr)
    assert res.stdout == "FABRICMON UNKNOWN - bad command line (see stderr)\n"
    assert "Traceback" not in res.stderr
    assert res.stderr.splitlines()[-1].startswith(f"fabricmon check: error: argument {argv[-2]}: must be "), res.stderr
