"""NCCL Inspector output -> NcclMeasure records (pure).

Formats (NCCL's `plugins/profiler/inspector/`, tests/fixtures/nccl_inspector/PROVENANCE.md):

- Prometheus mode (`NCCL_INSPECTOR_PROM_DUMP=1`): one file per GPU, `nccl_inspector_metrics_<UUID>.prom`,
  lines `nccl_bus_bandwidth_gbs{LABELS} VALUE` and `nccl_collective_exec_time_microseconds{LABELS} VALUE`
  (P2P: `nccl_p2p_bus_bandwidth_gbs`, `nccl_p2p_exec_time_microseconds`). Current labels (`version="v5.1"`):
  version, slurm_job_id, node, gpu, comm_name, n_nodes, nranks, collective | p2p_operation, message_size,
  algo_proto. The first format (2.29.x) had comm_id, hostname, rank, slurm_job, slurm_job_id, nranks,
  n_nodes, gpu_device_id, collective, coll_sn, timestamp, message_size ("2.00GB"): read too.
- JSON mode: one object per collective per communicator (`header`, `metadata`, `coll_perf`), one per
  line as NCCL writes them (indented ones, as its README prints them, are read too); averaged here per
  (communicator, collective, message-size bucket), bucketed as the Prometheus mode buckets.

NCCL truncates and rewrites a Prometheus file in place: a file that does not end in a newline is
half-written and rejected whole (the caller keeps its last good read). Binary or non-text input is a
ParseError; a line that is not an Inspector metric is skipped and counted.
"""

from __future__ import annotations

import json
import math
import re
from collections.abc import Iterator
from dataclasses import dataclass, field, replace

from fabricmon.model.nccl import COLLECTIVE, P2P, NcclMeasure
from fabricmon.parsers.errors import ParseError

FILE_RE = re.compile(r"^nccl_inspector_metrics_([0-9A-Fa-f]{8}-[0-9A-Fa-f]{4}-[0-9A-Fa-f]{4}-[0-9A-Fa-f]{4}-"
                     r"[0-9A-Fa-f]{12})\.prom$")
JSON_FILE_RE = re.compile(r"^.+-pid[0-9]+\.log$")

# metric name -> (kind, field)
METRICS = {
    "nccl_bus_bandwidth_gbs": (COLLECTIVE, "busbw_gbs"),
    "nccl_collective_exec_time_microseconds": (COLLECTIVE, "exec_time_us"),
    "nccl_p2p_bus_bandwidth_gbs": (P2P, "busbw_gbs"),
    "nccl_p2p_exec_time_microseconds": (P2P, "exec_time_us"),
}
# metrics of the Inspector that carry nothing fabricmon reads (skipped without counting them as garbage)
KNOWN_OTHER = frozenset({"nccl_algorithm_bandwidth_gbs"})
UNITS = ("B", "KB", "MB", "GB", "TB")

_LINE = re.compile(r"^([a-zA-Z_:][a-zA-Z0-9_:]*)\{(.*)\}\s+(\S+)(?:\s+-?[0-9]+)?$")
_LABEL_PAIR = re.compile(r'([a-zA-Z_][a-zA-Z0-9_]*)="((?:[^"\\]|\\.)*)"')
_LABELS_ALL = re.compile(r'\s*(?:[a-zA-Z_][a-zA-Z0-9_]*="(?:[^"\\]|\\.)*"\s*(?:,\s*|$))*')
_SIZE_RANGE = re.compile(r"^([0-9]+)-([0-9]+)(B|KB|MB|GB|TB)$")
_SIZE_POINT = re.compile(r"^([0-9]+(?:\.[0-9]+)?)(B|KB|MB|GB|TB)$")
_UNESCAPE = re.compile(r"\\(.)")
_PER_LINE = re.compile(r'(?:^|,)\s*(?:coll_sn|timestamp)="[^"]*"')


class HalfWritten(ParseError):
    """The file is being rewritten (NCCL truncates it and writes it again in place): read it next time."""


@dataclass(slots=True)
class PromRead:
    measures: list[NcclMeasure] = field(default_factory=list)
    skipped: int = 0                        # lines that are no Inspector metric
    first_skipped: str = ""                 # the first of them (cut), for the error message


def file_uuid(name: str) -> str | None:
    """The GPU UUID of an Inspector file name (lower case, no "GPU-"), or None when it is not one."""
    m = FILE_RE.match(name)
    return m.group(1).lower() if m else None


