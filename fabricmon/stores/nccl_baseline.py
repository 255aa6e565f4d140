"""The jobs' learned NCCL bus bandwidth (model.nccl.NcclBaselines), `<paths.state_dir>/nccl_baseline.json`
beside the learned inventory (in memory where that is): a daemon restarted mid-job keeps judging the
job against the baseline of its first minutes, not against the slow bandwidth it may have now.
Written as the optics baseline is (stores.optics_baseline.JsonStateFile: atomic, at most every
WRITE_EVERY seconds; an unreadable or unwritable file keeps the baselines in memory, logged once).
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable, Iterable

from fabricmon.checks.nccl import NcclSlowConfig
from fabricmon.model.nccl import NcclBaselines, NcclPath
from fabricmon.stores.optics_baseline import JsonStateFile

FILE_NAME = "nccl_baseline.json"


class NcclBaselineStore(JsonStateFile[NcclBaselines]):
    def __init__(self, path: str | None = None, clock: Callable[[], float] = time.monotonic):
        super().__init__(path, NcclBaselines, NcclBaselines.from_dict, "NCCL baseline", clock)

    def to_dict(self) -> object:
        return self.state.to_dict()

    def learn(self, paths: Iterable[NcclPath], now: float, cfg: NcclSlowConfig) -> None:
        """Take the new dumps; save when due, and at once when a baseline was just learned (a restart
        right after must not learn it again from a job that may be slow by then)."""
        before = len(self.state.learned())
        if self.state.learn(paths, now, cfg.learn_seconds, cfg.min_samples, cfg.forget_after):
            self._dirty = True
            self.flush(force=len(self.state.learned()) > before)


def nccl_baseline_path(inventory_path: str | None) -> str | None:
    """Beside the learned inventory's file (None: in memory, as the inventory is)."""
    return None if inventory_path is None else os.path.join(os.path.dirname(inventory_path), FILE_NAME)


__all__ = ["FILE_NAME", "NcclBaselineStore", "nccl_baseline_path"]
