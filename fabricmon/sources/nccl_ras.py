"""nccl_ras source (opt-in): the dead and unresponsive peers of the NCCL jobs on this node, and their
ranks stopped at different operation counts, from RAS's client port (docs/nccl.md#ras), one `STATUS`
at a time (HostIO.ras_status; never `VERBOSE`), read in JSON where NCCL writes it validly (2.29.7+)
and in text otherwise (parsers.nccl_ras, parsers.nccl_ras_text: the same records either way).

Querying RAS has crashed jobs in several NCCL releases (issues #1669, #1718, #1762, #1996, #2346), so:
- off by default, and at most one query every MIN_INTERVAL (30) seconds whatever `interval` says;
- each conversation asks for JSON first; an NCCL without it (before 2.28.7) answers in text, and one
  whose JSON is invalid for missing ranks (2.28.7-2.29.6) is asked in text for `recheck` seconds;
- versions before `text_since` (2.27.3: before it a query during communicator initialisation crashed
  NCCL, #1669) are not read: the version is only known from an answer, so one `STATUS` is sent, and
  then none for `recheck` seconds (parsers.nccl_ras.refusal says why: fabricmon_nccl_ras_refused);
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
from fabricmon.parsers.nccl_ras import (QUERY_SAFE_SINCE, RAS_SINCE, Version, json_is_valid, parse_ras_status,
                                        parse_version, refusal, show, version_of)
from fabricmon.parsers.nccl_ras_text import parse_ras_text
from fabricmon.pipeline.source import Inputs, Source, SourceOutput, register
from fabricmon.schema import ConfigError, Context, Schema, from_class, integer, number, string

if TYPE_CHECKING:
    from fabricmon.registry import SourceConfig

MIN_INTERVAL = 30.0


def _version(value: str, key: str, ctx: Context) -> str:
    v = parse_version(value)
    if v is None:
        raise ConfigError(key, f"{value!r} is not an NCCL version (three numbers: 2.27.3)")
    if v < RAS_SINCE:
        raise ConfigError(key, f"NCCL {value} has no RAS (it came with {show(RAS_SINCE)})")
    return value


@dataclass(frozen=True, slots=True)
class NcclRasOptions:
    address: str = "localhost"
    port: int = 28028
    max_bytes: int = 4 << 20
    recheck: float = 3600.0
    text_since: str = show(QUERY_SAFE_SINCE)


OPTIONS: Schema[NcclRasOptions] = Schema((
    string("address", "localhost", "where the jobs' RAS client port listens (NCCL_RAS_ADDR's host)"),
    integer("port", 28028, "RAS's client port (NCCL_RAS_ADDR's port)", lo=1, hi=65535),
    integer("max_bytes", 4 << 20, "bytes of a STATUS answer read at most", lo=4096, hi=1 << 28),
    number("recheck", 3600.0, "seconds before an NCCL version that is not read (docs/nccl.md#ras) is asked again; "
           "an NCCL whose JSON is invalid (2.28.7-2.29.6) is asked in text for as long", lo=60.0),
    string("text_since", show(QUERY_SAFE_SINCE), "the oldest NCCL whose RAS is read (2.24.0 at the earliest; "
           "before 2.27.3 a query during communicator initialisation could crash the job, NCCL #1669)",
           check=_version, kind="version"),
), build=from_class(NcclRasOptions))


@register("nccl_ras", enabled=False, interval=60.0, timeout=10.0, records=RasData, options=OPTIONS)
class NcclRasSource(Source):
    def __init__(self, sc: SourceConfig):
        super().__init__(sc)
        self.opts: NcclRasOptions = self.sc.settings(NcclRasOptions)
        self.text_since: Version = parse_version(self.opts.text_since) or QUERY_SAFE_SINCE
        self.data: RasData | None = None
        self._last = float("-inf")          # time.monotonic() of the last query
        self._refused_until = float("-inf")
        self._text_until = float("-inf")    # ask in text until then (this NCCL's JSON is invalid)

    def collect(self, io: HostIO, inputs: Inputs) -> SourceOutput:
        """One STATUS at most every MIN_INTERVAL; between them the last answer read. A query that read
        nothing (a timeout, an answer cut or not parsed) returns no records: the last ones ride it out
        while fresh (pipeline.scheduler), and the polls until the next query return none either."""
        out = SourceOutput()
        now = time.monotonic()
        if now - self._last < MIN_INTERVAL or now < self._refused_until:
            out.data = self._copy()
            return out
        self._last = now
        self.data = None
        where = f"{self.opts.address}:{self.opts.port}"
        try:
            ex = io.ras_status(self.opts.address, self.opts.port, inputs.remaining(self.sc.timeout),
                               self.opts.max_bytes, "text" if now < self._text_until else "json")
        except OSError as exc:
            if exc.errno in (errno.ECONNREFUSED, errno.EOPNOTSUPP):
                self.data = RasData()               # no NCCL job with RAS here: no peers to judge
            else:
                out.error("timeout" if isinstance(exc, TimeoutError) else "read", f"nccl_ras {where}: {exc}")
            out.data = self._copy()
            return out
        if not ex.server_protocol:
            out.error("parse", f"nccl_ras {where}: not an NCCL RAS port (it greeted {ex.answer[:80]!r})")
            return out
        v = version_of(ex.text)
        data = RasData(show(v) if v else "", refused=refusal(v, self.text_since), format="json" if ex.json else "text",
                       queried_at=time.time(), local_host=io.hostname().split(".")[0])
        if data.refused:                        # not an error: exported (fabricmon_nccl_ras_refused), logged once
            self._refused_until = now + self.opts.recheck
        elif ex.cut:
            out.error("read", f"nccl_ras {where}: answer longer than max_bytes ({self.opts.max_bytes}), not read")
            return out
        else:
            self._text_until = float("-inf") if json_is_valid(v) else now + self.opts.recheck
            try:
                data.version, data.comms = (parse_ras_status if ex.json else parse_ras_text)(ex.text)
            except ParseError as exc:
                why = ("" if not ex.json or json_is_valid(v) else
                       f" (NCCL {data.version} writes invalid JSON for missing ranks, fixed in 2.29.7: its text "
                       "report is read from the next query)")
                out.error("parse", f"nccl_ras {where}: {exc}{why}")
                return out
        self.data = data
        out.data = self._copy()
        return out

    def _copy(self) -> RasData | None:
        d = self.data
        return None if d is None else RasData(d.version, list(d.comms), d.refused, d.format, d.queried_at,
                                              d.local_host)


__all__ = ["MIN_INTERVAL", "NcclRasOptions", "NcclRasSource", "OPTIONS"]
