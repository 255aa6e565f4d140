"""The learned receive-power baseline's file, `<paths.state_dir>/optics_baseline.json`, kept where
the learned inventory is kept (pipeline.learned): by the daemon and `fabricmon check` in the state
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

import structlog

from fabricmon.fsutil import write_atomic
from fabricmon.checks.optics import Learn
from fabricmon.model.optics import RxBaseline

FILE_NAME = "optics_baseline.json"
WRITE_EVERY = 300.0
log = structlog.get_logger("fabricmon.optics")


class BaselineStore:
    def __init__(self, path: str | None = None, clock: Callable[[], float] = time.monotonic):
        self.path = path
        self.clock = clock
        self.baseline = RxBaseline()
        self._dirty = False
        self._written = float("-inf")
        self._warned: set[str] = set()
        if path is not None:
            try:
                with open(path, encoding="utf-8") as fh:
                    self.baseline = RxBaseline.from_dict(json.load(fh))
            except FileNotFoundError:
                pass
            except (OSError, ValueError, KeyError, TypeError) as exc:
                self._warn("cannot read the optics baseline; starting a new one", str(exc))

    def _warn(self, what: str, error: str) -> None:
        if what not in self._warned:
            self._warned.add(what)
            log.warning(what, path=self.path, error=error)

    def learn(self, updates: Iterable[Learn], now: float) -> int:
        """Apply the checks' Learn updates; save when due. Returns how many lanes changed."""
        changed = 0
        for u in updates:
            if self.baseline.learn(u.key, u.lane, u.serial, u.rx_dbm, now):
                changed += 1
        if changed:
            self._dirty = True
        self.flush()
        return changed

    def flush(self, force: bool = False) -> None:
        if self.path is None or not self._dirty:
            return
        if not force and self.clock() - self._written < WRITE_EVERY:
            return
        try:
            write_atomic(self.path, (json.dumps(self.baseline.to_dict(), indent=1) + "\n").encode(), 0o644,
                         make_dirs=False)
            self._dirty = False
            self._written = self.clock()
        except OSError as exc:
            self._warn("cannot save the optics baseline; keeping it in memory", exc.strerror or str(exc))


def baseline_path(inventory_path: str | None) -> str | None:
    """Beside the learned inventory's file (None: in memory, as the inventory is)."""
    return None if inventory_path is None else os.path.join(os.path.dirname(inventory_path), FILE_NAME)


__all__ = ["BaselineStore", "FILE_NAME", "baseline_path"]
