"""The server's bounds one at a time, in process, on loopback: the whole-head deadline, the
keep-alive idle timeout, the connection cap (and its sizing from RLIMIT_NOFILE), page variants
keyed only by what a part understands, the render gate, request-head parsing and the
exporter-toolkit web config's errors."""

from __future__ import annotations

import http.client
import select
import socket
import sys
import time
from pathlib import Path

import pytest

from fabricmon import config as fconfig
from fabricmon.config import ConfigError
from fabricmon.serve.settings import ServeConfig
from fabricmon.pages import Busy, Pages, RenderGate
from fabricmon.serve import server as srvmod
from fabricmon.serve import webconfig
from fabricmon.serve.server import BadRequest, Exposition, MetricsServer, parse_head

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from fabric_snap import fabric_snapshot  # noqa: E402

from fabricmon.sim.fabric import director_netfile  # noqa: E402
from helpers import wait_until  # noqa: E402


@pytest.fixture(scope="module")
def snap():
    """A small director-core fabric (4 leaves, a 4-line chassis) through the real FabricModel."""
    return fabric_snapshot(director_netfile(), sweeps=2)


@pytest.fixture
def serve(request):
    servers = []

    def start(cfg: ServeConfig, pages: Pages | None = None) -> MetricsServer:
        expo = Exposition()
        expo.set(b"# fabricmon\nfabricmon_build_info 1\n", time.time())
        expo.healthy = True
        expo.pages = pages
        s = MetricsServer("127.0.0.1", 0, expo, serve=cfg)
        s.start()
        servers.append(s)
        return s
    yield start
    for s in servers:
        s.stop()


def get(port: int, path: str = "/metrics") -> tuple[int, bytes]:
    c = http.client.HTTPConnection("127.0.0.1", port, timeout=5)
    try:
        c.request("GET", path)
        r = c.getresponse()
        return r.status, r.read()
    finally:
        c.close()


def closed_after(sock: socket.socket, trickle: bool, limit: float) -> float:
    """Seconds until the server closes `sock` (trickling a header byte every 0.1 s if asked)."""
    t0 = time.monotonic()
    sock.settimeout(0.1)
    while time.monotonic() - t0 < limit:
        try:
            if trickle:
                sock.send(b"X")
            if sock.recv(1024) == b"":
                return time.monotonic() - t0
        except socket.timeout:
            continue
        except OSError:
            return time.monotonic() - t0
    return float("inf")


def test_the_whole_head_has_a_deadline_however_it_trickles(serve):
    s = serve(ServeConfig(header_timeout=0.6))
    with socket.create_connection(("127.0.0.1", s.port)) as c:
        c.sendall(b"GET /metrics HTTP/1.1\r\nX-Slow: ")
        took = closed_after(c, trickle=True, limit=5)
    assert 0.5 <= took < 1.5, took
    assert s.errors.counts["timeout"] == 1
    assert get(s.port)[0] == 200


def test_keep_alive_connections_close_when_idle(serve):
    s = serve(ServeConfig(idle_timeout=0.5))
    c = http.client.HTTPConnection("127.0.0.1", s.port, timeout=5)
    c.request("GET", "/metrics")
    r = c.getresponse()
    assert r.status == 200 and r.getheader("Connection") == "keep-alive"
    r.read()
    c.request("GET", "/healthz")                     # the same connection, kept alive
    assert c.getresponse().read().startswith(b"ok")
    took = closed_after(c.sock, trickle=False, limit=5)
    assert 0.4 <= took < 1.5, took
    assert s.errors.counts["timeout"] == 0           # an idle close is not an error
    c.close()


def test_a_full_server_closes_the_oldest_waiting_connection_for_a_new_one(serve):
    s = serve(ServeConfig(max_connections=8))
    assert s.max_connections == 8
    silent = [socket.create_connection(("127.0.0.1", s.port)) for _ in range(20)]
    try:
        # the server has taken all 20 (each past the 8th evicting the oldest)
        wait_until(lambda: s.errors.counts["evicted"] >= 12, 5, "the 20 silent connections taken")
        assert s.open_connections <= 8
        t0 = time.monotonic()
        assert get(s.port)[0] == 200
        assert time.monotonic() - t0 < 0.5
        assert s.errors.counts["evicted"] >= 12
    finally:
        for c in silent:
            c.close()


