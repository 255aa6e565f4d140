"""HTTP(S) endpoint: /metrics serves the cached exposition of the last snapshot, /healthz
says whether polling is alive (liveness), /readyz whether there is a view to serve (readiness),
/ the page of the last snapshot (fabricmon.pages: the node status page or the fabric map) with its
static files under /static/. Nothing here ever waits
for a command.

Bounded serving (Go's net/http deadlines, node_exporter's request cap), so that a slow or
greedy client costs its own connection and nothing else:
- one event-loop thread accepts connections, does the TLS handshakes and reads request heads,
  all non-blocking: a client trickling its headers holds a descriptor, never a thread, and has
  `header_timeout` seconds for the handshake and the whole head (and body), however it trickles;
  a keep-alive connection is closed after `idle_timeout` idle seconds;
- at most `max_connections` open connections (fewer when the descriptor limit is low: half of
  it stays for the sources); when full, the oldest connection still waiting for its request is
  closed for the new one, so a scrape that sends its request at once always gets in;
- complete requests go to two bounded pools: pages (`/`) to their own, so they can never take
  the handler /metrics and /healthz need; a full pool answers 503 at once; a handler sends its
  answer while the client takes it (at most half a second, and 20 ms without progress ends it),
  then the loop sends the rest, non-blocking, within `write_timeout`: a client that reads slowly
  holds its own connection, never a handler;
- a client that hangs up, times out or fails its TLS handshake is one count in
  fabricmon_http_errors_total{kind} and at most one log line per kind per minute, never a
  traceback; an optional access log (one structured line per request).
"""

from __future__ import annotations

import collections
import errno
import gzip
import json
import math
import queue
import resource
import select
import selectors
import socket
import ssl
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any
from urllib.parse import parse_qsl, unquote

import structlog
from prometheus_client.exposition import CONTENT_TYPE_LATEST

from fabricmon.serve.settings import ServeConfig, TLSConfig
from fabricmon.exporter import counter_sets
from fabricmon.exporter.counter_sets import DEFAULT_SETS
from fabricmon.pages import Busy, Pages, runbooks, static_file
from fabricmon.report import FINDINGS_PATH
from fabricmon.serve.webconfig import BasicAuth, TLSSettings, WebConfig, from_tls_keys

log = structlog.get_logger("fabricmon.server")


class _Published:
    """One published exposition: its bodies per counter-set selection, each rendered at most once
    (when first asked for) with its gzip copy built at most once, shared by every scraper."""

    __slots__ = ("make", "bodies", "zipped", "lock")

    def __init__(self, make: Callable[[frozenset[str]], bytes]) -> None:
        self.make = make
        self.bodies: dict[frozenset[str], bytes] = {}       # sets -> the body
        self.zipped: dict[frozenset[str], bytes] = {}       # sets -> its gzip copy
        self.lock = threading.Lock()     # held through a render: a second scraper waits for the first's

    def get(self, sets: frozenset[str], want_gzip: bool) -> tuple[bytes, bool]:
        with self.lock:
            body = self.bodies.get(sets)
            if body is None:
                body = self.bodies[sets] = self.make(sets)
            if not want_gzip or len(body) < 1024:
                return body, False
            gz = self.zipped.get(sets)
            if gz is None:
                gz = self.zipped[sets] = gzip.compress(body, compresslevel=1)
            return gz, True


@dataclass(frozen=True, slots=True)
class View:
    """What one snapshot publishes, as one object swapped by one assignment: its exposition (rendered per
    counter-set selection when first scraped), its verdict (report.verdict, built when first asked for), its
    pages, and why it is not ready ("" when it is). /metrics, /api/v1/findings, / and /readyz each read the
    view once per request, so they never describe two different snapshots."""
    exposition: _Published
    updated: float
    verdict: Callable[[], dict[str, Any]] | None = None
    pages: Pages | None = None
    not_ready: str = "no poll completed yet"
    _built: dict[str, dict[str, Any]] | None = None        # the verdict once built (filled once, never changed)

    def verdict_doc(self) -> dict[str, Any] | None:
        if self.verdict is None:
            return None
        built = self._built
        if built is None:
            return self.verdict()
        doc = built.get("v")
        if doc is None:
            doc = built["v"] = self.verdict()
        return doc


