"""What an InfiniBand port may train at, from its PortInfo, and the best a link can run at.

PortInfo carries, per port, the widths and speeds it supports and the subset it enables (the subnet
manager or an operator may narrow the enabled set): LinkWidthSupported/Enabled (bit 0 1X, bit 1 4X,
bit 2 8X, bit 3 12X, bit 4 2X), LinkSpeedSupported/Enabled (bit 0 SDR, 1 DDR, 2 QDR),
LinkSpeedExtSupported/Enabled (bit 0 FDR, 1 EDR, 2 HDR, 3 NDR; an ExtEnabled of 30 means extended
speeds are disabled) and, from IBA 1.7, LinkSpeedExtSupported2/Enabled2 (bit 0 XDR). A port may
train at what it enables within what it supports; a link trains at the fastest width and the fastest
speed that both ends enable. That is the most a link can be judged against: one running there is
not degraded, however slow beside its neighbours (an EDR storage appliance on an HDR leaf).

Under ibsim every port supports up to 12X and SDR-QDR (and FDR-NDR where the link runs an extended
speed), and only the enabled set carries the net file's `4xHDR`: judging by the enabled set is what
makes a simulated fabric read like the real one.

Pure data; the decoders of the bytes (sources.infiniband.mad.codec) and of the tools' text
(parsers.portinfo) build these from the masks with `from_masks`."""

from __future__ import annotations

import functools
from dataclasses import dataclass
from typing import TypeVar

from fabricmon.model import ibspec

WIDTH_BITS = ((0x01, 1), (0x10, 2), (0x02, 4), (0x04, 8), (0x08, 12))     # mask bit -> lanes
SPEED_BITS = ((0x1, "SDR"), (0x2, "DDR"), (0x4, "QDR"))
SPEED_EXT_BITS = ((0x1, "FDR"), (0x2, "EDR"), (0x4, "HDR"), (0x8, "NDR"))
SPEED_EXT2_BITS = ((0x1, "XDR"),)
EXT_DISABLED = 30                    # LinkSpeedExtEnabled: extended link speeds disabled


@dataclass(frozen=True, slots=True)
class LinkAbility:
    """The widths (lanes) and speeds (generation names) one port may train at: what it enables,
    within what it supports."""
    widths: frozenset[int]
    speeds: frozenset[str]

    @property
    def known(self) -> bool:
        return bool(self.widths) and bool(self.speeds)


T = TypeVar("T")


def _bits(mask: int, table: tuple[tuple[int, T], ...]) -> set[T]:
    return {v for bit, v in table if mask & bit}


def from_masks(width_enabled: int, width_supported: int, speed_enabled: int, speed_supported: int,
               ext_enabled: int = 0, ext_supported: int = 0, ext2_enabled: int = 0,
               ext2_supported: int = 0) -> LinkAbility:
    """A port's ability from PortInfo's masks. A supported mask of 0 (a field the port does not
    fill) leaves the enabled set as it is; extended speeds count only where the port supports some
    and has not disabled them."""
    widths = _bits(width_enabled, WIDTH_BITS)
    if width_supported:
        widths &= _bits(width_supported, WIDTH_BITS)
    speeds = _bits(speed_enabled, SPEED_BITS)
    if speed_supported:
        speeds &= _bits(speed_supported, SPEED_BITS)
    if ext_supported and ext_enabled != EXT_DISABLED:
        speeds |= _bits(ext_enabled, SPEED_EXT_BITS) & _bits(ext_supported, SPEED_EXT_BITS)
    if ext2_supported:
        speeds |= _bits(ext2_enabled, SPEED_EXT2_BITS) & _bits(ext2_supported, SPEED_EXT2_BITS)
    return LinkAbility(frozenset(widths), frozenset(speeds))


@functools.lru_cache(maxsize=4096)
def best_common(a: LinkAbility | None, b: LinkAbility | None) -> tuple[int, str] | None:
    """The fastest width and speed both ends enable, or None when either end is unknown or they
    share none (a link that cannot train: nothing to judge it against). Cached: a fabric has a few
    distinct pairs, judged for each of its tens of thousands of links every sweep."""
    if a is None or b is None or not a.known or not b.known:
        return None
    widths = a.widths & b.widths
    speeds = [s for s in a.speeds & b.speeds if ibspec.generation_rank(s) is not None]
    if not widths or not speeds:
        return None
    return max(widths), max(speeds, key=lambda s: ibspec.generation_rank(s) or 0)


__all__ = ["EXT_DISABLED", "LinkAbility", "best_common", "from_masks"]
