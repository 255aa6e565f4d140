"""iblinkinfo source, restricted to the node's own links (`-D 0`: the local CA only; a
fabric-wide sweep from every node would be O(N^2) MADs and belongs to the fabric collector).
Ports are queried concurrently (bounded) under one deadline for the whole run. With `enabled:
auto` (the default) a missing iblinkinfo is not an error: the source is simply off."""

from __future__ import annotations

from fabricmon.host.io import HostIO
from fabricmon.parsers.iblinkinfo import LinkData, parse_iblinkinfo
from fabricmon.pipeline.source import INVENTORY, Inputs, Source, SourceOutput, register, run_per_name
from fabricmon.sources.privilege import umad_error


@register("iblinkinfo", enabled="auto", interval=60.0, timeout=10.0, command=("iblinkinfo",),
          needs=(INVENTORY,), concurrency=4, records=LinkData)
class IblinkinfoSource(Source):
    def collect(self, io: HostIO, inputs: Inputs) -> SourceOutput:
        out = SourceOutput()
        ports = inputs.inventory.ib_ports()

        def args(name: str) -> list[str]:
            dev, _, port = name.rpartition(":")
            return ["-C", dev, "-P", str(int(port)), "-D", "0"]
        run = run_per_name(io, self, inputs, out, [f"{d}:{p}" for d, p in ports], args)
        data = LinkData()
        for name, res in run.results:
            dev, _, p = name.rpartition(":")
            port = int(p)
            umad = umad_error(res)
            if umad is not None:                # no umad port for this user: why, and the fix
                out.error(*umad)
                continue
            links = out.parsed(res, parse_iblinkinfo)
            if links is None:
                continue
            match = next((ln for ln in links if ln.port == port), None)
            if match is None:
                out.error("parse", f"{' '.join(res.argv)}: no line for port {port}")
                continue
            data.links[(dev, port)] = match
        if data.links or not ports or run.tool_missing:
            out.data = data
        return out
