"""sweep (Ethernet): every switch port's counters, state and speed, and its PFC pause frames, from the
discovered topology (SweepData, the records the InfiniBand sweep fills).

Per switch three walks (parsers.snmp.WALKS of phase "sweep": ifTable, ifXTable and the PFC MIB
that switch answered at discovery). SNMPv2c: only the columns the parser reads
(parsers.snmp.SWEEP_COLUMNS), every switch's walks driven in this process by one thread
(HostIO.snmp_walks), at most `fabric.ethernet.concurrency` switches at once. SNMPv3: one net-snmp
process per walk, as many switches at once from a thread pool. Both under the sweep's one deadline. A switch that does not answer costs only itself: the walks after
its first failure are skipped, it is counted (`fabricmon_source_errors_total{source="sweep", kind}`) and
listed as missing. Per switch the walks sent and those left unanswered (a timeout, a refused
credential) fill SweepData.queries/unanswered/failed as the InfiniBand sweep's MADs do, so the one
`unresponsive` check judges both kinds.

ifOperStatus and ifHighSpeed are read every sweep, so a port that goes down shows in the next
sweep, not at the next discovery (SweepData.link_up). The 64-bit HC octet counters count bytes
(scale 1); the 32-bit ifTable error and discard counters wrap (SweepData.wrapping)."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor

from fabricmon.host.io import HostIO
from fabricmon.model.fabric import SweepData, Topology
from fabricmon.parsers.errors import ParseError
from fabricmon.parsers.snmp import OIDS, SWEEP_COLUMNS, WALK_BY_NAME, SwitchCounters, counters_from_walks
from fabricmon.pipeline.source import INVENTORY, Inputs, SourceOutput, register
from fabricmon.sources.ethernet.settings import SNMP_SOURCE
from fabricmon.sources.ethernet.snmp import SnmpAccess, SnmpSource, failure, switch_errors, switch_label

SWEEP_WALKS = ("if_table", "ifx_table")
OCTETS_WALK = "ifx_table"                   # the walk the traffic counters (ifHCIn/OutOctets) come in
OCTET_COUNTERS = {"transmit_bytes": 1, "receive_bytes": 1}
WRAPPING = frozenset(r.field for r in OIDS if r.type == "counter32")
OPER_UP = 1
NO_ANSWER = ("timeout", "exit_code")        # failure kinds that mean the switch did not answer (not garbage)


def read_counters(access: SnmpAccess, io: HostIO, address: str, tables: tuple[str, ...],
                  remaining: Callable[[], float], answered: dict[str, float] | None = None
                  ) -> tuple[SwitchCounters | None, tuple[str, str] | None]:
    """A switch's sweep walks one after another; `answered` gets when each walk finished, by walk name."""
    texts: dict[str, str] = {}
    for name in (*SWEEP_WALKS, *tables):
        res = access.walk(io, address, WALK_BY_NAME[name].root, remaining())
        err = failure(res)
        if err is not None:
            return None, err
        texts[name] = res.stdout
        if answered is not None:
            answered[name] = res.finished if res.finished is not None else time.monotonic()
    return _counters(texts)


def _counters(texts: dict[str, str]) -> tuple[SwitchCounters | None, tuple[str, str] | None]:
    try:
        return counters_from_walks(texts), None
    except ParseError as exc:
        return None, ("parse", str(exc))


def read_all_inprocess(access: SnmpAccess, io: HostIO, switches: list[tuple[str, str, tuple[str, ...]]],
                       deadline: float, concurrency: int, cancel: threading.Event | None = None,
                       answered: dict[str, dict[str, float]] | None = None
                       ) -> list[tuple[str, SwitchCounters | None, tuple[str, str] | None]]:
    """Every switch's sweep walks (v2c) in one HostIO.snmp_walks call: switches are (key, address,
    PFC tables); -> (key, counters or None, error or None) per switch, in order. A switch's error
    is its first failed walk's. `answered` gets when each of a switch's walks finished, by walk name."""
    specs, owner = [], []
    for key, address, tables in switches:
        for name in (*SWEEP_WALKS, *tables):
            specs.append(access.spec(address, WALK_BY_NAME[name].root, SWEEP_COLUMNS[name]))
            owner.append((key, name))
    results = io.snmp_walks(specs, deadline, concurrency, cancel)
    texts: dict[str, dict[str, str]] = {key: {} for key, _, _ in switches}
    errors: dict[str, tuple[str, str]] = {}
    for (key, name), res in zip(owner, results):
        if key in errors:
            continue
        err = failure(res)
        if err is not None:
            errors[key] = err
        else:
            texts[key][name] = res.stdout
            if answered is not None and res.finished is not None:
                answered.setdefault(key, {})[name] = res.finished
    return [(key, None, errors[key]) if key in errors else (key, *_counters(texts[key]))
            for key, _, _ in switches]


