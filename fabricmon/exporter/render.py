"""Render a Snapshot as the Prometheus text exposition (format 0.0.4), from the catalogue.

The text is rendered once per snapshot and cached by the server, so a scrape only copies
bytes. Rendering keeps each series' `name{labels}` prefix between snapshots (a port's label
strings are built once), so a render costs one dictionary lookup and one number format per
sample. `render_reference` produces the same text through prometheus_client's generate_latest;
a test compares the two byte for byte.
"""

from __future__ import annotations

import re
import threading
from collections.abc import Iterator

from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, HistogramMetricFamily
from prometheus_client.exposition import generate_latest
from prometheus_client.metrics_core import Metric as Metric_
from prometheus_client.registry import CollectorRegistry
from prometheus_client.utils import floatToGoString

from fabricmon.model import gc_pause
from fabricmon.exporter.catalogue import CATALOGUE, SW_PORT, Metric, PortTable
from fabricmon.exporter.counter_sets import DEFAULT_SETS
from fabricmon.model.snapshot import Snapshot

_NEEDS_ESCAPE = re.compile(r'[\\"\n]')
_TYPE_NAMES = {"counter": "counter", "gauge": "gauge", "histogram": "histogram"}


def _label_value(v: str) -> str:
    if _NEEDS_ESCAPE.search(v):
        return v.replace("\\", "\\\\").replace("\n", "\\n").replace('"', '\\"')
    return v


def _value(v: float) -> str:
    if -1e6 < v < 1e6 and v == int(v):     # the common case: small integral values
        return f"{float(v)!r}"
    return str(floatToGoString(v))          # exponents, +Inf, NaN exactly as Prometheus writes them


def _header(m: Metric) -> str:
    name = m.exposed_name
    doc = m.help.replace("\\", "\\\\").replace("\n", "\\n")
    return f"# HELP {name} {doc}\n# TYPE {name} {_TYPE_NAMES[m.type]}\n"


_SMALL: dict[float, str] = {0: "0.0", 1: "1.0"}       # the values most series have (quiet counters, state gauges)