class Exposition:
    """The current view (View), swapped atomically: `show` hands over the last snapshot's view (how to render
    it, its verdict, pages and readiness), rendered once per snapshot and counter-set selection, by the first
    scrape that asks (so a snapshot no one scrapes is never rendered). `healthy` is the daemon's own liveness
    (/healthz), kept apart: it says whether the daemon still builds snapshots, not what they say. The daemon
    sets it with each snapshot; `stuck_after` makes it false, when it is read, once no snapshot came for that
    long (the publisher is stuck): judged when /healthz asks, so no thread wakes to watch."""

    def __init__(self, sets: frozenset[str] = DEFAULT_SETS) -> None:
        self.sets = sets                     # what a scrape without collect[] gets (server.collect)
        self.view = View(_Published(lambda _sets: b""), 0.0)
        self._healthy = False
        self._detail = "no poll completed yet"
        self.stuck_after: float | None = None     # seconds without a snapshot that mean the publisher is stuck
        self.last_snapshot: float | None = None   # the wall-clock time of the last snapshot (its build)

    def _stuck(self) -> float | None:
        """Seconds since the last snapshot when more than stuck_after, else None."""
        if self.stuck_after is None or self.last_snapshot is None:
            return None
        age = time.time() - self.last_snapshot
        return age if age > self.stuck_after else None

    @property
    def healthy(self) -> bool:
        return self._healthy and self._stuck() is None

    @healthy.setter
    def healthy(self, value: bool) -> None:
        self._healthy = value

    @property
    def health_detail(self) -> str:
        age = self._stuck()
        if age is not None:
            return f"no snapshot built for {age:.0f} s (bound {self.stuck_after:g} s): the publisher is stuck"
        return self._detail

    @health_detail.setter
    def health_detail(self, value: str) -> None:
        self._detail = value

    def show(self, make: Callable[[frozenset[str]], bytes], updated: float,
             verdict: Callable[[], dict[str, Any]] | None = None, pages: Pages | None = None,
             not_ready: str = "") -> None:
        """A new snapshot's view, published by one assignment."""
        self.view = View(_Published(make), updated, verdict, pages, not_ready, {})

    def publish(self, make: Callable[[frozenset[str]], bytes], updated: float) -> None:
        """A new exposition alone (the rest of the view as it was): tests and fixed bodies."""
        v = self.view
        self.view = View(_Published(make), updated, v.verdict, v.pages, v.not_ready, {})

    def set(self, body: bytes, updated: float) -> None:
        """Publish fixed bytes (whatever the selection)."""
        self.publish(lambda _sets: body, updated)

    @property
    def updated(self) -> float:
        return self.view.updated

    @property
    def pages(self) -> Pages | None:
        return self.view.pages

    @pages.setter
    def pages(self, pages: Pages | None) -> None:
        v = self.view
        self.view = View(v.exposition, v.updated, v.verdict, pages, v.not_ready, v._built)

    @property
    def not_ready(self) -> str:
        return self.view.not_ready

    def verdict_json(self, view: View | None = None) -> bytes | None:
        doc = (view or self.view).verdict_doc()
        if doc is None:
            return None
        # daemon_healthy: the daemon itself is polling (as /healthz), not the node's verdict (status)
        return json.dumps({**doc, "daemon_healthy": self.healthy}).encode()

    def get(self, want_gzip: bool, sets: frozenset[str] | None = None) -> tuple[bytes, bool]:
        return self.view.exposition.get(self.sets if sets is None else sets, want_gzip)


def collect_sets(query: str) -> frozenset[str] | None:
    """The counter sets a scrape asks for with `collect[]=NAME` (node_exporter's parameter; repeat it
    for several, `all` for every set), or None for the configured ones; ValueError names an unknown set."""
    names = [v for k, v in parse_qsl(query, keep_blank_values=True) if k == "collect[]"]
    return counter_sets.parse(names) if names else None


# Pages load nothing from elsewhere: same-origin script and style only (an air-gapped cluster
# sees the same page), and no framing.
RUNBOOKS_PATH = "/runbooks"
PAGE_HEADERS = {
    "Content-Security-Policy": "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self' data:; "
                               "connect-src 'self'; frame-ancestors 'none'; base-uri 'none'; form-action 'none'",
    "X-Content-Type-Options": "nosniff",
    "Cache-Control": "no-store",
}
WAITING_PAGE = (b"<!doctype html><html lang='en'><head><meta charset='utf-8'><meta http-equiv='refresh' content='2'>"
                b"<title>fabricmon</title></head><body><p>fabricmon: no snapshot built yet; this page reloads "
                b"by itself.</p></body></html>\n")
HTML = "text/html; charset=utf-8"
TEXT = "text/plain; charset=utf-8"
REASONS = {200: "OK", 400: "Bad Request", 401: "Unauthorized", 404: "Not Found", 405: "Method Not Allowed",
           408: "Request Timeout", 413: "Content Too Large", 414: "URI Too Long",
           431: "Request Header Fields Too Large", 500: "Internal Server Error", 501: "Not Implemented",
           503: "Service Unavailable", 505: "HTTP Version Not Supported"}

# fabricmon_http_errors_total{kind}
ERROR_KINDS = (
    "disconnect",       # the client hung up (or reset) before its answer was sent
    "timeout",          # no whole request head within header_timeout, or an answer not taken within write_timeout
    "tls_handshake",    # a failed TLS handshake
    "bad_request",      # a malformed or oversized request (answered 4xx/5xx and closed)
    "unauthorized",     # basic auth missing or wrong (401)
    "busy",             # refused at once: a full handler pool, or a page render over its rate or budget (503)
    "evicted",          # a connection still waiting for its request, closed to make room for a new one
    "refused",          # a connection closed at once: no room, or the descriptor limit reached
)
LOG_INTERVAL = 60.0     # at most one log line per error kind per interval

MAX_HEAD = 16 << 10      # request line and headers
MAX_TARGET = 8 << 10     # the request target alone
MAX_HEADERS = 100
MAX_BODY = 8 << 10       # a body on GET is read and dropped up to this; larger is 413
SCRAPE_WORKERS = 8       # handlers for /metrics, /healthz, the findings API and static files
SCRAPE_QUEUE = 64
PAGE_WORKERS = 2         # handlers for / (the pages): never the scrape's
PAGE_QUEUE = 4
FD_RESERVE = 0.5         # of the descriptor limit kept for the sources (subprocess pipes, files)
SWEEP_IDLE = 1.0         # seconds: while a connection is open, the loop sweeps at least this often


