"""`fabricmon check`: a Nagios/NHC/Slurm health check.

Exit 0 OK, 1 WARNING, 2 CRITICAL, 3 UNKNOWN (could not check: a config error, an unreadable
bundle, a bad command line, an internal error). The first line is the verdict.

Two ways to get the verdict:
- `--daemon URL`: ask the running daemon (`/api/v1/findings`, milliseconds, with the daemon's full
  counter history); when it does not answer within the timeout, or its snapshot is stale, poll
  locally and say so on the first line;
- otherwise one local poll of every source under one deadline, with the counter history (and the
  ports seen before, so a vanished adapter can be named) carried between runs in a state file, and
  the learned inventory (the ports seen healthy here) shared with the daemon in state_dir.

A node with nothing to check (no InfiniBand/RoCE port, no expected_links, nothing learned) is
UNKNOWN (3), never OK: the Slurm/NHC wrappers do not drain on it, and do not pass it as healthy.
"""

from __future__ import annotations

import base64
import json
import os
import ssl
import time
import urllib.error
import urllib.request
from pathlib import Path
from typing import Any

import structlog

from fabricmon.config import Config
from fabricmon.fsutil import write_atomic
from fabricmon.host.io import HostIO
from fabricmon.model.history import CounterHistory
from fabricmon.pipeline.scheduler import Pipeline
from fabricmon.stores.learned import LearnedStore
from fabricmon.pipeline.node import NodeModel
from fabricmon.remediation.settings import effective_modes
from fabricmon.report import API_VERSION, FINDINGS_PATH, UNKNOWN, check_lines, status_of, verdict

STATE_VERSION = 2
DEFAULT_DAEMON_TIMEOUT = 2.0


class DaemonUnavailable(Exception):
    pass


def fetch_verdict(url: str, timeout: float = DEFAULT_DAEMON_TIMEOUT, auth: tuple[str, str] | None = None,
                  ca_file: str | None = None) -> dict[str, Any]:
    """The running daemon's verdict, or DaemonUnavailable saying why not (no answer within
    `timeout`, an error status, a stale snapshot, a document this version does not read).
    `auth`: (user, password) for a daemon behind basic auth; `ca_file`: the CA that signed an
    https daemon's certificate."""
    if not url.startswith(("http://", "https://")):
        url = "http://" + url
    full = url.rstrip("/") + FINDINGS_PATH
    req = urllib.request.Request(full)
    if auth is not None:
        token = base64.b64encode(f"{auth[0]}:{auth[1]}".encode()).decode()
        req.add_header("Authorization", f"Basic {token}")
    ctx = ssl.create_default_context(cafile=ca_file) if ca_file and full.startswith("https://") else None
    try:
        with urllib.request.urlopen(req, timeout=timeout, context=ctx) as resp:      # noqa: S310 - http(s) only
            doc = json.loads(resp.read(8 << 20))
    except urllib.error.HTTPError as exc:
        if exc.code == 401:
            raise DaemonUnavailable("HTTP 401: it wants basic auth (--daemon-user, --daemon-password-file)"
                                    if auth is None else "HTTP 401: the user or password was refused") from exc
        raise DaemonUnavailable(f"HTTP {exc.code}") from exc
    except urllib.error.URLError as exc:
        reason = exc.reason
        raise DaemonUnavailable(getattr(reason, "strerror", None) or str(reason)) from exc
    except (OSError, ValueError) as exc:       # timeouts, resets, bad JSON
        raise DaemonUnavailable(str(exc) or type(exc).__name__) from exc
    if not isinstance(doc, dict) or doc.get("api_version") != API_VERSION or "findings" not in doc:
        raise DaemonUnavailable(f"unexpected answer from {full}")
    if not doc.get("inventory_known", True):
        raise DaemonUnavailable("it has not listed the ports yet")
    # daemon_healthy (earlier builds: "healthy"): is the daemon's snapshot fresh, not the node's verdict
    if not doc.get("daemon_healthy", doc.get("healthy", True)):
        age = time.time() - float(doc.get("snapshot_time") or 0)
        raise DaemonUnavailable(f"its last snapshot is {age:.0f}s old")
    return doc


