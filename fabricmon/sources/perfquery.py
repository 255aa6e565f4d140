"""perfquery source: PortCounters (errors, 32-bit) and PortCountersExtended (`-x`, 64-bit data)
of the node's own InfiniBand ports, queried concurrently (bounded) under one deadline for the
whole run. Never resets counters (no -r/-R): that would destroy them for every other monitor
on the fabric. With `enabled: auto` only ports without sysfs counters are queried."""

from __future__ import annotations

from fabricmon.host.io import HostIO
from fabricmon.parsers.perfquery import PerfqueryData, PortCounterSet, parse_perfquery
from fabricmon.pipeline.source import INVENTORY, Inputs, Source, SourceOutput, register, run_per_name
from fabricmon.sources.privilege import umad_error


def _split(key: str) -> tuple[str, int]:
    dev, _, port = key.rpartition(":")
    return dev, int(port)


@register("perfquery", enabled="auto", interval=15.0, timeout=10.0, command=("perfquery",),
          needs=(INVENTORY,), concurrency=4, records=PerfqueryData)
class PerfquerySource(Source):
    def collect(self, io: HostIO, inputs: Inputs) -> SourceOutput:
        out = SourceOutput()
        skip_sysfs = self.sc.enabled == "auto"
        inv = inputs.inventory          # a restricted function's counters are never read (docs/kernel-log.md)
        keys = [f"{dev}:{port}" for (dev, port) in inv.ib_ports(without_sysfs_counters=skip_sysfs)
                if not inv.counters_restricted(dev)]
        # Two queries per port (PortCounters, then -x): both in flight at once, one deadline.
        names = [f"{k}:{x}" for k in keys for x in ("basic", "x")]

        def args(name: str) -> list[str]:
            dev, _, rest = name.partition(":")
            port, _, kind = rest.partition(":")
            return [*(["-x"] if kind == "x" else []), "-C", dev, "-P", str(int(port))]
        run = run_per_name(io, self, inputs, out, names, args)
        data = PerfqueryData()
        for name, res in run.results:          # in name order: "basic" before "x" for each port
            umad = umad_error(res)
            if umad is not None:                # no umad port for this user: why, and the fix
                out.error(*umad)
                continue
            blocks = out.parsed(res, parse_perfquery)
            if blocks is None:
                continue
            key = _split(name.rsplit(":", 1)[0])
            cs = data.ports.setdefault(key, PortCounterSet())
            cs.counters.update(blocks[0].counters)     # -x comes second: 64-bit data counters win
            cs.bits.update(blocks[0].bits)
        if data.ports or not keys or run.tool_missing:
            out.data = data
        return out