@register("sweep", enabled=True, interval=15.0, timeout=30.0, command=(),
          needs=(INVENTORY,), collector="ethernet", records=SweepData, options=SNMP_SOURCE)
class SnmpSweepSource(SnmpSource):
    def read_switches(self, io: HostIO, inputs: Inputs, out: SourceOutput, topo: Topology, mine: list[str]) -> None:
        t0 = time.monotonic()
        data = SweepData(scale=dict(OCTET_COUNTERS), wrapping=set(WRAPPING))

        answered: dict[str, dict[str, float]] = {}     # switch -> walk -> time.monotonic() it was answered

        def one(guid: str) -> tuple[str, SwitchCounters | None, tuple[str, str] | None]:
            sw = topo.switches[guid]
            got = read_counters(self.access, io, sw.address, sw.counter_tables,
                                lambda: inputs.remaining(self.sc.timeout), answered.setdefault(guid, {}))
            return guid, *got

        if mine and self.access.inprocess:
            results = read_all_inprocess(
                self.access, io, [(g, topo.switches[g].address, topo.switches[g].counter_tables) for g in mine],
                time.monotonic() + inputs.remaining(self.sc.timeout), self.settings.ethernet.concurrency, inputs.cancel,
                answered)
        elif mine:
            with ThreadPoolExecutor(max_workers=max(1, min(self.settings.ethernet.concurrency, len(mine))),
                                    thread_name_prefix="fabricmon-snmp-sweep") as pool:
                results = list(pool.map(one, mine))
        else:
            results = []
        failed: list[tuple[str, str, str]] = []
        for guid, sc, err in results:
            sw = topo.switches[guid]
            data.queries[guid] = walks = len(SWEEP_WALKS) + len(sw.counter_tables)
            if sc is None:
                assert err is not None          # no counters: the error says why
                data.missing.add(guid)
                if err[0] in NO_ANSWER:     # no data from it this sweep: every walk counts as unanswered
                    data.unanswered[guid] = walks
                    data.failed[guid] = {"counters", "state"}
                failed.append((switch_label(sw.name, sw.address), *err))
                continue
            data.switches.add(guid)
            data.bits.update(sc.bits)
            for port in sw.ports():
                if port in sc.counters:
                    data.ports[(guid, port)] = sc.counters[port]
                if port in sc.oper_status:
                    data.link_up[(guid, port)] = sc.oper_status[port] == OPER_UP
                if sc.speed_mbps.get(port):
                    data.rate_mbps[(guid, port)] = sc.speed_mbps[port]
                if port in sc.pause:
                    data.pause[(guid, port)] = sc.pause[port]
        switch_errors(out, failed)
        end = time.monotonic()
        data.duration = end - t0
        # each switch's traffic and pause frames timed at the walk that read them (a PFC walk answered a
        # second after the traffic's in one sweep and at once in the next is no change of pause rate)
        data.read_ago = {g: max(0.0, end - at[OCTETS_WALK]) for g, at in answered.items()
                         if g in data.switches and OCTETS_WALK in at}
        data.pause_read_ago = {g: max(0.0, end - at[t]) for g, at in answered.items() if g in data.switches
                               for t in topo.switches[g].counter_tables[:1] if t in at}
        if data.switches or not mine:
            out.data = data


__all__ = ["SnmpSweepSource", "read_all_inprocess", "read_counters"]
