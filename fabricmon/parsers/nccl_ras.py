"""NCCL RAS STATUS in JSON (`SET FORMAT json`, NCCL 2.28.7+) -> RasComm records (pure), and which NCCL
versions are not to be queried at all (docs/nccl.md#ras).

The format is what `rasDumpCommsToJSON` in NCCL's src/ras/client_support.cc writes: a document with
`nccl_version`, `communicators` (each `hash`, `size`, `ranks_count`, `missing_ranks_count`, `ranks`,
`missing_ranks`; a missing rank has `rank`, `host`, `pid`, `cuda_dev`, `nvml_dev` and `status` with
`unresponsive` and `considered_dead`) and `ras`.
"""

from __future__ import annotations

import json
import re

from fabricmon.model.nccl import RasComm, RasPeer
from fabricmon.parsers.errors import ParseError

_VERSION = re.compile(r'"nccl_version"\s*:\s*"(\d+)\.(\d+)\.(\d+)')
JSON_SINCE = (2, 28, 7)             # SET FORMAT json
VALID_JSON_SINCE = (2, 29, 7)       # a missing rank's "nvml_dev" is followed by its comma


def version_of(text: str) -> tuple[int, int, int] | None:
    """The nccl_version at the head of a STATUS answer (read even where the rest is not valid JSON)."""
    m = _VERSION.search(text[:4096])
    return (int(m.group(1)), int(m.group(2)), int(m.group(3))) if m else None


def refusal(version: tuple[int, int, int] | None) -> str:
    """Why fabricmon does not query this NCCL version's RAS ("" where it does)."""
    if version is None:
        return "no nccl_version in the answer"
    v = ".".join(map(str, version))
    if version < JSON_SINCE:
        return f"NCCL {v} has no JSON RAS output (2.28.7+), and RAS queries crashed jobs before it (#1669, #1718, #1762)"
    if version < VALID_JSON_SINCE:
        return (f"NCCL {v} writes invalid JSON for missing ranks (no comma after nvml_dev; fixed in 2.29.7): "
                "exactly the answer fabricmon reads")
    return ""


def _peer(raw: object) -> RasPeer:
    if not isinstance(raw, dict) or not isinstance(raw.get("status"), dict):
        raise ParseError("a missing rank is not an object with a status")
    st = raw["status"]
    try:
        return RasPeer(int(raw["rank"]), str(raw.get("host", "unknown")), int(raw.get("pid", -1)),
                       int(raw.get("cuda_dev", -1)), int(raw.get("nvml_dev", -1)), st.get("unresponsive") is True,
                       st.get("considered_dead") is True)
    except (KeyError, TypeError, ValueError) as exc:
        raise ParseError(f"a missing rank's fields are unreadable: {exc}") from None


def parse_ras_status(text: str) -> tuple[str, list[RasComm]]:
    """(nccl_version, communicators) of a JSON STATUS answer. ParseError where it is not one."""
    try:
        doc = json.loads(text)
    except ValueError as exc:
        raise ParseError(f"RAS answer is not JSON: {exc}") from None
    if not isinstance(doc, dict) or not isinstance(doc.get("communicators"), list):
        raise ParseError("RAS answer has no communicators list")
    comms = []
    for c in doc["communicators"]:
        if not isinstance(c, dict):
            raise ParseError("a communicator is not an object")
        missing = c.get("missing_ranks") or []
        if not isinstance(missing, list):
            raise ParseError("missing_ranks is not a list")
        try:
            comms.append(RasComm(str(c.get("hash", "")), int(c.get("size", 0)), int(c.get("ranks_count", 0)),
                                 tuple(_peer(m) for m in missing)))
        except (TypeError, ValueError) as exc:
            raise ParseError(f"communicator {c.get('hash')!r}: {exc}") from None
    return str(doc.get("nccl_version", "")), comms


__all__ = ["JSON_SINCE", "VALID_JSON_SINCE", "parse_ras_status", "refusal", "version_of"]