class Renderer:
    """Renders snapshots. It keeps each label set's text (`{port="3",switch_guid="..."}`) between
    renders, shared by every family with the same label names (a switch port's labels are built once
    for its twenty families), so a series costs one lookup, one number format and one concatenation,
    and the cache costs one string per label set rather than one line per series. Bounded: when it
    holds more than twice the label sets of the largest render (label churn) and more than
    MAX_LABEL_SETS, it starts over."""

    MAX_LABEL_SETS = 200_000
    # A family whose samples equal its last render's is not formatted again: its bytes are reused
    # (on a node most families, the ports' states, rates, error counters and checks, stay the same
    # from one poll to the next). Kept for families of at most this many samples, and at most
    # MAX_KEPT_BYTES in all, so that a fabric's large per-port families (whose counters move) are
    # not held twice.
    MAX_KEPT_SAMPLES = 4096
    MAX_KEPT_BYTES = 8 << 20
    # A switch port family (one sample per port) is kept too, within its own bound: on a quiet fabric most of
    # them (the error counters, the link rates) do not move between sweeps, so a render compares each one's
    # values with its last render's and formats only the families that moved (issue 40: the render's CPU).
    # What it costs: the text of the kept families (about 90 bytes a port and family) and their values; a family
    # whose values moved at its last render (data counters on a busy fabric) keeps only its values.
    MAX_KEPT_PORT_BYTES = 64 << 20

    def __init__(self) -> None:
        # label names -> label values -> '{k="v",...}' (sorted by name, as prometheus_client writes them)
        self._labels: dict[tuple[str, ...], dict[tuple[str, ...], str]] = {}
        self._headers = {m.name: _header(m) for m in CATALOGUE}
        self._largest = 0           # label sets of the largest render so far
        # family name -> (its samples, their text) as last rendered, within the bounds above
        self._kept: dict[str, tuple[list[tuple[tuple[str, ...], float | None]], bytes]] = {}
        self._kept_bytes = 0
        # switch port family name -> (its value per port, the port labels they belong to, its text (None while it
        # moves), its lines while it moves (None while it stays), the text's size)
        self._kept_ports: dict[str, tuple[list[float | None], list[str], bytes | None, list[str | None] | None, int]] = {}
        self._kept_port_bytes = 0
        # family name -> (its samples, their text) for the fabric's large per-port families without a port column
        self._kept_large: dict[str, tuple[list[tuple[tuple[str, ...], float | None]], bytes]] = {}
        self._port_labels: list[str] = []       # the last render's port label texts, in order (shared by its families)
        self._lock = threading.Lock()

    @staticmethod
    def _label_text(keys: tuple[str, ...], values: tuple[str, ...]) -> str:
        if not keys:
            return ""
        pairs = sorted(zip(keys, values))
        return "{" + ",".join(f'{k}="{_label_value(v)}"' for k, v in pairs) + "}"

    def render(self, snap: Snapshot, sets: frozenset[str] = DEFAULT_SETS) -> bytes:
        """The exposition of the families in `sets` (fabricmon/exporter/counter_sets.py)."""
        with self._lock, gc_pause.paused():     # a fabric's render makes a line per series
            held = sum(len(c) for c in self._labels.values())
            if held > max(self.MAX_LABEL_SETS, 2 * self._largest):
                self._labels.clear()
            out: list[bytes] = []
            used: set[int] = set()
            label_sets = 0
            small, fmt, text, kept_get, kept_large = _SMALL, _value, self._label_text, self._kept.get, self._kept_large.get
            fab = snap.fabric
            table: PortTable | None = None          # the section's switch ports, made at the first port family
            port_labels: list[str] = []             # ... and their label texts, in the same order
            for m in CATALOGUE:
                if m.counter_set not in sets and not (m.also and not sets.isdisjoint(m.also)):
                    continue
                lines: list[str] = []
                append = lines.append
                if m.buckets is not None:
                    for suffix, lv, n in m.buckets(snap):
                        append(m.name + suffix + text(("le",) if lv else (), lv) + " " + fmt(n) + "\n")
                elif m.port_column is not None:
                    # a switch port family: the ports walked once per render for all of them (their label texts
                    # looked up once), each family a column of values compared with its last render's
                    if fab is None:
                        continue
                    keys = m.labels
                    cache = self._labels.get(keys)
                    if cache is None:
                        cache = self._labels[keys] = {}
                    if id(cache) not in used:
                        used.add(id(cache))
                        label_sets += len(cache)
                    if table is None:
                        table = PortTable(fab)
                        get = cache.get
                        port_labels = []
                        for p in table.ports:
                            lv = (p.guid, p.label)
                            lab = get(lv)
                            if lab is None:
                                lab = cache[lv] = text(keys, lv)
                                label_sets += 1
                            port_labels.append(lab + " ")
                        if port_labels == self._port_labels:
                            port_labels = self._port_labels     # the same ports: one list for every kept family
                        self._port_labels = port_labels
                    body = self._port_family(m, m.port_column(table), port_labels)
                    if body:
                        out.append(body)
                    continue
                else:
                    samples = list(m.samples(snap))
                    kept = kept_get(m.name) or kept_large(m.name)
                    if kept is not None and kept[0] == samples:
                        if kept[1]:
                            out.append(kept[1])     # unchanged since the last render: the same text
                        continue
                    keys = m.labels
                    cache = self._labels.get(keys)
                    if cache is None:
                        cache = self._labels[keys] = {}
                    if id(cache) not in used:       # the label sets in use (a kept family's are not counted)
                        used.add(id(cache))
                        label_sets += len(cache)
                    get = cache.get
                    name = m.exposed_name
                    for lv, value in samples:
                        if value is None:
                            continue        # absent: no sample
                        lab = get(lv)
                        if lab is None:
                            lab = cache[lv] = text(keys, lv)
                            label_sets += 1
                        v = small.get(value)
                        append(name + lab + " " + (v if v is not None else fmt(value)) + "\n")
                    body = (self._headers[m.name] + "".join(lines)).encode() if lines else b""
                    self._keep(m.name, samples, body, m.labels[:2] == SW_PORT)
                    if body:
                        out.append(body)
                    continue
                if lines:
                    out.append((self._headers[m.name] + "".join(lines)).encode())
            self._largest = max(self._largest, label_sets)
            return b"".join(out)

    def _port_family(self, m: Metric, column: list[float | None], labels: list[str]) -> bytes:
        """A switch port family's text: its last render's when its values did not move; else only the lines of
        the ports whose value moved formatted again, where its last render's lines are kept."""
        kept = self._kept_ports.get(m.name)
        name, small, fmt = m.exposed_name, _SMALL, _value
        if kept is not None and kept[1] is labels:
            if kept[0] == column:
                if kept[2] is not None:
                    return kept[2]          # the same values of the same ports: the same text
                body = self._body(m, kept[3] or [])
                self._keep_port_family(m.name, column, labels, body, None)
                return body
            if kept[3] is not None:         # it moved at its last render too: only the ports that moved
                lines = [ln if v == pv else None if v is None else name + lab + (small.get(v) or fmt(v)) + "\n"
                         for ln, v, pv, lab in zip(kept[3], column, kept[0], labels)]
                body = self._body(m, lines)
                self._keep_port_family(m.name, column, labels, body, lines)
                return body
        lines = [None if v is None else name + lab + (small.get(v) or fmt(v)) + "\n" for lab, v in zip(labels, column)]
        body = self._body(m, lines)
        if kept is None or kept[1] is not labels:
            self._keep_port_family(m.name, column, labels, body, None)      # first seen: its text
        else:
            self._keep_port_family(m.name, column, labels, body, lines)     # it moved: its lines
        return body

    def _body(self, m: Metric, lines: list[str | None]) -> bytes:
        text = "".join(filter(None, lines))
        return (self._headers[m.name] + text).encode() if text else b""

    def _keep_port_family(self, name: str, column: list[float | None], labels: list[str], body: bytes,
                          lines: list[str | None] | None) -> None:
        """Remember a switch port family's values with its text (lines None: a family that did not move) or its
        lines (a family that moved: the next render formats only the ports that move again), within
        MAX_KEPT_PORT_BYTES (its text's size counted either way)."""
        old = self._kept_ports.pop(name, None)
        if old is not None:
            self._kept_port_bytes -= old[4]
        size = len(body)
        if self._kept_port_bytes + size > self.MAX_KEPT_PORT_BYTES:
            return
        self._kept_ports[name] = (column, labels, body if lines is None else None, lines, size)
        self._kept_port_bytes += size

    def _keep(self, name: str, samples: list[tuple[tuple[str, ...], float | None]], body: bytes, per_port: bool) -> None:
        """Remember a family's samples and text for the next render, within the bounds: a family of more than
        MAX_KEPT_SAMPLES samples only when it has a switch port's labels (the fabric's link info and degraded
        reasons, whose ports rarely change), within MAX_KEPT_PORT_BYTES with the switch port families."""
        old = self._kept.pop(name, None)
        if old is not None:
            self._kept_bytes -= len(old[1])
        large = self._kept_large.pop(name, None)
        if large is not None:
            self._kept_port_bytes -= len(large[1])
        if len(samples) > self.MAX_KEPT_SAMPLES:
            if per_port and self._kept_port_bytes + len(body) <= self.MAX_KEPT_PORT_BYTES:
                self._kept_large[name] = (samples, body)
                self._kept_port_bytes += len(body)
            return
        if self._kept_bytes + len(body) > self.MAX_KEPT_BYTES:
            self._kept.clear()
            self._kept_bytes = 0
        self._kept[name] = (samples, body)
        self._kept_bytes += len(body)


