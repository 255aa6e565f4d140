"""The exporter: one catalogue of metrics (catalogue.py) rendered from a typed snapshot (render.py)."""

from fabricmon.exporter.render import SnapshotCollector, render, render_reference

__all__ = ["SnapshotCollector", "render", "render_reference"]
