"""The cable ledger's file, `<paths.state_dir>/cable_ledger.json`, kept beside the learned inventory (by the
daemon and `fabricmon check` in the state directory, in memory for a replay), and what the node model does
with it each build (docs/cables.md):

1. before the checks: each RDMA port's module as read now (`ethtool -m` and mlxlink's module info: serial,
   vendor, part number) is observed: a module back after none, or another serial, is counted (insertions,
   swaps) and the port's learned receive-power baseline is forgotten, so optics_dimming relearns it;
2. the checks run (cable_history reads the ledger);
3. after them: every finding of a cable's checks that is not OK is noted against the serial of the module in
   its port, so the module carries it to any port it is moved to.

Bounded (model.cable_ledger), written atomically at most every 5 minutes (stores.optics_baseline's
JsonStateFile); an unreadable file starts a new ledger, logged once.
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass

from fabricmon.model.ber import MlxlinkData
from fabricmon.model.cable_ledger import CableLedger, Change
from fabricmon.model.finding import OK, Finding
from fabricmon.model.optics import OpticsData
from fabricmon.model.snapshot import SourceState, source_data
from fabricmon.stores.optics_baseline import JsonStateFile

FILE_NAME = "cable_ledger.json"
# the checks whose trouble belongs to the cable or module in the port (what a moved cable carries)
CABLE_CHECKS = frozenset({"phy_ber", "symbol_errors", "link_error_recovery", "link_flap", "receive_errors",
                          "link_integrity", "optics_thresholds", "optics_lane_imbalance", "optics_dimming",
                          "optics_no_light"})


@dataclass(frozen=True, slots=True)
class PortModule:
    """What one port holds now: a module's identity, or none (serial "": the module read answered "no module")."""
    key: str            # node:<device>:<port>
    label: str          # mlx5_0 port 1
    device: str
    port: int
    serial: str
    vendor: str = ""
    part_number: str = ""


def port_key(device: str, port: int) -> str:
    return f"node:{device}:{port}"


def modules(states: Mapping[str, SourceState]) -> list[PortModule]:
    """Each RDMA port's module as the optics and mlxlink sources read it (mlxlink's where both did)."""
    out: dict[tuple[str, int], PortModule] = {}
    opt = source_data(states, OpticsData)
    for m in (opt.modules.values() if opt is not None else ()):
        key = (m.device, m.port)
        if key in out:
            continue
        serial = m.module.serial.strip() if m.module is not None else ""
        if m.module is None and not m.note:
            continue
        out[key] = PortModule(port_key(*key), f"{m.device} port {m.port}", m.device, m.port, serial,
                              m.module.vendor if m.module is not None else "",
                              m.module.part_number if m.module is not None else "")
    mlx = source_data(states, MlxlinkData)
    for (dev, port), p in (mlx.ports.items() if mlx is not None else ()):
        if p.module is not None and p.module.serial:
            out[(dev, port)] = PortModule(port_key(dev, port), f"{dev} port {port}", dev, port, p.module.serial,
                                          p.module.vendor, p.module.part_number)
    return [out[k] for k in sorted(out)]


class LedgerStore(JsonStateFile[CableLedger]):
    def __init__(self, path: str | None = None, clock: Callable[[], float] = time.monotonic):
        super().__init__(path, CableLedger, CableLedger.from_dict, "cable ledger", clock)

    @property
    def ledger(self) -> CableLedger:
        return self.state

    def to_dict(self) -> object:
        return self.state.to_dict()

    def observe(self, mods: Iterable[PortModule], now: float) -> list[Change]:
        changes = []
        for m in mods:
            c = self.state.observe(m.key, m.serial, m.vendor, m.part_number, now, m.label)
            self.changed()
            if c is not None:
                changes.append(c)
        return changes

    def troubles(self, findings: Iterable[Finding], mods: Iterable[PortModule], now: float) -> int:
        by_port = {(m.device, m.port): m for m in mods if m.serial}
        noted = 0
        for f in findings:
            m = by_port.get((f.device, f.port)) if f.port is not None else None
            if m is None or f.check not in CABLE_CHECKS or f.status == OK:
                continue
            if self.state.trouble(m.serial, m.key, f.check, f.status, f.message, now):
                noted += 1
        if noted:
            self.changed()
            self.flush(force=True)      # a trouble is worth keeping at once: it is what a moved cable carries
        else:
            self.flush()
        return noted


def ledger_path(inventory_path: str | None) -> str | None:
    """Beside the learned inventory's file (None: in memory, as the inventory is)."""
    return None if inventory_path is None else os.path.join(os.path.dirname(inventory_path), FILE_NAME)


__all__ = ["CABLE_CHECKS", "FILE_NAME", "LedgerStore", "PortModule", "ledger_path", "modules", "port_key"]
