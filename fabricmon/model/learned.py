"""The learned inventory: the RDMA ports seen healthy on this node, so that one that was there
and is gone fails the node without any configuration.

"Seen healthy" is ACTIVE and LinkUp at least once. A healthy port also keeps what it is cabled to
(its link peer from iblinkinfo: the switch and port), so that while its link is down the alerts
still name the switch port it hangs off (and Alertmanager can mute it under that switch's alert). A port that is down at first sight is not
learned (an uncabled second port, a spare adapter): it is never called missing, and while it
exists the link checks judge it. A learned port that is down stays a port (the link checks judge
it); only a learned port absent from the inventory is missing.

A port is known by its node GUID and port number where sysfs or ibstat give a node GUID (so an
adapter that vanished is named correctly even when the others were renumbered at the next boot,
mlx5_4 becoming mlx5_3), else by its device name and port number.

Pure: records in, records out. The file that keeps it between runs is stores.learned's.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from typing import Any

from fabricmon.model.ports import Inventory

VERSION = 1
MAX_PORTS = 1024        # bounded: a node has a handful; a runaway device list must not grow the file


@dataclass(slots=True)
class LearnedPort:
    device: str                 # the name it had when last seen healthy
    port: int
    link_layer: str = "InfiniBand"
    node_guid: str = ""
    port_guid: str = ""
    link: str = ""              # "4X NDR" (width and generation, as the link checks name it)
    rate_gbps: float | None = None
    netdev: str = ""
    learned_at: float = 0.0     # wall-clock time it was first seen healthy (or accepted)
    peer: str = ""              # the switch (node description) and port it was cabled to while up
    peer_port: int | None = None

    @property
    def key(self) -> str:
        return identity(self.device, self.port, self.node_guid)

    def describe(self) -> str:
        """What was known of it: GUIDs, link layer, link, netdev."""
        ids = [f"node GUID {self.node_guid}"] if self.node_guid else []
        ids += [f"port GUID {self.port_guid}"] if self.port_guid else []
        link = self.link_layer + (f" {self.link}" if self.link else "")
        if self.rate_gbps:
            link += f" {self.rate_gbps:g} Gb/s"
        parts = [", ".join(ids) or "no GUID known", link]
        if self.netdev:
            parts.append(f"netdev {self.netdev}")
        return "; ".join(parts)


def _keep_peer(rec: LearnedPort, old: LearnedPort) -> None:
    """A healthy port whose peer is not known now (iblinkinfo off or failing) keeps the one learned."""
    if not rec.peer and old.peer:
        rec.peer, rec.peer_port = old.peer, old.peer_port


def identity(device: str, port: int, node_guid: str) -> str:
    return f"guid:{node_guid.lower()}:{port}" if node_guid else f"name:{device}:{port}"


@dataclass(slots=True)
class LearnedInventory:
    ports: dict[str, LearnedPort] = field(default_factory=dict)     # identity -> port
    accepted_at: float | None = None     # when `fabricmon inventory accept` last replaced it

    @staticmethod
    def _healthy(inv: Inventory, now: float) -> list[LearnedPort]:
        out = []
        for (dev, num), p in sorted(inv.ports.items()):
            if not p.up:
                continue
            d = inv.devices.get(dev)
            out.append(LearnedPort(device=dev, port=num, link_layer=p.link_layer,
                                   node_guid=d.node_guid if d is not None else "", port_guid=p.port_guid,
                                   link=p.link_text() if p.width or p.generation else "",
                                   rate_gbps=p.rate_gbps or None, netdev=d.netdev if d is not None else "",
                                   learned_at=now, peer=p.peer, peer_port=p.peer_port))
        return out

    def _known(self, rec: LearnedPort) -> LearnedPort | None:
        old = self.ports.get(rec.key)
        if old is None and rec.node_guid:       # known by name before its GUID was
            old = self.ports.get(identity(rec.device, rec.port, ""))
        return old

    def would_learn(self, inv: Inventory) -> bool:
        """Whether learn() would add or change anything (cheap: no copy, no change)."""
        for rec in self._healthy(inv, 0.0):
            old = self._known(rec)
            if old is None or old.key != rec.key:
                if old is not None or len(self.ports) < MAX_PORTS:
                    return True
                continue
            rec.learned_at = old.learned_at
            _keep_peer(rec, old)
            if rec != old:
                return True
        return False

    def learn(self, inv: Inventory, now: float) -> list[LearnedPort]:
        """Add every healthy port of `inv` not known yet, and refresh what changed about a known
        one (its name after a renumbering, its GUIDs, its link); returns the ports added or changed."""
        changed = []
        for rec in self._healthy(inv, now):
            old = self._known(rec)
            if old is not None:
                rec.learned_at = old.learned_at
                _keep_peer(rec, old)
                if rec == old:
                    continue
                del self.ports[old.key]
            elif len(self.ports) >= MAX_PORTS:
                continue
            self.ports[rec.key] = rec
            changed.append(rec)
        return changed

    def recall_peers(self, inv: Inventory) -> None:
        """Give every port of `inv` whose link peer is not known now (a link that is down) the peer it
        was learned with."""
        for (dev, num), p in inv.ports.items():
            if p.peer:
                continue
            d = inv.devices.get(dev)
            rec = self.ports.get(identity(dev, num, d.node_guid if d is not None else "")) \
                or self.ports.get(identity(dev, num, ""))
            if rec is not None and rec.peer:
                p.peer, p.peer_port = rec.peer, rec.peer_port

    def gone(self, inv: Inventory, excluded: Callable[[str], bool] = lambda name: False) -> list[LearnedPort]:
        """The learned ports that are not in `inv` (by node GUID and port where known, else by
        name), in name order; ports of excluded devices are never missing."""
        present_names = set(inv.ports)
        present_guids = {identity(dev, num, d.node_guid) for (dev, num) in inv.ports
                         if (d := inv.devices.get(dev)) is not None and d.node_guid}
        present_port_guids = {p.port_guid for p in inv.ports.values() if p.port_guid}
        out = []
        for rec in self.ports.values():
            if excluded(rec.device):
                continue
            if rec.node_guid:
                if rec.key in present_guids or (rec.port_guid and rec.port_guid in present_port_guids):
                    continue
                d = inv.devices.get(rec.device)
                if (rec.device, rec.port) in present_names and (d is None or not d.node_guid):
                    continue    # the name is there and no GUID says it is another adapter
            elif (rec.device, rec.port) in present_names:
                continue
            out.append(rec)
        return sorted(out, key=lambda r: (r.device, r.port))

    def to_dict(self) -> dict[str, object]:
        return {"version": VERSION, "accepted_at": self.accepted_at,
                "ports": [asdict(p) for _, p in sorted(self.ports.items())]}

    @classmethod
    def from_dict(cls, doc: dict[str, Any]) -> LearnedInventory:
        """Raises ValueError (or KeyError/TypeError) on a document this version cannot read."""
        if not isinstance(doc, dict) or doc.get("version") != VERSION:
            raise ValueError(f"not a learned inventory of version {VERSION}")
        ports = {}
        for raw in doc.get("ports", [])[:MAX_PORTS]:
            p = LearnedPort(device=str(raw["device"]), port=int(raw["port"]),
                            link_layer=str(raw.get("link_layer", "InfiniBand")),
                            node_guid=str(raw.get("node_guid", "")), port_guid=str(raw.get("port_guid", "")),
                            link=str(raw.get("link", "")),
                            rate_gbps=float(raw["rate_gbps"]) if raw.get("rate_gbps") is not None else None,
                            netdev=str(raw.get("netdev", "")), learned_at=float(raw.get("learned_at", 0.0)),
                            peer=str(raw.get("peer", "")),
                            peer_port=int(raw["peer_port"]) if raw.get("peer_port") is not None else None)
            ports[p.key] = p
        acc = doc.get("accepted_at")
        return cls(ports, float(acc) if acc is not None else None)


__all__ = ["MAX_PORTS", "LearnedInventory", "LearnedPort", "identity"]
