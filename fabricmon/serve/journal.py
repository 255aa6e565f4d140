"""The daemon's journal: what an operator reads in `journalctl -u fabricmon`.

A subscriber on Pipeline.on_snapshot that diffs consecutive snapshots, never a part of the checks:
- the first snapshot: one line per port found (state, rate, where its counters come from) and
  one line for the sources in use and those that are off (an `auto` tool that is not installed);
- afterwards: one line when a port appears or vanishes, and one line each time a finding appears,
  changes severity or clears (check, device, port, severity, the human reason, and the jobs it
  hurts when a job source runs: those running at that moment). A finding whose
  message changes at the same severity (a count rising) is not logged again.
Sources that start or stop failing are logged by the pipeline itself, once each way.
"""

from __future__ import annotations

from typing import Any

import structlog

from fabricmon.model import ibspec
from fabricmon.checks import CRITICAL, OK, STATUS_NAMES
from fabricmon.model.ports import PortView
from fabricmon.model.snapshot import Snapshot

Key = tuple[str, str, "int | None"]


def port_fields(p: PortView) -> dict[str, Any]:
    state = ibspec.PORT_STATES.get(p.state_id, "unknown") if p.state_id is not None else "unknown"
    phys = ibspec.PHYS_STATES.get(p.phys_state_id, "unknown") if p.phys_state_id is not None else "unknown"
    rate = f"{p.link_text()} ({p.rate_gbps:g} Gb/s)" if p.rate_gbps is not None else p.link_text()
    return {"device": p.device, "port": p.port, "link_layer": p.link_layer, "state": f"{state}/{phys}",
            "rate": rate, "counters_from": p.counter_source or "none"}


class Journal:
    def __init__(self, logger: Any = None):
        self.log = logger or structlog.get_logger("fabricmon.daemon")
        self._findings: dict[Key, int] | None = None       # None until the first snapshot
        self._ports: set[tuple[str, int]] = set()

    def __call__(self, snap: Snapshot) -> None:
        if not snap.inventory_known and self._findings is None:
            return          # the inventory sources have not answered yet: nothing to say
        if self._findings is None:
            self._inventory(snap)
            self._findings = {}
        else:
            self._port_changes(snap)
        self._finding_changes(snap)

    # --- the inventory ------------------------------------------------------------------------
    def _inventory(self, snap: Snapshot) -> None:
        for p in snap.ib.ports.values():
            self.log.info("port found", **port_fields(p))
        if not snap.ib.ports and snap.fabric is None:      # a fabric collector has no local ports
            self.log.warning("no InfiniBand or RoCE port found")
        self._ports = set(snap.ib.ports)
        active = [n for n, s in snap.sources.items() if s.enabled and s.active]
        off = [n for n, s in snap.sources.items() if s.enabled and not s.active]
        disabled = [n for n, s in snap.sources.items() if not s.enabled]
        self.log.info("sources", active=active, not_installed=off, disabled=disabled)

    def _port_changes(self, snap: Snapshot) -> None:
        now = set(snap.ib.ports)
        for key in sorted(now - self._ports):
            self.log.info("port appeared", **port_fields(snap.ib.ports[key]))
        for dev, port in sorted(self._ports - now):
            self.log.warning("port vanished", device=dev, port=port)
        self._ports = now

    # --- findings -----------------------------------------------------------------------------
    def _emit(self, event: str, status: int, **fields: Any) -> None:
        level = self.log.error if status == CRITICAL else self.log.warning if status else self.log.info
        level(event, **fields)

    def _finding_changes(self, snap: Snapshot) -> None:
        assert self._findings is not None
        prev = self._findings               # the findings not OK at the last snapshot
        bad: dict[Key, int] = {}
        seen: set[Key] = set()              # those of prev this snapshot judges again
        for f in snap.findings:
            if f.status == OK and not prev:
                continue                    # the usual case: OK now and nothing was wrong before
            key = (f.check, f.device, f.port)
            before = prev.get(key, OK)
            if before != OK:
                seen.add(key)
            if f.status != OK:
                bad[key] = f.status
            if f.status == before:
                continue
            fields: dict[str, object] = {"check": f.check, "device": f.device, "port": f.port,
                                         "severity": STATUS_NAMES[f.status], "message": f.message}
            if f.jobs and f.status != OK:      # the jobs running (on the fabric: behind it) when it was raised
                fields["jobs"] = [j.text() for j in f.jobs]
            if before == OK:
                self._emit("finding", f.status, **fields)
            elif f.status == OK:
                self._emit("finding cleared", OK, previous=STATUS_NAMES[before], **fields)
            else:
                self._emit("finding changed severity", f.status, previous=STATUS_NAMES[before], **fields)
        for key, before in prev.items():
            if key not in seen:             # its port vanished: nothing judges it any more
                check, device, port = key
                self._emit("finding cleared", OK, check=check, device=device, port=port, severity="OK",
                           previous=STATUS_NAMES[before], message="no longer evaluated (the port vanished)")
        self._findings = bad


__all__ = ["Journal", "port_fields"]
