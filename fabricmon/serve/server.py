"""HTTP(S) endpoint: /metrics serves the cached exposition of the last snapshot, /healthz
says whether polling is alive, / the page of the last snapshot (fabricmon.pages: the node
status page or the fabric map) with its static files under /static/. Nothing here ever waits
for a command."""

from __future__ import annotations

from collections.abc import Callable

import gzip
import json
import ssl
import threading
from typing import Any
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from urllib.parse import parse_qsl

import structlog
from prometheus_client.exposition import CONTENT_TYPE_LATEST

from fabricmon.config import TLSConfig
from fabricmon.pages import Pages, static_file
from fabricmon.report import FINDINGS_PATH


class Exposition:
    """The current exposition bytes (and a lazily built gzip copy), swapped atomically."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._body = b""
        self._gz: bytes | None = None
        self.updated = 0.0
        self.healthy = False
        self.health_detail = "no poll completed yet"
        # report.verdict() of the last snapshot, built when first asked for (check --daemon is rare;
        # snapshots are frequent): a callable until then
        self._verdict: Callable[[], dict[str, Any]] | dict[str, Any] | None = None
        self.pages: Pages | None = None      # the HTML views of the last snapshot

    @property
    def verdict(self) -> dict[str, Any] | None:
        v = self._verdict
        if callable(v):
            v = self._verdict = v()
        return v

    @verdict.setter
    def verdict(self, value: Callable[[], dict[str, Any]] | dict[str, Any] | None) -> None:
        self._verdict = value

    def verdict_json(self) -> bytes | None:
        doc = self.verdict
        if doc is None:
            return None
        # daemon_healthy: the daemon itself is polling (as /healthz), not the node's verdict (status)
        return json.dumps({**doc, "daemon_healthy": self.healthy}).encode()

    def set(self, body: bytes, updated: float) -> None:
        with self._lock:
            self._body, self._gz, self.updated = body, None, updated

    def get(self, want_gzip: bool) -> tuple[bytes, bool]:
        with self._lock:
            if not want_gzip or len(self._body) < 1024:
                return self._body, False
            if self._gz is None:
                self._gz = gzip.compress(self._body, compresslevel=1)
            return self._gz, True


log = structlog.get_logger("fabricmon.server")

# Pages load nothing from elsewhere: same-origin script and style only (an air-gapped cluster
# sees the same page), and no framing.
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


def make_handler(expo: Exposition) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        server_version = "fabricmon"
        protocol_version = "HTTP/1.1"
        timeout = 10          # a slow or silent client cannot hold a thread for long

        def setup(self) -> None:
            super().setup()
            if isinstance(self.request, ssl.SSLSocket):
                # The TLS handshake runs here, in the request's own thread, never in the
                # accept loop, so one slow client cannot stall every other scrape.
                self.request.do_handshake()

        def _send(self, code: int, body: bytes, ctype: str, gz: bool = False,
                  headers: dict[str, str] | None = None) -> None:
            self.send_response(code)
            self.send_header("Content-Type", ctype)
            for k, v in (headers or {}).items():
                self.send_header(k, v)
            self.send_header("Content-Length", str(len(body)))
            if gz:
                self.send_header("Content-Encoding", "gzip")
            self.end_headers()
            if self.command != "HEAD":
                self.wfile.write(body)

        def _page(self, query: str) -> None:
            pages = expo.pages
            if pages is None:
                self._send(503, WAITING_PAGE, HTML, headers=PAGE_HEADERS)
                return
            try:
                q = dict(parse_qsl(query, max_num_fields=8))
            except ValueError:
                self._send(400, b"too many query fields\n", "text/plain", headers=PAGE_HEADERS)
                return
            headers = {**PAGE_HEADERS, "X-Fabricmon-Snapshot": f"{pages.snap.time:.3f}"}
            try:
                body = pages.get(q.pop("part", "page"), q)
            except Exception as e:          # a page bug must not cost a scrape or the daemon
                log.error("page rendering failed", path=self.path, error=f"{type(e).__name__}: {e}")
                self._send(500, b"fabricmon could not render this page; /metrics is unaffected (see the log)\n",
                           "text/plain", headers=headers)
                return
            if body is None:
                self._send(404, b"no such part\n", "text/plain", headers=headers)
            else:
                self._send(200, body, HTML, headers=headers)

        def do_GET(self) -> None:  # noqa: N802
            path, _, query = self.path.partition("?")
            if path == "/metrics":
                body, gz = expo.get("gzip" in self.headers.get("Accept-Encoding", ""))
                self._send(200, body, CONTENT_TYPE_LATEST, gz)
            elif path == "/healthz":
                code = 200 if expo.healthy else 503
                self._send(code, (("ok: " if expo.healthy else "unhealthy: ") + expo.health_detail + "\n").encode(),
                           "text/plain; charset=utf-8")
            elif path == FINDINGS_PATH:
                body = expo.verdict_json()
                if body is None:
                    self._send(503, b'{"error": "no poll completed yet"}\n', "application/json")
                else:
                    self._send(200, body, "application/json")
            elif path == "/":
                self._page(query)
            elif path.startswith("/static/") and (asset := static_file(path[len("/static/"):])) is not None:
                self._send(200, asset[0], asset[1], headers={"X-Content-Type-Options": "nosniff",
                                                             "Cache-Control": "max-age=300"})
            else:
                self._send(404, b"not found\n", "text/plain")

        do_HEAD = do_GET

        def log_message(self, format: str, *args: object) -> None:  # silence per-request logs
            pass

    return Handler


class MetricsServer:
    def __init__(self, address: str, port: int, expo: Exposition, tls: TLSConfig | None = None):
        cls = ThreadingHTTPServer
        if ":" in address:
            import socket

            class V6(ThreadingHTTPServer):
                address_family = socket.AF_INET6
            cls = V6
        self.httpd = cls((address, port), make_handler(expo))
        self.httpd.daemon_threads = True
        if tls and tls.cert_file:
            ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
            ctx.minimum_version = ssl.TLSVersion.TLSv1_2
            ctx.load_cert_chain(tls.cert_file, tls.key_file)
            if tls.client_ca_file:
                ctx.load_verify_locations(tls.client_ca_file)
                ctx.verify_mode = ssl.CERT_REQUIRED
            self.httpd.socket = ctx.wrap_socket(self.httpd.socket, server_side=True,
                                                do_handshake_on_connect=False)
        self.thread = threading.Thread(target=self.httpd.serve_forever, name="fabricmon-http", daemon=True)

    @property
    def port(self) -> int:
        return self.httpd.server_address[1]

    @property
    def address(self) -> str:
        return str(self.httpd.server_address[0])

    def start(self) -> None:
        self.thread.start()

    def stop(self) -> None:
        self.httpd.shutdown()
        self.httpd.server_close()