def size_bucket(nbytes: int) -> tuple[str, int]:
    """NCCL's message-size bucket of a size in bytes: (label, lower bound in bytes), e.g. 4.5 GiB ->
    ("4-5GB", 4 GiB): the size in the largest 1024-based unit it reaches (up to TB), floored."""
    if nbytes <= 0:
        return "0B", 0
    unit, value = 0, float(nbytes)
    while value >= 1024.0 and unit < len(UNITS) - 1:
        value /= 1024.0
        unit += 1
    lower = max(1, math.floor(value))
    return f"{lower}-{lower + 1}{UNITS[unit]}", lower * 1024 ** unit


def bucket_bytes(label: str) -> int:
    """The lower bound in bytes of a message_size label ("4-5GB"; the first format's "2.00GB"; "0B")."""
    m = _SIZE_RANGE.match(label)
    if m:
        unit: int = 1024 ** UNITS.index(m.group(3))     # int ** int is typed Any (a negative power is a float)
        return int(m.group(1)) * unit
    m = _SIZE_POINT.match(label)
    if m:
        return int(float(m.group(1)) * 1024 ** UNITS.index(m.group(2)))
    raise ParseError(f"message_size {label[:40]!r} is not a size bucket")


def _check_text(text: str) -> None:
    if "\x00" in text or "\ufffd" in text:
        raise ParseError("binary data (NUL bytes or invalid UTF-8): not an Inspector file")


def _labels(body: str) -> dict[str, str]:
    if _LABELS_ALL.fullmatch(body) is None:
        raise ParseError(f"labels unreadable: {body[:60]!r}")
    return {k: _UNESCAPE.sub(lambda e: "\n" if e.group(1) == "n" else e.group(1), v) if "\\" in v else v
            for k, v in _LABEL_PAIR.findall(body)}


def _int(labels: dict[str, str], *names: str) -> int:
    for n in names:
        if n in labels:
            try:
                return int(labels[n])
            except ValueError:
                raise ParseError(f"label {n}={labels[n][:20]!r} is not an integer") from None
    raise ParseError(f"label {names[0]} missing")


def _value(text: str) -> float | None:
    try:
        v = float(text)
    except ValueError:
        raise ParseError(f"value {text[:30]!r} is not a number") from None
    return v if math.isfinite(v) else None


def _measure(kind: str, labels: dict[str, str]) -> NcclMeasure:
    op_label = "collective" if kind == COLLECTIVE else "p2p_operation"
    size = labels.get("message_size")
    if op_label not in labels or size is None:
        raise ParseError(f"label {op_label if op_label not in labels else 'message_size'} missing")
    return NcclMeasure(
        kind=kind, job=labels.get("slurm_job_id", "unknown"), node=labels.get("node", labels.get("hostname", "")),
        gpu=labels.get("gpu", labels.get("gpu_device_id", "")), comm=labels.get("comm_name", labels.get("comm_id", "")),
        n_nodes=_int(labels, "n_nodes"), nranks=_int(labels, "nranks", "n_ranks"), operation=labels[op_label],
        message_size=size, message_bytes=bucket_bytes(size), algo_proto=labels.get("algo_proto", ""),
        version=labels.get("version", ""))


def parse_prom(text: str) -> PromRead:
    """An Inspector Prometheus file -> one NcclMeasure per label set (bus bandwidth and exec time
    of the same labels joined). Raises ParseError for a half-written file (no final newline), binary
    data, or a file with lines but not one Inspector metric."""
    _check_text(text)
    if text and not text.endswith("\n"):
        raise HalfWritten("half-written (no final newline): NCCL is rewriting it")
    got: dict[tuple[str, str], dict[str, float | None]] = {}
    firsts: dict[tuple[str, str], NcclMeasure] = {}
    parsed: dict[tuple[str, str], tuple[tuple[str, str], NcclMeasure] | ParseError] = {}
    read = PromRead()
    lines = 0
    for n, line in enumerate(text.splitlines(), 1):
        line = line.strip()
        if not line or line.startswith("#"):
            continue
        lines += 1
        m = _LINE.match(line)
        metric = METRICS.get(m.group(1)) if m else None
        if m is None or metric is None:
            if m is None or m.group(1) not in KNOWN_OTHER:
                read.skipped += 1
                read.first_skipped = read.first_skipped or f"line {n}: {line[:80]!r}"
            continue
        kind, fld = metric
        hit = parsed.get((kind, m.group(2)))
        if hit is None:                 # a communicator's two lines share their labels: parsed once
            try:
                measure = _measure(kind, _labels(m.group(2)))
                # the first format labels each line with its coll_sn and timestamp: not part of the key
                hit = parsed[(kind, m.group(2))] = ((kind, _PER_LINE.sub("", m.group(2))), measure)
            except ParseError as exc:
                hit = parsed[(kind, m.group(2))] = exc
        try:
            if isinstance(hit, ParseError):
                raise hit
            value = _value(m.group(3))
        except ParseError as exc:
            read.skipped += 1
            read.first_skipped = read.first_skipped or f"line {n}: {exc}"
            continue
        key, measure = hit
        got.setdefault(key, {})[fld] = value
        firsts.setdefault(key, measure)
    if lines and not firsts:
        raise ParseError(f"no Inspector metric in {lines} line(s) ({read.first_skipped})")
    for key, measure in firsts.items():
        vals = got[key]
        read.measures.append(replace(measure, busbw_gbs=vals.get("busbw_gbs"), exec_time_us=vals.get("exec_time_us")))
    return read


