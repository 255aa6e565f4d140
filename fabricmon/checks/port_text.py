"""How the fabric checks' messages name a list of switch ports (shared by ecmp, uplinks and routing)."""

from __future__ import annotations

from collections.abc import Callable, Iterable


def port_ranges(ports: Iterable[int], label: Callable[[int], str] = str) -> str:
    """Port numbers as ranges (1-4, 7); ports with names (Ethernet ifNames) listed by name."""
    ports = sorted(ports)
    if any(label(p) != str(p) for p in ports):
        return ", ".join(label(p) for p in ports)
    out: list[tuple[int, int]] = []
    for p in ports:
        if out and out[-1][1] == p - 1:
            out[-1] = (out[-1][0], p)
        else:
            out.append((p, p))
    return ", ".join(f"{a}" if a == b else f"{a}-{b}" for a, b in out)


__all__ = ["port_ranges"]
