"""The cable ledger: which module or cable (by serial number) has been in which port, over time, and the
trouble each serial had wherever it was (docs/cables.md). A cable moved to another port during
troubleshooting carries its history with it ("this cable (serial X) failed its BER budget on mlx5_3 port 1
on 2026-11-30"); each port counts its insertions (a module back after an absence: a reseat) and its swaps
(another serial than before), as UFM's cable validation counts both.

Pure and bounded: at most MAX_PORTS ports and MAX_SERIALS serials (the least recently seen go first), the last
MAX_PLACES ports and MAX_EVENTS troubles per serial. stores.cable_ledger keeps it in the state directory.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field

VERSION = 1
MAX_PORTS = 65536
MAX_SERIALS = 65536
MAX_PLACES = 16
MAX_EVENTS = 32
REPEAT_AFTER = 86400.0          # the same trouble of one serial on one port is noted again at most once a day

# what a change of a port's module is
INSERTED, REINSERTED, SWAPPED, REMOVED = "inserted", "reinserted", "swapped", "removed"


@dataclass(slots=True)
class PortEntry:
    serial: str = ""                # the module in the port now ("" while it has none)
    last_serial: str = ""           # the last module seen in it
    vendor: str = ""
    part_number: str = ""
    since: float = 0.0              # when this module was first seen here
    insertions: int = 0             # a module seen in it after another or after none (a reseat, or a new module)
    swaps: int = 0                  # ... with another serial than the one before


@dataclass(slots=True)
class Trouble:
    t: float
    port: str                       # the port's label where it happened
    check: str
    status: int
    text: str


@dataclass(slots=True)
class SerialEntry:
    vendor: str = ""
    part_number: str = ""
    last_seen: float = 0.0
    places: list[tuple[str, float, float]] = field(default_factory=list)    # (port key, first, last seen)
    troubles: list[Trouble] = field(default_factory=list)


@dataclass(frozen=True, slots=True)
class Change:
    port: str
    kind: str                       # INSERTED, REINSERTED, SWAPPED, REMOVED
    serial: str
    before: str


@dataclass(frozen=True, slots=True)
class CablePort:
    """One port's line in the snapshot: the module in it now, and what the port counted."""
    device: str
    port: int
    serial: str
    vendor: str
    part_number: str
    insertions: int
    swaps: int
    troubles: int           # the troubles its module has had, here and elsewhere


@dataclass(frozen=True, slots=True)
class CablesSection:
    """What the node snapshot exports of the ledger: the ports cable_history judged."""
    ports: tuple[CablePort, ...] = ()


