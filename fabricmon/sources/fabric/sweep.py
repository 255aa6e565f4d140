"""sweep: every switch port's counters, in batches, never a process per port.

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
"""

from __future__ import annotations

import os
import re
import time
from concurrent.futures import ThreadPoolExecutor

from fabricmon import ibspec
from fabricmon.host.io import HostIO
from fabricmon.model.fabric import SweepData, Topology, in_shard
from fabricmon.parsers.errors import ParseError
from fabricmon.parsers.ibqueryerrors import IbqueryerrorsReport, parse_ibqueryerrors
from fabricmon.parsers.perfquery import parse_perfquery
from fabricmon.pipeline.source import INVENTORY, Inputs, Source, SourceOutput, command_error, register

ERROR_COUNTERS = tuple(c.name for c in ibspec.COUNTERS if c.kind in ("error", "congestion"))
TRAFFIC_COUNTERS = frozenset(c.name for c in ibspec.COUNTERS if c.kind == "traffic")
_FAILED_LID = re.compile(r"query failed on .*?,?\s*Lid (\d+)", re.I)
# processes in flight at once on a sharded sweep (ibsim serves about 10 MAD clients; GUIDE section 6)
SHARD_CONCURRENCY = 8


@register("sweep", enabled=True, interval=15.0, timeout=30.0, command=("ibqueryerrors",),
          needs=(INVENTORY,), collector="fabric", concurrency=2, records=SweepData)
class SweepSource(Source):
    def collect(self, io: HostIO, inputs: Inputs) -> SourceOutput:
        out = SourceOutput()
        topo: Topology | None = inputs.inventory
        if topo is None or not topo.switches or not topo.cache_file:
            out.error("read", "no discovered topology yet (the discovery source has not completed)")
            return out
        fc = self.config.fabric
        t0 = time.monotonic()
        base = [*self.sc.command, "--load-cache", topo.cache_file, "--skip-sl", "--switch",
                "--threshold-file", "/dev/null", "-t", str(fc.mad_timeout_ms)]
        mine = {g for g in topo.switches if in_shard(g, *fc.shard)}
        by_lid = {sw.lid: g for g, sw in topo.switches.items() if sw.lid is not None}
        data = SweepData(bits={c.name: 64 if c.kind == "traffic" else c.bits for c in ibspec.COUNTERS})
        if fc.shard[1] > 1:
            counters, errors, err_failed = self._sweep_switches(io, inputs, out, sorted(mine), topo)
        else:
            counters, errors, err_failed = self._sweep_fabric(io, inputs, out, base, by_lid)
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
                data.ports[(guid, p)] = vals
        data.duration = time.monotonic() - t0
        if data.ports or not mine:
            out.data = data
        return out

    def _parse(self, out: SourceOutput, res, what: str = "") -> IbqueryerrorsReport | None:
        err = command_error(res)
        if err and not (err[0] == "exit_code" and res.returncode == 1):     # 1: "errors found"
            out.error(err[0], what + err[1])
            return None
        try:
            return parse_ibqueryerrors(res.stdout, res.stderr)
        except ParseError as exc:
            out.error("parse", what + str(exc))
            return None

    def _sweep_fabric(self, io: HostIO, inputs: Inputs, out: SourceOutput, base: list[str], by_lid: dict):
        """The whole cached fabric in two processes (counters, errors)."""
        passes = [base + ["--counters"], base]
        if self.config.fabric.concurrency >= 2:
            results = list(self.pool().map(lambda a: io.run(a, inputs.remaining(self.sc.timeout)), passes))
        else:
            results = [io.run(a, inputs.remaining(self.sc.timeout)) for a in passes]
        counters, errors = (self._parse(out, r) for r in results)
        err_failed = {by_lid.get(int(m.group(1))) for m in _FAILED_LID.finditer(results[1].stderr)}
        return counters, errors, err_failed

    def _sweep_switches(self, io: HostIO, inputs: Inputs, out: SourceOutput, guids: list[str], topo: Topology):
        """Only this shard's switches, with perfquery by LID (no topology cache to load per process),
        SHARD_CONCURRENCY processes at once under the sweep's one deadline: per switch
        `perfquery -x -l <lid> 255` (PortCountersExtended of every port) and `perfquery -a <lid>` (the
        PortCounters aggregate), then `perfquery -l <lid> 255` only for the switches whose aggregate
        shows a non-zero error counter or PortXmitWait (error counters are sums)."""
        counters, errors, err_failed = IbqueryerrorsReport(), IbqueryerrorsReport(), set()
        cmd0 = self.sc.command[0]
        prog = os.path.join(os.path.dirname(cmd0), "perfquery") if os.sep in cmd0 else "perfquery"
        base = [prog, "-t", str(self.config.fabric.mad_timeout_ms)]
        lids = {}
        for g in guids:
            sw = topo.switches[g]
            if sw.lid is None:
                out.error("read", f"switch {sw.name or g} (0x{g}) has no LID in the discovered topology")
            else:
                lids[g] = sw.lid
        if not lids:
            return counters, errors, err_failed

        def run_all(jobs):
            def one(job):
                g, argv = job
                return g, io.run(argv, inputs.remaining(self.sc.timeout))
            with ThreadPoolExecutor(max_workers=min(SHARD_CONCURRENCY, len(jobs)),
                                    thread_name_prefix="fabricmon-sweep-shard") as pool:
                return list(pool.map(one, jobs))

        def parse(g, res):
            sw = topo.switches[g]
            what = f"switch {sw.name or g} (0x{g}): "
            blocks = out.parsed(res, parse_perfquery, what)
            return None if blocks is None else [b for b in blocks if b.lid == lids[g]]

        jobs = [(g, [*base, *extra, str(lid), *tail]) for g, lid in lids.items()
                for extra, tail in ((["-x", "-l"], ["255"]), (["-a"], []))]
        drill = []
        for (g, argv), (_, res) in zip(jobs, run_all(jobs)):
            blocks = parse(g, res)
            if "-x" in argv:
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
