"""Typed records merged across sources, the counter history and the snapshot."""
