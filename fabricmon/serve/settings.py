"""The `server` section: the HTTP server of both daemons (serve/server.py) and its exporter-toolkit
web config, declared with fabricmon.schema beside the code that reads it; fabricmon/config/__init__.py composes
it (`Config.address`, `.port`, `.tls` and `.serve`).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Mapping

from fabricmon.exporter import counter_sets
from fabricmon.schema import (ConfigError, Context, Schema, boolean, existing_file, integer, listing, number,
                              section, string)

DEFAULT_PORT = 9879


@dataclass(frozen=True, slots=True)
class TLSConfig:
    cert_file: str | None = None
    key_file: str | None = None
    client_ca_file: str | None = None


@dataclass(frozen=True, slots=True)
class ServeConfig:
    """The HTTP server's bounds (serve/server.py) and its exporter-toolkit web config."""
    web_config_file: str | None = None      # tls_server_config, basic_auth_users (bcrypt), http_server_config
    unauthenticated_paths: tuple[str, ...] = ("/healthz", "/readyz")     # served without basic auth
    max_connections: int = 512              # open connections (fewer when RLIMIT_NOFILE is low)
    header_timeout: float = 5.0             # TLS handshake plus the whole request head, however slowly sent
    idle_timeout: float = 60.0              # a keep-alive connection between requests
    write_timeout: float = 10.0             # the client must take its answer within this
    backlog: int = 1024                     # listen backlog (the kernel caps it at net.core.somaxconn)
    access_log: bool = False                # one structured log line per request
    page_renders_per_second: float = 2.0    # uncached page renders, one at a time
    page_render_budget: float = 2.0         # refuse (503) a render not expected to end within this
    collect: tuple[str, ...] = ("default",)     # counter sets a scrape without collect[] gets (fabricmon/exporter/counter_sets.py)


def _tls_check(values: dict[str, Any], m: Mapping[str, Any], key: str, ctx: Context) -> None:
    if bool(values["cert_file"]) != bool(values["key_file"]):
        raise ConfigError(key, "cert_file and key_file must be set together")
    if values["client_ca_file"] and not values["cert_file"]:
        raise ConfigError(f"{key}.client_ca_file", "needs cert_file and key_file")
    for k in ("cert_file", "key_file", "client_ca_file"):
        if values[k]:
            existing_file(values[k], f"{key}.{k}", ctx)


TLS: Schema[TLSConfig] = Schema(
    fields=(string("cert_file", None, "HTTPS: the server certificate (PEM), with `key_file`", null=True,
                   kind="path", default_doc="unset"),
            string("key_file", None, "HTTPS: its private key", null=True, kind="path", default_doc="unset"),
            string("client_ca_file", None, "clients must present a certificate signed by this CA", null=True,
                   kind="path", default_doc="unset")),
    check=_tls_check, build=lambda v, key, ctx: TLSConfig(**v))


def _url_path(value: Any, key: str, ctx: Context) -> str:
    if not isinstance(value, str) or not value.startswith("/"):
        raise ConfigError(key, f"expected a path such as /healthz, got {value!r}")
    return value


def _counter_set(value: Any, key: str, ctx: Context) -> str:
    if not isinstance(value, str):
        raise ConfigError(key, f"expected a counter set name, got {value!r}")
    try:
        counter_sets.parse([value])
    except ValueError as exc:
        raise ConfigError(key, str(exc)) from None
    return value


@dataclass(frozen=True, slots=True)
class ServerSection:
    """The `server` section: where the node daemon listens, and how both daemons serve (ServeConfig)."""
    address: str
    port: int
    tls: TLSConfig
    serve: ServeConfig


def _server(v: dict[str, Any], key: str, ctx: Context) -> ServerSection:
    return ServerSection(address=v["address"], port=v["port"], tls=v["tls"],
                         serve=ServeConfig(**{k: v[k] for k in SERVE_KEYS}))


_D_SERVE = ServeConfig()
SERVER: Schema[ServerSection] = Schema(fields=(
    string("address", "0.0.0.0", "listen address for `/metrics`, `/healthz` and the pages"),
    integer("port", DEFAULT_PORT, "the node daemon's TCP port", lo=0, hi=65535),
    section("tls", TLS, ""),
    string("web_config_file", None, "exporter-toolkit web config (`tls_server_config`, `basic_auth_users` "
           "with bcrypt hashes, `http_server_config`); see [serving.md](serving.md)", null=True,
           check=existing_file, kind="path", default_doc="unset"),
    listing("unauthenticated_paths", _D_SERVE.unauthenticated_paths, "served without basic auth", _url_path, "paths"),
    integer("max_connections", _D_SERVE.max_connections, "open connections at most (fewer when RLIMIT_NOFILE is low)",
            lo=8, hi=65536),
    number("header_timeout", _D_SERVE.header_timeout, "seconds for the TLS handshake plus the whole request head",
           lo=0.1),
    number("idle_timeout", _D_SERVE.idle_timeout, "seconds a keep-alive connection may idle between requests", lo=0.1),
    boolean("access_log", _D_SERVE.access_log, "one structured log line per request"),
    number("page_renders_per_second", _D_SERVE.page_renders_per_second,
           "uncached page renders per second, one at a time", lo=0.01),
    listing("collect", _D_SERVE.collect, "the counter sets `/metrics` returns when a scrape names none "
            "(`default`, or more of " + ", ".join(f"`{n}`" for n in counter_sets.SETS if n != counter_sets.DEFAULT)
            + ", `all`; a scrape picks its own with `?collect[]=NAME`); see [metrics.md](metrics.md)",
            _counter_set, "counter sets"),
), build=_server,
    doc="The HTTP server of both daemons (the node daemon's port here, the fabric collector's in `fabric.port`).")
SERVE_KEYS = tuple(f.name for f in SERVER.fields if f.name not in ("address", "port", "tls"))
