"""The exporter-toolkit web config (`--web.config.file`, as node_exporter and snmp_exporter read
it): `tls_server_config` and `basic_auth_users` (bcrypt hashes), plus `http_server_config.headers`.
https://github.com/prometheus/exporter-toolkit/blob/master/docs/web-configuration.md

Relative file names are relative to the web config file's directory, as exporter-toolkit reads
them. Every error names the key (`server.web_config_file: tls_server_config.min_version`)."""

from __future__ import annotations

import base64
import binascii
import hashlib
import os
import ssl
import threading
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any


from fabricmon.config import Config, yaml_document
from fabricmon.schema import ConfigError
from fabricmon.serve.settings import TLSConfig

KEY = "server.web_config_file"
TLS_VERSIONS = {"TLS10": ssl.TLSVersion.TLSv1, "TLS11": ssl.TLSVersion.TLSv1_1,
                "TLS12": ssl.TLSVersion.TLSv1_2, "TLS13": ssl.TLSVersion.TLSv1_3}
# exporter-toolkit's client_auth_type -> what OpenSSL does. Python verifies every certificate it
# is given, so the two "Request"/"RequireAny" types verify against client_ca_file as well.
CLIENT_AUTH = {"NoClientCert": ssl.CERT_NONE, "RequestClientCert": ssl.CERT_OPTIONAL,
               "VerifyClientCertIfGiven": ssl.CERT_OPTIONAL, "RequireAnyClientCert": ssl.CERT_REQUIRED,
               "RequireAndVerifyClientCert": ssl.CERT_REQUIRED}
# only these response headers may be set (as exporter-toolkit allows)
HEADERS = ("Strict-Transport-Security", "X-Content-Type-Options", "X-Frame-Options", "X-XSS-Protection",
           "Content-Security-Policy")


@dataclass(frozen=True, slots=True)
class TLSSettings:
    cert_file: str
    key_file: str
    client_ca_file: str | None = None
    client_auth: ssl.VerifyMode = ssl.CERT_NONE
    min_version: ssl.TLSVersion = ssl.TLSVersion.TLSv1_2
    max_version: ssl.TLSVersion | None = None

    def context(self) -> ssl.SSLContext:
        """Raises OSError/ssl.SSLError when the files cannot be loaded."""
        ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        ctx.minimum_version = self.min_version
        if self.max_version is not None:
            ctx.maximum_version = self.max_version
        ctx.load_cert_chain(self.cert_file, self.key_file)
        if self.client_ca_file:
            ctx.load_verify_locations(self.client_ca_file)
        ctx.verify_mode = self.client_auth
        return ctx


@dataclass(frozen=True, slots=True)
class WebConfig:
    tls: TLSSettings | None = None
    users: dict[str, bytes] = field(default_factory=dict)       # user -> bcrypt hash
    headers: dict[str, str] = field(default_factory=dict)
    path: str | None = None


def _mapping(value: Any, key: str, allowed: tuple[str, ...]) -> dict[str, Any]:
    if value is None:
        return {}
    if not isinstance(value, dict):
        raise ConfigError(f"{KEY}: {key}", f"expected a mapping, got {value!r}")
    for k in value:
        if k not in allowed:
            raise ConfigError(f"{KEY}: {key}.{k}" if key else f"{KEY}: {k}",
                              f"unknown key (allowed: {', '.join(allowed)})")
    return value


def _file(value: Any, key: str, base: Path, check: bool) -> str:
    if not isinstance(value, str) or not value:
        raise ConfigError(f"{KEY}: {key}", f"expected a file name, got {value!r}")
    p = Path(value) if os.path.isabs(value) else base / value
    if check and not p.is_file():
        raise ConfigError(f"{KEY}: {key}", f"{p} is not a readable file")
    return str(p)


def _tls(raw: Any, base: Path, check: bool) -> TLSSettings:
    t = _mapping(raw, "tls_server_config", ("cert_file", "key_file", "client_ca_file", "client_auth_type",
                                             "min_version", "max_version", "cipher_suites", "curve_preferences",
                                             "prefer_server_cipher_suites", "cert", "key"))
    for k in ("cipher_suites", "curve_preferences", "cert", "key"):
        if t.get(k):
            raise ConfigError(f"{KEY}: tls_server_config.{k}", "not supported by fabricmon (OpenSSL's defaults "
                              "for the TLS versions allowed are used; certificates come from cert_file/key_file)")
    if "cert_file" not in t or "key_file" not in t:
        raise ConfigError(f"{KEY}: tls_server_config", "cert_file and key_file must both be set")
    ca = _file(t["client_ca_file"], "tls_server_config.client_ca_file", base, check) if t.get("client_ca_file") else None
    auth_name = t.get("client_auth_type") or ("RequireAndVerifyClientCert" if ca else "NoClientCert")
    if auth_name not in CLIENT_AUTH:
        raise ConfigError(f"{KEY}: tls_server_config.client_auth_type",
                          f"expected one of {', '.join(CLIENT_AUTH)}, got {auth_name!r}")
    if CLIENT_AUTH[auth_name] != ssl.CERT_NONE and not ca:
        raise ConfigError(f"{KEY}: tls_server_config.client_auth_type", f"{auth_name} needs client_ca_file")
    versions = {}
    for k in ("min_version", "max_version"):
        v = t.get(k)
        if v is not None and v not in TLS_VERSIONS:
            raise ConfigError(f"{KEY}: tls_server_config.{k}", f"expected one of {', '.join(TLS_VERSIONS)}, got {v!r}")
        versions[k] = TLS_VERSIONS[v] if v is not None else None
    return TLSSettings(cert_file=_file(t["cert_file"], "tls_server_config.cert_file", base, check),
                       key_file=_file(t["key_file"], "tls_server_config.key_file", base, check),
                       client_ca_file=ca, client_auth=CLIENT_AUTH[auth_name],
                       min_version=versions["min_version"] or ssl.TLSVersion.TLSv1_2,
                       max_version=versions["max_version"])


