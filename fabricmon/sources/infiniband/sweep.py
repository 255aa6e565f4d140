"""sweep: every switch port's counters, in batches, never a process per port.

Two ways, said by `method` (fabricmon_fabric_sweep_method):

- **mad** (fabric.sweep_method auto or mad, where the host interface's mad_open opens a umad port in
  the collector's own process, or a capture bundle holds MADs): the in-process MAD engine (the I/O
  in host/mad.py, what to ask in sources/infiniband/mad/, docs/mad-engine.md) reads every switch of the
  sweep (the whole fabric, or a shard's switches) from the cached topology's LIDs in one pass, as
  planned once per discovery (mad.plan_targets, the plan the bare read uses too):
  PortCountersExtended of every port cabled now or before (a port never cabled and down exports
  none), the PortCounters aggregate (AllPortSelect) and per port only where it is non-zero, and
  PortInfo (link state, width, speed and what the port may train at, by SMP) of every cabled port,
  except that a link between two switches of the sweep is read at one end (its other end takes that
  state, and is read itself where that end goes unanswered), and, once, what the far ends may train
  at (CA ports, a mirrored switch end), with many MADs in flight under a window per switch and a
  global one. No process is spawned, no ibnetdiscover per
  sweep; a shard costs its share. Unanswered queries are retried, then counted per switch, and
  leave that port's last known state in place (never a port down). A umad port lost under a sweep (an
  HCA reset, the simulator restarted) is reopened with backoff by the host interface (host/mad.py
  MadHost); the sweeps until then fail, with no data.
- **tools** (no umad port here, fabric.sweep_method tools, or a bundle recorded with the tools): the
  infiniband-diags processes, as follows.

Measured on the real 400-switch director topology in ibsim (16,568 switch ports; docs/benchmarks.md
"Fabric collector"): a process per switch (`perfquery -x -l`, 4-8 in parallel) took 4.7-12 s,
because spawning a MAD client costs more than its queries; `ibqueryerrors` on the cached
topology reads the whole fabric in one process. So a sweep is two passes, in parallel:

- `ibqueryerrors --load-cache C --skip-sl --switch --counters`: PortCountersExtended (64-bit data
  and packet counters) of every switch port, one MAD per port;
- `ibqueryerrors --load-cache C --skip-sl --switch`: the error counters and PortXmitWait, read as
  one aggregate (AllPortSelect) per switch and per port only where the aggregate is non-zero;
  a switch without an "Errors for" block has all of them at zero.

`--skip-sl` keeps the SA out of it (ibqueryerrors says `Query SA failed` and exits 0 without an
SM), `--threshold-file /dev/null` reports every non-zero counter whatever the host's
thresholds say, and `-t` bounds what a switch that does not answer costs: ibqueryerrors moves
on, and that switch alone is missing from this sweep (counted). Counters are never reset (no
-k/-K). The pass process is killed with its process group at the source's timeout.

A shard (`--shard i/n`, n > 1) sweeps only its own switches, by LID with perfquery (no process loads
the topology cache: a per-switch `ibqueryerrors -G` loads all of it, which made a 1/4 shard of the
director fabric take 11-17 s; perfquery takes 4-7 s there, measured in one run): per switch
`perfquery -x -l <lid> 255` (PortCountersExtended of every port) and `perfquery -a <lid>` (the
PortCounters aggregate), then `perfquery -l <lid> 255` only for the switches whose aggregate shows
a non-zero error counter or PortXmitWait, as ibqueryerrors does. At most SHARD_CONCURRENCY processes
at once, all under the sweep's one deadline; a switch whose read fails costs only that switch.

Link state, every sweep, before the counters (so the counters are read closest to the sweep's data
time): first from the subnet manager's database, one `saquery PIR` (PortInfoRecords; no MAD to any
switch), used when it holds a record for every cabled port swept; its records also say what each end
of a link may train at (the enabled widths and speeds, CA ports included), taken for every port
they cover. Otherwise (no SM, or an SA that
answers partially, as ibsim's does) from PortInfo SMPs: one `ibnetdiscover` pass without a cache
(the topology and the cache are left alone; only which ports are cabled is taken from it: 1.6 s on
the 400-switch director fabric, 0.1-0.3 s on a fat tree, where a process per port would cost a
process spawn per port). A port it shows cabled is up; one it does not show is down when the pass
lost no query (it reached both ends); when it lost some, each such port's own PortInfo is read with
`smpquery portinfo <lid> <port>` (at most fabric.link_state_max_ports per sweep,
LINK_STATE_CONCURRENCY at once). The ports that were cabled and went down are read too, so a
re-linked cable shows without a rediscovery. `state_method` says which path answered
(fabricmon_fabric_link_state_method).

Unreached is not down: a query that went unanswered is retried with backoff (RETRY_BACKOFF)
while the sweep's deadline allows (a port's PortInfo up to twice; a switch the fabric pass got no
counters from, once, per switch with perfquery); what stays unanswered is counted per switch
(`unanswered`, fabricmon_source_errors_total{source="sweep", kind="unanswered"}) and leaves that port's
last known state in place (the model marks the switch stale), never a port down.
"""

