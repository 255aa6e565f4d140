"""hw_counters source: mlx5's /sys/class/infiniband/<dev>/ports/<n>/hw_counters/* of every port
the inventory lists (RoCE congestion and loss signals: np_cnp_sent, rp_cnp_ignored,
out_of_sequence, local_ack_timeout_err, ...; QP diagnostics on InfiniBand ports).

A source of its own, on its own interval (default 30 s): the RoCE checks read these counters
over windows of 5 minutes to an hour, and node_exporter-class port state and counters (the
sysfs source) stay cheap at a short interval. Each port's file list is kept for STATIC_TTL and
its files are read in one HostIO.read_many call. A port without hw_counters/ (other drivers,
the simulator) has none, which is not an error; `lifespan` is a setting and skipped.
"""

from __future__ import annotations

import errno
import time
from typing import TYPE_CHECKING, cast

from fabricmon.host.io import HostIO
from fabricmon.parsers.sysfs_ib import HwCountersData
from fabricmon.pipeline.source import INVENTORY, Inputs, Source, SourceOutput, register
from fabricmon.sources.sysfs_ib import BASE, STATIC_TTL, SysfsSource

if TYPE_CHECKING:
    from fabricmon.registry import SourceConfig

# hw_counters entries that are settings, not counters.
HW_NOT_COUNTERS = frozenset({"lifespan"})


@register("hw_counters", enabled=True, interval=30.0, timeout=5.0, needs=(INVENTORY,), records=HwCountersData)
class HwCountersSource(Source):
    def __init__(self, sc: SourceConfig):
        super().__init__(sc)
        self._files: dict[tuple[str, int], tuple[list[tuple[str, str]], float]] = {}   # port -> (files, read at)

    def _list(self, io: HostIO, dev: str, port: int, out: SourceOutput, now: float) -> list[tuple[str, str]]:
        key = (dev, port)
        hit = self._files.get(key)
        if hit is not None and now - hit[1] < STATIC_TTL:
            return hit[0]
        rel = f"{BASE}/{dev}/ports/{port}/hw_counters"
        try:
            names = io.listdir("sysfs", rel)
        except OSError as exc:
            if exc.errno not in (errno.ENOENT, errno.ENOTDIR):
                out.error("read", f"/sys/{rel}: {exc.strerror or exc}")
            names = []
        files = [(f"{rel}/{n}", n) for n in names if n not in HW_NOT_COUNTERS]
        self._files[key] = (files, now)
        return files

    def collect(self, io: HostIO, inputs: Inputs) -> SourceOutput:
        out = SourceOutput()
        data = HwCountersData()
        now = time.monotonic()
        # a restricted function's counters are never read, hw_counters included (docs/kernel-log.md)
        ports = sorted(k for k in inputs.inventory.ports if not inputs.inventory.counters_restricted(k[0]))
        for dev, port in ports:
            files = self._list(io, dev, port, out, now)
            if not files:
                continue
            answers = io.read_many("sysfs", [r for r, _ in files])
            try:        # the common case: every file a decimal integer and a newline
                values = dict(zip([n for _, n in files], map(int, cast("list[str]", answers))))   # OSError: TypeError
            except (ValueError, TypeError):     # one that is not, or could not be read: file by file
                values = {}
                for (rel, name), answer in zip(files, answers):
                    SysfsSource._counter(rel, name, answer, values, out)
            data.ports[(dev, port)] = values
        for gone in set(self._files) - set(ports):
            del self._files[gone]
        out.data = data
        return out