def _objects(text: str) -> Iterator[object]:
    dec = json.JSONDecoder()
    pos, end = 0, len(text)
    while True:
        while pos < end and text[pos] in " \t\r\n":
            pos += 1
        if pos >= end:
            return
        obj, pos = dec.raw_decode(text, pos)
        yield obj


def _num(v: object) -> float | None:
    if isinstance(v, bool) or not isinstance(v, (int, float)):
        return None                                 # NCCL writes a NaN as the string "nan"
    return float(v) if math.isfinite(v) else None


def parse_json_log(text: str, tail: bool = False) -> PromRead:
    """A JSON-mode log -> one NcclMeasure per (communicator, collective, message bucket), bus bandwidth
    and exec time averaged over the objects read. `tail`: the text starts mid-file (a bounded read of
    a large log's end): the part before the first newline is dropped. A last object cut off (NCCL is
    appending) is dropped; anything else that is not JSON is a ParseError."""
    _check_text(text)
    if tail:
        text = text[text.find("\n") + 1:] if "\n" in text else ""
    cut = text.rfind("\n")
    if cut >= 0 and text[cut + 1:].strip():
        text = text[:cut + 1]                      # the object NCCL is writing now
    sums: dict[tuple[str, str, str, str], list[float]] = {}
    firsts: dict[tuple[str, str, str, str], NcclMeasure] = {}
    read = PromRead()
    try:
        objs = list(_objects(text))
    except ValueError as exc:
        raise ParseError(f"not JSON: {exc}") from None
    for obj in objs:
        perf = obj.get("coll_perf") if isinstance(obj, dict) else None
        header = obj.get("header") if isinstance(obj, dict) else None
        meta = obj.get("metadata") if isinstance(obj, dict) else None
        if not isinstance(perf, dict) or not isinstance(header, dict):
            read.skipped += 1
            continue
        size = perf.get("coll_msg_size_bytes")
        if not isinstance(size, int) or not isinstance(perf.get("coll"), str):
            read.skipped += 1
            continue
        label, lower = size_bucket(size)
        comm = str(header.get("comm_name") or header.get("id") or "")
        key = (comm, str(perf["coll"]), label, str(header.get("rank", "")))
        acc = sums.setdefault(key, [0.0, 0.0, 0.0, 0.0])    # busbw sum, busbw n, exec sum, exec n
        bw, ex = _num(perf.get("coll_busbw_gbs")), _num(perf.get("coll_exec_time_us"))
        if bw is not None:
            acc[0] += bw
            acc[1] += 1
        if ex is not None:
            acc[2] += ex
            acc[3] += 1
        if key not in firsts:
            try:
                nnodes, nranks = int(header.get("nnodes", 0)), int(header.get("n_ranks", 0))
            except (TypeError, ValueError):
                read.skipped += 1
                del sums[key]
                continue
            firsts[key] = NcclMeasure(
                kind=COLLECTIVE, job="unknown", node=str((meta or {}).get("hostname", "")), gpu="", comm=comm,
                n_nodes=nnodes, nranks=nranks, operation=str(perf["coll"]), message_size=label, message_bytes=lower,
                version=str((meta or {}).get("inspector_output_format_version", "")))
    if objs and not firsts:
        raise ParseError(f"no Inspector collective in {len(objs)} JSON object(s)")
    for key, m in firsts.items():
        a = sums[key]
        read.measures.append(replace(m, busbw_gbs=a[0] / a[1] if a[1] else None,
                                     exec_time_us=a[2] / a[3] if a[3] else None))
    return read


__all__ = ["FILE_RE", "HalfWritten", "JSON_FILE_RE", "METRICS", "PromRead", "bucket_bytes", "file_uuid", "parse_json_log",
           "parse_prom", "size_bucket"]
