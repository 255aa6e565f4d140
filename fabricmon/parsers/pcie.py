"""PCI sysfs values (drivers/pci/pci-sysfs.c, drivers/pci/pcie/aer.c): `current_link_speed` and
`max_link_speed` ("32.0 GT/s PCIe", "2.5 GT/s PCIe", "Unknown"; older kernels "8 GT/s", "5.0 GT/s"),
`current_link_width`/`max_link_width` ("16"), and the AER statistics `aer_dev_correctable`,
`aer_dev_nonfatal`, `aer_dev_fatal`: one `<name> <count>` line per error the kernel names
(aer_correctable_error_string / aer_uncorrectable_error_string), `dev_cor_errs_bit[<n>] <count>` for an
unnamed bit that counted, then `TOTAL_ERR_COR` / `TOTAL_ERR_NONFATAL` / `TOTAL_ERR_FATAL`. Pure."""

from __future__ import annotations

import re

from fabricmon.model.pcie import AerCounts
from fabricmon.parsers.errors import ParseError

_SPEED = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*GT/s(?:\s+PCIe)?\s*$", re.I)
_LINE = re.compile(r"^(?P<name>[A-Za-z_][A-Za-z0-9_\[\]]*)\s+(?P<value>\d+)\s*$")


def parse_speed(text: str) -> float | None:
    """GT/s, or None for "Unknown" (a link that is down, a device without a PCIe capability)."""
    t = text.strip()
    if not t or t.lower().startswith("unknown"):
        return None
    m = _SPEED.match(t)
    if m is None:
        raise ParseError(f"not a PCIe link speed: {t[:40]!r}")
    return float(m.group(1))


def parse_width(text: str) -> int | None:
    t = text.strip()
    if not t or t.lower().startswith("unknown"):
        return None
    if not t.isdigit():
        raise ParseError(f"not a PCIe link width: {t[:40]!r}")
    w = int(t)
    return w if w > 0 else None        # 0: the link is down


def parse_aer(text: str) -> AerCounts:
    counts = AerCounts()
    seen = False
    for raw in text.splitlines():
        line = raw.strip()
        if not line:
            continue
        m = _LINE.match(line)
        if m is None:
            raise ParseError(f"not an AER statistics line: {line[:60]!r}")
        seen = True
        name, value = m["name"], int(m["value"])
        if name.startswith("TOTAL_"):
            counts.total = value
        else:
            counts.errors[name] = value
    if not seen:
        raise ParseError("empty AER statistics")
    if counts.total is None:
        counts.total = sum(counts.errors.values())
    return counts


__all__ = ["parse_aer", "parse_speed", "parse_width"]
