"""nccl_inspector source: NCCL's own measurements of the jobs on this node, read from the files its
Inspector profiler plugin writes into `NCCL_INSPECTOR_DUMP_DIR` (docs/nccl.md): one
`nccl_inspector_metrics_<GPU UUID>.prom` per GPU in Prometheus mode (rewritten in place every 30 s or
more), and `<host>-pid<pid>.log` JSON logs (appended for a process's life) where that mode is used.

- Each file is read through the host interface, at most `max_bytes` (a JSON log: its last `max_bytes`;
  a Prometheus file larger than that is a source error, not read).
- NCCL writes a dump one communicator at a time, in place: a file modified less than a second ago is
  read again once it has settled (the poll waits up to a second). A file still being rewritten
  (half-written, just truncated, changed during the read, still fresh) keeps its last good read; the
  next poll reads it again. Garbage or binary data is a `parse` source error naming
  the file, and only that file's measures are dropped.
- A file not rewritten for `expire` seconds belongs to an ended job: it is forgotten (not read).
"""

from __future__ import annotations

import errno
import os
import time
from dataclasses import dataclass
from typing import TYPE_CHECKING

import structlog

from fabricmon.host.io import HostFileRead, HostIO
from fabricmon.model.nccl import NcclData, NcclFile
from fabricmon.parsers.errors import ParseError
from fabricmon.parsers.nccl_inspector import JSON_FILE_RE, HalfWritten, file_uuid, parse_json_log, parse_prom
from fabricmon.pipeline.source import Inputs, Source, SourceOutput, register
from fabricmon.schema import Schema, boolean, from_class, integer, number, string

if TYPE_CHECKING:
    from fabricmon.registry import SourceConfig

log = structlog.get_logger("fabricmon.nccl_inspector")


@dataclass(frozen=True, slots=True)
class NcclInspectorOptions:
    dir: str = "/var/lib/node_exporter/nccl_inspector"
    max_bytes: int = 8 << 20
    expire: float = 300.0
    max_files: int = 1024
    json: bool = True


OPTIONS: Schema[NcclInspectorOptions] = Schema((
    string("dir", "/var/lib/node_exporter/nccl_inspector", "the directory the jobs' NCCL_INSPECTOR_DUMP_DIR names "
           "(read: nccl_inspector_metrics_<UUID>.prom, and <host>-pid<pid>.log with `json`)"),
    integer("max_bytes", 8 << 20, "bytes read per file at most (a JSON log: its end; a larger Prometheus file is "
            "a source error)", lo=4096, hi=1 << 30),
    number("expire", 300.0, "seconds after its last rewrite that a file counts as an ended job's and is no longer "
           "read (NCCL rewrites a live one every dump interval, 30 s at least)", lo=60.0),
    integer("max_files", 1024, "files read per poll at most (in name order; a "
            "source error says how many were left out)", lo=1, hi=100_000),
    boolean("json", True, "also read the Inspector's JSON-mode logs (no GPU UUID in them: not joined to a NIC)"),
), build=from_class(NcclInspectorOptions))


