"""Routing balance from the forwarding tables (static: seen before any job runs into it).

For every switch with active uplinks, the remote destinations are the CA LIDs not attached
below it (not on its host ports, nor below the lower-level switches its down ports reach). Each
is counted on the port its linear forwarding table sends it to; the route imbalance is max/mean
of those counts over the switch's active uplinks (ports carrying none count as 0). A switch
above the threshold is flagged, naming the port that carries most and those that carry none.
rdma-core's check_lft_balance.pl calls a switch unbalanced when the largest count exceeds the
smallest by more than one; the finding says whether that rule agrees.

Records in (Topology, FabricPort, the tables), balances and findings out; nothing here parses
or fetches."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING

from fabricmon.checks import OK, WARNING, Finding
from fabricmon.checks.port_text import port_ranges
from fabricmon.checks.shape import Outcome, report
from fabricmon.model.fabric import NO_ROUTE, FabricPort, LftData, RouteBalance, RouteBalances, Topology
from fabricmon.model.snapshot import source_state

if TYPE_CHECKING:
    from fabricmon.checks.fabric_inputs import FabricInputs

CHECK = "routing"
NEEDS = ("forwarding_tables", "SweepData")    # fresh forwarding tables against the links a fresh sweep read up


def ca_lids_below(topo: Topology) -> tuple[set[int], dict[str, set[int]]]:
    """All CA LIDs (from the switches' host ports) and, per switch, those attached below it:
    on its host ports, or below a switch of a lower level its ports reach."""
    levels = topo.levels
    below: dict[str, set[int]] = {}
    for guid in sorted(topo.switches, key=lambda g: levels.get(g, 0)):
        mine: set[int] = set()
        lvl = levels.get(guid, 0)
        for lk in topo.switches[guid].links.values():
            if lk.remote_type != "Switch":
                if lk.remote_lid:
                    mine.add(lk.remote_lid)
            elif 0 < levels.get(lk.remote_guid, 0) < lvl:
                mine |= below.get(lk.remote_guid, set())
        below[guid] = mine
    every: set[int] = set()
    for guid, sw in topo.switches.items():
        every.update(lk.remote_lid for lk in sw.links.values() if lk.remote_type != "Switch" and lk.remote_lid)
    return every, below


def balance(topo: Topology, tables: Mapping[str, bytes], ports: Mapping[tuple[str, int], FabricPort],
            guids: list[str], threshold: float) -> dict[str, RouteBalance]:
    """The route balance of every switch in `guids` that has a table and active uplinks."""
    every, below = ca_lids_below(topo)
    out: dict[str, RouteBalance] = {}
    for guid in guids:
        table = tables.get(guid)
        sw = topo.switches.get(guid)
        if table is None or sw is None:
            continue
        up = sorted(p for p in sw.ports()
                    if (p_ := ports.get((guid, p))) is not None and p_.role == "up" and p_.up)
        if not up:
            continue
        remote = every - below.get(guid, set())
        rb = RouteBalance(guid=guid, switch=sw.name, remote=len(remote), routes={p: 0 for p in up})
        for lid in remote:
            port = table[lid] if lid < len(table) else NO_ROUTE
            if port in rb.routes:
                rb.routes[port] += 1
            else:
                rb.other += 1
        total = sum(rb.routes.values())
        if total:
            rb.ratio = max(rb.routes.values()) / (total / len(up))
            rb.imbalanced = rb.ratio > threshold
        out[guid] = rb
    return out


def evaluate(balances: Mapping[str, RouteBalance], ports: Mapping[tuple[str, int], FabricPort],
             threshold: float) -> list[Finding]:
    """A WARNING per imbalanced switch (non-OK only), on the port that carries most."""
    findings = []
    for guid, rb in balances.items():
        if not rb.imbalanced:
            continue
        hot = max(rb.routes, key=lambda p: (rb.routes[p], -p))
        hp = ports.get((guid, hot))
        to = f' (to "{hp.link.remote_name}")' if hp is not None and hp.link is not None else ""
        none = [p for p, n in rb.routes.items() if n == 0]
        if none:
            rest = f"port{'s' if len(none) > 1 else ''} {port_ranges(none)} carr{'y' if len(none) > 1 else 'ies'} none"
        else:
            cold = min(rb.routes, key=lambda p: (rb.routes[p], p))
            rest = f"the least, port {cold}, carries {rb.routes[cold]}"
        spread = max(rb.routes.values()) - min(rb.routes.values())
        other = f"; {rb.other} routed elsewhere (down, host or no route)" if rb.other else ""
        findings.append(Finding(
            CHECK, guid, hot, WARNING,
            f"{rb.switch} routes {rb.routes[hot]} of {rb.remote} remote hosts through port {hot}{to}; {rest} "
            f"(route imbalance max/mean {rb.ratio:.2f} > {threshold:g} over {len(rb.routes)} active uplinks; "
            f"check_lft_balance: largest exceeds smallest by {spread}{other}): check the routing engine "
            f"(opensm -R) or the switch's LFT"))
    return [f for f in findings if f.status != OK]


@dataclass(slots=True)
class RoutingState:
    # the last route balance and what it was computed from: (topology, tables, up uplinks, it)
    routes: tuple[Topology, LftData, frozenset[tuple[str, int]], dict[str, RouteBalance]] | None = None


class Routing:
    """routing (checks.shape): the route balance of the latest forwarding tables, computed again only
    when the tables, the topology or the up uplinks changed (the tables every routing_interval, the
    uplinks when one goes down or comes back); the balances go into the section."""
    reports = (report(CHECK, *NEEDS),)

    def __init__(self, threshold: float):
        self.settings = threshold
        self.state = RoutingState()

    def run(self, inputs: FabricInputs) -> Outcome:
        st = source_state(inputs.states, LftData)
        if st is None or not isinstance(st.data, LftData):
            return Outcome((), ())
        topo, sec = inputs.topo, inputs.sec
        active = frozenset(k for k, p in sec.ports.items() if p.role == "up" and p.up)
        last = self.state.routes
        if last is None or last[0] is not topo or last[1] is not st.data or last[2] != active:
            last = self.state.routes = (topo, st.data, active,
                                        balance(topo, st.data.tables, sec.ports, list(sec.switches), self.settings))
        routes = last[3]
        # the switches whose forwarding table was balanced against their active uplinks
        return Outcome(evaluate(routes, sec.ports, self.settings), tuple(routes), RouteBalances(routes))


__all__ = ["CHECK", "NEEDS", "Routing", "RoutingState", "balance", "ca_lids_below", "evaluate"]
