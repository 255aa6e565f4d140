"""Fabric link health: a cabled switch port that went away is down (reported, never dropped);
a link below the norm of its link class (the most common width and speed among the up links
of the same switch level and port role, e.g. every other leaf uplink is 4X HDR, or 400G on
Ethernet) is degraded. Speeds compare within a kind: IB generations by rank, Ethernet by Mb/s.

Records in (FabricPort with its link), verdicts and findings out; nothing here parses or fetches."""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable, Mapping

from fabricmon.checks import OK, Finding
from fabricmon.checks.settings import ChecksConfig
from fabricmon.model.fabric import FabricPort, Link, SwitchNode

REASONS = ("down", "width", "speed")
CHECK = "degraded_link"          # the node's link check's name: one idea, one name
NEEDS = ("topology",)             # the inputs it runs on (pipeline.fabric.CAPABILITIES)


def _speed(lk: Link) -> str | int | None:
    return lk.rate_mbps or lk.speed


def link_class_norms(ports: Iterable[FabricPort], levels: Mapping[str, int]
                     ) -> dict[tuple[int, str], tuple[int | None, str | int | None]]:
    """(level, role) -> (most common width, most common speed) among the up links of that class;
    a speed is an IB generation name or an Ethernet speed in Mb/s."""
    widths: dict[tuple[int, str], Counter[int | None]] = {}
    speeds: dict[tuple[int, str], Counter[str | int | None]] = {}
    for p in ports:
        if p.link is None or not p.up:
            continue
        cls = (levels.get(p.guid, 0), p.role)
        if p.link.width:
            widths.setdefault(cls, Counter())[p.link.width] += 1
        if _speed(p.link):
            speeds.setdefault(cls, Counter())[_speed(p.link)] += 1
    out = {}
    for cls in set(widths) | set(speeds):
        w = widths.get(cls)
        s = speeds.get(cls)
        out[cls] = (w.most_common(1)[0][0] if w else None, s.most_common(1)[0][0] if s else None)
    return out


def _norm_link(width: int | None, speed: str | int | None) -> Link:
    """A stand-in link at a class norm, to rank and name it as a link."""
    mbps = speed if isinstance(speed, int) else None
    return Link(0, "", 0, "", "", width, speed if isinstance(speed, str) else None, rate_mbps=mbps)


def evaluate(ports: Mapping[tuple[str, int], FabricPort], switches: Mapping[str, SwitchNode],
             levels: Mapping[str, int], checks: ChecksConfig) -> list[Finding]:
    """Sets p.degraded, p.expected and p.rate_bps on every cabled port; returns the non-OK
    findings (a fabric has too many ports for one OK finding each)."""
    norms = link_class_norms(ports.values(), levels)
    findings = []
    for (guid, port), p in ports.items():
        if p.link is None:
            continue
        lk = p.link
        nw, ns = norms.get((levels.get(guid, 0), p.role), (None, None))
        norm = _norm_link(nw, ns)
        p.expected = norm.rate_class if nw or ns else ""
        ns_rank, s_rank = norm.speed_rank, lk.speed_rank
        p.degraded = {
            "down": not p.up,
            "width": p.up and nw is not None and lk.width is not None and lk.width < nw,
            "speed": p.up and ns_rank is not None and s_rank is not None and s_rank < ns_rank,
        }
        p.rate_bps = (lk.rate_bps or 0.0) if p.up else 0.0
        name = switches[guid].name if guid in switches else guid
        where = f'{name} port {p.label} ({p.role} to "{lk.remote_name}"[{lk.remote_port_label}])'
        if p.degraded["down"]:
            if not p.seen_up:           # a first discovery claims no history
                was = "no read has seen it up; the switch still lists its LLDP neighbour"
            else:
                was = f"was up at an earlier {p.seen_by}"
            findings.append(Finding(CHECK, guid, port, checks.down_severity,
                                    f"{where}: link is down ({was}): check the cable, "
                                    f"the transceivers and both ports"))
        elif p.degraded["width"] or p.degraded["speed"]:
            why = [r for r in ("width", "speed") if p.degraded[r]]
            findings.append(Finding(CHECK, guid, port, checks.degraded_severity,
                                    f"{where}: runs at {lk.rate_class}, below the {p.expected} of its "
                                    f"link class ({' and '.join(why)}): reseat or replace the cable/transceiver"))
    return [f for f in findings if f.status != OK]


__all__ = ["CHECK", "NEEDS", "REASONS", "evaluate", "link_class_norms"]
