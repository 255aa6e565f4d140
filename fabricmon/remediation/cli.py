"""`fabricmon actions`: what remediation did, why, when it expires and what it waits for (the record in the
state directory, node and fabric); `fabricmon actions undo ID`: reverse one now (asked of the running
daemon, which carries it out on its next round; carried out here when no daemon holds the record)."""

from __future__ import annotations

import argparse
import json
import sys
import time
from collections.abc import Callable
from dataclasses import asdict

from fabricmon.config import Config
from fabricmon.model.remediation import DONE, RETURNING, TODO, WAITING, Action, modes_line
from fabricmon.remediation.record import Record, daemon_running, open_first, read_answer, record_path, request_undo
from fabricmon.remediation.settings import effective_modes

SCOPES = ("node", "fabric")
UNDO_WAIT = 30.0            # seconds `undo` waits for the running daemon's answer


def _when(t: float | None) -> str:
    return "-" if t is None else time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(t))


def waits_for(a: Action, now: float) -> str:
    """What an action waits for, in words."""
    if a.state == WAITING:
        return a.waits
    if a.state == TODO:
        if a.next_try is not None:
            return f"its next try at {_when(a.next_try)} (try {a.attempts + 1}; last: {a.error})"
        return "being carried out"
    if a.state == RETURNING:
        if a.next_try is not None:
            return f"its return, tried again at {_when(a.next_try)} (last: {a.error})"
        return "being returned to service"
    if a.state == DONE:
        if a.note.startswith("failed again after"):
            return "an operator: `fabricmon actions undo " + a.id + "` (it failed again after earlier returns)"
        end = a.returns_at()
        if end is None:
            return f"a clean window of {a.window:g} s (its condemning finding is still there)"
        return (f"a clean window: returns at {_when(end)} (clean since {_when(a.clean_since)}, {a.window:g} s) "
                "unless it fails again")
    return ""


def lines(scope: str, cfg: Config, record: Record, running: bool, show_closed: bool) -> list[str]:
    now = time.time()
    modes = effective_modes(cfg.remediation)
    head = (f"{scope}: {modes_line(modes)}; record {record.path or '(none: no state directory)'}; "
            f"{'a daemon holds it' if running else 'no daemon running'}")
    out = [head]
    acts = open_first(record.actions.values())
    shown = [a for a in acts if a.open or show_closed]
    if not shown:
        out.append("  no open action" + ("" if show_closed else " (--all shows the closed ones too)"))
    for a in shown:
        out.append(f"  {a.id} {a.kind} {a.mode} {a.state} since {_when(a.effective or a.created)}: {a.label}")
        out.append(f"     why: {a.reason}")
        w = waits_for(a, now)
        if w:
            out.append(f"     waits for: {w}")
        if not a.open:
            out.append(f"     closed {_when(a.closed)}: {a.note}")
        elif a.note:
            out.append(f"     last: {a.note}")
    return out


def cmd_actions(args: argparse.Namespace, load: Callable[[argparse.Namespace], Config]) -> int:
    cfg = load(args)
    scopes = SCOPES if args.scope == "all" else (args.scope,)
    if args.json:
        doc = {}
        for s in scopes:
            path = record_path(cfg.state_dir, s)
            rec = Record(path)
            doc[s] = {"modes": dict(effective_modes(cfg.remediation)), "record": path,
                      "daemon": bool(path and daemon_running(path)),
                      "actions": [dict(asdict(a), waits_for=waits_for(a, time.time()), returns_at=a.returns_at())
                                  for a in open_first(rec.actions.values()) if a.open or args.all]}
        print(json.dumps(doc, indent=1))
        return 0
    for s in scopes:
        path = record_path(cfg.state_dir, s)
        rec = Record(path)
        print("\n".join(lines(s, cfg, rec, bool(path and daemon_running(path)), args.all)))
    return 0


def cmd_undo(args: argparse.Namespace, load: Callable[[argparse.Namespace], Config]) -> int:
    cfg = load(args)
    scope = args.scope if args.scope != "all" else ("node" if args.id.startswith("n") and
                                                   _has(cfg, "node", args.id) else "fabric")
    path = record_path(cfg.state_dir, scope)
    if path is None:
        print(f"fabricmon: no state directory {cfg.state_dir}: no record to undo from", file=sys.stderr)
        return 1
    rec = Record(path)
    if args.id not in rec.actions:
        print(f"fabricmon: no action {args.id} in {path}", file=sys.stderr)
        return 1
    if daemon_running(path):
        answer = request_undo(path, args.id)
        end = time.monotonic() + UNDO_WAIT
        while time.monotonic() < end:
            got = read_answer(answer)
            if got is not None:
                print(got[1])
                return 0 if got[0] else 1
            time.sleep(0.1)
        print(f"fabricmon: the daemon did not answer within {UNDO_WAIT:g} s (the request stays: it is carried "
              "out on its next round)", file=sys.stderr)
        return 1
    # no daemon: carried out here, through this host's tools
    from fabricmon.host import LiveIO
    from fabricmon.remediation.engine import Remediator
    io = LiveIO(cfg.sysfs, cfg.procfs, tool_dirs=cfg.tool_dirs)
    collector = "node" if scope == "node" else cfg.fabric.kind
    rem = Remediator(cfg, io, collector, record=rec)
    ok, text = rem.undo(args.id)
    print(text)
    return 0 if ok else 1


def _has(cfg: Config, scope: str, action_id: str) -> bool:
    path = record_path(cfg.state_dir, scope)
    return bool(path) and action_id in Record(path).actions


def add_parsers(sub: "argparse._SubParsersAction[argparse.ArgumentParser]", load: Callable[[argparse.Namespace], Config]) -> None:
    ap = sub.add_parser("actions", help="what remediation did, why, when it expires, what it waits for "
                                        "(docs/remediation.md); `actions undo ID` reverses one now")
    ap.add_argument("--config", help="YAML config file (default /etc/fabricmon/fabricmon.yml if present)")
    ap.add_argument("--scope", choices=("node", "fabric", "all"), default="all",
                    help="the node daemon's record, the fabric collector's, or both (default)")
    ap.add_argument("--json", action="store_true", help="the records as JSON")
    ap.add_argument("--all", action="store_true", help="the closed actions too")
    ap.set_defaults(func=lambda a: cmd_actions(a, load))
    asub = ap.add_subparsers(dest="actions_command")
    up = asub.add_parser("undo", help="reverse one action now: re-enable the port, resume the node (only if its "
                                      "reason is still fabricmon's)")
    up.add_argument("id", help="the action's id (p1, n3: `fabricmon actions`)")
    up.add_argument("--config", default=argparse.SUPPRESS, help="YAML config file")
    up.add_argument("--scope", choices=("node", "fabric", "all"), default=argparse.SUPPRESS)
    up.set_defaults(func=lambda a: cmd_undo(a, load))


__all__ = ["add_parsers", "cmd_actions", "cmd_undo", "lines", "waits_for"]

