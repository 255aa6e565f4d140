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
    return floatToGoString(v)               # exponents, +Inf, NaN exactly as Prometheus writes them


def _header(m: Metric) -> str:
    name = m.exposed_name
    doc = m.help.replace("\\", "\\\\").replace("\n", "\\n")
    return f"# HELP {name} {doc}\n# TYPE {name} {_TYPE_NAMES[m.type]}\n"


class Renderer:
    """Renders snapshots; keeps the series prefixes of earlier renders (bounded)."""

    MAX_PREFIXES = 200_000

    def __init__(self) -> None:
        self._prefix: dict[tuple, str] = {}
        self._lines: dict[tuple, tuple[float, str]] = {}     # series -> (value, its line)
        self._headers = {m.name: _header(m) for m in CATALOGUE}
        self._lock = threading.Lock()

    def _series(self, name: str, keys: tuple[str, ...], values: tuple[str, ...]) -> str:
        """`name{k="v",...} ` with the labels sorted by name, as prometheus_client writes them."""
        pairs = sorted(zip(keys, values))
        return name + "{" + ",".join(f'{k}="{_label_value(v)}"' for k, v in pairs) + "} "

    def render(self, snap: Snapshot) -> bytes:
        with self._lock:
            if len(self._prefix) > self.MAX_PREFIXES:
                self._prefix.clear()      # label churn (hot-plugged devices): start over
                self._lines.clear()
            cached = self._lines
            out: list[str] = []
            append = out.append
            prefix = self._prefix
            for m in CATALOGUE:
                lines: list[str] = []
                if m.type == "histogram":
                    for suffix, lv, value in m.samples(snap):
                        name = m.name + suffix
                        key = (name, lv)
                        p = prefix.get(key)
                        if p is None:
                            p = prefix[key] = self._series(name, m.labels, lv) if lv else name + " "
                        lines.append(p + _value(value) + "\n")
                else:
                    name = m.exposed_name
                    labels = m.labels
                    for lv, value in m.samples(snap):
                        if value is None:
                            continue        # absent: no sample
                        key = (name, lv)
                        hit = cached.get(key)
                        if hit is not None and hit[0] == value:
                            lines.append(hit[1])        # unchanged since the last render
                            continue
                        p = prefix.get(key)
                        if p is None:
                            p = prefix[key] = self._series(name, labels, lv) if labels else name + " "
                        line = p + _value(value) + "\n"
                        cached[key] = (value, line)
                        lines.append(line)
                if lines:
                    append(self._headers[m.name])
                    out.extend(lines)
            return "".join(out).encode()


_default = Renderer()


def render(snap: Snapshot) -> bytes:
    """The Prometheus text exposition of a snapshot."""
    return _default.render(snap)


def families(snap: Snapshot) -> Iterator:
    """The snapshot as prometheus_client metric families (for render_reference)."""
    for m in CATALOGUE:
        if m.type == "histogram":
            samples = list(m.samples(snap))
            buckets = [(lv[0], v) for suffix, lv, v in samples if suffix == "_bucket"]
            total = next(v for suffix, _, v in samples if suffix == "_sum")
            fam = HistogramMetricFamily(m.name, m.help, buckets=buckets, sum_value=total)
        else:
            cls = CounterMetricFamily if m.type == "counter" else GaugeMetricFamily
            fam = cls(m.name, m.help, labels=list(m.labels))
            for lv, value in m.samples(snap):
                if value is not None:
                    fam.add_metric(list(lv), value)
        if fam.samples:
            yield fam


class SnapshotCollector:
    """A prometheus_client custom collector over one snapshot (the reference rendering)."""

    def __init__(self, snap: Snapshot):
        self.snap = snap

    def collect(self) -> Iterator:
        return families(self.snap)


def render_reference(snap: Snapshot) -> bytes:
    """The same exposition through prometheus_client's generate_latest (tests compare the two)."""
    registry = CollectorRegistry(auto_describe=False)
    registry.register(SnapshotCollector(snap))
    return generate_latest(registry)


__all__ = ["Renderer", "SnapshotCollector", "families", "render", "render_reference"]
