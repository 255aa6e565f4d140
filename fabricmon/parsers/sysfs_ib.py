"""Pure parsers for the values in /sys/class/infiniband/<dev>/ports/<n>/."""

from __future__ import annotations

import re
from dataclasses import dataclass, field

from fabricmon.ibspec import generation_from_rate
from fabricmon.parsers.errors import ParseError

_ENUM_RE = re.compile(r"^\s*(?P<id>\d+)\s*:\s*(?P<name>.*?)\s*$")
_RATE_RE = re.compile(
    r"^\s*(?P<gbps>[\d.]+)\s*Gb/sec(?:\s*\((?P<width>\d+)X\s*(?P<gen>[A-Za-z0-9]+)?\))?\s*$")



@dataclass(slots=True)
class SysfsPort:
    port: int
    state_id: int | None = None            # state
    phys_state_id: int | None = None       # phys_state
    rate_gbps: float | None = None         # rate
    width: int | None = None
    generation: str | None = None
    link_layer: str | None = None          # link_layer
    port_guid: str | None = None           # gids/0
    counters: dict[str, int] = field(default_factory=dict)      # counters/ (+ counters_ext/): canonical -> raw
    counter_bits: dict[str, int] = field(default_factory=dict)  # width of each counter read


@dataclass(slots=True)
class SysfsDevice:
    name: str
    hca_type: str | None = None            # hca_type
    fw_ver: str | None = None              # fw_ver
    board_id: str | None = None            # board_id
    node_guid: str | None = None           # node_guid
    netdevs: list[str] = field(default_factory=list)   # device/net/*
    numa_node: int | None = None           # device/numa_node (None for -1)
    pci_path: str | None = None            # realpath of device
    pci_chain: tuple[str, ...] | None = None   # pci_path as a PCI chain (None: not a PCI device)
    ports: dict[int, SysfsPort] = field(default_factory=dict)


@dataclass(slots=True)
class HwCountersData:
    """mlx5 `hw_counters/` of every port (RoCE and QP diagnostics), by (device, port)."""
    ports: dict[tuple[str, int], dict[str, int]] = field(default_factory=dict)


@dataclass(slots=True)
class SysfsData:
    """Every RDMA device under /sys/class/infiniband (empty: no devices, not an error)."""
    devices: dict[str, SysfsDevice] = field(default_factory=dict)
    # devices whose port counters are not read, and why: a firmware-restricted function (a counter
    # read failed EINVAL/EIO/EACCES), or named in sources.sysfs.counters_exclude_devices
    restricted: dict[str, str] = field(default_factory=dict)


def parse_enum(text: str) -> tuple[int, str]:
    """`4: ACTIVE` -> (4, "ACTIVE"); `7: Phy Test` -> (7, "Phy Test")."""
    m = _ENUM_RE.match(text)
    if not m:
        raise ParseError(f"expected '<id>: <name>', got {text.strip()[:60]!r}")
    return int(m["id"]), m["name"]


def parse_rate(text: str) -> tuple[float, int | None, str | None]:
    """`400 Gb/sec (4X NDR)` -> (400.0, 4, "NDR").

    RoCE ports use IB names too (`200 Gb/sec (2X NDR)` on a 200GbE port): the number and
    the width are what count; the generation is recomputed from them when it is missing.
    """
    m = _RATE_RE.match(text)
    if not m:
        raise ParseError(f"unrecognised rate {text.strip()[:60]!r}")
    gbps = float(m["gbps"])
    width = int(m["width"]) if m["width"] else None
    gen = m["gen"].upper() if m["gen"] else None
    if gen is None and width:
        g = generation_from_rate(gbps, width)
        gen = g.name if g else None
    return gbps, width, gen


def parse_counter(text: str) -> int | None:
    """A counter file: an integer, or None for `N/A (no PMA)` and similar."""
    t = text.strip()
    if not t or t.startswith("N/A"):
        return None
    try:
        return int(t, 0)
    except ValueError as exc:
        raise ParseError(f"counter is not an integer: {t[:40]!r}") from exc


def port_guid_from_gid(text: str) -> str | None:
    """GID index 0 (`fe80:0000:0000:0000:a288:c2ff:feab:cdef`) -> port GUID `0xa288c2fffeabcdef`.

    The low 64 bits of the link-local GID 0 are the port GUID on InfiniBand. An all-zero GID
    (an empty slot) gives None.
    """
    parts = text.strip().split(":")
    if len(parts) != 8 or not all(len(x) == 4 for x in parts):
        return None
    low = "".join(parts[4:]).lower()
    if not all(c in "0123456789abcdef" for c in low) or int(low, 16) == 0:
        return None
    return "0x" + low
