"""discovery (Ethernet): every configured switch's identity, interfaces and LLDP neighbours, joined into
the fabric graph (DiscoveryData, the records the InfiniBand discovery fills).

Per switch, one walk after the other (parsers.snmp.WALKS, phase "discovery" plus the interface
tables and a probe of each PFC MIB until one answers; v2c in this process, v3 one net-snmp process
per walk: sources.ethernet.snmp), all switches at once up to
`fabric.ethernet.concurrency`, under the source's one deadline. A switch that does not answer costs
only itself: its error is counted (timeout, or a wrong credential) and it keeps the identity it
had at its last answer (so its links are not called gone); one that never answered shows as
unreachable under its address.

The graph (build_graph): a switch's ports are its fabric ports only (the port model of
parsers.snmp.SwitchIdentity.fabric_ports: physical interfaces, management ports excluded by
`fabric.ethernet.exclude_ports`), each labelled uniquely. A neighbour whose chassis ID is one of the
configured switches' is a switch link (its port joined by name on that switch); one that says it
bridges or routes (lldpRemSysCapEnabled) is an `External` switch outside the fabric; anything else
is a host. The local port of an LLDP entry is joined to its interface by the local-port rule of docs/ethernet.md
(SwitchIdentity.if_index_of_lldp_port). A switch is named by switch_names (its address added where
its sysName does not tell it apart). docs/ethernet.md describes the model.
"""

from __future__ import annotations

from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from typing import TYPE_CHECKING

import structlog

from fabricmon.sources.ethernet.settings import DEFAULT_EXCLUDE_PORTS, SNMP_SOURCE
from fabricmon.host.io import HostIO
from fabricmon.model.fabric import DiscoveryData, Link, SwitchNode
from fabricmon.parsers.errors import ParseError
from fabricmon.parsers.snmp import PFC_WALKS, WALK_BY_NAME, LldpNeighbour, SwitchIdentity, identity_from_walks
from fabricmon.pipeline.source import Inputs, SourceOutput, register
from fabricmon.sources.ethernet.snmp import SnmpAccess, SnmpSource, failure, switch_errors

if TYPE_CHECKING:
    from fabricmon.registry import SourceConfig

log = structlog.get_logger("fabricmon.fabric")

IDENTITY_WALKS = ("system", "lldp_local", "lldp_remote", "bridge_ports", "if_stack", "if_table", "ifx_table")


def read_identity(access: SnmpAccess, io: HostIO, address: str, timeout: Callable[[], float]
                  ) -> tuple[SwitchIdentity | None, tuple[str, str] | None]:
    """One switch's discovery walks: (identity, None) or (None, (kind, message)). `timeout()`:
    the seconds left of the run's deadline."""
    texts: dict[str, str] = {}
    for name in IDENTITY_WALKS:
        res = access.walk(io, address, WALK_BY_NAME[name].root, timeout())
        err = failure(res)
        if err is not None:
            if name == "system" or err[0] == "timeout":
                return None, err
            continue                 # an optional table the switch refuses (BRIDGE-MIB on a router, ifStackTable)
        texts[name] = res.stdout
    for w in PFC_WALKS:              # the first PFC MIB that answers is the one the sweep reads
        res = access.walk(io, address, w.root, timeout())
        if failure(res) is None and any(line.startswith("." + w.root + ".") for line in res.stdout.splitlines()):
            texts[w.name] = res.stdout
            break
    try:
        return identity_from_walks(texts), None
    except ParseError as exc:
        return None, ("parse", str(exc))


# sysNames that do not tell one switch from another: a switch with one of these (or with none, or
# with the same sysName as another configured switch) is named "<sysName> (<address>)"
DEFAULT_SYS_NAMES = frozenset(("sonic", "switch", "localhost", "localhost.localdomain", "cumulus", "os10",
                               "arista", "dell", "default", "router"))


def switch_names(idents: dict[str, SwitchIdentity]) -> dict[str, str]:
    """address -> the name an operator can use: the sysName when it tells the switch apart, else
    the sysName with the configured address, or the address alone when the sysName is empty."""
    count: dict[str, int] = {}
    for ident in idents.values():
        key = ident.sys_name.casefold()
        count[key] = count.get(key, 0) + 1
    out = {}
    for address, ident in idents.items():
        name = ident.sys_name
        if not name:
            out[address] = address
        elif name.casefold() in DEFAULT_SYS_NAMES or count[name.casefold()] > 1:
            out[address] = f"{name} ({address})"
        else:
            out[address] = name
    return out


def _describe(n: LldpNeighbour) -> str:
    return f"{n.sys_name or n.chassis_id}[{n.port_name or '?'}] ({n.chassis_id})"


