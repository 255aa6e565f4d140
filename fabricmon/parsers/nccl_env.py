"""NCCL environment: simple env files and the NCCL_IB_HCA device filter.

NCCL_IB_HCA semantics follow NCCL's ``parseStringList``/``matchIfList``
(src/misc/utils.cc) and net_ib.cc:

* a leading ``^`` excludes the listed devices, then a leading ``=`` asks for
  exact names (order ``^=``); without ``=`` each entry is a *prefix*, so
  ``mlx5_1`` also selects ``mlx5_10``..``mlx5_17``;
* entries are comma-separated ``device[:port]``; no port means any port; empty
  entries and entries with an empty device name are dropped; entries are not
  whitespace-stripped (NCCL does not strip them either);
* an empty list matches every device, so a bare ``^`` excludes every device.

Unlike NCCL (which reads a bad port as 0 via ``atoi``) a non-numeric port
raises ParseError, since it is a misconfiguration worth reporting.
"""
from __future__ import annotations

import re

from fabricmon.parsers.errors import ParseError
from fabricmon.model.node_records import (  # the records this parser returns (re-exported)
    NcclHcaSpec as NcclHcaSpec,
)

_KEY = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")


def _unquote(value: str) -> str:
    if len(value) >= 2 and value[0] == value[-1] and value[0] in "\"'":
        inner = value[1:-1]
        if value[0] == '"':
            inner = re.sub(r"\\([\"\\$`])", r"\1", inner)
        return inner
    return re.split(r"\s+#", value, maxsplit=1)[0].rstrip()


def parse_env_file(text: str) -> dict[str, str]:
    """KEY=VALUE lines (``#`` comments, blank lines, optional ``export``, quotes).

    Lines that are not assignments are skipped, as NCCL does for nccl.conf;
    a later assignment of the same key wins.
    """
    env: dict[str, str] = {}
    for raw in text.splitlines():
        line = raw.strip()
        if not line or line.startswith("#"):
            continue
        if line.startswith("export "):
            line = line[len("export ") :].lstrip()
        key, sep, value = line.partition("=")
        key = key.strip()
        if not sep or not _KEY.fullmatch(key):
            continue
        env[key] = _unquote(value.strip())
    return env


def parse_nccl_ib_hca(value: str) -> NcclHcaSpec:
    """Parse an NCCL_IB_HCA value such as ``^=mlx5_0:1,mlx5_1``."""
    exclude = value.startswith("^")
    rest = value[1:] if exclude else value
    exact = rest.startswith("=")
    rest = rest[1:] if exact else rest
    entries: list[tuple[str, int | None]] = []
    for item in rest.split(","):
        name, sep, port = item.partition(":")
        if not name:
            continue
        if not sep:
            entries.append((name, None))
        elif port.isascii() and port.isdigit():
            entries.append((name, int(port)))
        else:
            raise ParseError(f"bad port {port!r} in NCCL_IB_HCA entry {item!r}")
    return NcclHcaSpec(exclude, exact, tuple(entries))