def test_the_connection_cap_leaves_half_the_descriptors_to_the_sources(monkeypatch):
    monkeypatch.setattr(srvmod.resource, "getrlimit", lambda what: (256, 256))
    assert srvmod.connection_cap(512) == 112
    monkeypatch.setattr(srvmod.resource, "getrlimit", lambda what: (65536, 65536))
    assert srvmod.connection_cap(512) == 512


def test_head_answers_without_a_body_and_the_server_names_no_version(serve):
    s = serve(ServeConfig())
    c = http.client.HTTPConnection("127.0.0.1", s.port, timeout=5)
    c.request("HEAD", "/metrics")
    r = c.getresponse()
    assert r.status == 200 and r.read() == b"" and int(r.getheader("Content-Length")) > 0
    assert r.getheader("Server") == "fabricmon"
    c.close()


@pytest.mark.parametrize("head,code", [
    (b"GET / HTTP/1.1", None), (b"GET /metrics HTTP/1.0\r\nConnection: keep-alive", None),
    (b"GET  / HTTP/1.1", 400), (b"G\xffT / HTTP/1.1", 400), (b"GET / HTTP/3", 505),
    (b"GET / HTTP/1.1\r\nNoColon", 400), (b"GET / HTTP/1.1\r\nContent-Length: -1", 400),
    (b"GET / HTTP/1.1\r\nContent-Length: \xc2\xb2", 400), (b"GET / HTTP/1.1\r\nTransfer-Encoding: gzip", 501),
    (b"GET / HTTP/1.1\r\n" + b"A: b\r\n" * 101, 431),
])
def test_parse_head(head: bytes, code: int | None) -> None:
    if code is None:
        req = parse_head(head)
        assert req.keep_alive and req.length == 0
    else:
        with pytest.raises(BadRequest) as exc:
            parse_head(head)
        assert exc.value.code == code


def test_page_variants_are_keyed_only_by_what_the_part_understands(serve, snap):
    gate = RenderGate(rate=100, burst=100, budget=10)
    s = serve(ServeConfig(), Pages(snap, gate))
    assert get(s.port, "/")[0] == 200
    for i in range(20):
        assert get(s.port, f"/?n={i}&utm={i}")[0] == 200
    assert gate.renders == 1                               # one render: the rest are the cached page
    for i in range(5):
        assert get(s.port, f"/?part=live&expand=9-{i:016x},junk,,")[0] == 200
    assert gate.renders == 2                               # unknown groups: the plain live part, once
    guid = next(iter(snap.fabric.switches))
    level = snap.fabric.levels.get(guid, 0)
    a = get(s.port, f"/?part=live&expand={level}-{guid},{level}-{guid}")
    b = get(s.port, f"/?part=live&expand=nonsense,{level}-{guid}")
    assert a == b and gate.renders == 3
    assert get(s.port, f"/?part=switch&guid=0x{guid.upper()}")[0] == 200
    assert get(s.port, "/?part=switch&guid=ffffffffffffffff")[0] == 404
    assert get(s.port, "/?part=switch")[0] == 404


def test_the_render_gate_refuses_rather_than_queues():
    gate = RenderGate(rate=1, burst=2, budget=0.5)
    assert gate.run("page", lambda: b"x") == b"x"
    assert gate.run("page", lambda: b"y") == b"y"
    with pytest.raises(Busy) as exc:                       # over the rate
        gate.run("page", lambda: b"z")
    assert exc.value.retry_after >= 1
    slow = RenderGate(rate=100, burst=100, budget=0.1)
    slow.run("live", lambda: time.sleep(0.2) or b"slow")   # learns that "live" takes 0.2 s
    with pytest.raises(Busy):
        slow.run("live", lambda: b"again")                 # expected past the budget: refused at once
    assert slow.run("switch", lambda: b"other part") == b"other part"


def test_a_page_render_over_the_gate_is_503_and_the_scrape_is_untouched(serve, snap):
    gate = RenderGate(rate=0.01, burst=1, budget=10)
    s = serve(ServeConfig(), Pages(snap, gate))
    assert get(s.port, "/")[0] == 200
    c = http.client.HTTPConnection("127.0.0.1", s.port, timeout=5)
    c.request("GET", "/?part=live&expand=x")               # cached? no: "live" is another part
    r = c.getresponse()
    assert r.status == 503 and int(r.getheader("Retry-After")) >= 1
    r.read()
    c.close()
    assert get(s.port)[0] == 200
    assert s.errors.counts["busy"] == 1


