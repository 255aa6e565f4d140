"""The action record: every action remediation decided, open or recently closed, kept in the state
directory as one JSON file written atomically (fabricmon.fsutil) after every change, read at start, so a
restart forgets nothing (the Remediator reconciles it with the fabric and Slurm on its first rounds).

`<paths.state_dir>/remediation-<scope>.json` (scope `node` or `fabric`: a node daemon and a collector on
one host keep their own). While a daemon runs it holds an flock on `<file>.lock`: `fabricmon actions undo`
asks it through `<file>.requests/` (the daemon carries the undo out on its next round, within a second),
and carries the undo out itself when no daemon holds the lock."""

from __future__ import annotations

import dataclasses
import fcntl
import json
import os
import time
from collections.abc import Iterable

import structlog

from fabricmon.fsutil import write_atomic
from fabricmon.model.remediation import ACTIONS, DRAIN, ISOLATE, STATES, Action

VERSION = 1
_FIELDS = {f.name for f in dataclasses.fields(Action)}
log = structlog.get_logger("fabricmon.remediation")


def record_path(state_dir: str, scope: str) -> str | None:
    """The record's file; None (kept in memory) where the state directory does not exist."""
    if not state_dir or not os.path.isdir(state_dir):
        return None
    return os.path.join(state_dir, f"remediation-{scope}.json")


def action_from(doc: object) -> Action:
    """One action as the file keeps it; ValueError for one that is not."""
    if not isinstance(doc, dict):
        raise ValueError(f"an action is a mapping, got {type(doc).__name__}")
    d = {k: v for k, v in doc.items() if k in _FIELDS}
    d["baseline"] = tuple((str(k), v) if not isinstance(v, list) else (str(k), tuple(v))
                          for k, v in d.get("baseline", ()))
    a = Action(**d)
    if a.kind not in ACTIONS or a.state not in STATES or not a.id:
        raise ValueError(f"action {a.id!r}: kind {a.kind!r} or state {a.state!r} unknown")
    return a


class Record:
    """The actions by id, the next id of each kind, and the file they live in (None: in memory)."""

    def __init__(self, path: str | None, keep_closed: int = 200):
        self.path = path
        self.keep_closed = keep_closed
        self.actions: dict[str, Action] = {}
        self.next = {"p": 1, "n": 1}
        self.error = ""                  # why the file could not be read or written ("" while it can)
        self._lock_fd: int | None = None
        if path is not None:
            self.load()

    def load(self) -> None:
        assert self.path is not None
        try:
            with open(self.path, encoding="utf-8") as fh:
                doc = json.load(fh)
        except FileNotFoundError:
            return
        except (OSError, ValueError) as exc:
            self.error = f"cannot read {self.path}: {exc}"
            log.warning("remediation record unreadable: acting on nothing it holds", path=self.path, error=str(exc))
            return
        bad = []
        for item in doc.get("actions", []) if isinstance(doc, dict) else []:
            try:
                a = action_from(item)
            except (TypeError, ValueError) as exc:
                bad.append(str(exc))
                continue
            self.actions[a.id] = a
        if isinstance(doc, dict) and isinstance(doc.get("next"), dict):
            for k in ("p", "n"):
                v = doc["next"].get(k)
                if isinstance(v, int) and v > 0:
                    self.next[k] = v
        for a in self.actions.values():               # never reuse an id
            k, n = a.id[:1], a.id[1:]
            if k in self.next and n.isdigit():
                self.next[k] = max(self.next[k], int(n) + 1)
        if bad:
            log.warning("remediation record: actions left out", path=self.path, errors=bad[:5], count=len(bad))

    def new_id(self, kind: str) -> str:
        k = "p" if kind == ISOLATE else "n" if kind == DRAIN else "x"
        n = self.next.get(k, 1)
        self.next[k] = n + 1
        return f"{k}{n}"

    def replace_all(self, actions: dict[str, Action]) -> bool:
        """Take a round's actions; the oldest closed ones past keep_closed are forgotten. True when changed."""
        closed = sorted((a for a in actions.values() if not a.open), key=lambda a: a.closed or 0.0)
        drop = {a.id for a in closed[:max(0, len(closed) - self.keep_closed)]}
        new = {i: a for i, a in actions.items() if i not in drop}
        changed = new != self.actions
        self.actions = new
        return changed

    def save(self) -> None:
        if self.path is None:
            return
        doc = {"version": VERSION, "written": time.time(), "next": self.next,
               "actions": [dataclasses.asdict(a) for a in sorted(self.actions.values(), key=lambda a: a.created)]}
        try:
            write_atomic(self.path, json.dumps(doc, indent=1).encode(), mode=0o640)
            self.error = ""
        except OSError as exc:
            if not self.error:
                log.warning("remediation record not written: kept in memory", path=self.path, error=str(exc))
            self.error = f"cannot write {self.path}: {exc}"

    # --- the daemon's lock and `fabricmon actions undo`'s requests ------------------------------------
    def lock(self) -> bool:
        """Hold `<file>.lock` while this daemon runs (True when held)."""
        if self.path is None or self._lock_fd is not None:
            return self._lock_fd is not None
        try:
            os.makedirs(os.path.dirname(os.path.abspath(self.path)), exist_ok=True)
            fd = os.open(self.path + ".lock", os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o640)
        except OSError:
            return False
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError:
            os.close(fd)
            return False
        self._lock_fd = fd
        return True

    def unlock(self) -> None:
        if self._lock_fd is not None:
            os.close(self._lock_fd)
            self._lock_fd = None

    def requests_dir(self) -> str | None:
        return None if self.path is None else self.path + ".requests"

    def requests(self) -> list[str]:
        """The action ids `fabricmon actions undo` asked for (oldest first)."""
        d = self.requests_dir()
        if d is None:
            return []
        try:
            names = sorted(os.listdir(d))
        except OSError:
            return []
        return [n[5:] for n in names if n.startswith("undo-")]

    def answer(self, action_id: str, ok: bool, text: str) -> None:
        d = self.requests_dir()
        if d is None:
            return
        try:
            write_atomic(os.path.join(d, f"done-{action_id}"), json.dumps({"ok": ok, "text": text}).encode())
            os.unlink(os.path.join(d, f"undo-{action_id}"))
        except OSError as exc:
            log.warning("remediation: undo answer not written", action=action_id, error=str(exc))


def request_undo(path: str, action_id: str) -> str:
    """`fabricmon actions undo`: ask the running daemon; the answer file's path."""
    d = path + ".requests"
    os.makedirs(d, exist_ok=True)
    answer = os.path.join(d, f"done-{action_id}")
    try:
        os.unlink(answer)
    except FileNotFoundError:
        pass
    write_atomic(os.path.join(d, f"undo-{action_id}"), b"{}")
    return answer


def read_answer(path: str) -> tuple[bool, str] | None:
    try:
        with open(path, encoding="utf-8") as fh:
            doc = json.load(fh)
    except (OSError, ValueError):
        return None
    return bool(doc.get("ok")), str(doc.get("text", ""))


def daemon_running(path: str) -> bool:
    """A daemon holds this record's lock."""
    try:
        fd = os.open(path + ".lock", os.O_RDWR | os.O_CLOEXEC)
    except OSError:
        return False
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except OSError:
        return True
    finally:
        os.close(fd)
    return False


def open_first(actions: Iterable[Action]) -> list[Action]:
    return sorted(actions, key=lambda a: (not a.open, -(a.updated or 0.0)))


__all__ = ["Record", "action_from", "daemon_running", "open_first", "read_answer", "record_path", "request_undo"]