def _users(raw: Any) -> dict[str, bytes]:
    if not raw:
        return {}
    if not isinstance(raw, dict):
        raise ConfigError(f"{KEY}: basic_auth_users", f"expected a mapping of user: bcrypt hash, got {raw!r}")
    users = raw
    out = {}
    for user, h in users.items():
        key = f"{KEY}: basic_auth_users.{user}"
        if not isinstance(user, str) or not user or ":" in user:
            raise ConfigError(key, "a user name is a non-empty string without ':'")
        if not isinstance(h, str) or not h.startswith(("$2a$", "$2b$", "$2y$")) or len(h) != 60:
            raise ConfigError(key, "expected a bcrypt hash ($2y$..., 60 characters; make one with "
                                   "`htpasswd -nBC 10 \"\" | tr -d ':\\n'`)")
        out[user] = h.encode()
    try:
        import bcrypt  # noqa: F401
    except ImportError as exc:      # a runtime dependency: only a broken install lacks it
        raise ConfigError(f"{KEY}: basic_auth_users", "needs the Python package bcrypt "
                                                      "(pip install bcrypt)") from exc
    return out


def from_dict(raw: Any, path: str | None = None, check_paths: bool = True) -> WebConfig:
    top = _mapping(raw, "", ("tls_server_config", "basic_auth_users", "http_server_config"))
    base = Path(path).parent if path else Path.cwd()
    http = _mapping(top.get("http_server_config"), "http_server_config", ("http2", "headers"))
    headers = _mapping(http.get("headers"), "http_server_config.headers", HEADERS)
    for k, v in headers.items():
        if not isinstance(v, str) or "\n" in v or "\r" in v:
            raise ConfigError(f"{KEY}: http_server_config.headers.{k}", f"expected a one-line string, got {v!r}")
    tls = _tls(top["tls_server_config"], base, check_paths) if top.get("tls_server_config") else None
    return WebConfig(tls=tls, users=_users(top.get("basic_auth_users")), headers=dict(headers), path=path)


def load(path: str, check_paths: bool = True) -> WebConfig:
    try:
        text = Path(path).read_text()
    except OSError as exc:
        raise ConfigError(KEY, f"cannot read {path}: {exc.strerror or exc}") from exc
    return loads(text, path, check_paths)


def loads(text: str, path: str, check_paths: bool = True) -> WebConfig:
    """A web config file's text, validated (load without the file)."""
    return from_dict(yaml_document(text, path, KEY) or {}, path, check_paths)


def for_config(cfg: Config) -> WebConfig | None:
    """The web config a daemon serves with (None: none configured). TLS is set in one place:
    server.tls or the file's tls_server_config, not both."""
    if not cfg.serve.web_config_file:
        return None
    web = load(cfg.serve.web_config_file)
    if web.tls is not None and cfg.tls.cert_file:
        raise ConfigError("server.tls", "set TLS in one place: server.tls or the web config file's "
                                        "tls_server_config, not both")
    return web


def from_tls_keys(tls: TLSConfig) -> TLSSettings | None:
    """The older `server.tls` keys, mapped onto the same settings (a client CA requires and
    verifies client certificates, as it always did)."""
    if not tls.cert_file or not tls.key_file:
        return None
    return TLSSettings(cert_file=tls.cert_file, key_file=tls.key_file, client_ca_file=tls.client_ca_file,
                       client_auth=ssl.CERT_REQUIRED if tls.client_ca_file else ssl.CERT_NONE)


class BasicAuth:
    """Checks `Authorization: Basic` against bcrypt hashes. A password that matched is
    remembered (by its SHA-256, for that user and hash), so a scrape pays bcrypt once; failures
    are checked one at a time (bcrypt is slow on purpose), and an unknown user costs the same
    as a wrong password."""

    MAX_REMEMBERED = 256

    def __init__(self, users: dict[str, bytes]):
        import bcrypt
        self._bcrypt = bcrypt
        self.users = users
        self._ok: dict[tuple[str, bytes], None] = {}
        self._slow = threading.Lock()
        self._dummy = bcrypt.hashpw(b"fabricmon-no-such-user", bcrypt.gensalt(10))

    def check(self, header: str | None, wait: float = 1.0) -> bool | None:
        """True: authenticated; False: not; None: too many checks in progress (answer 503)."""
        if not header or not header[:6].lower() == "basic ":
            return False
        try:
            user, sep, password = base64.b64decode(header[6:].strip(), validate=True).decode("utf-8").partition(":")
        except (binascii.Error, UnicodeDecodeError, ValueError):
            return False
        if not sep:
            return False
        pw = password.encode()
        h = self.users.get(user)
        memo = (user, hashlib.sha256(pw + (h or b"")).digest())
        if h is not None and memo in self._ok:
            return True
        if not self._slow.acquire(timeout=wait):
            return None
        try:
            ok = self._bcrypt.checkpw(pw, h if h is not None else self._dummy) and h is not None
        except ValueError:
            ok = False
        finally:
            self._slow.release()
        if ok:
            if len(self._ok) >= self.MAX_REMEMBERED:
                self._ok.clear()
            self._ok[memo] = None
        return ok


__all__ = ["BasicAuth", "TLSSettings", "WebConfig", "for_config", "from_dict", "from_tls_keys", "load", "loads"]
