"""The exporter: one catalogue of metrics (catalogue.py) rendered from a typed snapshot (render.py)."""

from fabricmon.exporter.render import render, render_reference

__all__ = ["render", "render_reference"]