# --- the state file: counter history and the ports seen, between runs ------------------------

def read_state(path: str, horizon: float) -> tuple[CounterHistory, dict[tuple[str, int], tuple[str, float]]]:
    """Raises OSError/ValueError/KeyError on an unreadable file. Reads version 1 (the bare
    counter history) too."""
    doc = json.loads(Path(path).read_text())
    if isinstance(doc, dict) and doc.get("version") == STATE_VERSION:
        seen: dict[tuple[str, int], tuple[str, float]] = {}
        for k, (layer, t) in doc.get("ports_seen", {}).items():
            dev, _, port = k.rpartition("|")
            seen[(dev, int(port))] = (str(layer), float(t))
        return CounterHistory.from_dict(doc["counters"], horizon), seen
    return CounterHistory.from_dict(doc, horizon), {}


def _node_model(pipe: Pipeline) -> NodeModel:
    """`check` keeps the node model's state between runs (its counter history and the ports it has seen);
    a fabric collector's model has no such state."""
    if not isinstance(pipe.model, NodeModel):
        raise TypeError(f"check state is a node pipeline's, not {type(pipe.model).__name__}'s")
    return pipe.model


def write_state(path: str, pipe: Pipeline) -> None:
    seen_ports = _node_model(pipe).seen_ports
    doc = {"version": STATE_VERSION, "counters": pipe.history.to_dict(),
           "ports_seen": {f"{d}|{p}": [layer, t] for (d, p), (layer, t) in sorted(seen_ports.items())}}
    write_atomic(path, json.dumps(doc).encode(), 0o600)


def local_verdict(cfg: Config, io: HostIO, state_path: str | None, sample_window: float = 0.0,
                  inventory_path: str | None = None) -> dict[str, Any]:
    """One local poll (two with `sample_window`). `state_path`: the counter history between runs;
    `inventory_path`: the learned inventory shared with the daemon (None: learned for this run only)."""
    log = structlog.get_logger("fabricmon.check")
    history: CounterHistory | None = None
    seen: dict[tuple[str, int], tuple[str, float]] = {}
    horizon = max(*(c.window for c in cfg.checks.counters.values()), *cfg.roce.windows())
    if state_path and os.path.exists(state_path):
        try:
            history, seen = read_state(state_path, horizon)
        except (OSError, ValueError, KeyError, TypeError) as exc:
            log.warning("ignoring unreadable check state", path=state_path, error=str(exc))
    pipe = Pipeline(cfg, io, history=history, learned=LearnedStore(inventory_path, create_dir=True))
    _node_model(pipe).seen_ports.update(seen)
    try:
        # Every source at once under one deadline (the largest timeout): a hung tool costs
        # its own data and a WARNING line, never an unbounded check.
        snap = pipe.collect()
        if sample_window:
            time.sleep(sample_window)
            snap = pipe.collect()
    finally:
        pipe.close()
    if state_path:
        try:
            write_state(state_path, pipe)
        except OSError as exc:
            log.warning("cannot save check state; rate checks need --sample-window", path=state_path,
                        error=exc.strerror or str(exc))
    doc = verdict(snap)
    # remediation runs in the daemon only: a local poll says the configured modes
    doc["remediation"] = {"modes": dict(effective_modes(cfg.remediation)), "held": False,
                          "lease": "a local poll: remediation acts in the daemon only", "open": []}
    return doc


def daemon_note(url: str, doc: dict[str, Any]) -> str:
    age = max(0.0, time.time() - float(doc.get("snapshot_time") or 0))
    return f"from the daemon at {url}, snapshot {age:.0f}s old"


def unknown_line(reason: str) -> str:
    return f"FABRICMON UNKNOWN - {reason}"


__all__ = ["DEFAULT_DAEMON_TIMEOUT", "DaemonUnavailable", "UNKNOWN", "check_lines", "daemon_note", "fetch_verdict",
           "local_verdict", "read_state", "status_of", "unknown_line", "write_state"]
