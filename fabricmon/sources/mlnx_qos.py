"""mlnx_qos source: DCB/QoS settings (trust, PFC per priority, buffers, traffic classes) of each
RoCE netdev, from the vendor tool `mlnx_qos -i <netdev>`.

"ETS features are not supported on your system" (exit 1) means the netdev has no DCB: that is
recorded as a property of the netdev, never as a failure. With `enabled: auto` (the default) a
missing mlnx_qos (it is not packaged by Debian) is not an error either: the PFC checks then say
that they could not look.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from fabricmon.config import Config
from fabricmon.hostio import HostIO
from fabricmon.parsers.errors import ParseError
from fabricmon.parsers.mlnx_qos import QosConfig, is_dcb_unsupported, parse_mlnx_qos
from fabricmon.sources import SourceOutput, command_error, run_per_name
from fabricmon.sources.targets import RoceTarget


@dataclass(slots=True)
class QosResult:
    qos: QosConfig | None          # None when the netdev has no DCB
    dcb_supported: bool = True


@dataclass(slots=True)
class MlnxQosData:
    netdevs: dict[str, QosResult] = field(default_factory=dict)
    tool_missing: bool = False     # enabled: auto and mlnx_qos is not installed


class MlnxQosSource:
    name = "mlnx_qos"

    def __init__(self, config: Config):
        self.config = config
        self.sc = config.sources["mlnx_qos"]

    def collect(self, io: HostIO, targets: list[RoceTarget]) -> SourceOutput:
        out = SourceOutput()
        data = MlnxQosData()
        run = run_per_name(io, self.sc, out, sorted({t.netdev for t in targets if t.netdev}),
                           lambda nd: ["-i", nd])
        data.tool_missing = run.tool_missing
        for nd, res in run.results:
            if res.error is None and is_dcb_unsupported(res.stdout + "\n" + res.stderr, res.returncode or 0):
                data.netdevs[nd] = QosResult(None, dcb_supported=False)
                continue
            err = command_error(res)
            if err:
                out.error(*err)
                continue
            try:
                data.netdevs[nd] = QosResult(parse_mlnx_qos(res.stdout))
            except ParseError as exc:
                out.error("parse", f"{' '.join(res.argv)}: {exc}")
        if data.netdevs or data.tool_missing or not targets or not out.errors:
            out.data = data
        return out