@register("nccl_inspector", enabled=False, interval=30.0, timeout=10.0, records=NcclData, options=OPTIONS)
class NcclInspectorSource(Source):
    SETTLE = 1.0        # seconds: a Prometheus file modified more recently keeps its last good read

    def __init__(self, sc: SourceConfig):
        super().__init__(sc)
        self.opts: NcclInspectorOptions = self.sc.settings(NcclInspectorOptions)
        self.data = NcclData(directory=self.opts.dir)
        self._unavailable = False
        self._expired_seen: set[str] = set()     # files counted as expired (counted once each)

    def collect(self, io: HostIO, inputs: Inputs) -> SourceOutput:
        out = SourceOutput()
        d = self.opts.dir
        try:
            names = io.list_host_dir(d)
        except OSError as exc:
            kind = "not_found" if exc.errno == errno.ENOENT else "read"
            out.error(kind, f"nccl_inspector dir {d}: {exc.strerror or exc}")
            self.data.files.clear()
            out.data = self._copy()
            return out
        wanted = [(n, file_uuid(n)) for n in names]
        wanted = [(n, u) for n, u in wanted if u is not None or (self.opts.json and JSON_FILE_RE.match(n))]
        if len(wanted) > self.opts.max_files:
            out.error("read", f"nccl_inspector dir {d}: {len(wanted)} Inspector files, only "
                              f"{self.opts.max_files} read (sources.nccl_inspector.max_files)")
            wanted = wanted[:self.opts.max_files]
        now = time.time()
        seen: set[str] = set()
        self.data.skipped_lines = 0
        for name, uuid in wanted:
            path = os.path.join(d, name)
            seen.add(path)
            if not self._read(io, path, uuid, now, out, inputs):
                break
        for path in [p for p in self.data.files if p not in seen]:
            del self.data.files[path]            # removed by the operator (or by a cleanup of ended jobs)
        self._expired_seen &= seen
        out.data = self._copy()
        return out

    def _copy(self) -> NcclData:
        return NcclData(self.data.directory, dict(self.data.files), self.data.expired, self.data.skipped_lines)

    def _fetch(self, io: HostIO, path: str, is_json: bool, now: float, inputs: Inputs) -> HostFileRead:
        """The file's bytes. NCCL writes a Prometheus dump one communicator at a time, in place: a file
        modified less than SETTLE seconds ago may hold only its first communicators (in whole lines),
        so it is read again once it has settled (waiting at most what the source's timeout leaves)."""
        got = io.read_host_file_bounded(path, self.opts.max_bytes, tail=is_json, min_mtime=now - self.opts.expire)
        for _ in range(3):                          # a file rewritten without pause is not waited on forever
            age = time.time() - got.mtime
            if is_json or not got.data or not 0 <= age < self.SETTLE:
                break
            wait = min(self.SETTLE - age, inputs.remaining(self.sc.timeout) - 1.0)
            if wait <= 0:
                break
            time.sleep(wait)
            got = io.read_host_file_bounded(path, self.opts.max_bytes, tail=False, min_mtime=now - self.opts.expire)
        return got

    def _read(self, io: HostIO, path: str, uuid: str | None, now: float, out: SourceOutput, inputs: Inputs) -> bool:
        """Read one file into self.data.files; False where the host cannot read such files at all."""
        is_json = uuid is None
        try:
            got = self._fetch(io, path, is_json, now, inputs)
        except OSError as exc:
            if exc.errno == errno.EOPNOTSUPP:        # a replayed bundle: no Inspector files in it
                if not self._unavailable:
                    self._unavailable = True
                    log.info("NCCL Inspector files not available here", error=exc.strerror or str(exc))
                return False
            if exc.errno != errno.ENOENT:            # ENOENT: removed since the listing
                out.error("read", f"{path}: {exc.strerror or exc}")
            self.data.files.pop(path, None)
            return True
        prev = self.data.files.get(path)
        if got.mtime < now - self.opts.expire:
            if prev is not None:
                del self.data.files[path]
            if prev is not None or path not in self._expired_seen:
                self.data.expired += 1
                self._expired_seen.add(path)
            return True
        self._expired_seen.discard(path)
        entry = NcclFile(path, uuid or "", got.mtime, got.size, read_at=now)
        if not is_json and got.size > self.opts.max_bytes:
            entry.error = f"{got.size} bytes, more than max_bytes {self.opts.max_bytes}: not read"
            out.error("read", f"{path}: {entry.error}")
            self.data.files[path] = entry
            return True
        if got.changed or (not is_json and not got.data):
            self._keep(path, prev, entry, "being rewritten (changed while read, or just truncated)")
            return True
        if not is_json and prev is not None and prev.measures and time.time() - got.mtime < self.SETTLE:
            # still being written after the wait (or no time left to wait): the last good read stays
            self._keep(path, prev, entry, "written less than a second ago (NCCL may be writing it)")
            return True
        text = got.data.decode("utf-8", "replace")
        try:
            read = parse_json_log(text, tail=got.size > len(got.data)) if is_json else parse_prom(text)
        except HalfWritten as exc:
            self._keep(path, prev, entry, str(exc))
            return True
        except ParseError as exc:
            entry.error = str(exc)
            out.error("parse", f"{path}: {exc}")
            self.data.files[path] = entry
            return True
        entry.measures = read.measures
        if read.skipped:
            self.data.skipped_lines += read.skipped
            out.error("parse", f"{path}: {read.skipped} line(s) not Inspector metrics, skipped ({read.first_skipped})")
        self.data.files[path] = entry
        return True

    def _keep(self, path: str, prev: NcclFile | None, entry: NcclFile, why: str) -> None:
        """A file NCCL is rewriting now: its last good read stays (read again next poll)."""
        if prev is not None:
            entry.measures, entry.read_at = prev.measures, prev.read_at
        entry.error = why
        self.data.files[path] = entry


__all__ = ["NcclInspectorOptions", "NcclInspectorSource", "OPTIONS"]