# --- the exporter-toolkit web config ---------------------------------------------------------

HASH = "$2y$10$" + "a" * 53


@pytest.mark.parametrize("doc,key", [
    ({"tls_server_config": {"cert_file": "c"}}, "tls_server_config"),
    ({"tls_server_config": {"cert_file": "c", "key_file": "k", "client_auth_type": "Sometimes"}},
     "tls_server_config.client_auth_type"),
    ({"tls_server_config": {"cert_file": "c", "key_file": "k", "client_auth_type": "RequireAndVerifyClientCert"}},
     "tls_server_config.client_auth_type"),
    ({"tls_server_config": {"cert_file": "c", "key_file": "k", "min_version": "TLS9"}}, "tls_server_config.min_version"),
    ({"tls_server_config": {"cert_file": "c", "key_file": "k", "cipher_suites": ["X"]}}, "tls_server_config.cipher_suites"),
    ({"tls_server_config": {"cert_file": "c", "key_file": "k", "certfile": "x"}}, "tls_server_config.certfile"),
    ({"basic_auth_users": {"u": "plaintext"}}, "basic_auth_users.u"),
    ({"basic_auth_users": ["u"]}, "basic_auth_users"),
    ({"http_server_config": {"headers": {"Set-Cookie": "x"}}}, "http_server_config.headers.Set-Cookie"),
    ({"basic_auth": {}}, "basic_auth"),
])
def test_web_config_errors_name_the_key(doc: dict, key: str) -> None:
    with pytest.raises(ConfigError) as exc:
        webconfig.from_dict(doc, "/etc/fabricmon/web.yml", check_paths=False)
    assert exc.value.key == f"server.web_config_file: {key}", exc.value


def test_web_config_reads_exporter_toolkit_files(tmp_path: Path) -> None:
    (tmp_path / "tls").mkdir()
    for f in ("tls/s.crt", "tls/s.key", "tls/ca.crt"):
        (tmp_path / f).write_text("x")
    path = tmp_path / "web.yml"
    path.write_text(f"tls_server_config:\n  cert_file: tls/s.crt\n  key_file: {tmp_path}/tls/s.key\n"
                    f"  client_ca_file: tls/ca.crt\n  min_version: TLS13\n"
                    f"http_server_config:\n  http2: true\n  headers:\n    Strict-Transport-Security: max-age=31536000\n"
                    f"basic_auth_users:\n  prometheus: '{HASH}'\n")
    web = webconfig.load(str(path))
    assert web.tls.cert_file == str(tmp_path / "tls" / "s.crt")             # relative to the file
    assert web.tls.client_auth == webconfig.ssl.CERT_REQUIRED                # a CA alone requires and verifies
    assert web.tls.min_version == webconfig.ssl.TLSVersion.TLSv1_3
    assert web.users == {"prometheus": HASH.encode()}
    assert web.headers == {"Strict-Transport-Security": "max-age=31536000"}
    path.write_text("tls_server_config:\n  cert_file: missing.crt\n  key_file: tls/s.key\n")
    with pytest.raises(ConfigError, match="missing.crt is not a readable file"):
        webconfig.load(str(path))


def test_server_keys_in_fabricmon_yml(tmp_path: Path) -> None:
    web = tmp_path / "web.yml"
    web.write_text("{}\n")
    cfg = fconfig.from_dict({"server": {"web_config_file": str(web), "max_connections": 64, "header_timeout": 3,
                                        "access_log": True, "unauthenticated_paths": ["/healthz", "/"]}})
    assert cfg.serve.web_config_file == str(web) and cfg.serve.max_connections == 64
    assert cfg.serve.unauthenticated_paths == ("/healthz", "/") and cfg.serve.access_log
    for bad, key in (({"web_config_file": str(tmp_path / "nope.yml")}, "server.web_config_file"),
                     ({"max_connections": 2}, "server.max_connections"),
                     ({"unauthenticated_paths": "healthz"}, "server.unauthenticated_paths"),
                     ({"access_log": "yes"}, "server.access_log"),
                     ({"idle_timeout": 0}, "server.idle_timeout")):
        with pytest.raises(ConfigError) as exc:
            fconfig.from_dict({"server": bad})
        assert exc.value.key == key
    # TLS in one place: server.tls with a web config that has tls_server_config is an error,
    # with one that has only basic_auth_users it is not
    both = fconfig.from_dict({"server": {"web_config_file": str(web), "tls": {"cert_file": str(web),
                                                                                 "key_file": str(web)}}})
    assert webconfig.for_config(both).tls is None
    web.write_text(f"tls_server_config:\n  cert_file: {web}\n  key_file: {web}\n")
    with pytest.raises(ConfigError) as exc:
        webconfig.for_config(both)
    assert exc.value.key == "server.tls"


