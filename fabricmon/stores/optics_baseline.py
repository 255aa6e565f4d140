"""The learned receive-power baseline's file, `<paths.state_dir>/optics_baseline.json`, kept where
the learned inventory is kept (stores.learned): by the daemon and `fabricmon check` in the state
directory, in memory for a replay.

A baseline only rises (model.optics.RxBaseline), so a write lost to another writer costs at most a
rise, never a false "dimming": the file is written atomically, at most once per WRITE_EVERY
seconds, without a lock. An unreadable or unwritable file keeps the baseline in memory, logged once.
"""

from __future__ import annotations

import json
import os
import time
from collections.abc import Callable, Iterable
from typing import Generic, TypeVar

import structlog

from fabricmon.fsutil import write_atomic
from fabricmon.checks.optics import Learn
from fabricmon.model.optics import RxBaseline

FILE_NAME = "optics_baseline.json"
WRITE_EVERY = 300.0
log = structlog.get_logger("fabricmon.optics")
T = TypeVar("T")


class JsonStateFile(Generic[T]):
    """A learned state kept in one JSON file of the state directory (None: in memory only): read at
    start (a missing file is a new state; an unreadable one is logged once and started anew), written
    atomically when changed, at most once per WRITE_EVERY seconds, without a lock. An unwritable file
    keeps the state in memory, logged once. `what` names the state in the logs."""

    def __init__(self, path: str | None, empty: Callable[[], T], load: Callable[[object], T], what: str,
                 clock: Callable[[], float] = time.monotonic):
        self.path = path
        self.clock = clock
        self.what = what
        self.state: T = empty()
        self._dirty = False
        self._written = float("-inf")
        self._warned: set[str] = set()
        if path is not None:
            try:
                with open(path, encoding="utf-8") as fh:
                    self.state = load(json.load(fh))
            except FileNotFoundError:
                pass
            except (OSError, ValueError, KeyError, TypeError) as exc:
                self._warn(f"cannot read the {what}; starting a new one", str(exc))

    def _warn(self, what: str, error: str) -> None:
        if what not in self._warned:
            self._warned.add(what)
            log.warning(what, path=self.path, error=error)

    def changed(self) -> None:
        """The state changed in place: write it with the next flush that is due."""
        self._dirty = True

    def flush(self, force: bool = False) -> None:
        if self.path is None or not self._dirty:
            return
        if not force and self.clock() - self._written < WRITE_EVERY:
            return
        try:
            write_atomic(self.path, (json.dumps(self.to_dict(), indent=1) + "\n").encode(), 0o644, make_dirs=False)
            self._dirty = False
            self._written = self.clock()
        except OSError as exc:
            self._warn(f"cannot save the {self.what}; keeping it in memory", exc.strerror or str(exc))

    def to_dict(self) -> object:
        raise NotImplementedError


class BaselineStore(JsonStateFile[RxBaseline]):
    def __init__(self, path: str | None = None, clock: Callable[[], float] = time.monotonic):
        super().__init__(path, RxBaseline, RxBaseline.from_dict, "optics baseline", clock)

    @property
    def baseline(self) -> RxBaseline:
        return self.state

    def to_dict(self) -> object:
        return self.state.to_dict()

    def learn(self, updates: Iterable[Learn], now: float) -> int:
        """Apply the checks' Learn updates; save when due. Returns how many lanes changed."""
        changed = 0
        for u in updates:
            if self.state.learn(u.key, u.lane, u.serial, u.rx_dbm, now):
                changed += 1
        if changed:
            self._dirty = True
        self.flush()
        return changed


def forget_port(store: BaselineStore, port_prefix: str) -> int:
    """A port's module changed: its lanes' baseline is learned again (saved with the next write)."""
    n = store.state.forget(port_prefix)
    if n:
        store.changed()
    return n


def baseline_path(inventory_path: str | None) -> str | None:
    """Beside the learned inventory's file (None: in memory, as the inventory is)."""
    return None if inventory_path is None else os.path.join(os.path.dirname(inventory_path), FILE_NAME)


__all__ = ["BaselineStore", "FILE_NAME", "JsonStateFile", "baseline_path", "forget_port"]
