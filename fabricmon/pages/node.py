"""The node status page (`fabricmon run`, at /): placeholder until the full page lands."""

from __future__ import annotations

from collections.abc import Mapping

from fabricmon.model.snapshot import Snapshot
from fabricmon.pages.html import document, esc, findings_table, when


def live(snap: Snapshot, query: Mapping[str, str]) -> str:
    return (f'<div id="meta" hidden data-when="{esc(when(snap.time))}" data-state="ok"></div>'
            f"<h2>Findings</h2>{findings_table(snap.findings)}")


def page(snap: Snapshot, query: Mapping[str, str]) -> str:
    return document("node", "fabricmon node", live(snap, query), snap.time, snap.status)


PARTS = {"page": page, "live": live}
