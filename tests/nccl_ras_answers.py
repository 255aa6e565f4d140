"""NCCL RAS STATUS answers in JSON for the tests, written as NCCL's jsonWrite* functions print them
(src/ras/client_support.cc @ v2.29.7-1: jsonWriteHeader, jsonStartCommunicator, jsonWriteRankData,
jsonWriteMissingRank, jsonWriteFooter; every collective of ncclFunc_t in each rank's
collective_counts). `comma_bug` writes a missing rank as 2.28.7-2.29.6 do: no comma after nvml_dev."""

from __future__ import annotations

from dataclasses import dataclass, field

COLLECTIVES = ("Broadcast", "Reduce", "AllGather", "ReduceScatter", "AllReduce")


@dataclass
class Rank:
    rank: int
    host: str = "unknown"
    pid: int = -1
    cuda: int = 0
    nvml: int | None = None
    counts: dict[str, int] = field(default_factory=dict)


@dataclass
class Missing:
    rank: int
    host: str
    pid: int
    cuda: int
    nvml: int | None = None
    unresponsive: bool = True
    dead: bool = False


@dataclass
class Comm:
    hash: int
    size: int
    ranks: list[Rank]
    missing: list[Missing] = field(default_factory=list)


def json_answer(version: str, comms: list[Comm], comma_bug: bool = False) -> str:
    out = ["{\n", f'  "nccl_version": "{version}",\n', '  "cuda_runtime_version": 12080,\n',
           '  "cuda_driver_version": 12080,\n', '  "timestamp": "2026-11-27 16:40:00",\n',
           f'  "communicators_count": {len(comms)},\n', '  "communicators": [\n']
    for ci, c in enumerate(comms):
        out.append(",\n" if ci else "")
        out += ["    {\n", f'      "hash": "0x{c.hash:x}",\n', '      "secondary_hash": "0x1a2b:0x3c4d",\n',
                f'      "size": {c.size},\n', f'      "ranks_count": {len(c.ranks)},\n',
                f'      "missing_ranks_count": {len(c.missing)},\n', '      "ranks": [\n']
        for i, r in enumerate(c.ranks):
            out.append(",\n" if i else "")
            out += ["        {\n", f'          "rank": {r.rank},\n', f'          "host": "{r.host}",\n',
                    f'          "pid": {r.pid},\n', f'          "cuda_dev": {r.cuda},\n',
                    f'          "nvml_dev": {r.cuda if r.nvml is None else r.nvml},\n', '          "status": {\n',
                    '            "init_state": 0,\n', '            "async_error": 0,\n',
                    '            "finalize_called": false,\n', '            "destroy_flag": false,\n',
                    '            "abort_flag": false\n', "          },\n", '          "collective_counts": {\n']
            for k, name in enumerate(COLLECTIVES):
                out.append(f'            "{name}": {r.counts.get(name, 0)}' + ("," if k < len(COLLECTIVES) - 1 else "")
                           + "\n")
            out += ["          }\n", "        }"]
        out += ["\n      ],\n", '      "missing_ranks": [\n']
        for i, m in enumerate(c.missing):
            out.append(",\n" if i else "")
            out += ["        {\n", f'          "rank": {m.rank},\n', f'          "host": "{m.host}",\n',
                    f'          "pid": {m.pid},\n', f'          "cuda_dev": {m.cuda},\n',
                    f'          "nvml_dev": {m.cuda if m.nvml is None else m.nvml}' + ("\n" if comma_bug else ",\n"),
                    '          "status": {\n', f'            "unresponsive": {str(m.unresponsive).lower()},\n',
                    f'            "considered_dead": {str(m.dead).lower()}\n', "          }\n", "        }"]
        out += ["\n      ]\n", "    }"]
    out += ["\n  ],\n", '  "ras": {\n', '    "collection_time_sec": 0.012,\n', '    "timeouts_count": 0\n', "  }\n",
            "}\n"]
    return "".join(out)


# The states of the real text reports in tests/fixtures/nccl_ras (PROVENANCE.md), as JSON would have them
def issue1911(version: str = "2.29.7") -> str:
    """32 ranks on 4 nodes (8 per node): 30 at AllGather 640, ranks 12 and 13 (GPUs 4 and 5 of
    10.137.190.124, pids 323032 and 323033) at 641."""
    hosts = ["10.137.190.121", "10.137.190.124", "10.137.190.122", "10.137.190.125"]
    ranks = [Rank(r, hosts[r // 8], 323020 + r, r % 8, counts={"AllGather": 641 if r in (12, 13) else 640})
             for r in range(32)]
    return json_answer(version, [Comm(0xfa93daea854b060b, 32, ranks)])


def issue1762(version: str = "2.29.7") -> str:
    """A 2-rank communicator whose rank 1 (GPU 0, process 60004 on 10.4.109.13) did not answer."""
    return json_answer(version, [Comm(0xb3398875b8b2a063, 2, [Rank(0, "10.4.109.13", 60035, 1)],
                                      [Missing(1, "10.4.109.13", 60004, 0)])])


def issue1730(version: str = "2.29.7") -> str:
    """256 ranks on 32 nodes, every one at the same counts."""
    return json_answer(version, [Comm(0x1, 256, [Rank(r, f"10.0.{r // 8}.1", 1000 + r, r % 8,
                                                     counts={"AllReduce": 2398578}) for r in range(256)])])


__all__ = ["COLLECTIVES", "Comm", "Missing", "Rank", "issue1730", "issue1762", "issue1911", "json_answer"]