class HttpErrors:
    """Counts per kind, and one structured log line per kind per interval."""

    def __init__(self, interval: float = LOG_INTERVAL):
        self.interval = interval
        self._lock = threading.Lock()
        self.counts = {k: 0 for k in ERROR_KINDS}
        self._logged: dict[str, float] = {}
        self._since: dict[str, int] = {}

    def record(self, kind: str, detail: str = "", peer: str = "") -> None:
        now = time.monotonic()
        with self._lock:
            self.counts[kind] += 1
            self._since[kind] = self._since.get(kind, 0) + 1
            last = self._logged.get(kind)
            if last is not None and now - last < self.interval:
                return
            self._logged[kind] = now
            n, self._since[kind] = self._since[kind], 0
        log.warning("http client error", kind=kind, count=n, interval_s=self.interval, last_peer=peer,
                    last_detail=detail[:200])

    def snapshot(self) -> dict[str, int]:
        with self._lock:
            return dict(self.counts)


class BadRequest(Exception):
    def __init__(self, code: int, message: str):
        super().__init__(message)
        self.code = code


@dataclass(slots=True)
class Request:
    method: str
    target: str
    version: str
    headers: dict[str, str]
    length: int
    keep_alive: bool


def parse_head(head: bytes) -> Request:
    """The request line and headers (without the blank line). Raises BadRequest."""
    lines = head.split(b"\r\n")
    try:
        line = lines[0].decode("ascii")
    except UnicodeDecodeError:
        raise BadRequest(400, "request line is not ASCII") from None
    parts = line.split(" ")
    if len(parts) != 3 or not parts[0].isalpha() or not parts[1]:
        raise BadRequest(400, "malformed request line")
    method, target, version = parts
    if len(target) > MAX_TARGET:
        raise BadRequest(414, "request target too long")
    if version not in ("HTTP/1.1", "HTTP/1.0"):
        raise BadRequest(505, f"unsupported version {version[:16]!r}")
    if len(lines) - 1 > MAX_HEADERS:
        raise BadRequest(431, "too many header fields")
    headers: dict[str, str] = {}
    for raw in lines[1:]:
        name, sep, value = raw.partition(b":")
        if not sep or not name or name != name.strip() or raw[:1] in (b" ", b"\t"):
            raise BadRequest(400, "malformed header field")
        key = name.decode("latin-1").lower()
        val = value.strip().decode("latin-1")
        if key in headers and key in ("content-length", "host", "authorization", "transfer-encoding"):
            raise BadRequest(400, f"repeated {key}")
        headers[key] = val
    if "transfer-encoding" in headers:
        raise BadRequest(501, "request bodies with a transfer-encoding are not accepted")
    cl = headers.get("content-length", "0")
    if not cl.isascii() or not cl.isdigit() or len(cl) > 12:
        raise BadRequest(400, "malformed content-length")
    length = int(cl)
    if length > MAX_BODY:
        raise BadRequest(413, "request body too large")
    conn = headers.get("connection", "").lower()
    keep = "keep-alive" in conn if version == "HTTP/1.0" else "close" not in conn
    return Request(method, target, version, headers, length, keep)


HANDSHAKE, HEAD, BODY, WRITE, IDLE, DEAD = "handshake", "head", "body", "write", "idle", "dead"
DIRECT_WRITE = 0.5       # seconds a handler sends an answer itself before the loop takes over,
STALL_MS = 20            # or as soon as the client takes nothing for this many milliseconds
WRITE_CHUNK = 256 << 10    # per send; at most 4 per connection per loop turn


class _Conn:
    __slots__ = ("sock", "peer", "buf", "phase", "deadline", "served", "request", "events", "out", "keep",
                 "registered")

    def __init__(self, sock: socket.socket, peer: str, phase: str, deadline: float):
        self.sock = sock
        self.peer = peer
        self.buf = bytearray()
        self.phase = phase
        self.deadline = deadline
        self.served = 0
        self.request: Request | None = None
        self.events = selectors.EVENT_READ
        self.out: collections.deque[memoryview] = collections.deque()     # the answer still to send
        self.keep = False
        self.registered = False      # with the selector (unregistering one that is not costs a KeyError)


class _Pool:
    """A fixed set of handler threads behind a bounded queue."""

    def __init__(self, name: str, workers: int, size: int, handle: Callable[[_Conn], None]):
        self.q: queue.Queue[_Conn | None] = queue.Queue(size)
        self.handle = handle
        self.threads = [threading.Thread(target=self._run, name=f"fabricmon-{name}-{i}", daemon=True)
                        for i in range(workers)]

    def start(self) -> None:
        for t in self.threads:
            t.start()

    def submit(self, conn: _Conn) -> bool:
        try:
            self.q.put_nowait(conn)
            return True
        except queue.Full:
            return False

    def _run(self) -> None:
        while True:
            conn = self.q.get()
            if conn is None:
                return
            self.handle(conn)

    def stop(self, timeout: float = 2.0) -> None:
        for _ in self.threads:
            try:
                self.q.put(None, timeout=0.1)
            except queue.Full:
                break
        end = time.monotonic() + timeout
        for t in self.threads:
            if t.is_alive():
                t.join(max(0.0, end - time.monotonic()))