@dataclass(slots=True)
class CableLedger:
    ports: dict[str, PortEntry] = field(default_factory=dict)
    serials: dict[str, SerialEntry] = field(default_factory=dict)
    labels: dict[str, str] = field(default_factory=dict)        # port key -> how findings name it

    def observe(self, port: str, serial: str, vendor: str, part_number: str, now: float, label: str = "") -> Change | None:
        """The module read in `port` now (serial "": the port has none). Returns what changed, if anything."""
        if label:
            self.labels[port] = label
        entry = self.ports.get(port)
        if entry is None:
            if not serial:
                return None
            if len(self.ports) >= MAX_PORTS:
                self._evict_port()
            entry = self.ports[port] = PortEntry(serial, serial, vendor, part_number, now)
            self._place(serial, vendor, part_number, port, now)
            return None                 # the first sight of a port is no change: what was there before is unknown
        change: Change | None = None
        if not serial:
            if entry.serial:
                change = Change(port, REMOVED, "", entry.serial)
                entry.serial = ""
            return change
        if serial != entry.serial:
            before = entry.last_serial
            kind = REINSERTED if before == serial else SWAPPED
            entry.insertions += 1               # a module went in: a reseat, or another module
            if kind == SWAPPED:
                entry.swaps += 1
            entry.serial, entry.last_serial, entry.since = serial, serial, now
            entry.vendor, entry.part_number = vendor, part_number
            change = Change(port, kind, serial, before)
        self._place(serial, vendor, part_number, port, now)
        return change

    def _place(self, serial: str, vendor: str, part_number: str, port: str, now: float) -> None:
        s = self.serials.get(serial)
        if s is None:
            if len(self.serials) >= MAX_SERIALS:
                oldest = min(self.serials, key=lambda k: self.serials[k].last_seen)
                del self.serials[oldest]
            s = self.serials[serial] = SerialEntry(vendor, part_number)
        s.last_seen = now
        if s.places and s.places[-1][0] == port:
            s.places[-1] = (port, s.places[-1][1], now)
        else:
            s.places.append((port, now, now))
            del s.places[:-MAX_PLACES]

    def _evict_port(self) -> None:
        idle = [k for k, e in self.ports.items() if not e.serial] or list(self.ports)
        del self.ports[idle[0]]

    def trouble(self, serial: str, port: str, check: str, status: int, text: str, now: float) -> bool:
        """Note a trouble of the module `serial` in `port` (a finding not OK); False when noted already within
        REPEAT_AFTER, or the serial is unknown."""
        s = self.serials.get(serial)
        if s is None:
            return False
        label = self.labels.get(port, port)
        for t in reversed(s.troubles):
            if t.port == label and t.check == check and now - t.t < REPEAT_AFTER and t.status >= status:
                return False
        s.troubles.append(Trouble(now, label, check, status, text[:300]))
        del s.troubles[:-MAX_EVENTS]
        return True

    def elsewhere(self, serial: str, port: str) -> list[Trouble]:
        """The troubles the module had in other ports than `port` (what it carries with it)."""
        s = self.serials.get(serial)
        label = self.labels.get(port, port)
        return [t for t in s.troubles if t.port != label] if s is not None else []

    def to_dict(self) -> dict[str, object]:
        return {"version": VERSION,
                "ports": {k: asdict(v) for k, v in sorted(self.ports.items())},
                "serials": {k: {"vendor": v.vendor, "part_number": v.part_number, "last_seen": v.last_seen,
                                "places": [list(p) for p in v.places],
                                "troubles": [asdict(t) for t in v.troubles]} for k, v in sorted(self.serials.items())},
                "labels": dict(sorted(self.labels.items()))}

    @classmethod
    def from_dict(cls, doc: object) -> CableLedger:
        if not isinstance(doc, dict) or doc.get("version") != VERSION:
            raise ValueError("not a cable ledger of version 1")
        led = cls()
        for k, v in (doc.get("ports") or {}).items():
            led.ports[str(k)] = PortEntry(str(v["serial"]), str(v.get("last_serial", "")), str(v.get("vendor", "")),
                                          str(v.get("part_number", "")), float(v.get("since", 0.0)),
                                          int(v.get("insertions", 0)), int(v.get("swaps", 0)))
        for k, v in (doc.get("serials") or {}).items():
            led.serials[str(k)] = SerialEntry(
                str(v.get("vendor", "")), str(v.get("part_number", "")), float(v.get("last_seen", 0.0)),
                [(str(p[0]), float(p[1]), float(p[2])) for p in v.get("places", [])][-MAX_PLACES:],
                [Trouble(float(t["t"]), str(t["port"]), str(t["check"]), int(t["status"]), str(t["text"]))
                 for t in v.get("troubles", [])][-MAX_EVENTS:])
        led.labels = {str(k): str(v) for k, v in (doc.get("labels") or {}).items()}
        return led


__all__ = ["CableLedger", "CablePort", "CablesSection", "Change", "INSERTED", "MAX_EVENTS", "MAX_PLACES", "MAX_PORTS", "MAX_SERIALS", "PortEntry",
           "REINSERTED", "REMOVED", "SWAPPED", "SerialEntry", "Trouble"]
