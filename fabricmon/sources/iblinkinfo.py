"""iblinkinfo source, restricted to the node's own links (`-D 0`: the local CA only; a
fabric-wide sweep from every node would be O(N^2) MADs and belongs to the fabric collector)."""

from __future__ import annotations

from fabricmon.config import Config, safe_arg
from fabricmon.hostio import HostIO
from fabricmon.parsers.errors import ParseError
from fabricmon.parsers.iblinkinfo import LinkInfo, parse_iblinkinfo
from fabricmon.sources import SourceOutput, command_error


class IblinkinfoSource:
    name = "iblinkinfo"

    def __init__(self, config: Config):
        self.config = config
        self.sc = config.sources["iblinkinfo"]

    def collect(self, io: HostIO, ports: list[tuple[str, int]]) -> SourceOutput:
        out = SourceOutput()
        data: dict[tuple[str, int], LinkInfo] = {}
        for dev, port in ports:
            try:
                argv = [*self.sc.command, "-C", safe_arg(dev), "-P", str(int(port)), "-D", "0"]
            except ValueError as exc:
                out.error("parse", str(exc))
                continue
            res = io.run(argv, self.sc.timeout)
            err = command_error(res)
            if err:
                out.error(*err)
                continue
            try:
                links = parse_iblinkinfo(res.stdout)
            except ParseError as exc:
                out.error("parse", f"{' '.join(argv)}: {exc}")
                continue
            match = next((ln for ln in links if ln.port == port), None)
            if match is None:
                out.error("parse", f"{' '.join(argv)}: no line for port {port}")
                continue
            data[(dev, port)] = match
        if data or not ports:
            out.data = data
        return out
