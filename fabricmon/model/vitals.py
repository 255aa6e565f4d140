"""Switch vitals: fans, power supplies, temperatures and modules as the switch reports them over SNMP
(parsers.vitals, docs/vitals.md). Pure records."""

from __future__ import annotations

from dataclasses import asdict, dataclass, field

KINDS = ("fan", "psu", "temperature", "module")


@dataclass(frozen=True, slots=True)
class Vital:
    """One part: its index in its table, name, kind, the table it came from, its state as the switch says
    it, the status fabricmon gives it (0 OK, 1 WARNING, 2 CRITICAL; None: not judged, e.g. an empty bay),
    and its reading (celsius, rpm, watts) with the switch's own thresholds where it gives them."""
    index: str
    part: str
    kind: str
    source: str
    state: str
    status: int | None
    value: float | None = None
    unit: str = ""
    note: str = ""
    limits: tuple[tuple[str, float], ...] = ()
    vendor: str = ""

    def as_dict(self) -> dict[str, object]:
        return asdict(self)


@dataclass(slots=True)
class SwitchVitalsData:
    """The vitals source's records: per switch GUID its parts; the switches that did not answer."""
    switches: dict[str, list[Vital]] = field(default_factory=dict)
    missing: set[str] = field(default_factory=set)


@dataclass(frozen=True, slots=True)
class VitalsView:
    """What the vitals check derived for the fabric section: each judged switch's parts."""
    vitals: dict[str, list[Vital]]


__all__ = ["KINDS", "SwitchVitalsData", "Vital", "VitalsView"]
