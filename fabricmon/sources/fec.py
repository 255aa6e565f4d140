"""fec source: the FEC mode and statistics of every RoCE netdev, `ethtool -I --show-fec <netdev>`:
corrected and uncorrectable codewords (per lane where the driver splits them), corrected bits, and the
RS-FEC histogram's bins (codewords by how many symbols they needed corrected) where the kernel reports
them (Linux 6.18 and ethtool 6.18; mlx5 in 2025: "net/mlx5e: Report RS-FEC histogram statistics via
ethtool"). docs/ber.md. A netdev whose driver gives no FEC information ("Operation not supported") is
recorded as such, not as a failure; with `enabled: auto` (the default) a missing ethtool is not an error.
"""

from __future__ import annotations

from fabricmon.host.io import HostIO
from fabricmon.model.ber import FecData
from fabricmon.model.roce import roce_netdevs
from fabricmon.parsers.ethtool_fec import NO_FEC, parse_show_fec
from fabricmon.pipeline.source import INVENTORY, Inputs, Source, SourceOutput, register, run_per_name


@register("fec", enabled="auto", interval=60.0, timeout=10.0, command=("ethtool",), needs=(INVENTORY,),
          concurrency=4, records=FecData)
class FecSource(Source):
    def collect(self, io: HostIO, inputs: Inputs) -> SourceOutput:
        out = SourceOutput()
        data = FecData()
        names = roce_netdevs(inputs.inventory.devices, inputs.inventory.ports)
        run = run_per_name(io, self, inputs, out, names, lambda nd: ["-I", "--show-fec", nd])
        data.tool_missing = run.tool_missing
        for nd, res in run.results:
            said = (res.stderr + "\n" + res.stdout).strip()
            if res.error is None and res.returncode != 0 and any(w in said.lower() for w in NO_FEC):
                data.notes[nd] = said.splitlines()[-1][:200] if said else f"ethtool exited {res.returncode}"
                continue
            stats = out.parsed(res, parse_show_fec)
            if stats is not None:
                data.netdevs[nd] = stats
        run.publish(out, data, bool(data.netdevs or data.notes))
        return out
