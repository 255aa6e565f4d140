"""Serving securely: TLS, and client-certificate authentication, from the config."""

from __future__ import annotations

import http.client
import shutil
import ssl
import subprocess
import time
import urllib.error
import urllib.request

import pytest

from fabricmon.config import ConfigError, from_dict
from fabricmon.serve.daemon import Daemon
from fabricmon.host import LiveIO
from helpers import unavailable, wait_until


def openssl(*args, cwd):
    subprocess.run(["openssl", *args], cwd=cwd, check=True, capture_output=True)


@pytest.fixture
def pki(tmp_path):
    if not shutil.which("openssl"):
        unavailable("openssl not installed: the TLS tests need it to make a throwaway CA and certificates "
                    "(apt-get install openssl)")
    d = tmp_path
    openssl("req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "2", "-subj", "/CN=test-ca",
            "-keyout", "ca.key", "-out", "ca.crt", cwd=d)
    for name, cn in (("server", "127.0.0.1"), ("client", "prometheus")):
        openssl("req", "-newkey", "rsa:2048", "-nodes", "-subj", f"/CN={cn}", "-keyout", f"{name}.key",
                "-out", f"{name}.csr", cwd=d)
        ext = d / f"{name}.ext"
        ext.write_text("subjectAltName=IP:127.0.0.1\n" if name == "server" else "extendedKeyUsage=clientAuth\n")
        openssl("x509", "-req", "-in", f"{name}.csr", "-CA", "ca.crt", "-CAkey", "ca.key", "-CAcreateserial",
                "-days", "2", "-extfile", str(ext), "-out", f"{name}.crt", cwd=d)
    return d


def start(harness, tls):
    raw = harness.config()
    raw["server"]["tls"] = tls
    cfg = from_dict(raw)
    harness.daemon = Daemon(cfg, LiveIO(cfg.sysfs, cfg.procfs))
    harness.daemon.start()
    # until the first poll, /metrics has no body yet
    wait_until(lambda: harness.daemon.snapshot is not None, 20, "the first poll", interval=0.02)
    return harness.daemon.port


def test_tls_with_client_certificates(harness, pki):
    port = start(harness, {"cert_file": str(pki / "server.crt"), "key_file": str(pki / "server.key"),
                           "client_ca_file": str(pki / "ca.crt")})
    url = f"https://127.0.0.1:{port}/metrics"
    ctx = ssl.create_default_context(cafile=str(pki / "ca.crt"))
    with pytest.raises((urllib.error.URLError, ssl.SSLError, ConnectionResetError)):
        urllib.request.urlopen(url, context=ctx, timeout=5).read()          # no client certificate
    ctx.load_cert_chain(str(pki / "client.crt"), str(pki / "client.key"))
    body = urllib.request.urlopen(url, context=ctx, timeout=5).read().decode()
    assert "fabricmon_build_info" in body
    with pytest.raises((urllib.error.URLError, ConnectionError, http.client.HTTPException)):
        urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5).read()   # plain HTTP refused
    # the daemon still serves TLS clients after those failed handshakes
    assert "fabricmon_build_info" in urllib.request.urlopen(url, context=ctx, timeout=5).read().decode()


def test_tls_config_errors(harness, pki):
    raw = harness.config()
    raw["server"]["tls"] = {"cert_file": str(pki / "server.crt")}
    with pytest.raises(ConfigError, match="cert_file and key_file must be set together"):
        from_dict(raw)
    raw["server"]["tls"] = {"cert_file": str(pki / "server.crt"), "key_file": str(pki / "missing.key")}
    with pytest.raises(ConfigError, match="server.tls.key_file"):
        from_dict(raw)


def test_silent_client_does_not_block_other_scrapes(harness, pki):
    import socket
    port = start(harness, {"cert_file": str(pki / "server.crt"), "key_file": str(pki / "server.key")})
    silent = socket.create_connection(("127.0.0.1", port))      # connects, never handshakes
    try:
        ctx = ssl.create_default_context(cafile=str(pki / "ca.crt"))
        t0 = time.monotonic()
        body = urllib.request.urlopen(f"https://127.0.0.1:{port}/metrics", context=ctx, timeout=5).read()
        assert time.monotonic() - t0 < 3.0         # a blocked server would wait the 10 s handshake timeout
        assert b"fabricmon_build_info" in body
    finally:
        silent.close()
