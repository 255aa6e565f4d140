"""discovery (Ethernet): every configured switch's identity, interfaces and LLDP neighbours, joined into
the fabric graph (DiscoveryData, the records the InfiniBand discovery fills).

Per switch, one walk after the other (parsers.snmp.WALKS, phase "discovery" plus the interface
tables and a probe of each PFC MIB until one answers; v2c in this process, v3 one net-snmp process
per walk: sources.ethernet.snmp), all switches at once up to
`fabric.ethernet.concurrency`, under the source's one deadline. A switch that does not answer costs
only itself: its error is counted (timeout, or a wrong credential) and it keeps the identity it
had at its last answer (so its links are not called gone); one that never answered shows as
unreachable under its address.

The graph: a neighbour whose chassis ID is one of the configured switches' is a switch link
(its port joined by name on that switch), anything else is a host. The local port of an LLDP
entry is joined to its interface by the rule of GUIDE section 9 (SwitchIdentity.if_index_of_lldp_port).
"""

from __future__ import annotations

from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor

from fabricmon.host.io import HostIO
from fabricmon.model.fabric import DiscoveryData, Link, SwitchNode
from fabricmon.parsers.errors import ParseError
from fabricmon.parsers.snmp import PFC_WALKS, WALK_BY_NAME, SwitchIdentity, identity_from_walks
from fabricmon.pipeline.source import Inputs, Source, SourceOutput, register
from fabricmon.sources.ethernet.snmp import SnmpAccess, failure

IDENTITY_WALKS = ("system", "lldp_local", "lldp_remote", "bridge_ports", "if_table", "ifx_table")


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
            continue                 # an optional table the switch refuses (BRIDGE-MIB on a router)
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


def build_graph(idents: dict[str, SwitchIdentity], unreachable: dict[str, str]) -> DiscoveryData:
    """Switch identities (by address) -> the fabric graph."""
    d = DiscoveryData()
    by_chassis: dict[str, tuple[str, SwitchIdentity]] = {}
    for address, ident in idents.items():
        guid = ident.chassis_id or address
        by_chassis[guid] = (address, ident)
    for guid, (address, ident) in sorted(by_chassis.items()):
        names = {i: str(f.get("name") or f.get("descr") or i) for i, f in ident.ifaces.items()}
        sw = SwitchNode(guid, ident.sys_name or address, len(names), None, kind="ethernet", port_names=names,
                        address=address, counter_tables=(ident.pfc_walk,) if ident.pfc_walk else ())
        for n in ident.neighbours:
            local = ident.if_index_of_lldp_port(n.local_port_num)
            if local is None or local in sw.links:
                continue
            speed = ident.ifaces.get(local, {}).get("speed_mbps")
            mbps = int(speed) if isinstance(speed, int) and speed > 0 else None
            if n.chassis_id in by_chassis and n.chassis_id != guid:
                other = by_chassis[n.chassis_id][1]
                rport = other.if_index_of_advertised(n.port_id, n.port_desc) or 0
                rname = str(other.ifaces.get(rport, {}).get("name") or n.port_name) if rport else n.port_name
                sw.links[local] = Link(local, n.chassis_id, rport, "Switch", other.sys_name or n.sys_name,
                                       None, None, rate_mbps=mbps, remote_port_name=rname)
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
          provides_inventory=True, collector="ethernet", records=DiscoveryData)
class SnmpDiscoverySource(Source):
    def __init__(self, config, sc=None):
        super().__init__(config, sc)
        self.access = SnmpAccess(config.fabric.ethernet.snmp)
        self._last: dict[str, SwitchIdentity] = {}       # address -> identity at its last answer

    def collect(self, io: HostIO, inputs: Inputs) -> SourceOutput:
        out = SourceOutput()
        eth = self.config.fabric.ethernet
        switches = list(eth.switches)
        if not switches:
            out.error("read", "no switches configured (fabric.ethernet.switches)")
            return out

        def one(address: str):
            return address, *read_identity(self.access, io, address, lambda: inputs.remaining(self.sc.timeout))

        with ThreadPoolExecutor(max_workers=max(1, min(eth.concurrency, len(switches))),
                                thread_name_prefix="fabricmon-snmp-disc") as pool:
            results = list(pool.map(one, switches))
        idents: dict[str, SwitchIdentity] = {}
        unreachable: dict[str, str] = {}
        for address, ident, err in results:
            if ident is not None:
                idents[address] = self._last[address] = ident
                continue
            kind, msg = err
            out.error(kind, f"switch {address}: {msg}")
            if address in self._last:                        # keeps what it was; the sweep says it is unread
                idents[address] = self._last[address]
            unreachable[address] = msg
        data = build_graph(idents, unreachable)
        for address, msg in unreachable.items():
            guid = next((g for g, sw in data.switches.items() if sw.address == address), address)
            data.unreachable[guid] = msg
        out.data = data
        return out

    def close(self) -> None:
        self.access.close()
        super().close()


__all__ = ["IDENTITY_WALKS", "SnmpDiscoverySource", "build_graph", "read_identity"]