def build_graph(idents: dict[str, SwitchIdentity], unreachable: dict[str, str],
                exclude: tuple[str, ...] = DEFAULT_EXCLUDE_PORTS) -> DiscoveryData:
    """Switch identities (by address) -> the fabric graph. Only fabric ports (the port model:
    SwitchIdentity.fabric_ports) are ports of a switch. A port's LLDP neighbours are all kept: its
    link is the neighbour that is a configured switch, else one that says it bridges or routes,
    else the first; a port with several keeps every one in SwitchNode.neighbours. A neighbour that
    is not a configured switch is a host, or `External` when its capabilities say bridge or router."""
    d = DiscoveryData(links_are_up=False)      # LLDP is no evidence of a link's state
    names = switch_names(idents)
    by_chassis: dict[str, tuple[str, SwitchIdentity]] = {}
    guid_of: dict[str, str] = {}
    for address, ident in idents.items():
        guid = ident.chassis_id or address
        if guid in by_chassis:          # two switches with one chassis ID: the second by its address
            guid = address
        by_chassis[guid] = (address, ident)
        guid_of[address] = guid
    portsets = {address: ident.fabric_ports(exclude) for address, ident in idents.items()}
    for guid, (address, ident) in sorted(by_chassis.items()):
        ports = portsets[address]
        excluded = {ident.base_name(i): why for i, why in ports.excluded.items()}
        sw = SwitchNode(guid, names[address], len(ports.labels), None, kind="ethernet", port_names=dict(ports.labels),
                        address=address, counter_tables=(ident.pfc_walk,) if ident.pfc_walk else (),
                        excluded_ports=excluded, lags=dict(ports.lags))
        on_port: dict[int, list[LldpNeighbour]] = {}
        for n in ident.neighbours:
            local = ident.if_index_of_lldp_port(n.local_port_num)
            if local is None or local not in ports.labels:
                continue                # not a fabric port (a management port, a LAG): not a link
            on_port.setdefault(local, []).append(n)
        for local, ns in sorted(on_port.items()):
            if len(ns) > 1:
                sw.neighbours[local] = tuple(_describe(n) for n in ns)
            n = next((n for n in ns if n.chassis_id in by_chassis and n.chassis_id != guid), None) \
                or next((n for n in ns if n.is_switch), ns[0])
            speed = ident.ifaces.get(local, {}).get("speed_mbps")
            mbps = int(speed) if isinstance(speed, int) and speed > 0 else None
            if n.chassis_id in by_chassis and n.chassis_id != guid:
                oaddr, other = by_chassis[n.chassis_id]
                rport = other.if_index_of_advertised(n.port_id, n.port_desc) or 0
                rname = portsets[oaddr].labels.get(rport) or (other.base_name(rport) if rport else n.port_name)
                sw.links[local] = Link(local, n.chassis_id, rport, "Switch", names[oaddr], None, None,
                                       rate_mbps=mbps, remote_port_name=rname)
            elif n.is_switch:
                sw.links[local] = Link(local, n.chassis_id, 0, "External", n.sys_name or n.chassis_id, None, None,
                                       rate_mbps=mbps, remote_port_name=n.port_name)
            else:
                host = n.sys_name or n.chassis_id
                sw.links[local] = Link(local, n.chassis_id, 0, "Host", host, None, None, rate_mbps=mbps,
                                       remote_port_name=n.port_name)
                d.cas[n.chassis_id] = host
        d.switches[guid] = sw
    for address, why in sorted(unreachable.items()):
        if address not in {sw.address for sw in d.switches.values()}:
            d.switches[address] = SwitchNode(address, address, 0, None, kind="ethernet", address=address)
            d.unreachable[address] = why
    return d


@register("discovery", enabled=True, interval=300.0, timeout=60.0, command=(),
          provides_inventory=True, collector="ethernet", records=DiscoveryData,
          options=SNMP_SOURCE)
class SnmpDiscoverySource(SnmpSource):
    def __init__(self, sc: SourceConfig):
        super().__init__(sc)
        self._last: dict[str, SwitchIdentity] = {}       # address -> identity at its last answer
        self._reported: dict[tuple[str, int], tuple[str, ...]] = {}   # (guid, port) -> neighbours logged

    def collect(self, io: HostIO, inputs: Inputs) -> SourceOutput:
        out = SourceOutput()
        eth = self.settings.ethernet
        switches = list(eth.switches)
        if not switches:
            out.error("read", "no switches configured (fabric.ethernet.switches)")
            return out

        def one(address: str) -> tuple[str, SwitchIdentity | None, tuple[str, str] | None]:
            return address, *read_identity(self.access, io, address, lambda: inputs.remaining(self.sc.timeout))

        with ThreadPoolExecutor(max_workers=max(1, min(eth.concurrency, len(switches))),
                                thread_name_prefix="fabricmon-snmp-disc") as pool:
            results = list(pool.map(one, switches))
        idents: dict[str, SwitchIdentity] = {}
        unreachable: dict[str, str] = {}
        failed: list[tuple[str, str, str]] = []
        for address, ident, err in results:
            if ident is not None:
                idents[address] = self._last[address] = ident
                continue
            assert err is not None          # no identity: the error says why
            kind, msg = err
            failed.append((address, kind, msg))
            if address in self._last:                        # keeps what it was; the sweep says it is unread
                idents[address] = self._last[address]
            unreachable[address] = msg
        switch_errors(out, failed)
        data = build_graph(idents, unreachable, tuple(eth.exclude_ports))
        self._report(data)
        for address, msg in unreachable.items():
            guid = next((g for g, sw in data.switches.items() if sw.address == address), address)
            data.unreachable[guid] = msg
        out.data = data
        return out

    def _report(self, data: DiscoveryData) -> None:
        """Ports with several LLDP neighbours, logged when that changes (never dropped silently)."""
        now = {(g, p): ns for g, sw in data.switches.items() for p, ns in sw.neighbours.items()}
        for (g, p), ns in sorted(now.items()):
            if self._reported.get((g, p)) != ns:
                sw = data.switches[g]
                log.warning("several LLDP neighbours on one switch port", switch=sw.name, switch_guid=g,
                            port=sw.port_name(p), neighbours=list(ns), link=sw.links[p].remote_name)
        self._reported = now


__all__ = ["DEFAULT_SYS_NAMES", "IDENTITY_WALKS", "SnmpDiscoverySource", "build_graph", "read_identity",
           "switch_names"]
