"""ibstat source: the adapter and port list, port GUIDs and rates (the only port list where
sysfs has none, as under the simulator). Partial output before an `ibpanic:` is kept. With
`enabled: auto` (the default) a missing ibstat is not an error: the source is simply off."""

from __future__ import annotations

from fabricmon.host.io import HostIO
from fabricmon.parsers.errors import ParseError
from fabricmon.parsers.ibstat import IbstatData, parse_ibstat
from fabricmon.pipeline.source import Inputs, Source, SourceOutput, command_error, register


@register("ibstat", enabled="auto", interval=60.0, timeout=10.0, command=("ibstat",), provides_inventory=True, records=IbstatData)
class IbstatSource(Source):
    def collect(self, io: HostIO, inputs: Inputs) -> SourceOutput:
        out = SourceOutput()
        res = io.run(self.sc.command, inputs.remaining(self.sc.timeout))
        if self.sc.enabled == "auto" and res.error in ("not_found", "not_recorded"):
            out.data = IbstatData([])          # not installed (or not in a replayed bundle): no ports
            return out
        err = command_error(res)
        if err:
            out.error(*err)
        if res.error is None and res.stdout.strip():
            try:
                parsed = parse_ibstat(res.stdout)
            except ParseError as exc:
                out.error("parse", f"{' '.join(res.argv)}: {exc}")
            else:
                out.data = IbstatData([ca for ca in parsed.cas if not self.config.device_excluded(ca.name)])
                for ca in parsed.cas:
                    want = ca.num_ports or 1
                    if len(ca.ports) < want:
                        out.error("parse", f"{' '.join(res.argv)}: CA {ca.name!r} lists {len(ca.ports)} of "
                                           f"{want} port(s): truncated output?")
        return out