from __future__ import annotations

import os
import re
import time
from collections.abc import Sequence, Set as AbstractSet
from concurrent.futures import ThreadPoolExecutor

import structlog

from fabricmon.model import gc_pause, ibspec
from fabricmon.host.io import HostIO
from fabricmon.host.runner import CommandResult
from fabricmon.host.mad import UmadLost
from fabricmon.host.umad import UmadUnavailable
from fabricmon.model.compact import PortCounters
from fabricmon.model.fabric import SweepData, Topology, in_shard, port_key
from fabricmon.parsers.errors import ParseError
from fabricmon.parsers.ibqueryerrors import IbqueryerrorsReport, parse_ibqueryerrors
from fabricmon.parsers.ibnetdiscover import count_unanswered, parse_ibnetdiscover
from fabricmon.parsers.perfquery import PerfqueryBlock, parse_perfquery
from fabricmon.parsers.portinfo import PortState, parse_portinfo, parse_saquery_pir
from fabricmon.pipeline.source import INVENTORY, Inputs, Source, SourceOutput, command_error, register
from fabricmon.sources.infiniband.settings import SCOPE, FabricScope
from fabricmon.sources.infiniband.mad import FabricReader, SwitchTarget, plan_targets

ERROR_COUNTERS = tuple(c.name for c in ibspec.COUNTERS if c.kind in ("error", "congestion"))
TRAFFIC_COUNTERS = frozenset(c.name for c in ibspec.COUNTERS if c.kind == "traffic")
_FAILED_LID = re.compile(r"query failed on .*?,?\s*Lid (\d+)", re.I)
# processes in flight at once on a sharded sweep (ibsim serves about 10 MAD clients: docs/fabric-collector.md)
SHARD_CONCURRENCY = 8
LINK_STATE_CONCURRENCY = 6          # smpquery processes at once (the two ibqueryerrors passes have ended)
RETRY_BACKOFF = (0.2, 0.5)          # seconds before each retry of the queries that went unanswered
MAD_RECHECK = 60.0                  # seconds before a umad port that could not be opened is tried again
log = structlog.get_logger("fabricmon.sources.sweep")


@register("sweep", enabled=True, interval=15.0, timeout=30.0, command=("ibqueryerrors",),
          needs=(INVENTORY,), collector="infiniband", concurrency=2, records=SweepData, options=SCOPE)
