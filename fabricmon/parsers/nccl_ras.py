"""NCCL RAS STATUS in JSON (`SET FORMAT json`, NCCL 2.28.7+) -> RasComm records (pure), the version of
an answer in either format, and which NCCL versions are not read (docs/nccl.md#ras). The text report
(every NCCL with RAS, 2.24+) is parsers.nccl_ras_text; both give the same records.

The format is what `rasDumpCommsToJSON` in NCCL's src/ras/client_support.cc writes: a document with
`nccl_version`, `communicators` (each `hash`, `size`, `ranks_count`, `missing_ranks_count`, `ranks`,
`missing_ranks`; a rank has `rank`, `host`, `pid`, `cuda_dev`, `nvml_dev`, `status` and
`collective_counts` (operations launched, per collective); a missing rank has `status` with
`unresponsive` and `considered_dead`) and `ras`.
"""

from __future__ import annotations

import json
import re

from fabricmon.model.nccl import RasComm, RasMismatch, RasPeer, RasRank, ras_hash, ras_mismatch
from fabricmon.parsers.errors import ParseError
from fabricmon.parsers.nccl_ras_text import version_of_text

Version = tuple[int, int, int]

_VERSION = re.compile(r'"nccl_version"\s*:\s*"(\d+)\.(\d+)\.(\d+)')
RAS_SINCE = (2, 24, 0)              # RAS came with NCCL 2.24
JSON_SINCE = (2, 28, 7)             # SET FORMAT json
VALID_JSON_SINCE = (2, 29, 7)       # a missing rank's "nvml_dev" is followed by its comma
QUERY_SAFE_SINCE = (2, 27, 3)       # a STATUS during communicator initialisation crashed NCCL before (#1669, #1718)
# NCCL's collectives in ncclFunc_t order (ncclFuncStr; the JSON's collective_counts keys)
COLLECTIVES = ("Broadcast", "Reduce", "AllGather", "ReduceScatter", "AllReduce")


def parse_version(text: str) -> Version | None:
    """"2.27.3" -> (2, 27, 3); None where it is not three numbers."""
    m = re.fullmatch(r"(\d+)\.(\d+)\.(\d+)", text.strip())
    return (int(m.group(1)), int(m.group(2)), int(m.group(3))) if m else None


def version_of(text: str) -> Version | None:
    """The NCCL version at the head of a STATUS answer, JSON (`nccl_version`, read even where the rest
    is not valid JSON) or text (`NCCL version`)."""
    m = _VERSION.search(text[:4096])
    return (int(m.group(1)), int(m.group(2)), int(m.group(3))) if m else version_of_text(text)


def show(version: Version) -> str:
    return ".".join(map(str, version))


def refusal(version: Version | None, text_since: Version = QUERY_SAFE_SINCE) -> str:
    """Why fabricmon does not read this NCCL version's RAS ("" where it does, in one format or the other:
    JSON from 2.29.7, text before)."""
    if version is None:
        return "no NCCL version in the answer"
    if version < max(text_since, RAS_SINCE):
        return (f"NCCL {show(version)}: a RAS query during communicator initialisation crashed NCCL before 2.27.3 "
                f"(#1669, #1718); read from {show(max(text_since, RAS_SINCE))} (sources.nccl_ras.text_since)")
    return ""


def json_is_valid(version: Version | None) -> bool:
    """Whether this NCCL's JSON answer is valid whatever it holds (2.28.7-2.29.6 leave out a comma after a
    missing rank's nvml_dev: read their text instead)."""
    return version is not None and version >= VALID_JSON_SINCE


def _int(raw: dict[str, object], key: str, default: int = -1) -> int:
    v = raw.get(key, default)
    if isinstance(v, bool) or not isinstance(v, int):
        raise ParseError(f"{key} is {v!r}, not a number")
    return v


def _peer(raw: object) -> RasPeer:
    if not isinstance(raw, dict) or not isinstance(raw.get("status"), dict):
        raise ParseError("a missing rank is not an object with a status")
    st = raw["status"]
    return RasPeer(_int(raw, "rank"), str(raw.get("host", "unknown")), _int(raw, "pid"), _int(raw, "cuda_dev"),
                   _int(raw, "nvml_dev"), st.get("unresponsive") is True, st.get("considered_dead") is True)


def _mismatches(ranks: list[object], size: int) -> tuple[RasMismatch, ...]:
    """The collectives whose ranks are at different operation counts, as NCCL's text report has them
    (model.nccl.ras_mismatch: groups most ranks first, outlier groups named)."""
    counts: dict[str, dict[int, int]] = {}
    where: dict[int, dict[str, object]] = {}
    for r in ranks:
        if not isinstance(r, dict) or not isinstance(r.get("collective_counts", {}), dict):
            raise ParseError("a rank is not an object with collective_counts")
        rank = _int(r, "rank")
        where[rank] = r
        for coll, n in r.get("collective_counts", {}).items():
            if isinstance(n, bool) or not isinstance(n, int):
                raise ParseError(f"rank {rank}: {coll} count is {n!r}")
            counts.setdefault(str(coll), {})[rank] = n
    out = []
    for coll in COLLECTIVES + tuple(sorted(set(counts) - set(COLLECTIVES))):
        if coll not in counts:
            continue
        named = {rank: RasRank(rank, n, str(where[rank].get("host", "unknown")), _int(where[rank], "pid"),
                               _int(where[rank], "cuda_dev"), _int(where[rank], "nvml_dev"))
                 for rank, n in counts[coll].items()}
        m = ras_mismatch(coll, counts[coll], named, size)
        if m is not None:
            out.append(m)
    return tuple(out)


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
        missing, ranks = c.get("missing_ranks") or [], c.get("ranks") or []
        if not isinstance(missing, list) or not isinstance(ranks, list):
            raise ParseError(f"communicator {c.get('hash')!r}: ranks or missing_ranks is not a list")
        try:
            peers = tuple(_peer(m) for m in missing)
            size = _int(c, "size", 0)
            comms.append(RasComm(ras_hash(str(c.get("hash", ""))), size,
                                 sum(1 for p in peers if p.unresponsive or p.dead), peers, _mismatches(ranks, size)))
        except ParseError as exc:
            raise ParseError(f"communicator {c.get('hash')!r}: {exc}") from None
        except ValueError:
            raise ParseError(f"communicator hash {c.get('hash')!r} is not hexadecimal") from None
    return str(doc.get("nccl_version", "")), comms


__all__ = ["COLLECTIVES", "JSON_SINCE", "QUERY_SAFE_SINCE", "RAS_SINCE", "VALID_JSON_SINCE", "Version", "json_is_valid",
           "parse_ras_status", "parse_version", "refusal", "show", "version_of"]
