"""nccl_ras source (opt-in): the dead and unresponsive peers of the NCCL jobs on this node, from RAS's
client port (docs/nccl.md#ras), one JSON `STATUS` at a time (HostIO.ras_status; never `VERBOSE`).

Querying RAS has crashed jobs in several NCCL releases (issues #1669, #1718, #1762, #1996, #2346), so:
- off by default, and at most one query every MIN_INTERVAL (30) seconds whatever `interval` says;
- only NCCL versions with valid JSON are read: an NCCL that does not accept `SET FORMAT json` (before
  2.28.7) gets no `STATUS` at all, and an answer from 2.28.7-2.29.6 (invalid JSON for missing ranks)
  stops the queries for `recheck` seconds (parsers.nccl_ras.refusal says why:
  fabricmon_nccl_ras_refused).
- nothing listening (no NCCL job with RAS here) is no error: no job, no peers.
"""

from __future__ import annotations

import errno
import time
from dataclasses import dataclass
from typing import TYPE_CHECKING

from fabricmon.host.io import HostIO
from fabricmon.model.nccl import RasData
from fabricmon.parsers.errors import ParseError
from fabricmon.parsers.nccl_ras import parse_ras_status, refusal, version_of
from fabricmon.pipeline.source import Inputs, Source, SourceOutput, register
from fabricmon.schema import Schema, from_class, integer, number, string

if TYPE_CHECKING:
    from fabricmon.config import Config, SourceConfig

MIN_INTERVAL = 30.0


@dataclass(frozen=True, slots=True)
class NcclRasOptions:
    address: str = "localhost"
    port: int = 28028
    max_bytes: int = 4 << 20
    recheck: float = 3600.0


OPTIONS: Schema[NcclRasOptions] = Schema((
    string("address", "localhost", "where the jobs' RAS client port listens (NCCL_RAS_ADDR's host)"),
    integer("port", 28028, "RAS's client port (NCCL_RAS_ADDR's port)", lo=1, hi=65535),
    integer("max_bytes", 4 << 20, "bytes of a STATUS answer read at most", lo=4096, hi=1 << 28),
    number("recheck", 3600.0, "seconds before an NCCL version that is not read (docs/nccl.md#ras) is asked again",
           lo=60.0),
), build=from_class(NcclRasOptions))


@register("nccl_ras", enabled=False, interval=60.0, timeout=10.0, records=RasData, options=OPTIONS)
class NcclRasSource(Source):
    def __init__(self, config: Config, sc: SourceConfig | None = None):
        super().__init__(config, sc)
        self.opts: NcclRasOptions = self.sc.settings(NcclRasOptions)
        self.data = RasData()
        self._last = float("-inf")          # time.monotonic() of the last query
        self._refused_until = float("-inf")

    def collect(self, io: HostIO, inputs: Inputs) -> SourceOutput:
        out = SourceOutput()
        now = time.monotonic()
        if now - self._last < MIN_INTERVAL or now < self._refused_until:
            out.data = self._copy()
            return out
        self._last = now
        where = f"{self.opts.address}:{self.opts.port}"
        try:
            ex = io.ras_status(self.opts.address, self.opts.port, inputs.remaining(self.sc.timeout),
                               self.opts.max_bytes)
        except OSError as exc:
            if exc.errno in (errno.ECONNREFUSED, errno.EOPNOTSUPP):
                self.data = RasData()               # no NCCL job with RAS here: no peers to judge
            else:
                out.error("timeout" if isinstance(exc, TimeoutError) else "read", f"nccl_ras {where}: {exc}")
            out.data = self._copy()
            return out
        self.data = RasData(queried_at=time.time(), local_host=io.hostname().split(".")[0])
        if not ex.json:
            self.data.refused = (f"RAS at {where} did not accept SET FORMAT json ({ex.answer[:80]!r}): NCCL before "
                                 "2.28.7, not queried")
        else:
            v = version_of(ex.text)
            self.data.refused = refusal(v)
            self.data.version = ".".join(map(str, v)) if v else ""
        if self.data.refused:                   # not an error: exported (fabricmon_nccl_ras_refused), logged once
            self._refused_until = now + self.opts.recheck
        elif ex.cut:
            out.error("read", f"nccl_ras {where}: answer longer than max_bytes ({self.opts.max_bytes}), not read")
        else:
            try:
                self.data.version, self.data.comms = parse_ras_status(ex.text)
            except ParseError as exc:
                out.error("parse", f"nccl_ras {where}: {exc}")
        out.data = self._copy()
        return out

    def _copy(self) -> RasData:
        return RasData(self.data.version, list(self.data.comms), self.data.refused, self.data.queried_at,
                       self.data.local_host)


__all__ = ["MIN_INTERVAL", "NcclRasOptions", "NcclRasSource", "OPTIONS"]
