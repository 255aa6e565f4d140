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

from fabricmon.exporter.catalogue import CATALOGUE, Metric
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


class Renderer:
    """Renders snapshots. Per metric it keeps each series' line from the last render and its
    value: a series whose value is unchanged costs one lookup (bounded; label churn resets it)."""

    MAX_SERIES = 200_000

    def __init__(self) -> None:
        # metric name -> label values -> (value, the whole exposition line)
        self._lines: dict[str, dict[tuple[str, ...], tuple[float, str]]] = {m.name: {} for m in CATALOGUE}
        self._headers = {m.name: _header(m) for m in CATALOGUE}
        self._series_count = 0
        self._lock = threading.Lock()

    @staticmethod
    def _prefix(name: str, keys: tuple[str, ...], values: tuple[str, ...]) -> str:
        """`name{k="v",...} ` with the labels sorted by name, as prometheus_client writes them."""
        if not keys:
            return name + " "
        pairs = sorted(zip(keys, values))
        return name + "{" + ",".join(f'{k}="{_label_value(v)}"' for k, v in pairs) + "} "

    def render(self, snap: Snapshot) -> bytes:
        with self._lock:
            if self._series_count > self.MAX_SERIES:
                for cache in self._lines.values():
                    cache.clear()
                self._series_count = 0
            out: list[str] = []
            for m in CATALOGUE:
                cache = self._lines[m.name]
                lines: list[str] = []
                append = lines.append
                if m.buckets is not None:
                    for suffix, lv, n in m.buckets(snap):
                        keys = ("le",) if lv else ()
                        append(self._prefix(m.name + suffix, keys, lv) + _value(n) + "\n")
                else:
                    name, labels = m.exposed_name, m.labels
                    get = cache.get
                    for lv, value in m.samples(snap):
                        if value is None:
                            continue        # absent: no sample
                        hit = get(lv)
                        if hit is not None and hit[0] == value:
                            append(hit[1])  # unchanged since the last render
                            continue
                        if hit is None:
                            self._series_count += 1
                            head = self._prefix(name, labels, lv)
                        else:
                            head = hit[1][:hit[1].rindex(" ") + 1]
                        line = head + _value(value) + "\n"
                        cache[lv] = (value, line)
                        append(line)
                if lines:
                    out.append(self._headers[m.name])
                    out.extend(lines)
            return "".join(out).encode()


_default = Renderer()


def render(snap: Snapshot) -> bytes:
    """The Prometheus text exposition of a snapshot."""
    return _default.render(snap)


def families(snap: Snapshot) -> Iterator[Metric_]:
    """The snapshot as prometheus_client metric families (for render_reference)."""
    for m in CATALOGUE:
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

    def __init__(self, snap: Snapshot):
        self.snap = snap

    def collect(self) -> Iterator[Metric_]:
        return families(self.snap)


def render_reference(snap: Snapshot) -> bytes:
    """The same exposition through prometheus_client's generate_latest (tests compare the two)."""
    registry = CollectorRegistry(auto_describe=False)
    registry.register(SnapshotCollector(snap))
    return generate_latest(registry)


__all__ = ["Renderer", "SnapshotCollector", "families", "render", "render_reference"]