class SweepSource(Source):
    _rotation = 0                       # where the next sweep's window of SMP state reads starts
    _results: Sequence[CommandResult] = ()  # this sweep's ibqueryerrors results (stderr names what went unanswered)
    _read_at: dict[str, float]                # this sweep's tools path: switch -> when its traffic counters were read

    def collect(self, io: HostIO, inputs: Inputs) -> SourceOutput:
        out = SourceOutput()
        topo: Topology | None = inputs.inventory
        if topo is None or not topo.switches or not topo.cache_file:
            out.error("read", "no discovered topology yet (the discovery source has not completed)")
            return out
        fc = self.sc.settings(FabricScope)
        t0 = time.monotonic()
        self._results = ()
        self._read_at = {}
        base = [*self.sc.command, "--load-cache", topo.cache_file, "--skip-sl", "--switch",
                "--threshold-file", "/dev/null", "-t", str(fc.mad.timeout_ms)]
        mine = {g for g in topo.switches if in_shard(g, *fc.shard)}
        by_lid = {sw.lid: g for g, sw in topo.switches.items() if sw.lid is not None}
        data = SweepData(bits={c.name: 64 if c.kind == "traffic" else c.bits for c in ibspec.COUNTERS})
        try:
            reader = self._mad_reader(io, out)
        except UmadLost as exc:         # the engine's port was lost and is not open again yet: no data, no tools
            out.error("read", f"MAD engine: {exc.strerror or exc}; no switch read this sweep")
            return out
        if reader is not None:
            data.method = "mad"
            with gc_pause.paused():     # the read and its records: a few objects per switch port (fabricmon.model.gc_pause)
                self._sweep_mad(reader, inputs, out, topo, mine, data)
            data.duration = time.monotonic() - t0
            if data.ports or data.link_up or not mine:
                out.data = data
            return out
        if fc.sweep_method == "mad":
            return out                  # _mad_reader said why
        data.method = "tools"
        # link state first: the counters are read last, closest to the sweep's data time; each switch's
        # rates are taken at the end of the process that read its traffic counters (_read_at), not at
        # the end of the error pass, the retries or the rest of the sweep after it
        self._link_states(io, inputs, out, topo, mine, data)
        retried: set[str] = set()
        counters: IbqueryerrorsReport | None
        errors: IbqueryerrorsReport | None
        err_failed: AbstractSet[str | None]     # the switches whose error counters did not read (None: an unknown LID)
        if fc.shard[1] > 1:
            counters, errors, err_failed = self._sweep_switches(io, inputs, out, sorted(mine), topo)
        else:
            counters, errors, err_failed = self._sweep_fabric(io, inputs, out, base, by_lid)
            counters, errors, err_failed, retried = self._retry(io, inputs, topo, mine, counters, errors, err_failed)
        for guid in sorted(mine):
            sw = topo.switches[guid]
            ports = {}
            if counters is not None:
                for p in range(1, sw.nports + 1):
                    v = counters.ports.get((guid, p))
                    if v:
                        ports[p] = dict(v)
            if not ports:
                data.missing.add(guid)
                out.error("read", f"switch {sw.name or guid} (0x{guid}) returned no counters this sweep")
                continue
            if errors is not None and guid not in err_failed:
                for p, vals in ports.items():
                    found = errors.ports.get((guid, p), {})
                    for c in ERROR_COUNTERS:
                        vals[c] = found.get(c, 0)
            data.switches.add(guid)
            for p, vals in ports.items():
                data.ports[(guid, p)] = PortCounters.pack(vals)
        # the counter queries that went unanswered (ibqueryerrors names the switch's LID in each); a
        # switch without counters lost all of its own (one per port and the error aggregate)
        lost: dict[str, int] = {}
        if fc.shard[1] <= 1:
            # what _sweep_fabric kept (the checker would read the () it was reset to above)
            results: Sequence[CommandResult] = self._results
            for res in results:
                for m in _FAILED_LID.finditer(res.stderr):
                    g = by_lid.get(int(m.group(1)))
                    if g in mine and g not in retried:
                        lost[g] = lost.get(g, 0) + 1
        for g in mine:
            n = topo.switches[g].nports + 1
            data.queries[g] = data.queries.get(g, 0) + n
            k = n if g in data.missing else min(lost.get(g, 0), n)
            if k:
                data.unanswered[g] = data.unanswered.get(g, 0) + k
                data.failed.setdefault(g, set()).add("counters")
        for g in sorted(data.unanswered):
            sw = topo.switches[g]
            out.error("unanswered", f"switch {sw.name or g} (0x{g}): {data.unanswered[g]} of {data.queries[g]} queries "
                                    f"unanswered ({', '.join(sorted(data.failed.get(g, ())))}); its last known "
                                    f"state is kept")
        end = time.monotonic()
        for g in data.switches:
            at = self._read_at.get(g)
            if at is not None:          # a replayed bundle has no times: taken at the sweep's end
                data.read_ago[g] = round(max(0.0, end - at), 3)
        data.duration = end - t0
        if data.ports or data.link_up or not mine:
            out.data = data
        return out

    _mad_failed_at: float | None = None      # when the last attempt to open a umad port failed
    _method: str = ""                         # the method of the last sweep (logged when it changes)

    def _note_method(self, method: str, why: str = "") -> None:
        if method != self._method:
            if method == "mad":
                log.info("sweeping with the in-process MAD engine")
            else:
                log.info("sweeping with the infiniband-diags tools", why=why or None)
            self._method = method

    _reader: FabricReader | None = None       # what the MADs ask (capabilities and plans kept across sweeps)
    _reader_io: HostIO | None = None          # the HostIO whose mad_run the reader sends through

    def _mad_reader(self, io: HostIO, out: SourceOutput) -> FabricReader | None:
        """The MAD reader when this sweep may use it (module doc), else None: where io opens a umad port
        (the host's, reaching the fabric its tools reach, or a bundle's recorded MADs). Raises UmadLost while
        the engine's port, lost under an earlier run, is not open again: that sweep fails (the tools would
        read a fabric the engine cannot reach, or fail alike on a reset HCA)."""
        fc = self.sc.settings(FabricScope)
        if fc.sweep_method == "tools":
            return None
        now = time.monotonic()
        if self._mad_failed_at is not None and now - self._mad_failed_at < MAD_RECHECK and fc.sweep_method != "mad":
            return None
        try:
            io.mad_open(fc.mad)
        except UmadLost:
            raise
        except UmadUnavailable as exc:
            if self._mad_failed_at is None and fc.sweep_method == "mad":
                out.error("read", f"fabric.sweep_method is mad, but no umad port opens: {exc.strerror or exc}")
            self._mad_failed_at = now
            self._note_method("tools", f"no umad port: {exc.strerror or exc}")
            return None
        self._mad_failed_at = None
        self._note_method("mad")
        if self._reader is None or self._reader_io is not io:
            self._reader, self._reader_io = FabricReader(io.mad_run), io
        return self._reader

    def _sweep_mad(self, reader: FabricReader, inputs: Inputs, out: SourceOutput, topo: Topology, mine: set[str],
                   data: SweepData) -> None:
        """This sweep's switches through the MAD engine, counters and link state in one pass."""
        targets, no_lid = self._mad_targets(topo, mine)
        for g in no_lid:
            sw = topo.switches[g]
            out.error("read", f"switch {sw.name or g} (0x{g}) has no LID in the discovered topology")
            data.missing.add(g)
        if any(t.state_ports for t in targets):
            data.state_method = "smp"
        deadline = time.monotonic() + inputs.remaining(self.sc.timeout)
        try:
            results = reader.read(targets, deadline, ERROR_COUNTERS)
        except OSError as exc:          # the umad device failed under us: nothing read; the port is lost and reopened
            out.error("read", f"MAD engine: {exc.strerror or exc}; no switch read this sweep")
            data.missing.update(t.guid for t in targets)
            return
        dports, pack, key = data.ports, PortCounters.pack, port_key     # one key tuple a port (model.fabric.port_key)
        # each switch's traffic at its own read (SweepData.read_ago, as the Ethernet sweep): a run's answers
        # spread over it, and the next run may be longer (retries, a loaded host), so the sweep's end is
        # not when a switch answered early; ms are enough (a rate over 15 s), and group the switches
        end = time.monotonic()
        for t in targets:
            g, r, sw = t.guid, results[t.guid], topo.switches[t.guid]
            n = len(dports)
            for p, vals in r.ports.items():
                if 1 <= p <= sw.nports:
                    dports[key(g, p)] = vals if type(vals) is PortCounters else pack(vals)
            if len(dports) > n:
                data.switches.add(g)
                if r.read_at is not None:
                    data.read_ago[g] = round(max(0.0, end - r.read_at), 3)
            else:
                data.missing.add(g)
                out.error("read", f"switch {sw.name or g} (0x{g}) returned no counters this sweep")
            for p, up in r.link_up.items():
                data.link_up[key(g, p)] = up
            for p, (width, speed, ability) in r.link.items():
                k = key(g, p)
                data.link_rate[k] = (width, speed)
                if ability.known:           # a mirrored end whose own PortInfo was never answered: its last stays
                    data.abilities[k] = ability
            for p, ability in r.peer_ability.items():
                info = topo.ports.get((g, p))
                if info is not None and info.link is not None:
                    data.abilities[key(info.link.remote_guid, info.link.remote_port)] = ability
            data.queries[g] = r.queries
            if r.unanswered:
                data.unanswered[g] = r.unanswered
                data.failed[g] = set(r.failed)
        for g in sorted(data.unanswered):
            sw = topo.switches[g]
            out.error("unanswered", f"switch {sw.name or g} (0x{g}): {data.unanswered[g]} of {data.queries[g]} queries "
                                    f"unanswered ({', '.join(sorted(data.failed.get(g, ())))}); its last known "
                                    f"state is kept")

    # (topology, switches, link_state_max_ports, targets, switches without a LID)
    _targets: tuple[Topology, frozenset[str], int, list[SwitchTarget], list[str]] | None = None

    def _mad_targets(self, topo: Topology, mine: set[str]) -> tuple[list[SwitchTarget], list[str]]:
        """What the MAD read asks of each of this sweep's switches (mad.plan_targets), and the switches
        without a LID: from the topology and the shard only, so made once per discovery (a SuperPOD-size
        fabric's 25,000 cabled ports cost about 0.1 CPU-s a sweep to walk)."""
        fc = self.sc.settings(FabricScope)
        last = self._targets
        if last is not None and last[0] is topo and last[1] == mine and last[2] == fc.link_state_max_ports:
            return last[3], last[4]
        targets, no_lid = plan_targets(topo, mine, bool(fc.link_state_max_ports))
        self._targets = (topo, frozenset(mine), fc.link_state_max_ports, targets, no_lid)
        return targets, no_lid

    def _retry(self, io: HostIO, inputs: Inputs, topo: Topology, mine: set[str], counters: IbqueryerrorsReport | None,
               errors: IbqueryerrorsReport | None, err_failed: AbstractSet[str | None]
               ) -> tuple[IbqueryerrorsReport | None, IbqueryerrorsReport | None, AbstractSet[str | None], set[str]]:
        """The switches the fabric pass got no counters from (their queries went unanswered), read once
        more after a backoff, per switch by LID (_sweep_switches), while the deadline allows. Returns the
        merged reports and the switches read again successfully."""
        if counters is None:
            return counters, errors, err_failed, set()
        missing = [g for g in sorted(mine) if topo.switches[g].lid is not None
                   and not any((g, p) in counters.ports for p in range(1, topo.switches[g].nports + 1))]
        if not missing or inputs.remaining(self.sc.timeout) < RETRY_BACKOFF[0] + 4 * self.sc.settings(FabricScope).mad.timeout_ms / 1000 + 1:
            return counters, errors, err_failed, set()
        time.sleep(RETRY_BACKOFF[0])
        c2, e2, f2 = self._sweep_switches(io, inputs, SourceOutput(), missing, topo)
        got = {g for g, _ in c2.ports}
        counters.ports.update(c2.ports)
        if errors is not None:
            errors.ports.update(e2.ports)
        err_failed = (set(err_failed) - got) | (set(f2) & got)
        return counters, errors, err_failed, got

    @staticmethod
    def _lost(data: SweepData, g: str, what: str) -> None:
        data.unanswered[g] = data.unanswered.get(g, 0) + 1
        data.failed.setdefault(g, set()).add(what)

    def _link_states(self, io: HostIO, inputs: Inputs, out: SourceOutput, topo: Topology, mine: set[str],
                     data: SweepData) -> None:
        """Every cabled port's link state into data.link_up (module doc): the SM's PortInfoRecords
        when they cover every port; else one uncached ibnetdiscover pass (a port it shows cabled is
        up; one it does not show is down when the pass lost no query, and read with `smpquery
        portinfo` otherwise). Ports that stay unanswered are left out: their last state is kept."""
        fc = self.sc.settings(FabricScope)
        if fc.link_state_max_ports == 0:
            return
        targets = sorted({k for k, info in topo.ports.items() if info.link is not None and k[0] in mine}
                         | {k for k in topo.down_links if k[0] in mine})
        targets = [k for k in targets if topo.switches[k[0]].lid is not None and topo.switches[k[0]].kind == "infiniband"]
        if not targets:
            return
        cmd0 = self.sc.command[0]
        tooldir = os.path.dirname(cmd0) if os.sep in cmd0 else ""
        t = ["-t", str(fc.mad.timeout_ms)]
        sa = io.run([os.path.join(tooldir, "saquery"), *t, "PIR"], inputs.remaining(self.sc.timeout))
        if command_error(sa) is None:
            records = parse_saquery_pir(sa.stdout)
            self._abilities(topo, targets, records, data)
            states = {k: records.get((lid, k[1])) for k in targets if (lid := topo.switches[k[0]].lid) is not None}
            if all(v is not None for v in states.values()):
                data.link_up.update({k: v.up for k, v in states.items() if v is not None})
                data.state_method = "sa"
                return
        disc = io.run([os.path.join(tooldir, "ibnetdiscover"), *t], inputs.remaining(self.sc.timeout))
        if disc.error in ("not_found", "not_recorded", "exec_error"):
            return                      # no SMP path here (a bundle recorded without it): state from discoveries
        data.state_method = "smp"
        try:
            seen = parse_ibnetdiscover(disc.stdout) if disc.stdout.strip() else None
        except ParseError:
            seen = None
        lost = count_unanswered(disc.stderr)
        complete = seen is not None and command_error(disc) is None and not lost
        cabled = {(g, p) for g, sw in seen.switches.items() for p in sw.links} if seen is not None else set()
        for g, sw in seen.switches.items() if seen is not None else ():
            for p, lk in sw.links.items():      # what each link runs at now (the pass prints `4xHDR`)
                if g in mine:
                    data.link_rate[(g, p)] = (lk.width, lk.speed)
        for k in targets:
            data.queries[k[0]] = data.queries.get(k[0], 0) + 1
            if k in cabled:
                data.link_up[k] = True
            elif complete:              # the pass reached every switch and lost nothing: not cabled now
                data.link_up[k] = False
        unread = [k for k in targets if k not in data.link_up]
        if not unread:
            return
        # the ports the pass did not show while it lost queries: read each one's PortInfo (the ports known
        # down first; at most link_state_max_ports, the rest in a window that rotates over sweeps)
        if len(unread) > fc.link_state_max_ports:
            first = [k for k in unread if k in topo.down_links]
            rest = [k for k in unread if k not in topo.down_links]
            n = max(0, fc.link_state_max_ports - len(first))
            start = self._rotation % len(rest) if rest else 0
            self._rotation = start + n
            unread = (first + (rest[start:] + rest[:start])[:n])[:fc.link_state_max_ports]
        prog = os.path.join(tooldir, "smpquery")
        pending = list(unread)
        for attempt in range(len(RETRY_BACKOFF) + 1):
            if attempt:
                wait = RETRY_BACKOFF[attempt - 1]
                if inputs.remaining(self.sc.timeout) < wait + 2 * fc.mad.timeout_ms / 1000 + 0.5:
                    break
                time.sleep(wait)

            def one(k: tuple[str, int]) -> tuple[tuple[str, int], CommandResult]:
                return k, io.run([prog, *t, "portinfo", str(topo.switches[k[0]].lid), str(k[1])],
                                 inputs.remaining(self.sc.timeout))
            with ThreadPoolExecutor(max_workers=min(LINK_STATE_CONCURRENCY, len(pending)),
                                    thread_name_prefix="fabricmon-sweep-state") as pool:
                results = list(pool.map(one, pending))
            pending = []
            if any(res.error in ("not_found", "not_recorded", "exec_error") for _, res in results):
                return
            for k, res in results:
                try:
                    if command_error(res) is not None:
                        raise ParseError("unanswered")
                    st = parse_portinfo(res.stdout)
                    data.link_up[k] = st.up
                    if st.ability is not None:
                        data.abilities[k] = st.ability
                except ParseError:
                    pending.append(k)
            if not pending:
                break
        for k in pending:
            self._lost(data, k[0], "port state")

    @staticmethod
    def _abilities(topo: Topology, targets: list[tuple[str, int]], records: dict[tuple[int, int], PortState],
                   data: SweepData) -> None:
        """What both ends of each swept link may train at, from the SM's PortInfoRecords (they hold
        every port's PortInfo, CA ports included, where the SA covers them: a real fabric's SM does;
        ibsim's SA holds a few): each port whose record is there, nothing assumed for the others."""
        for k in targets:
            sw = topo.switches[k[0]]
            own = records.get((sw.lid, k[1])) if sw.lid is not None else None
            if own is not None and own.ability is not None:
                data.abilities[k] = own.ability
                if own.up:
                    data.link_rate[k] = (own.width, own.speed)
            info = topo.ports.get(k)
            lk = info.link if info is not None else None
            if lk is not None and lk.remote_lid and lk.remote_port:
                far = records.get((lk.remote_lid, lk.remote_port))
                if far is not None and far.ability is not None:
                    data.abilities[(lk.remote_guid, lk.remote_port)] = far.ability

    def _parse(self, out: SourceOutput, res: CommandResult, what: str = "") -> IbqueryerrorsReport | None:
        err = command_error(res)
        if err and not (err[0] == "exit_code" and res.returncode == 1):     # 1: "errors found"
            out.error(err[0], what + err[1])
            return None
        try:
            return parse_ibqueryerrors(res.stdout, res.stderr)
        except ParseError as exc:
            out.error("parse", what + str(exc))
            return None

    def _sweep_fabric(self, io: HostIO, inputs: Inputs, out: SourceOutput, base: list[str], by_lid: dict[int, str]
                      ) -> tuple[IbqueryerrorsReport | None, IbqueryerrorsReport | None, set[str | None]]:
        """The whole cached fabric in two processes (counters, errors)."""
        passes = [base + ["--counters"], base]
        if self.sc.settings(FabricScope).concurrency >= 2:
            results = list(self.pool().map(lambda a: io.run(a, inputs.remaining(self.sc.timeout)), passes))
        else:
            results = [io.run(a, inputs.remaining(self.sc.timeout)) for a in passes]
        self._results = results
        counters, errors = (self._parse(out, r) for r in results)
        if counters is not None and results[0].finished is not None:
            # one process read every switch's traffic counters: each at its end (the skew within it, a
            # switch read early in the pass, is the same every sweep, so it cancels in a rate)
            self._read_at.update(dict.fromkeys({g for g, _ in counters.ports}, results[0].finished))
        err_failed = {by_lid.get(int(m.group(1))) for m in _FAILED_LID.finditer(results[1].stderr)}
        return counters, errors, err_failed

    def _sweep_switches(self, io: HostIO, inputs: Inputs, out: SourceOutput, guids: list[str], topo: Topology
                        ) -> tuple[IbqueryerrorsReport, IbqueryerrorsReport, set[str]]:
        """Only this shard's switches, with perfquery by LID (no topology cache to load per process),
        SHARD_CONCURRENCY processes at once under the sweep's one deadline: per switch
        `perfquery -x -l <lid> 255` (PortCountersExtended of every port) and `perfquery -a <lid>` (the
        PortCounters aggregate), then `perfquery -l <lid> 255` only for the switches whose aggregate
        shows a non-zero error counter or PortXmitWait (error counters are sums)."""
        counters, errors = IbqueryerrorsReport(), IbqueryerrorsReport()
        err_failed: set[str] = set()
        cmd0 = self.sc.command[0]
        prog = os.path.join(os.path.dirname(cmd0), "perfquery") if os.sep in cmd0 else "perfquery"
        base = [prog, "-t", str(self.sc.settings(FabricScope).mad.timeout_ms)]
        lids: dict[str, int] = {}
        for g in guids:
            sw = topo.switches[g]
            if sw.lid is None:
                out.error("read", f"switch {sw.name or g} (0x{g}) has no LID in the discovered topology")
            else:
                lids[g] = sw.lid
        if not lids:
            return counters, errors, err_failed

        def run_all(jobs: list[tuple[str, list[str]]]) -> list[tuple[str, CommandResult]]:
            def one(job: tuple[str, list[str]]) -> tuple[str, CommandResult]:
                g, argv = job
                return g, io.run(argv, inputs.remaining(self.sc.timeout))
            with ThreadPoolExecutor(max_workers=min(SHARD_CONCURRENCY, len(jobs)),
                                    thread_name_prefix="fabricmon-sweep-shard") as pool:
                return list(pool.map(one, jobs))

        def parse(g: str, res: CommandResult) -> list[PerfqueryBlock] | None:
            sw = topo.switches[g]
            what = f"switch {sw.name or g} (0x{g}): "
            blocks = out.parsed(res, parse_perfquery, what)
            return None if blocks is None else [b for b in blocks if b.lid == lids[g]]

        jobs = [(g, [*base, *extra, str(lid), *tail]) for g, lid in lids.items()
                for extra, tail in ((["-x", "-l"], ["255"]), (["-a"], []))]
        drill: list[tuple[str, list[str]]] = []
        for (g, argv), (_, res) in zip(jobs, run_all(jobs)):
            blocks = parse(g, res)
            if "-x" in argv:
                if blocks and res.finished is not None:
                    self._read_at[g] = res.finished     # this switch's traffic counters, its own process
                for b in blocks or ():
                    if 1 <= b.port <= topo.switches[g].nports:
                        counters.ports[(g, b.port)] = {c: v for c, v in b.counters.items() if c in TRAFFIC_COUNTERS}
            elif not blocks:
                err_failed.add(g)
            elif any(blocks[0].counters.get(c, 0) for c in ERROR_COUNTERS):
                drill.append((g, [*base, "-l", str(lids[g]), "255"]))
        for g, res in run_all(drill) if drill else ():
            blocks = parse(g, res)
            if not blocks:
                err_failed.add(g)
                continue
            for b in blocks:
                vals = {c: v for c, v in b.counters.items() if c in ERROR_COUNTERS and v}
                if vals and 1 <= b.port <= topo.switches[g].nports:
                    errors.ports[(g, b.port)] = vals
        return counters, errors, err_failed
