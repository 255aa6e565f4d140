"""etcd's v3 API over its HTTP/JSON gateway (the gRPC gateway every etcd 3.x serves on its client port:
`POST /v3/lease/grant`, `/v3/lease/keepalive`, `/v3/lease/revoke`, `/v3/kv/txn`, `/v3/kv/range`), the
few calls remediation's lease makes (fabricmon/remediation/lease.py). No client library: the gateway is
JSON over HTTP, which the standard library speaks; each call has its own timeout and goes to the first
endpoint that answers (an etcd cluster's members all serve it).

Keys and values travel base64-encoded, 64-bit integers (lease IDs, revisions, TTLs) as decimal strings:
the gateway's JSON mapping of the protobuf messages (etcd `api/etcdserverpb/rpc.proto`)."""

from __future__ import annotations

import base64
import json
import ssl
import urllib.error
import urllib.request
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any


class EtcdError(OSError):
    """No endpoint answered, or one answered with an error (the message says which and why)."""


@dataclass(frozen=True, slots=True)
class KeyValue:
    key: str
    value: str
    lease: int                  # the lease the key is attached to (0: none)
    create_revision: int


def _b64(text: str) -> str:
    return base64.b64encode(text.encode()).decode("ascii")


def _unb64(text: str) -> str:
    return base64.b64decode(text).decode("utf-8", "replace")


class EtcdClient:
    """The gateway at `endpoints` (`http://host:2379` or `https://...`), tried in order; `timeout` seconds a call
    (connect and answer)."""

    def __init__(self, endpoints: Sequence[str], timeout: float = 2.0, ca_file: str | None = None,
                 cert_file: str | None = None, key_file: str | None = None):
        if not endpoints:
            raise ValueError("no etcd endpoint")
        self.endpoints = [e.rstrip("/") for e in endpoints]
        self.timeout = timeout
        self._ctx: ssl.SSLContext | None = None
        if any(e.startswith("https:") for e in self.endpoints):
            self._ctx = ssl.create_default_context(cafile=ca_file)
            if cert_file:
                self._ctx.load_cert_chain(cert_file, key_file)
        self._first = 0                         # the endpoint that answered last: asked first next time

    def call(self, path: str, body: dict[str, Any]) -> dict[str, Any]:
        """POST `body` as JSON to `path` on the first endpoint that answers; its JSON answer. EtcdError when none
        answers, or one answers with an error (an HTTP error status, or a JSON `error`)."""
        data = json.dumps(body).encode()
        errors = []
        n = len(self.endpoints)
        for i in range(n):
            k = (self._first + i) % n
            url = self.endpoints[k] + path
            req = urllib.request.Request(url, data=data, method="POST", headers={"Content-Type": "application/json"})
            try:
                with urllib.request.urlopen(req, timeout=self.timeout, context=self._ctx) as r:
                    raw = r.read(1 << 20)
            except urllib.error.HTTPError as exc:        # etcd answered: an error of the request, not of the endpoint
                detail = exc.read(4096).decode("utf-8", "replace").strip()
                raise EtcdError(f"{url}: HTTP {exc.code}: {detail[:300]}") from None
            except (OSError, ValueError) as exc:         # refused, timed out, reset, DNS: try the next endpoint
                errors.append(f"{url}: {getattr(exc, 'reason', None) or exc}")
                continue
            self._first = k
            # the keep-alive stream's gateway answer is one JSON object per line: the first is ours
            line = raw.split(b"\n", 1)[0] if raw.lstrip().startswith(b"{") else raw
            try:
                doc = json.loads(line)
            except ValueError:
                raise EtcdError(f"{url}: not JSON: {raw[:200]!r}") from None
            if not isinstance(doc, dict):
                raise EtcdError(f"{url}: not a JSON object: {raw[:200]!r}")
            if "error" in doc:
                err = doc["error"]
                raise EtcdError(f"{url}: {err.get('message', err) if isinstance(err, dict) else err}")
            return doc.get("result", doc) if isinstance(doc.get("result"), dict) else doc
        raise EtcdError("no etcd endpoint answered: " + "; ".join(errors))

    # --- leases ---------------------------------------------------------------------------------------
    def grant(self, ttl: int) -> tuple[int, int]:
        """A new lease of `ttl` seconds: (its ID, the TTL etcd granted)."""
        doc = self.call("/v3/lease/grant", {"TTL": str(ttl)})
        if doc.get("error"):
            raise EtcdError(f"lease grant: {doc['error']}")
        return int(doc["ID"]), int(doc.get("TTL", 0))

    def keepalive(self, lease: int) -> int:
        """One keep-alive of `lease`: the TTL it has again from now (0 or less: it expired, it is gone)."""
        doc = self.call("/v3/lease/keepalive", {"ID": str(lease)})
        return int(doc.get("TTL", 0))

    def revoke(self, lease: int) -> None:
        """Revoke `lease` (the keys attached to it are deleted at once)."""
        try:
            self.call("/v3/lease/revoke", {"ID": str(lease)})
        except EtcdError as exc:
            if "not found" not in str(exc):     # revoked or expired already: what was asked for
                raise

    def time_to_live(self, lease: int) -> int:
        """The seconds `lease` has left (-1: expired or never granted)."""
        doc = self.call("/v3/lease/timetolive", {"ID": str(lease)})
        return int(doc.get("TTL", -1))

    # --- keys -----------------------------------------------------------------------------------------
    def create(self, key: str, value: str, lease: int) -> tuple[bool, KeyValue | None]:
        """Put `key` = `value` attached to `lease` only where the key does not exist (one transaction:
        compare its create revision with 0). (True, None) when created; (False, the key as it is) otherwise."""
        k = _b64(key)
        doc = self.call("/v3/kv/txn", {
            "compare": [{"key": k, "target": "CREATE", "result": "EQUAL", "create_revision": "0"}],
            "success": [{"request_put": {"key": k, "value": _b64(value), "lease": str(lease)}}],
            "failure": [{"request_range": {"key": k}}]})
        if doc.get("succeeded"):
            return True, None
        for resp in doc.get("responses", ()):
            kvs = resp.get("response_range", {}).get("kvs", ())
            if kvs:
                return False, self._kv(kvs[0])
        return False, None                      # gone between the compare and the range: try again later

    def get(self, key: str) -> KeyValue | None:
        doc = self.call("/v3/kv/range", {"key": _b64(key)})
        kvs = doc.get("kvs", ())
        return self._kv(kvs[0]) if kvs else None

    @staticmethod
    def _kv(d: dict[str, Any]) -> KeyValue:
        return KeyValue(_unb64(d.get("key", "")), _unb64(d.get("value", "")), int(d.get("lease", 0)),
                        int(d.get("create_revision", 0)))


__all__ = ["EtcdClient", "EtcdError", "KeyValue"]
