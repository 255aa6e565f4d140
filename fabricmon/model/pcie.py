"""PCIe links of the node's RDMA functions and GPUs: the speed and width each trained at, what it and its
slot (the port above it) support, and its AER error counters (docs/pcie.md). Pure records and the link
arithmetic; the judgement is checks.pcie's.
"""

from __future__ import annotations

from dataclasses import dataclass, field

# GT/s -> PCIe generation, and the data rate per lane after line coding (the kernel's PCIE_SPEED2MBS_ENC:
# 8b/10b up to 5 GT/s, 128b/130b from 8 GT/s; Gen6's 64 GT/s FLIT mode counted at its raw rate, as the
# kernel does)
GENERATIONS = {2.5: 1, 5.0: 2, 8.0: 3, 16.0: 4, 32.0: 5, 64.0: 6}
_ENCODING = {2.5: 0.8, 5.0: 0.8, 8.0: 128 / 130, 16.0: 128 / 130, 32.0: 128 / 130, 64.0: 1.0}


def lane_gbps(gts: float) -> float:
    """Usable Gb/s of one lane at `gts` GT/s (8.0 GT/s -> 7.877)."""
    return gts * _ENCODING.get(gts, 128 / 130 if gts >= 8 else 0.8)


@dataclass(frozen=True, slots=True)
class PcieLink:
    """One link's speed (GT/s) and width (lanes); None where sysfs does not say ("Unknown", a missing file)."""
    gts: float | None = None
    width: int | None = None

    @property
    def known(self) -> bool:
        return self.gts is not None and self.width is not None

    @property
    def gbps(self) -> float | None:
        """The link's usable bandwidth, Gb/s (Gen4 x16: 252; Gen5 x16: 504)."""
        if self.gts is None or self.width is None:
            return None
        return lane_gbps(self.gts) * self.width

    def text(self) -> str:
        if not self.known:
            return "unknown"
        assert self.gts is not None and self.width is not None
        gen = GENERATIONS.get(self.gts)
        g = f"Gen{gen}, " if gen else ""
        return f"{self.gts:g} GT/s x{self.width} ({g}{self.gbps:.0f} Gb/s)"

    def below(self, other: PcieLink) -> tuple[bool, bool]:
        """(speed below, width below) `other` (False where either is unknown)."""
        slow = self.gts is not None and other.gts is not None and self.gts < other.gts
        narrow = self.width is not None and other.width is not None and self.width < other.width
        return slow, narrow


def capable(device: PcieLink, slot: PcieLink | None) -> PcieLink:
    """What the link can train at: the lesser of what the device and its slot (the port above it) support."""
    if slot is None:
        return device
    gts = min((v for v in (device.gts, slot.gts) if v is not None), default=None)
    width = min((v for v in (device.width, slot.width) if v is not None), default=None)
    return PcieLink(gts, width)


AER_SEVERITIES = ("correctable", "nonfatal", "fatal")


@dataclass(slots=True)
class AerCounts:
    """One aer_dev_<severity> file: each error's count ("RxErr 3"), and TOTAL_ERR_*."""
    errors: dict[str, int] = field(default_factory=dict)
    total: int | None = None


@dataclass(slots=True)
class PcieDevice:
    """One PCI function fabricmon watches: an RDMA device's function (a NIC) or a GPU."""
    address: str                    # 0000:1a:00.0
    kind: str                       # "nic" or "gpu"
    name: str                       # the RDMA device (mlx5_0) or the GPU (GPU0, else its address)
    current: PcieLink = field(default_factory=PcieLink)
    maximum: PcieLink = field(default_factory=PcieLink)
    slot: PcieLink | None = None    # max_link_* of the port above it (None: no PCI parent, or unreadable)
    slot_address: str = ""          # that port's address
    aer: dict[str, AerCounts] = field(default_factory=dict)          # severity -> counts (absent: no AER)
    slot_aer: dict[str, AerCounts] = field(default_factory=dict)     # the port above it, which may see them instead
    ports: tuple[int, ...] = ()     # the RDMA ports of a NIC's function


@dataclass(slots=True)
class PcieData:
    """The pcie source's records: the watched functions by address."""
    devices: dict[str, PcieDevice] = field(default_factory=dict)


@dataclass(slots=True)
class PcieSection:
    """What the node snapshot exports: every watched function, and the links each check expected."""
    devices: list[PcieDevice] = field(default_factory=list)
    expected: dict[str, PcieLink] = field(default_factory=dict)      # address -> what it should have trained at


__all__ = ["AER_SEVERITIES", "AerCounts", "GENERATIONS", "PcieData", "PcieDevice", "PcieLink", "PcieSection", "capable",
           "lane_gbps"]
