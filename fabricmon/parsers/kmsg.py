"""The pure matcher from a kernel log line to a typed event, by the table of patterns declared once
in model.kernel_log.PATTERNS (like the SNMP OIDs of parsers/snmp.py; in the model because the
checks, the exporter and the docs read the same rows).

Each row: the event's name (the `event` label), the regex (written from the Linux driver's format
strings: drivers/net/ethernet/mellanox/mlx5/core/{cmd,health,events,en_main}.c, en/reporter_tx.c,
drivers/pci/pcie/aer.c, net/sched/sch_generic.c, kernel/module; test data with provenance in
tests/data/kmsg/), how the device is named (the `dev_printk` prefix `mlx5_core 0000:5c:00.0: ` or
`mlx5_core 0000:5c:00.0 eth0: `, a netdev, or nothing), the class (model.finding: fatal drains the
node, degraded schedules a repair, watch is evidence), what happened and what the operator does,
and how NVIDIA NVSentinel's NIC monitor and gpud classify the same line (docs/kernel-log.md shows
them side by side, generated from this table).

Lines are matched by their text (driver, device, message), never by syslog facility: a line an
administrator writes to /dev/kmsg gets the user facility.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass

from fabricmon.model.kernel_log import PATTERNS
from fabricmon.parsers.errors import ParseError

# dev_printk's prefix: driver, PCI function, and for netdev_printk the interface
PREFIX = re.compile(r"^(?P<driver>[\w-]+) (?P<pci>[0-9a-fA-F]{4}:[0-9a-fA-F]{2}:[0-9a-fA-F]{2}\.[0-7])(?: (?P<netdev>[^\s:]+))?: ")
IBDEV = re.compile(r"\b(mlx5_(?:bond_)?\d+)\b")
# Only lines holding one of these are matched against the table (the rest cost one `in` each).
KEYWORDS = ("mlx5", "peermem", "NETDEV WATCHDOG", "soft lockup")




@dataclass(frozen=True, slots=True)
class Match:
    event: str
    pci: str
    netdev: str
    ibdev: str
    detail: str


def match(text: str) -> Match | None:
    """The first pattern that `text` (one kernel log line, without its timestamp) matches, with the
    device it names; None for a line no pattern declares."""
    if not any(k in text for k in KEYWORDS):
        return None
    for p in PATTERNS:
        m = p.regex.search(text)
        if m is None:
            continue
        groups = m.groupdict()
        pre = PREFIX.match(text)
        pci = pre.group("pci").lower() if pre is not None and p.device == "pci" else ""
        netdev = groups.get("netdev") or (pre.group("netdev") if pre is not None and pre.group("netdev") else "") or ""
        ib = IBDEV.search(text) if p.device != "node" and not pci and not netdev else None
        return Match(p.event, pci, netdev, ib.group(1) if ib is not None else "", (groups.get("detail") or "").strip())
    return None


@dataclass(frozen=True, slots=True)
class JournalEntry:
    cursor: str
    usec: int           # CLOCK_MONOTONIC microseconds (__MONOTONIC_TIMESTAMP)
    boot_id: str
    text: str


def parse_journal_json(text: str) -> list[JournalEntry]:
    """`journalctl -k -o json` output: one JSON object per line. MESSAGE may be a list of bytes
    (journald's form for a message that is not UTF-8)."""
    out = []
    for n, line in enumerate(text.splitlines(), 1):
        if not line.strip():
            continue
        try:
            obj = json.loads(line)
        except ValueError as exc:
            raise ParseError(f"line {n}: not JSON ({exc})") from None
        if not isinstance(obj, dict) or "__CURSOR" not in obj:
            raise ParseError(f"line {n}: no __CURSOR")
        msg = obj.get("MESSAGE", "")
        if isinstance(msg, list):
            msg = bytes(b for b in msg if isinstance(b, int) and 0 <= b < 256).decode("utf-8", "replace")
        try:
            usec = int(obj.get("__MONOTONIC_TIMESTAMP", 0))
        except (TypeError, ValueError):
            usec = 0
        out.append(JournalEntry(str(obj["__CURSOR"]), usec, str(obj.get("_BOOT_ID", "")), str(msg)))
    return out


__all__ = ["JournalEntry", "Match", "match", "parse_journal_json"]