def test_basic_auth_checks(tmp_path: Path) -> None:
    import base64

    import bcrypt
    auth = webconfig.BasicAuth({"u": bcrypt.hashpw(b"pw", bcrypt.gensalt(4))})

    def hdr(s: str) -> str:
        return "Basic " + base64.b64encode(s.encode()).decode()
    assert auth.check(hdr("u:pw")) is True
    assert auth.check(hdr("u:pw")) is True                   # remembered
    assert auth.check(hdr("u:wrong")) is False
    assert auth.check(hdr("v:pw")) is False
    assert auth.check(hdr("upw")) is False
    assert auth.check("Bearer x") is False and auth.check(None) is False
    assert auth.check("Basic ####") is False


def test_run_refuses_a_bad_web_config_with_exit_2(tmp_path: Path) -> None:
    import subprocess
    web = tmp_path / "web.yml"
    web.write_text("tls_server_config:\n  cert_file: s.crt\n  key_file: s.key\n  min_version: TLS1.2\n")
    (tmp_path / "s.crt").write_text("x")
    (tmp_path / "s.key").write_text("x")
    cfg = tmp_path / "f.yml"
    cfg.write_text("server: {address: 127.0.0.1, port: 0}\nsources: {sysfs: {enabled: false}}\n")
    for arg, msg in ((str(tmp_path / "nope.yml"), "bad --web.config.file"),
                     (str(web), "server.web_config_file: tls_server_config.min_version")):
        res = subprocess.run([sys.executable, "-m", "fabricmon", "run", "--config", str(cfg), "--web.config.file", arg],
                             capture_output=True, text=True, timeout=60)
        assert res.returncode == 2 and msg in res.stderr, res.stderr


def test_clients_that_never_read_hold_their_connection_not_a_handler(serve):
    s = serve(ServeConfig())
    object.__setattr__(s, "cfg", ServeConfig(write_timeout=1.0))
    big = b"# padding\n" * (3 << 20)                   # 30 MiB: more than the socket buffers take
    s.expo.set(big, time.time())
    readers = []
    try:
        for _ in range(3 * srvmod.SCRAPE_WORKERS):      # more than there are handlers
            c = socket.create_connection(("127.0.0.1", s.port))
            c.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
            c.sendall(b"GET /metrics HTTP/1.1\r\n\r\n")
            readers.append(c)
        # the server is writing every answer: each reader has bytes it does not read
        wait_until(lambda: len(select.select(readers, [], [], 0)[0]) == len(readers), 5, "an answer to every reader")
        t0 = time.monotonic()
        assert get(s.port, "/healthz")[0] == 200
        assert time.monotonic() - t0 < 1.0
        # the write timeout (1 s) ends them
        wait_until(lambda: s.errors.counts["timeout"] >= len(readers) - 2, 5, "the write timeouts counted")
        assert s.errors.counts["timeout"] >= len(readers) - 2
        assert s.open_connections <= 2
    finally:
        for c in readers:
            c.close()


def test_http_errors_family_passes_promtool() -> None:
    import subprocess

    from fabricmon.exporter import render
    from fabricmon.model.snapshot import BuildStats, Snapshot
    from helpers import promtool as find_promtool
    promtool = find_promtool()
    snap = Snapshot(time=1.0, findings=[], sources={}, builds=BuildStats(buckets=[0] * 10),
                    http_errors={k: i for i, k in enumerate(srvmod.ERROR_KINDS)})
    body = render(snap)
    assert b'fabricmon_http_errors_total{kind="tls_handshake"} 2.0' in body
    res = subprocess.run([promtool, "check", "metrics"], input=body, capture_output=True, timeout=60)
    assert res.returncode == 0, res.stdout + res.stderr
