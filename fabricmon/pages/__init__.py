"""The HTML pages a daemon serves at `/`: the node status page (`fabricmon run`) and the live
fabric map (`fabricmon fabric run`). They read the published snapshot only, add no data path,
and are rendered when first asked for, then kept until the next snapshot (a daemon nobody
looks at renders nothing). No external JavaScript, fonts or CDN: the two static files under
`static/` are served by the daemon itself.

A page can never be used against the scrape: a variant is keyed only by the parameters its part
understands, normalised (`/?n=<random>` is the plain page, from the cache), and a render that
is not cached goes through a RenderGate: one at a time, at most so many per second, and refused
(Busy, a 503) rather than queued when it would not finish within its budget."""

from __future__ import annotations

import threading
import time
from collections import OrderedDict
from collections.abc import Callable, Mapping
from importlib import resources
from typing import Protocol

from fabricmon.model.snapshot import Snapshot

STATIC = {"page.js": "text/javascript; charset=utf-8", "page.css": "text/css; charset=utf-8"}
MAX_CACHED = 16                  # rendered variants (expanded groups, detail views) kept per snapshot
MAX_CACHED_BYTES = 32 << 20      # and at most this many bytes of them


def static_file(name: str) -> tuple[bytes, str] | None:
    """A file of the page's static assets, with its content type (None: not one of them)."""
    if name not in STATIC:
        return None
    # one name a joinpath: Python 3.10's Traversable (a zip's, a namespace package's) takes no more
    return resources.files("fabricmon.pages").joinpath("static").joinpath(name).read_bytes(), STATIC[name]


class Busy(Exception):
    """A render refused by the gate (answered 503 with Retry-After)."""

    def __init__(self, reason: str, retry_after: float):
        super().__init__(reason)
        self.retry_after = max(1, int(retry_after + 0.999))


class RenderGate:
    """Renders one at a time, at most `rate` per second (a bucket of `burst`), and only when the
    render, counting the wait for the one in progress, is expected to end within `budget`
    seconds (from the last render of the same part); otherwise Busy, at once."""

    def __init__(self, rate: float = 2.0, burst: int = 4, budget: float = 2.0):
        self.rate, self.burst, self.budget = rate, burst, budget
        self._render = threading.Lock()
        self._mu = threading.Lock()
        self._tokens = float(burst)
        self._refilled = time.monotonic()
        self._busy_until = 0.0
        self._cost: dict[str, float] = {}
        self.renders = 0
        self.refused = 0

    def run(self, part: str, fn: Callable[[], bytes | None]) -> bytes | None:
        with self._mu:
            now = time.monotonic()
            self._tokens = min(self.burst, self._tokens + (now - self._refilled) * self.rate)
            self._refilled = now
            wait = max(0.0, self._busy_until - now)
            expected = self._cost.get(part, 0.0)
            if self._tokens < 1:
                self.refused += 1
                raise Busy("page renders over their rate", (1 - self._tokens) / self.rate)
            if wait + expected > self.budget:
                self.refused += 1
                raise Busy("a page render would not finish within its budget", wait + expected)
            self._tokens -= 1
            self._busy_until = max(now, self._busy_until) + expected
        if not self._render.acquire(timeout=self.budget):
            with self._mu:
                self.refused += 1
            raise Busy("a page render would not finish within its budget", self.budget)
        try:
            t0 = time.monotonic()
            body = fn()
            took = time.monotonic() - t0
            with self._mu:
                self._cost[part] = took
                self.renders += 1
                self._busy_until = time.monotonic()
        finally:
            self._render.release()
        return body


Params = tuple[tuple[str, str], ...]      # a part's parameters, normalised (a view's `params`)
Part = Callable[[Snapshot, Mapping[str, str]], str | None]    # a part's HTML (None: no such object)


class _View(Protocol):
    """What a page module (node, fabric_map) offers: its parts by name, and the parameters each understands."""

    @property
    def PARTS(self) -> Mapping[str, Part]: ...

    def params(self, snap: Snapshot, part: str, query: Mapping[str, str]) -> Params | None: ...


class Pages:
    """The views of one snapshot. `get(part, query)` returns the HTML of a part: "page" (the
    whole document), "live" (the fragment the page refreshes itself with) or a page's own extra
    parts (the fabric map's "switch" details); None for an unknown part or an unknown object
    (a port, a switch). Raises Busy when the gate refuses an uncached render."""

    def __init__(self, snap: Snapshot, gate: RenderGate | None = None):
        self.snap = snap
        self.gate = gate
        self._lock = threading.Lock()
        self._cache: OrderedDict[tuple[str, Params], bytes | None] = OrderedDict()
        self._bytes = 0

    def _module(self) -> _View:
        if self.snap.fabric is not None:
            from fabricmon.pages import fabric_map
            return fabric_map
        from fabricmon.pages import node
        return node

    def _cached(self, key: tuple[str, Params]) -> tuple[bool, bytes | None]:
        with self._lock:
            if key in self._cache:
                self._cache.move_to_end(key)
                return True, self._cache[key]
        return False, None

    def get(self, part: str, query: Mapping[str, str]) -> bytes | None:
        mod = self._module()
        fn = mod.PARTS.get(part)
        if fn is None:
            return None
        params = mod.params(self.snap, part, query)
        if params is None:
            return None
        key = (part, params)
        hit, body = self._cached(key)
        if hit:
            return body

        def render() -> bytes | None:
            hit, body = self._cached(key)          # rendered by another request meanwhile
            if hit:
                return body
            html = fn(self.snap, dict(params))
            return html.encode() if html is not None else None

        body = self.gate.run(part, render) if self.gate is not None else render()
        with self._lock:
            if key not in self._cache:
                self._cache[key] = body
                self._bytes += len(body or b"")
            while self._cache and (len(self._cache) > MAX_CACHED or self._bytes > MAX_CACHED_BYTES):
                _, old = self._cache.popitem(last=False)
                self._bytes -= len(old or b"")
        return body


__all__ = ["Busy", "Pages", "RenderGate", "static_file"]
