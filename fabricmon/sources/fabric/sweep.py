"""sweep: every switch port's counters, in batches, never a process per port.

Measured on the real 400-switch director topology in ibsim (16,568 switch ports; README
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

A shard (`--shard i/n`, n > 1) sweeps only its own switches: the same two passes per switch with
`-G <guid>` (ibqueryerrors then reads just that node of the cached topology; without an SA it says
"Failed to resolve ... attempting full scan" and still reads only that node), at most
SHARD_CONCURRENCY processes at once, all under the sweep's one deadline. A switch whose pass fails
costs only that switch.
"""

from __future__ import annotations

import re
import time
from concurrent.futures import ThreadPoolExecutor

from fabricmon import ibspec
from fabricmon.host.io import HostIO
from fabricmon.model.fabric import SweepData, Topology, in_shard
from fabricmon.parsers.errors import ParseError
from fabricmon.parsers.ibqueryerrors import IbqueryerrorsReport, parse_ibqueryerrors
from fabricmon.pipeline.source import INVENTORY, Inputs, Source, SourceOutput, command_error, register

ERROR_COUNTERS = tuple(c.name for c in ibspec.COUNTERS if c.kind in ("error", "congestion"))
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
            counters, errors, err_failed = self._sweep_switches(io, inputs, out, base, sorted(mine), topo)
            if inputs.cancel is not None and inputs.cancel.is_set():
                return out
        else:
            counters, errors, err_failed = self._sweep_fabric(io, inputs, out, base, by_lid)
            if counters is None and errors is None and inputs.cancel is not None and inputs.cancel.is_set():
                return out          # stopping: the passes were killed on purpose, nothing to count
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
        if inputs.cancel is not None and inputs.cancel.is_set():
            return None, None, set()
        counters, errors = (self._parse(out, r) for r in results)
        err_failed = {by_lid.get(int(m.group(1))) for m in _FAILED_LID.finditer(results[1].stderr)}
        return counters, errors, err_failed

    def _sweep_switches(self, io: HostIO, inputs: Inputs, out: SourceOutput, base: list[str], guids: list[str],
                        topo: Topology):
        """Only this shard's switches: both passes per switch (`-G 0x<guid>`), SHARD_CONCURRENCY at once."""
        jobs = [(g, extra) for g in guids for extra in (["--counters"], [])]
        if not jobs:
            return IbqueryerrorsReport(), IbqueryerrorsReport(), set()

        def one(job):
            g, extra = job
            return job, io.run([*base, "-G", f"0x{g}", *extra], inputs.remaining(self.sc.timeout))

        with ThreadPoolExecutor(max_workers=min(SHARD_CONCURRENCY, len(jobs)),
                                thread_name_prefix="fabricmon-sweep-shard") as pool:
            results = list(pool.map(one, jobs))
        counters, errors, err_failed = IbqueryerrorsReport(), IbqueryerrorsReport(), set()
        if inputs.cancel is not None and inputs.cancel.is_set():
            return counters, errors, err_failed
        for (g, extra), res in results:
            sw = topo.switches[g]
            rep = self._parse(out, res, f"switch {sw.name or g} (0x{g}): ")
            if extra:
                if rep is not None:
                    counters.ports.update({k: v for k, v in rep.ports.items() if k[0] == g})
            elif rep is None or _FAILED_LID.search(res.stderr):
                err_failed.add(g)
            else:
                errors.ports.update({k: v for k, v in rep.ports.items() if k[0] == g})
        return counters, errors, err_failed
