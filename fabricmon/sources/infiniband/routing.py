"""routing: every switch's unicast linear forwarding table, read with one `dump_fts -n` run
(infiniband-diags; `dump_lfts.sh` is its old wrapper) on its own interval: routes change only
when the subnet manager re-sweeps, so the default is 300 s.

Why one run rather than `ibroute -n <lid>` per switch: measured on the real 400-switch director
topology in ibsim (1,774 CA LIDs, docs/benchmarks.md). With a running opensm (as on every
production fabric) one `dump_fts -n` took 1.8 s and `ibroute` per switch, 4 at a time, 10-21 s;
with no SM answering they were even (3.2 s against 3.1 s; 2.5 s 8 at a time). The tables are
kept as bytes indexed by LID (about 5 KB per switch on that fabric); a shard keeps only its own
switches' tables.

Every table is read, however large the fabric: the host keeps up to host.runner.MAX_OUTPUT (256 MiB)
of the tool's output (a SuperPOD-class fabric prints about 40 MB). Output cut at that bound is an
error of this source (`read`, fabricmon_source_errors_total), and that run yields no tables: no
switch is ever blamed for a table the cut-off left out, and the last complete tables stay in use."""

from __future__ import annotations

import time

from fabricmon.host.io import HostIO
from fabricmon.model.fabric import LftData, Topology, in_shard
from fabricmon.parsers.lft import parse_lft
from fabricmon.pipeline.source import INVENTORY, Inputs, Source, SourceOutput, register
from fabricmon.sources.infiniband.settings import SCOPE, FabricScope


@register("routing", enabled=True, interval=300.0, timeout=60.0, command=("dump_fts",),
          needs=(INVENTORY,), collector="infiniband", concurrency=1, records=LftData, options=SCOPE)
class RoutingSource(Source):
    def collect(self, io: HostIO, inputs: Inputs) -> SourceOutput:
        out = SourceOutput()
        topo: Topology | None = inputs.inventory
        if topo is None or not topo.switches:
            out.error("read", "no discovered topology yet (the discovery source has not completed)")
            return out
        fc = self.sc.settings(FabricScope)
        t0 = time.monotonic()
        res = io.run([*self.sc.command, "-n", "-t", str(fc.mad.timeout_ms)], inputs.remaining(self.sc.timeout))
        if res.truncated:           # not the whole answer: an error of the source, never of the switches
            out.error("read", f"{res.describe()}: forwarding tables not judged this run (the last complete "
                              f"ones stay in use)")
            return out
        tables = out.parsed(res, parse_lft, partial=True)
        if tables is None:
            return out
        data = LftData()
        for guid in sorted(topo.switches):
            if not in_shard(guid, *fc.shard):
                continue
            if guid in tables:
                data.tables[guid] = tables[guid]
            elif topo.switches[guid].lid:
                sw = topo.switches[guid]
                out.error("read", f"switch {sw.name or guid} (0x{guid}) returned no forwarding table")
        data.duration = time.monotonic() - t0
        out.data = data
        return out
