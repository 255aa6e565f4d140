"""ibstat source: the adapter and port list, port GUIDs and rates (the only port list where
sysfs has none, as under the simulator). Partial output before an `ibpanic:` is kept; no output
at all (exit 0, or its "can't find any IB device") is no ports, not an error (as a missing
/sys/class/infiniband).
With `enabled: auto` (the default) a missing ibstat is not an error: the source is simply off."""

from __future__ import annotations

from fabricmon.host.io import HostIO
from fabricmon.parsers.errors import ParseError
from fabricmon.parsers.ibstat import IbstatData, parse_ibstat
from fabricmon.pipeline.source import Inputs, Source, SourceOutput, command_error, register
from fabricmon.registry import shared_settings
from fabricmon.schema import DeviceFilter

NO_DEVICE = "can't find any IB device"      # ibstat's ibpanic on a host without an RDMA device


@register("ibstat", enabled="auto", interval=60.0, timeout=10.0, command=("ibstat",), provides_inventory=True, records=IbstatData,
          options=shared_settings(lambda ctx: ctx.take(DeviceFilter)))
class IbstatSource(Source):
    def collect(self, io: HostIO, inputs: Inputs) -> SourceOutput:
        out = SourceOutput()
        res = io.run(self.sc.command, inputs.remaining(self.sc.timeout))
        if self.sc.enabled == "auto" and res.error in ("not_found", "not_recorded"):
            out.data = IbstatData([])          # not installed (or not in a replayed bundle): no ports
            return out
        if res.error is None and not res.stdout.strip() and (res.returncode == 0 or NO_DEVICE in res.stderr):
            # nothing listed (rdma-core's ibstat prints nothing and exits 0 on a host without an
            # RDMA device; older ones ibpanic "can't find any IB device"): no ports, as an empty sysfs
            out.data = IbstatData([])
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
                out.data = IbstatData([ca for ca in parsed.cas if not self.sc.settings(DeviceFilter).excluded(ca.name)])
                for ca in parsed.cas:
                    want = ca.num_ports or 1
                    if len(ca.ports) < want:
                        out.error("parse", f"{' '.join(res.argv)}: CA {ca.name!r} lists {len(ca.ports)} of "
                                           f"{want} port(s): truncated output?")
        return out
