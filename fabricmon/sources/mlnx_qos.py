"""mlnx_qos source: DCB/QoS settings (trust, PFC per priority, buffers, traffic classes) of each
RoCE netdev, from the vendor tool `mlnx_qos -i <netdev>`.

"ETS features are not supported on your system" (exit 1) means the netdev has no DCB: that is
recorded as a property of the netdev, never as a failure. With `enabled: auto` (the default) a
missing mlnx_qos (it is not packaged by Debian) is not an error either: the PFC checks then say
that they could not look.
"""

from __future__ import annotations

from fabricmon.host.io import HostIO
from fabricmon.model.roce import roce_netdevs
from fabricmon.parsers.mlnx_qos import MlnxQosData, QosResult, is_dcb_unsupported, parse_mlnx_qos
from fabricmon.pipeline.source import INVENTORY, Inputs, Source, SourceOutput, register, run_per_name


@register("mlnx_qos", enabled="auto", interval=60.0, timeout=10.0, command=("mlnx_qos",), needs=(INVENTORY,),
          concurrency=4, records=MlnxQosData)
class MlnxQosSource(Source):
    def collect(self, io: HostIO, inputs: Inputs) -> SourceOutput:
        out = SourceOutput()
        data = MlnxQosData()
        names = roce_netdevs(inputs.inventory.devices, inputs.inventory.ports)
        run = run_per_name(io, self, inputs, out, names, lambda nd: ["-i", nd])
        data.tool_missing = run.tool_missing
        for nd, res in run.results:
            if res.error is None and is_dcb_unsupported(res.stdout + "\n" + res.stderr, res.returncode or 0):
                data.netdevs[nd] = QosResult(None, dcb_supported=False)
                continue
            qos = out.parsed(res, parse_mlnx_qos)
            if qos is not None:
                data.netdevs[nd] = QosResult(qos)
        run.publish(out, data, bool(data.netdevs))
        return out
