"""perfquery source: PortCounters (errors, 32-bit) and PortCountersExtended (`-x`, 64-bit data)
of the node's own ports. Never resets counters (no -r/-R): that would destroy them for every
other monitor on the fabric."""

from __future__ import annotations

from fabricmon.config import Config, safe_arg
from fabricmon.hostio import HostIO
from fabricmon.parsers.errors import ParseError
from fabricmon.parsers.perfquery import parse_perfquery
from fabricmon.sources import SourceOutput, command_error


class PerfquerySource:
    name = "perfquery"

    def __init__(self, config: Config):
        self.config = config
        self.sc = config.sources["perfquery"]

    def collect(self, io: HostIO, ports: list[tuple[str, int]]) -> SourceOutput:
        """ports: the (device, port) pairs to query (InfiniBand ports only)."""
        out = SourceOutput()
        data: dict[tuple[str, int], tuple[dict[str, int], dict[str, int]]] = {}
        for dev, port in ports:
            try:
                args = ["-C", safe_arg(dev), "-P", str(int(port))]
            except ValueError as exc:
                out.error("parse", str(exc))
                continue
            counters: dict[str, int] = {}
            bits: dict[str, int] = {}
            for extra in ([], ["-x"]):
                argv = [*self.sc.command, *extra, *args]
                res = io.run(argv, self.sc.timeout)
                err = command_error(res)
                if err:
                    out.error(*err)
                    continue
                try:
                    blocks = parse_perfquery(res.stdout)
                except ParseError as exc:
                    out.error("parse", f"{' '.join(argv)}: {exc}")
                    continue
                b = blocks[0]
                counters.update(b.counters)     # -x runs second: 64-bit data counters win
                bits.update(b.bits)
            if counters:
                data[(dev, port)] = (counters, bits)
        if data or not ports:
            out.data = data
        return out
