"""NCCL RAS STATUS in text (what `ncclras` prints; NCCL 2.24 and later, the only format before 2.28.7)
-> the RasComm records the JSON gives (pure; docs/nccl.md#ras).

The layout is rasClientRunComms in NCCL's src/ras/client_support.cc:
- `NCCL version X.Y.Z ...` first;
- the communicators table (`Group  Comms ... Status  Errors`): one row per group of alike communicators,
  with its ranks per communicator;
- `Errors` / `======`: `INCOMPLETE` (job processes that did not answer), `DEAD` (processes considered
  dead: `Process P on node H managing GPU(s) G`), then per communicator `#g-c (hash) INCOMPLETE` with
  `Missing communicator data from N rank(s)` and, where N is small, `Rank R -- GPU G managed by
  process P on node H` (2.26+) or `The missing ranks: 1,5` (2.24, 2.25);
- `Warnings` / `========`: per communicator `#g-c (hash) MISMATCH`, then for each collective whose
  ranks differ `Communicator ranks have different <Collective> operation counts` (2.24, 2.25: one
  `collective operation counts` block), `N ranks have launched up to operation X` (or `have not
  launched any operations`) per count, and the outlier ranks named.

A GPU is `C` or `C (NVML N)` where the CUDA and NVML numbers differ. `[process information not found]`
names a rank without its process. What the reader does not judge (ERROR blocks, the status breakdown of
a MISMATCH, the job summary, travel times) is passed over; a line in a block it reads that it does not
know is a ParseError naming the line.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

from fabricmon.model.nccl import RasComm, RasMismatch, RasPeer, RasRank, ras_hash
from fabricmon.parsers.errors import ParseError

_VERSION = re.compile(r"^NCCL version (\d+)\.(\d+)\.(\d+)", re.M)
_ROW = re.compile(r"^\s*(\d+)\s+(\d+)\s+(\d+)\s+(\S+)\s+(\d+)\s+(\d+)\s+(\S+)\s+(\S+)\s*$")
_COMM = re.compile(r"^#(\d+)-(\d+) \(([0-9a-fA-F]+)\) (INCOMPLETE|ERROR|MISMATCH)$")
_GPU = r"(\d+)(?: \(NVML (\d+)\))?"
_PROCESS = re.compile(rf"^  Process (\d+) on node (\S+) managing GPUs? ({_GPU}(?:,\s*{_GPU})*|\S.*)$")
_MISSING_N = re.compile(r"^  Missing communicator data from (\d+) ranks?$")
_RANK = re.compile(rf"^  Rank (\d+)(?: has launched up to operation (\d+)| has (not) launched any operations)?"
                   rf" -- (?:GPU {_GPU} managed by process (\d+) on node (\S+)|\[process information not found\])$")
_RANK_LIST = re.compile(r"^  The missing ranks?: ([\d,\s]+)$")
_DIFFERENT = re.compile(r"^  Communicator ranks have different (\w+) operation counts$")
_GROUP = re.compile(r"^  (\d+) ranks have (?:launched up to operation (\d+)|(not) launched any operations)$")


def version_of_text(text: str) -> tuple[int, int, int] | None:
    """The NCCL version of a text STATUS answer (its `NCCL version` line)."""
    m = _VERSION.search(text[:4096])
    return (int(m.group(1)), int(m.group(2)), int(m.group(3))) if m else None


@dataclass(slots=True)
class _Comm:
    hash: str
    group: int
    unreachable: int = 0
    missing: list[RasPeer] = field(default_factory=list)
    mismatches: list[RasMismatch] = field(default_factory=list)


@dataclass(slots=True)
class _Counts:
    """One `different <collective> operation counts` block being read."""
    collective: str
    groups: list[tuple[int, int]] = field(default_factory=list)
    named: list[RasRank] = field(default_factory=list)

    def done(self) -> RasMismatch:
        for r in self.named:                # a rank alone at its count is a group NCCL prints no line for
            if r.count not in {n for n, _ in self.groups}:
                self.groups.append((r.count, 1))
        groups = sorted(self.groups, key=lambda g: (-g[1], -g[0]))
        return RasMismatch(self.collective, tuple(groups), tuple(self.named))


def _rank(m: re.Match[str], count: int) -> RasRank:
    if m.group(6) is None:
        return RasRank(int(m.group(1)), count)
    cuda = int(m.group(4))
    return RasRank(int(m.group(1)), count, m.group(7), int(m.group(6)), cuda,
                   int(m.group(5)) if m.group(5) else cuda)


def parse_ras_text(text: str) -> tuple[str, list[RasComm]]:
    """(nccl_version, communicators) of a text STATUS answer. ParseError where it is not one."""
    lines = text.replace("\r\n", "\n").split("\n")
    v = version_of_text(text)
    if v is None:
        raise ParseError("RAS answer has no 'NCCL version' line")
    sizes: dict[int, int] = {}                      # table group -> ranks per communicator
    dead: set[tuple[int, str]] = set()              # (pid, host) RAS considers dead
    comms: dict[str, _Comm] = {}
    section = ""                                    # "table", "errors", "warnings"
    block = ""                                      # DEAD, INCOMPLETE (of a comm), MISMATCH, or skipped
    comm: _Comm | None = None
    counts: _Counts | None = None
    count_now = 0                                   # the count of the group whose ranks are being listed

    def close_counts() -> None:
        nonlocal counts
        if counts is not None and comm is not None:
            comm.mismatches.append(counts.done())
        counts = None

    for i, line in enumerate(lines, 1):
        if line.startswith("Group ") and "Comms" in line:
            section = "table"
            continue
        if line in ("Errors", "Warnings"):
            close_counts()
            section, block, comm = line.lower(), "", None
            continue
        if section == "table":
            m = _ROW.match(line)
            if m:
                sizes[int(m.group(1))] = int(m.group(5))
            elif line.strip() and not line.lstrip().startswith("#"):
                section = ""
            continue
        if section not in ("errors", "warnings") or (line and set(line) == {"="}):
            continue
        if not line.strip():                        # ends a collective's counts (a comm's next block follows)
            close_counts()
            continue
        m = _COMM.match(line)
        if m:
            close_counts()
            h, group = ras_hash(m.group(3)), int(m.group(1))
            comm = comms.setdefault(h, _Comm(h, group))
            block = m.group(4)
            continue
        if not line.startswith("  "):               # a job-wide block: INCOMPLETE, DEAD, TIMEOUT, ...
            close_counts()
            block, comm = line.strip(), None
            continue
        if comm is None:
            if block == "DEAD":
                p = _PROCESS.match(line)
                if p:
                    dead.add((int(p.group(1)), p.group(2)))
            continue
        if block == "INCOMPLETE":
            if (m := _MISSING_N.match(line)):
                comm.unreachable = int(m.group(1))
            elif (m := _RANK.match(line)):
                r = _rank(m, 0)
                comm.missing.append(RasPeer(r.rank, r.host, r.pid, r.cuda_dev, r.nvml_dev, True, False))
            elif (m := _RANK_LIST.match(line)):
                comm.missing.extend(RasPeer(int(r), "unknown", -1, -1, -1, True, False)
                                    for r in m.group(1).replace(" ", "").split(",") if r)
            elif "[could not find information" not in line:
                raise ParseError(f"line {i}: not a line of an INCOMPLETE block: {line.strip()!r}")
        elif block == "MISMATCH":
            if (m := _DIFFERENT.match(line)):
                close_counts()
                counts = _Counts(m.group(1))
            elif line.startswith("  Communicator ranks have different"):
                close_counts()                      # "different status": not judged here
            elif counts is None:
                continue                            # the status breakdown
            elif (m := _GROUP.match(line)):
                count_now = 0 if m.group(3) else int(m.group(2))
                counts.groups.append((count_now, int(m.group(1))))
            elif (m := _RANK.match(line)):
                alone = m.group(2) is not None or m.group(3) is not None
                counts.named.append(_rank(m, (int(m.group(2)) if m.group(2) else 0) if alone else count_now))
            else:
                raise ParseError(f"line {i}: not a line of a MISMATCH block: {line.strip()!r}")
    close_counts()
    out = []
    for c in comms.values():
        missing = tuple(RasPeer(p.rank, p.host, p.pid, p.cuda_dev, p.nvml_dev, True, (p.pid, p.host) in dead)
                        for p in c.missing)
        out.append(RasComm(c.hash, sizes.get(c.group, 0), c.unreachable, missing, tuple(c.mismatches)))
    return ".".join(map(str, v)), out


__all__ = ["parse_ras_text", "version_of_text"]
