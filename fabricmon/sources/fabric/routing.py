"""routing: every switch's unicast linear forwarding table, read with `ibroute -n <lid>` per
switch (at most `concurrency` at once, one deadline for the whole run), on its own interval:
routes change only when the subnet manager re-sweeps, so the default is 300 s.

Why per switch rather than one `dump_fts` (formerly dump_lfts.sh): measured on the real
400-switch director topology in ibsim (1,774 CA LIDs, README "Fabric collector"), one
`dump_fts -n` took 3.2 s (it rediscovers the fabric first and cannot load a cache), `ibroute -n`
per switch took 3.1 s 4 at a time and 2.5 s 8 at a time; and per switch, a shard reads only its
own switches and a switch that does not answer costs only its own table. The tables are kept
as bytes indexed by LID (about 5 KB per switch on that fabric)."""

from __future__ import annotations

import time

from fabricmon.host.io import HostIO
from fabricmon.model.fabric import LftData, Topology, in_shard
from fabricmon.parsers.errors import ParseError
from fabricmon.parsers.lft import parse_lft
from fabricmon.pipeline.source import INVENTORY, Inputs, Source, SourceOutput, command_error, register, run_per_name


@register("routing", enabled=True, interval=300.0, timeout=60.0, command=("ibroute",),
          needs=(INVENTORY,), collector="fabric", concurrency=4, records=LftData)
class RoutingSource(Source):
    def collect(self, io: HostIO, inputs: Inputs) -> SourceOutput:
        out = SourceOutput()
        topo: Topology | None = inputs.inventory
        if topo is None or not topo.switches:
            out.error("read", "no discovered topology yet (the discovery source has not completed)")
            return out
        fc = self.config.fabric
        t0 = time.monotonic()
        by_lid = {str(sw.lid): g for g, sw in sorted(topo.switches.items())
                  if sw.lid and in_shard(g, *fc.shard)}
        run = run_per_name(io, self, inputs, out, by_lid,
                           lambda lid: ["-n", "-t", str(fc.mad_timeout_ms), lid])
        if inputs.cancel is not None and inputs.cancel.is_set():
            return out
        data = LftData()
        for lid, res in run.results:
            guid = by_lid[lid]
            err = command_error(res)
            if err:
                out.error(*err)
                continue
            try:
                tables = parse_lft(res.stdout)
            except ParseError as exc:
                out.error("parse", f"switch {topo.switches[guid].name or guid} (lid {lid}): {exc}")
                continue
            if guid in tables:
                data.tables[guid] = tables[guid]
            else:
                out.error("parse", f"ibroute {lid} printed no table for switch 0x{guid}")
        data.duration = time.monotonic() - t0
        if data.tables or not by_lid:
            out.data = data
        return out