def connection_cap(configured: int) -> int:
    """`configured`, or fewer when the descriptor limit would leave the sources too few."""
    soft, _ = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft == resource.RLIM_INFINITY:
        return configured
    return max(8, min(configured, int(soft * (1 - FD_RESERVE)) - 16))


class ListenError(OSError):
    """The listener could not be bound (the port held, the address on no interface, a name that does
    not resolve): the OSError as raised, with the address and port it tried."""

    def __init__(self, exc: OSError, address: str, port: int):
        super().__init__(*exc.args)
        self.address, self.port = address, port

    @property
    def where(self) -> str:
        """ADDR:PORT, an IPv6 address in brackets ([::1]:9879), as --listen takes it."""
        return f"[{self.address}]:{self.port}" if ":" in self.address else f"{self.address}:{self.port}"


class MetricsServer:
    def __init__(self, address: str, port: int, expo: Exposition, tls: TLSConfig | None = None,
                 serve: ServeConfig | None = None, web: WebConfig | None = None):
        self.expo = expo
        self.cfg = serve or ServeConfig()
        self.web = web or WebConfig()
        settings: TLSSettings | None = self.web.tls or (from_tls_keys(tls) if tls is not None else None)
        self.ssl: ssl.SSLContext | None = settings.context() if settings is not None else None
        self.auth = BasicAuth(self.web.users) if self.web.users else None
        self.errors = HttpErrors()
        self.max_connections = connection_cap(self.cfg.max_connections)
        family = socket.AF_INET6 if ":" in address else socket.AF_INET
        self._listener = socket.socket(family, socket.SOCK_STREAM)
        self._family = family
        try:
            self._listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            self._listener.bind((address, port))
            self._listener.listen(self.cfg.backlog)
        except OSError as exc:
            self._listener.close()
            raise ListenError(exc, address, port) from exc
        self._listener.setblocking(False)
        self._sel = selectors.DefaultSelector()
        self._wake_r, self._wake_w = socket.socketpair()
        self._wake_r.setblocking(False)
        self._wake_w.setblocking(False)
        self._conns: collections.OrderedDict[_Conn, None] = collections.OrderedDict()   # in the loop's hands, oldest first
        self._busy = 0               # connections in a handler
        self._returned: collections.deque[_Conn] = collections.deque()
        self._lock = threading.Lock()
        self._stopping = False
        self._paused_until = 0.0     # accepting paused after EMFILE
        self._next_sweep = math.inf  # when the loop next closes late connections (see _loop)
        self._scrapes = _Pool("http", SCRAPE_WORKERS, SCRAPE_QUEUE, self._handle)
        self._pages = _Pool("page", PAGE_WORKERS, PAGE_QUEUE, self._handle)
        self.thread = threading.Thread(target=self._loop, name="fabricmon-http", daemon=True)

    @property
    def port(self) -> int:
        return int(self._listener.getsockname()[1])

    @property
    def address(self) -> str:
        return str(self._listener.getsockname()[0])

    @property
    def open_connections(self) -> int:
        with self._lock:
            return len(self._conns) + self._busy

    def start(self) -> None:
        self._sel.register(self._listener, selectors.EVENT_READ, "listen")
        self._sel.register(self._wake_r, selectors.EVENT_READ, "wake")
        self._scrapes.start()
        self._pages.start()
        self.thread.start()

    def stop(self) -> None:
        self._stopping = True
        self._wake()
        if self.thread.is_alive():
            self.thread.join(5)
        self._scrapes.stop()
        self._pages.stop()
        self.close()

    def close(self) -> None:
        for c in list(self._conns):
            self._close(c)
        for s in (self._listener, self._wake_r, self._wake_w):
            try:
                s.close()
            except OSError:
                pass
        try:
            self._sel.close()
        except (OSError, RuntimeError):
            pass

    # --- the event loop: accept, handshake, read the request head -----------------------------

    def _wake(self) -> None:
        try:
            self._wake_w.send(b"x")
        except OSError:
            pass

    def _loop(self) -> None:
        """Waits for events, and for the next deadline to sweep (a connection's, or the end of a
        pause): every deadline the loop sets lowers the next sweep to it, a handler that hands a
        connection back lowers it to that connection's idle deadline (waking the loop only where
        that is sooner), and while any connection is open the loop sweeps at least once a second.
        A server with no connection sleeps until one comes: serving costs nothing between scrapes."""
        while not self._stopping:
            wait = self._next_sweep - time.monotonic()
            try:
                events = self._sel.select(None if wait == math.inf else max(0.0, wait))
            except OSError:          # the selector was closed under us (stop)
                return
            for key, _ in events:
                if key.data == "listen":
                    self._accept()
                elif key.data == "wake":
                    try:
                        while self._wake_r.recv(4096):
                            pass
                    except OSError:
                        pass
                    self._take_back()
                else:
                    self._ready(key.data)
            now = time.monotonic()
            if now >= self._next_sweep:
                self._next_sweep = self._sweep(now)
        self._take_back()

    def _due(self, deadline: float) -> None:
        """The loop sweeps by this deadline (set in the loop's thread)."""
        if deadline < self._next_sweep:
            self._next_sweep = deadline

    def _accept(self) -> None:
        for _ in range(64):
            try:
                sock, addr = self._listener.accept()
            except (BlockingIOError, InterruptedError):
                return
            except OSError as exc:
                if exc.errno in (errno.EMFILE, errno.ENFILE, errno.ENOBUFS, errno.ENOMEM):
                    self.errors.record("refused", f"accept: {exc.strerror}")
                    self._sel.unregister(self._listener)         # pause, or the loop spins
                    self._paused_until = time.monotonic() + 0.05
                    self._due(self._paused_until)
                return
            peer = f"{addr[0]}:{addr[1]}" if isinstance(addr, tuple) else str(addr)
            with self._lock:
                full = len(self._conns) + self._busy >= self.max_connections
            if full and not self._evict():
                self.errors.record("refused", f"{self.max_connections} connections open", peer)
                sock.close()
                continue
            sock.setblocking(False)
            if self._family != socket.AF_UNIX:
                sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)     # head and body are two writes
            now = time.monotonic()
            if self.ssl is not None:
                try:
                    sock = self.ssl.wrap_socket(sock, server_side=True, do_handshake_on_connect=False)
                except (OSError, ValueError) as exc:
                    self.errors.record("tls_handshake", str(exc), peer)
                    sock.close()
                    continue
                conn = _Conn(sock, peer, HANDSHAKE, now + self.cfg.header_timeout)
            else:
                conn = _Conn(sock, peer, HEAD, now + self.cfg.header_timeout)
            with self._lock:
                self._conns[conn] = None
            self._due(conn.deadline)
            if conn.phase == HEAD and self._read_first(conn):
                continue            # its request was there already: answered, dropped or rejected
            self._sel.register(sock, selectors.EVENT_READ, conn)
            conn.registered = True

    def _read_first(self, conn: _Conn) -> bool:
        """A plain connection's request usually arrives with it (the client sends it as soon as it
        is connected): read it at once, so a whole request goes to a handler without waiting for
        the loop's next turn (and without registering the socket at all). False, with nothing
        done, where nothing has arrived yet: the loop waits for it as for any other."""
        try:
            data = conn.sock.recv(65536)
        except (BlockingIOError, InterruptedError):
            return False
        except OSError as exc:
            self._drop(conn, None, str(exc))
            return True
        if not data:
            self._drop(conn, None, "closed before its request")
            return True
        conn.buf += data
        return self._advance(conn)

    def _evict(self) -> bool:
        """Close the oldest connection still waiting for its request, for a new one."""
        with self._lock:
            victim = next((c for c in self._conns if c.phase != WRITE), None)
        if victim is None:
            return False
        self._drop(victim, "evicted", "connection limit reached")
        return True

    def _close(self, conn: _Conn) -> None:
        with self._lock:
            self._conns.pop(conn, None)
        if conn.registered:
            conn.registered = False
            try:
                self._sel.unregister(conn.sock)
            except (KeyError, ValueError, OSError):
                pass
        try:
            conn.sock.close()
        except OSError:
            pass

    def _drop(self, conn: _Conn, kind: str | None, detail: str = "") -> None:
        if kind is not None:
            self.errors.record(kind, detail, conn.peer)
        self._close(conn)

    def _watch(self, conn: _Conn, events: int) -> None:
        if conn.events != events:
            conn.events = events
            self._sel.modify(conn.sock, events, conn)

    def _ready(self, conn: _Conn) -> None:
        if conn.phase == WRITE:
            self._write(conn)
            return
        if conn.phase == HANDSHAKE:
            assert isinstance(conn.sock, ssl.SSLSocket)      # only a TLS connection starts in this phase
            try:
                conn.sock.do_handshake()
            except ssl.SSLWantReadError:
                self._watch(conn, selectors.EVENT_READ)
                return
            except ssl.SSLWantWriteError:
                self._watch(conn, selectors.EVENT_WRITE)
                return
            except (ssl.SSLError, OSError) as exc:
                self._drop(conn, "tls_handshake", getattr(exc, "reason", None) or str(exc) or type(exc).__name__)
                return
            conn.phase = HEAD
            self._watch(conn, selectors.EVENT_READ)
        for _ in range(8):                  # bounded: a fast sender cannot keep the loop here
            try:
                data = conn.sock.recv(65536)
            except (BlockingIOError, InterruptedError, ssl.SSLWantReadError, ssl.SSLWantWriteError):
                break
            except (OSError, ssl.SSLError) as exc:
                self._drop(conn, "disconnect" if conn.buf else None, str(exc))
                return
            if not data:                    # the client closed: an error only mid-request
                self._drop(conn, "disconnect" if conn.buf else None, "closed mid-request")
                return
            conn.buf += data
            if len(conn.buf) > MAX_HEAD + MAX_BODY:
                break
            if not (isinstance(conn.sock, ssl.SSLSocket) and conn.sock.pending()):
                break
        self._advance(conn)

    def _advance(self, conn: _Conn) -> bool:
        """Move a connection on with what its buffer holds: a whole request goes to a handler.
        True when the connection left the loop's hands (to a handler, or closed), False while it
        waits for more."""
        if conn.phase == IDLE and conn.buf:
            conn.phase = HEAD
            conn.deadline = time.monotonic() + self.cfg.header_timeout
            self._due(conn.deadline)
        if conn.phase == HEAD:
            end = conn.buf.find(b"\r\n\r\n")
            if end < 0:
                if len(conn.buf) > MAX_HEAD:
                    self._reject(conn, 431, "request head too large")
                    return True
                return False
            if end > MAX_HEAD:
                self._reject(conn, 431, "request head too large")
                return True
            try:
                conn.request = parse_head(bytes(conn.buf[:end]))
            except BadRequest as exc:
                self._reject(conn, exc.code, str(exc))
                return True
            del conn.buf[:end + 4]
            conn.phase = BODY
        if conn.phase == BODY:
            assert conn.request is not None
            if len(conn.buf) < conn.request.length:
                return False
            del conn.buf[:conn.request.length]       # a body on GET: read and dropped
            self._dispatch(conn)
            return True
        return False

    def _reject(self, conn: _Conn, code: int, message: str) -> None:
        """Answer a bad request from the loop (best effort, never blocking) and close."""
        body = (message + "\n").encode()
        head = (f"HTTP/1.1 {code} {REASONS.get(code, 'Error')}\r\nServer: fabricmon\r\nContent-Type: {TEXT}\r\n"
                f"Content-Length: {len(body)}\r\nConnection: close\r\n\r\n").encode()
        try:
            conn.sock.send(head + body)
        except (OSError, ssl.SSLError):
            pass
        self._drop(conn, "bad_request", f"{code} {message}")

    def _dispatch(self, conn: _Conn) -> None:
        assert conn.request is not None
        path = conn.request.target.partition("?")[0]
        pool = self._pages if path == "/" else self._scrapes
        with self._lock:
            self._conns.pop(conn, None)
            self._busy += 1
        if conn.registered:
            conn.registered = False
            try:
                self._sel.unregister(conn.sock)
            except (KeyError, ValueError):
                pass
        if not pool.submit(conn):
            with self._lock:
                self._busy -= 1
                self._conns[conn] = None
            self._sel.register(conn.sock, selectors.EVENT_READ, conn)
            conn.registered = True
            conn.events = selectors.EVENT_READ
            self._reject_busy(conn)

    def _reject_busy(self, conn: _Conn) -> None:
        body = b"fabricmon is busy; try again\n"
        head = (f"HTTP/1.1 503 Service Unavailable\r\nServer: fabricmon\r\nContent-Type: {TEXT}\r\n"
                f"Retry-After: 1\r\nContent-Length: {len(body)}\r\nConnection: close\r\n\r\n").encode()
        try:
            conn.sock.send(head + body)
        except (OSError, ssl.SSLError):
            pass
        self._drop(conn, "busy", "handler queue full")

    def _take_back(self) -> None:
        """Answers the handlers made: the loop writes them (non-blocking, under write_timeout),
        so a client that reads slowly holds its connection, never a handler."""
        while True:
            try:
                conn = self._returned.popleft()
            except IndexError:
                return
            if self._stopping or conn.phase == DEAD:
                self._close(conn)
                continue
            conn.phase = WRITE
            conn.deadline = time.monotonic() + self.cfg.write_timeout - DIRECT_WRITE
            self._due(conn.deadline)
            # registered for what comes next: the rest of the answer, or (the handler sent it all, as
            # it does for a scraper that reads) the next request, so that _write need not re-register
            conn.events = selectors.EVENT_WRITE if conn.out else selectors.EVENT_READ
            with self._lock:
                self._conns[conn] = None
            try:
                self._sel.register(conn.sock, conn.events, conn)
            except (ValueError, OSError):
                self._close(conn)
                continue
            conn.registered = True
            self._write(conn)

    def _write(self, conn: _Conn) -> None:
        for _ in range(4):                  # bounded: the loop serves everyone a little at a time
            if not conn.out:
                break
            buf = conn.out[0]
            try:
                n = conn.sock.send(buf[:WRITE_CHUNK])
            except (BlockingIOError, InterruptedError, ssl.SSLWantWriteError):
                self._watch(conn, selectors.EVENT_WRITE)
                return
            except ssl.SSLWantReadError:
                self._watch(conn, selectors.EVENT_READ)
                return
            except (OSError, ssl.SSLError) as exc:
                self._drop(conn, "disconnect", str(exc) or type(exc).__name__)
                return
            if n >= len(buf):
                conn.out.popleft()
            else:
                conn.out[0] = buf[n:]
        if conn.out:
            self._watch(conn, selectors.EVENT_WRITE)
            return
        if not conn.keep or self._stopping:
            self._close(conn)
            return
        conn.phase, conn.request = IDLE, None
        conn.deadline = time.monotonic() + self.cfg.idle_timeout
        self._due(conn.deadline)
        self._watch(conn, selectors.EVENT_READ)
        if conn.buf or (isinstance(conn.sock, ssl.SSLSocket) and conn.sock.pending()):
            self._ready(conn)               # a pipelined request, already read

    def _sweep(self, now: float) -> float:
        """Close the connections past their deadline, end a pause that is over; returns when to sweep
        next: the next deadline, within SWEEP_IDLE while any connection is open (inf when none is)."""
        if self._paused_until and now >= self._paused_until:
            self._paused_until = 0.0
            self._sel.register(self._listener, selectors.EVENT_READ, "listen")
        with self._lock:
            late = [c for c in self._conns if c.deadline <= now]
            soonest = min((c.deadline for c in self._conns if c.deadline > now), default=math.inf)
            if self._conns or self._busy:
                soonest = min(soonest, now + SWEEP_IDLE)     # a handler may hand one back: see it within this
        if self._paused_until:
            soonest = min(soonest, self._paused_until)
        for c in late:
            if c.phase == IDLE:
                self._close(c)               # an idle keep-alive connection: closed quietly
            elif c.phase == WRITE:
                self._drop(c, "timeout", f"answer not taken within {self.cfg.write_timeout:g}s")
            else:
                what = "TLS handshake" if c.phase == HANDSHAKE else "request head"
                self._drop(c, "timeout", f"no complete {what} within {self.cfg.header_timeout:g}s")
        return soonest

    # --- the handlers: they make the answer, the loop sends it ----------------------------------

    def _handle(self, conn: _Conn) -> None:
        try:
            self._answer(conn)
        except Exception as exc:         # a bug closes this connection, never a traceback flood
            log.error("request handling failed", peer=conn.peer, error=f"{type(exc).__name__}: {exc}")
            conn.out.clear()
            conn.keep = False
        finally:
            if not self._hand_back(conn):
                with self._lock:
                    self._busy -= 1
                self._returned.append(conn)
                self._wake()

    def _hand_back(self, conn: _Conn) -> bool:
        """A connection answered in full goes back from the handler itself, without waking the loop:
        closed, or (keep-alive) registered idle for its next request. False where the loop must take
        it (an answer still to send, a pipelined request already read, the server stopping)."""
        if conn.out or conn.phase == DEAD or conn.buf or self._stopping or (
                isinstance(conn.sock, ssl.SSLSocket) and conn.sock.pending()):
            return False
        if not conn.keep:
            with self._lock:
                self._busy -= 1
            try:
                conn.sock.close()
            except OSError:
                pass
            return True
        conn.phase, conn.request = IDLE, None
        conn.deadline = time.monotonic() + self.cfg.idle_timeout
        conn.events = selectors.EVENT_READ
        with self._lock:
            self._busy -= 1
            self._conns[conn] = None
        conn.registered = True      # before the loop can see an event of it
        try:
            self._sel.register(conn.sock, selectors.EVENT_READ, conn)    # thread-safe: one epoll_ctl
        except Exception:           # the selector closed under us (stop): the connection goes with it
            conn.registered = False
            self._close(conn)
            return True
        if conn.deadline < self._next_sweep:        # rare: an idle timeout shorter than the loop's sleep
            self._next_sweep = conn.deadline
            self._wake()
        return True

    def _answer(self, conn: _Conn) -> None:
        req = conn.request
        assert req is not None
        t0 = time.monotonic()
        try:
            code, body, headers = self._route(req)
        except Exception as exc:         # a bug answers 500 on this connection
            log.error("request handling failed", peer=conn.peer, error=f"{type(exc).__name__}: {exc}")
            code, body, headers = 500, b"fabricmon: internal error (see the log)\n", {"Content-Type": TEXT}
        head_only = req.method == "HEAD"
        conn.keep = req.keep_alive and (code < 500 or code == 503)
        lines = [f"HTTP/1.1 {code} {REASONS.get(code, 'Error')}", "Server: fabricmon"]
        for k, v in {**self.web.headers, **headers}.items():
            lines.append(f"{k}: {v}")
        lines.append(f"Content-Length: {len(body)}")
        lines.append("Connection: keep-alive" if conn.keep else "Connection: close")
        conn.out.clear()
        conn.out.append(memoryview(("\r\n".join(lines) + "\r\n\r\n").encode("latin-1")))
        if body and not head_only:
            conn.out.append(memoryview(body))       # the cached bytes themselves, never a copy
        conn.served += 1
        self._send_direct(conn)
        if self.cfg.access_log:
            log.info("http request", peer=conn.peer, method=req.method, path=req.target[:200], status=code,
                     bytes=0 if head_only else len(body), duration_ms=round((time.monotonic() - t0) * 1000, 2))

    def _send_direct(self, conn: _Conn) -> None:
        """Send from the handler's own thread while the client takes the answer (Prometheus
        does), for at most DIRECT_WRITE seconds and only while it keeps taking it; what is left,
        the loop sends. A client that stops reading costs a handler STALL_MS, no more."""
        deadline = time.monotonic() + DIRECT_WRITE
        poller: select.poll | None = None
        plain = not isinstance(conn.sock, ssl.SSLSocket)
        out = conn.out
        while out:
            try:
                if plain and len(out) > 1:
                    # the head and the body in one system call (and one segment where they fit)
                    n = conn.sock.sendmsg([out[0], out[1][:4 * WRITE_CHUNK]])
                else:
                    n = conn.sock.send(out[0][:4 * WRITE_CHUNK])
            except (BlockingIOError, InterruptedError, ssl.SSLWantWriteError):
                left = deadline - time.monotonic()
                if poller is None and left > 0:
                    poller = select.poll()
                    poller.register(conn.sock, select.POLLOUT)
                if left <= 0 or poller is None or not poller.poll(min(STALL_MS, left * 1000)):
                    return          # out of time, or the client stopped taking it: the loop goes on
                continue
            except ssl.SSLWantReadError:
                return
            except (OSError, ssl.SSLError) as exc:
                self.errors.record("disconnect", str(exc) or type(exc).__name__, conn.peer)
                conn.phase = DEAD
                return
            while n and out:
                buf = out[0]
                if n >= len(buf):
                    out.popleft()
                    n -= len(buf)
                else:
                    out[0] = buf[n:]
                    n = 0

    def _route(self, req: Request) -> tuple[int, bytes, dict[str, str]]:
        expo = self.expo
        if req.method not in ("GET", "HEAD"):
            self.errors.record("bad_request", f"method {req.method[:16]}")
            return 405, b"only GET and HEAD\n", {"Allow": "GET, HEAD", "Content-Type": TEXT}
        raw_path, _, query = req.target.partition("?")
        path = unquote(raw_path)
        if self.auth is not None and path not in self.cfg.unauthenticated_paths:
            ok = self.auth.check(req.headers.get("authorization"))
            if ok is None:
                self.errors.record("busy", "basic auth checks in progress")
                return 503, b"fabricmon is busy; try again\n", {"Retry-After": "1", "Content-Type": TEXT}
            if not ok:
                self.errors.record("unauthorized", f"{req.method} {raw_path[:100]}")
                return 401, b"unauthorized\n", {"WWW-Authenticate": 'Basic realm="fabricmon", charset="UTF-8"',
                                                "Content-Type": TEXT}
        if path == "/metrics":
            try:
                sets = collect_sets(query)
            except ValueError as exc:
                self.errors.record("bad_request", str(exc)[:200])
                return 400, f"{exc}\n".encode(), {"Content-Type": TEXT}
            try:
                body, gz = expo.get("gzip" in req.headers.get("accept-encoding", ""), sets)
            except Exception as exc:        # a render bug: this scrape fails, the daemon goes on
                log.exception("rendering the exposition failed")
                return 500, f"fabricmon could not render /metrics: {type(exc).__name__}\n".encode(), \
                    {"Content-Type": TEXT}
            h = {"Content-Type": CONTENT_TYPE_LATEST}
            if gz:
                h["Content-Encoding"] = "gzip"
            return 200, body, h
        if path == "/healthz":
            code = 200 if expo.healthy else 503
            return code, (("ok: " if expo.healthy else "unhealthy: ") + expo.health_detail + "\n").encode(), \
                {"Content-Type": TEXT}
        if path == "/readyz":
            why = expo.view.not_ready
            return (503 if why else 200), (f"not ready: {why}\n" if why else "ready\n").encode(), {"Content-Type": TEXT}
        if path == FINDINGS_PATH:
            doc = expo.verdict_json(expo.view)
            if doc is None:
                return 503, b'{"error": "no poll completed yet"}\n', {"Content-Type": "application/json"}
            return 200, doc, {"Content-Type": "application/json"}
        if path == "/":
            return self._page(query)
        if path == RUNBOOKS_PATH:       # the shipped runbooks: every alert's default runbook_url
            return 200, runbooks.page(), {**PAGE_HEADERS, "Content-Type": HTML}
        if path.startswith("/static/") and (asset := static_file(path[len("/static/"):])) is not None:
            return 200, asset[0], {"Content-Type": asset[1], "X-Content-Type-Options": "nosniff",
                                   "Cache-Control": "max-age=300"}
        return 404, b"not found\n", {"Content-Type": TEXT}

    def _page(self, query: str) -> tuple[int, bytes, dict[str, str]]:
        pages = self.expo.view.pages
        if pages is None:
            return 503, WAITING_PAGE, {**PAGE_HEADERS, "Content-Type": HTML}
        try:
            q = dict(parse_qsl(query, max_num_fields=16))
        except ValueError:
            return 400, b"too many query fields\n", {**PAGE_HEADERS, "Content-Type": TEXT}
        headers = {**PAGE_HEADERS, "X-Fabricmon-Snapshot": f"{pages.snap.time:.3f}"}
        try:
            body = pages.get(q.pop("part", "page"), q)
        except Busy as exc:
            self.errors.record("busy", str(exc))
            return 503, f"fabricmon: {exc}; /metrics is unaffected; try again\n".encode(), \
                {**headers, "Retry-After": str(exc.retry_after), "Content-Type": TEXT}
        except Exception as e:          # a page bug must not cost a scrape or the daemon
            log.error("page rendering failed", query=query[:200], error=f"{type(e).__name__}: {e}")
            return 500, b"fabricmon could not render this page; /metrics is unaffected (see the log)\n", \
                {**headers, "Content-Type": TEXT}
        if body is None:
            return 404, b"no such part, port or switch\n", {**headers, "Content-Type": TEXT}
        return 200, body, {**headers, "Content-Type": HTML}


__all__ = ["ERROR_KINDS", "Exposition", "HttpErrors", "ListenError", "MetricsServer", "View", "parse_head"]
