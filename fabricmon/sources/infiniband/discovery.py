"""discovery: `ibnetdiscover --cache` builds the topology (switches, CAs, links with width and
speed, node descriptions) and writes the cache the sweep loads. The cache is written beside its
final name and moved into place atomically, so a sweep never loads a half-written file.

A run in which MADs went unanswered (ibnetdiscover still exits 0 and prints what it reached; stderr
says `bad status 110` per lost query) is partial: its records go out marked incomplete, the model
merges them into the last complete view (model.fabric.merge_discovery), each lost query counts as an
`unanswered` error, and its cache does not replace the last complete one (the sweep keeps reading
every switch it knew)."""

from __future__ import annotations

import os

from fabricmon.host.io import HostIO
from fabricmon.model.fabric import DiscoveryData
from fabricmon.parsers.ibnetdiscover import count_unanswered, parse_ibnetdiscover
from fabricmon.pipeline.source import Inputs, Source, SourceOutput, register

CACHE_NAME = "topology.cache"


def cache_path(cache_dir: str) -> str:
    return os.path.join(cache_dir, CACHE_NAME)


@register("discovery", enabled=True, interval=300.0, timeout=60.0, command=("ibnetdiscover",),
          provides_inventory=True, collector="infiniband", records=DiscoveryData)
class DiscoverySource(Source):
    def collect(self, io: HostIO, inputs: Inputs) -> SourceOutput:
        out = SourceOutput()
        final = cache_path(self.config.fabric.cache_dir)
        tmp = final + ".new"
        res = io.run([*self.sc.command, "--cache", tmp], inputs.remaining(self.sc.timeout))
        data = out.parsed(res, parse_ibnetdiscover, partial=True)
        if data is None:
            return out
        lost = count_unanswered(res.stderr)
        if lost:
            data.complete, data.unanswered = False, lost
            out.error("unanswered", f"{lost} queries of the discovery went unanswered: merged with the last "
                                    f"complete view, nothing it did not reach is taken as gone")
        data.complete = not out.errors
        if not data.complete and os.path.exists(final):
            data.cache_file = final     # the last complete run's cache stays the one to sweep with
        elif not out.errors or (lost and res.error is None and res.returncode == 0):
            # a complete run's cache is the one to sweep with (a partial one only while there is none)
            try:
                io.commit_file(tmp, final)
                data.cache_file = final
            except OSError as exc:
                out.error("read", f"cannot move {tmp} into place: {exc.strerror or exc}")
        out.data = data
        return out
