"""port_state: every port's `state` and `phys_state` alone, every second, so that a port going down is in the
exposition within a second or so of the kernel knowing it, without reading the counters (the sysfs source's
15 s poll reads them, with the state again).

/sys/class/infiniband/<dev>/ports/<n>/state and phys_state of every port of the inventory, in one read_many
(two preads a port of files kept open: about as much as one counter file each). ib_core does not notify a
port state file's readers (no sysfs_notify on a change, so poll() on it never wakes); the kernel's own
notification reaches user space only as a verbs asynchronous event (IBV_EVENT_PORT_ACTIVE/PORT_ERR, read from
a device context libibverbs opens), which needs a verbs context per device and cannot be exercised under ibsim,
so this is a cheap poll instead (docs/latency.md). A run whose texts are the last run's returns the last record, and the pipeline rebuilds
nothing for it (registry `quiet`): a build follows only a change. What a state file does not hold (a port
ibstat lists that sysfs does not: ENOENT) is not read; another read error costs that port's value this run
and is counted (`fabricmon_source_errors_total{source="port_state"}`); the port keeps the sysfs source's
state. Its records win over the sysfs source's state while fresh (model/ports.py merge); the staleness bound
is two intervals and the timeout (3 s), then the sysfs source's state is all there is."""

from __future__ import annotations

import errno

from fabricmon.host.io import HostIO
from fabricmon.model.node_records import PortStateData
from fabricmon.model.ports import Inventory
from fabricmon.parsers.errors import ParseError
from fabricmon.parsers.sysfs_ib import parse_enum
from fabricmon.pipeline.source import INVENTORY, Inputs, Source, SourceOutput, register

BASE = "class/infiniband"


@register("port_state", enabled=True, interval=1.0, timeout=1.0, needs=(INVENTORY,), records=PortStateData,
          quiet=True)
class PortStateSource(Source):
    _inventory: object = None                      # the inventory the file list was made from
    _keys: tuple[tuple[str, int], ...] = ()
    _rels: tuple[str, ...] = ()
    _texts: object = None                          # the last run's answers (errors by errno)
    _last: PortStateData | None = None
    _ids: dict[str, int] = {}

    def collect(self, io: HostIO, inputs: Inputs) -> SourceOutput:
        out = SourceOutput()
        inv = inputs.inventory
        if not isinstance(inv, Inventory):
            return out
        if inv is not self._inventory:
            self._inventory = inv
            self._keys = tuple(sorted(inv.ports))
            self._rels = tuple(f"{BASE}/{d}/ports/{n}/{f}" for d, n in self._keys for f in ("state", "phys_state"))
            self._ids = {}
        if not self._rels:
            out.data = self._last if self._last is not None and not self._last.ports else PortStateData()
            self._last = out.data
            return out
        answers = io.read_many("sysfs", self._rels)
        texts = tuple(a if isinstance(a, str) else a.errno for a in answers)
        if texts == self._texts and self._last is not None:
            out.data = self._last                      # nothing changed: the same record (no rebuild)
            return out
        ports: dict[tuple[str, int], tuple[int | None, int | None]] = {}
        ids = self._ids
        for i, key in enumerate(self._keys):
            got: list[int | None] = []
            for a, rel in ((answers[2 * i], self._rels[2 * i]), (answers[2 * i + 1], self._rels[2 * i + 1])):
                if not isinstance(a, str):
                    if a.errno != errno.ENOENT:
                        out.error("read", f"/sys/{rel}: {a.strerror or a}")
                    got.append(None)
                    continue
                v = ids.get(a)
                if v is None:
                    try:
                        v = parse_enum(a)[0]
                    except ParseError as exc:
                        out.error("parse", f"/sys/{rel}: {exc}")
                        got.append(None)
                        continue
                    if len(ids) < 256:
                        ids[a] = v
                got.append(v)
            if got[0] is not None or got[1] is not None:
                ports[key] = (got[0], got[1])
        self._texts = texts if not out.errors else None
        self._last = out.data = PortStateData(ports)
        return out


__all__ = ["PortStateSource"]