_default = Renderer()


def render(snap: Snapshot, sets: frozenset[str] = DEFAULT_SETS) -> bytes:
    """The Prometheus text exposition of a snapshot: the families of the counter sets `sets`."""
    return _default.render(snap, sets)


def families(snap: Snapshot, sets: frozenset[str] = DEFAULT_SETS) -> Iterator[Metric_]:
    """The snapshot as prometheus_client metric families (for render_reference)."""
    for m in CATALOGUE:
        if not m.selected(sets):
            continue
        fam: Metric_
        if m.buckets is not None:
            samples = list(m.buckets(snap))
            buckets = [(lv[0], v) for suffix, lv, v in samples if suffix == "_bucket"]
            total = next(v for suffix, _, v in samples if suffix == "_sum")
            fam = HistogramMetricFamily(m.name, m.help, buckets=buckets, sum_value=total)
        else:
            fam = (CounterMetricFamily if m.type == "counter" else GaugeMetricFamily)(m.name, m.help,
                                                                                     labels=list(m.labels))
            for lv, value in m.samples(snap):
                if value is not None:
                    fam.add_metric(list(lv), value)
        if fam.samples:
            yield fam


class SnapshotCollector:
    """A prometheus_client custom collector over one snapshot (the reference rendering)."""

    def __init__(self, snap: Snapshot, sets: frozenset[str] = DEFAULT_SETS):
        self.snap = snap
        self.sets = sets

    def collect(self) -> Iterator[Metric_]:
        return families(self.snap, self.sets)


def render_reference(snap: Snapshot, sets: frozenset[str] = DEFAULT_SETS) -> bytes:
    """The same exposition through prometheus_client's generate_latest (tests compare the two)."""
    registry = CollectorRegistry(auto_describe=False)
    registry.register(SnapshotCollector(snap, sets))
    return generate_latest(registry)


__all__ = ["Renderer", "SnapshotCollector", "families", "render", "render_reference"]
