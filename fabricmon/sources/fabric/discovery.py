"""discovery: `ibnetdiscover --cache` builds the topology (switches, CAs, links with width and
speed, node descriptions) and writes the cache the sweep loads. The cache is written beside its
final name and moved into place atomically, so a sweep never loads a half-written file."""

from __future__ import annotations

import os

from fabricmon.host.io import HostIO
from fabricmon.model.fabric import DiscoveryData
from fabricmon.parsers.ibnetdiscover import parse_ibnetdiscover
from fabricmon.pipeline.source import Inputs, Source, SourceOutput, register

CACHE_NAME = "topology.cache"


def cache_path(cache_dir: str) -> str:
    return os.path.join(cache_dir, CACHE_NAME)


@register("discovery", enabled=True, interval=300.0, timeout=60.0, command=("ibnetdiscover",),
          provides_inventory=True, collector="fabric", records=DiscoveryData)
class DiscoverySource(Source):
    def collect(self, io: HostIO, inputs: Inputs) -> SourceOutput:
        out = SourceOutput()
        final = cache_path(self.config.fabric.cache_dir)
        tmp = final + ".new"
        res = io.run([*self.sc.command, "--cache", tmp], inputs.remaining(self.sc.timeout))
        data = out.parsed(res, parse_ibnetdiscover, partial=True)
        if data is None:
            return out
        if not out.errors:              # a complete run: its cache is the one to sweep with
            try:
                io.commit_file(tmp, final)
                data.cache_file = final
            except OSError as exc:
                out.error("read", f"cannot move {tmp} into place: {exc.strerror or exc}")
        out.data = data
        return out
