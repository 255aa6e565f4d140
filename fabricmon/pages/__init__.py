"""The HTML pages a daemon serves at `/`: the node status page (`fabricmon run`) and the live
fabric map (`fabricmon fabric run`). They read the published snapshot only, add no data path,
and are rendered when first asked for, then kept until the next snapshot (a daemon nobody
looks at renders nothing). No external JavaScript, fonts or CDN: the two static files under
`static/` are served by the daemon itself."""

from __future__ import annotations

import threading
from collections.abc import Callable, Mapping
from importlib import resources

from fabricmon.model.snapshot import Snapshot

STATIC = {"page.js": "text/javascript; charset=utf-8", "page.css": "text/css; charset=utf-8"}
MAX_CACHED = 16          # rendered variants (expanded groups, detail views) kept per snapshot


def static_file(name: str) -> tuple[bytes, str] | None:
    """A file of the page's static assets, with its content type (None: not one of them)."""
    if name not in STATIC:
        return None
    return resources.files("fabricmon.pages").joinpath("static", name).read_bytes(), STATIC[name]


class Pages:
    """The views of one snapshot. `get(part, query)` returns the HTML of a part: "page" (the
    whole document), "live" (the fragment the page refreshes itself with) or a page's own extra
    parts (the fabric map's "switch" details); None for an unknown part."""

    def __init__(self, snap: Snapshot):
        self.snap = snap
        self._lock = threading.Lock()
        self._cache: dict[tuple, bytes | None] = {}

    def _renderers(self) -> Mapping[str, Callable[[Snapshot, Mapping[str, str]], str | None]]:
        if self.snap.fabric is not None:
            from fabricmon.pages import fabric_map
            return fabric_map.PARTS
        from fabricmon.pages import node
        return node.PARTS

    def get(self, part: str, query: Mapping[str, str]) -> bytes | None:
        key = (part, tuple(sorted(query.items())))
        with self._lock:
            if key in self._cache:
                return self._cache[key]
        fn = self._renderers().get(part)
        html = fn(self.snap, query) if fn is not None else None
        body = html.encode() if html is not None else None
        with self._lock:
            if len(self._cache) >= MAX_CACHED:
                self._cache.clear()
            self._cache[key] = body
        return body


__all__ = ["Pages", "static_file"]
