"""discovery: `ibnetdiscover --cache` builds the topology (switches, CAs, links with width and
speed, node descriptions) and writes the cache the sweep loads. The cache is written beside its
final name and moved into place atomically, so a sweep never loads a half-written file.

A run in which MADs went unanswered (ibnetdiscover still exits 0 and prints what it reached; stderr
says `bad status 110` per lost query) is partial: its records go out marked incomplete, the model
merges them into the last complete view (model.fabric.merge_discovery), each lost query counts as an
`unanswered` error, and its cache does not replace the last complete one (the sweep keeps reading
every switch it knew).

The site's node name map (infiniband-diags' `--node-name-map` file, `fabric.sources.discovery.
node_name_map`, `/etc/rdma/ib-node-name-map` by default) names hosts whose CAs keep the
firmware's node description (no rdma-ndd): read with every discovery; no file is no map; an
unreadable (`read`) or garbage (`parse`) file is a source error naming the file, the discovery
itself stays complete and is used without the names."""

from __future__ import annotations

import os
from dataclasses import dataclass

from fabricmon.host.io import HostIO
from fabricmon.model.fabric import DiscoveryData
from fabricmon.parsers.errors import ParseError
from fabricmon.parsers.ibnetdiscover import count_unanswered, parse_ibnetdiscover
from fabricmon.parsers.node_name_map import parse_node_name_map
from fabricmon.pipeline.source import Inputs, Source, SourceOutput, register
from fabricmon.schema import Schema, string
from fabricmon.sources.infiniband.settings import FabricScope

CACHE_NAME = "topology.cache"
NODE_NAME_MAP = "/etc/rdma/ib-node-name-map"       # infiniband-diags' default


@dataclass(frozen=True, slots=True)
class DiscoverySettings:
    """fabric.sources.discovery's own keys."""
    node_name_map: str = NODE_NAME_MAP
    cache_dir: str = ""         # fabric.cache_dir: where the topology cache is written


OPTIONS: Schema[DiscoverySettings] = Schema(fields=(
    string("node_name_map", NODE_NAME_MAP,
           "infiniband-diags' node name map (`0x<guid> \"name\"` lines, `#` comments): names the "
           "hosts whose CAs keep the firmware's node description; a missing file is no map",
           kind="path"),
), build=lambda v, key, ctx: DiscoverySettings(**v, cache_dir=ctx.take(FabricScope).cache_dir),
   pure=False)


def cache_path(cache_dir: str) -> str:
    return os.path.join(cache_dir, CACHE_NAME)


@register("discovery", enabled=True, interval=300.0, timeout=60.0, command=("ibnetdiscover",),
          provides_inventory=True, collector="infiniband", records=DiscoveryData, options=OPTIONS)
class DiscoverySource(Source):
    def collect(self, io: HostIO, inputs: Inputs) -> SourceOutput:
        out = SourceOutput()
        final = cache_path(self.sc.settings(DiscoverySettings).cache_dir)
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
                if os.path.exists(final):
                    data.cache_file = final     # the last complete run's, as for a partial run
        data.node_names = self._node_names(io, out)
        out.data = data
        return out

    def _node_names(self, io: HostIO, out: SourceOutput) -> dict[str, str]:
        """The node name map, {} when there is none; an error of its own when it cannot be used."""
        path = self.sc.settings(DiscoverySettings).node_name_map
        try:
            text = io.read_host_file(path)
        except FileNotFoundError:
            return {}
        except OSError as exc:
            out.error("read", f"cannot read the node name map {path}: {exc.strerror or exc}")
            return {}
        try:
            return parse_node_name_map(text)
        except ParseError as exc:
            out.error("parse", f"node name map {path} ignored: {exc}")
            return {}
