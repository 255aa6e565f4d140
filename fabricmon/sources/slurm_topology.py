"""slurm_topology (the fabric collector, both kinds): the scheduler's topology as configured, Slurm's
`topology.conf` or `topology.yaml` (its tree; `fabric.sources.slurm_topology.path`, default
/etc/slurm/topology.conf), read on the
discovery's schedule and parsed by parsers.slurm; the model compares it with the rail's tree of the
live topology (checks.fabric_slurm_topology, docs/slurm-topology.md). `enabled: auto` (the default): on where
the file exists; a file that cannot be read or parsed is this source's error (the check does not run)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from fabricmon.host.io import HostIO
from fabricmon.model.slurm_topology import SchedulerTopologyData, parse_rail
from fabricmon.parsers.errors import ParseError
from fabricmon.parsers.slurm import parse_topology
from fabricmon.pipeline.source import Inputs, Source, SourceOutput, register
from fabricmon.schema import ConfigError, Context, Schema, from_class, listing, string

TOPOLOGY_CONF = "/etc/slurm/topology.conf"


@dataclass(frozen=True, slots=True)
class SlurmTopologySettings:
    """fabric.sources.slurm_topology's own keys."""
    path: str = TOPOLOGY_CONF
    rail: tuple[str, ...] = ()


def _rail_spec(value: Any, key: str, ctx: Context) -> str:
    if not isinstance(value, str):
        raise ConfigError(key, f"expected a rail spec (hca=PATTERN, switch=PATTERN, guid=GUID,...), got {value!r}")
    try:
        parse_rail([value])
    except ValueError as exc:
        raise ConfigError(key, str(exc).replace("--rail ", "")) from exc
    return value


OPTIONS: Schema[SlurmTopologySettings] = Schema(fields=(
    string("path", TOPOLOGY_CONF, "Slurm's topology.conf as configured (topology/tree; or a topology.yaml, its "
           "tree), compared with the live fabric's rail", kind="path"),
    listing("rail", (), "the rail the file describes, as `fabricmon topology slurm --rail`: hca=PATTERN, "
            "switch=PATTERN, guid=GUID,... (all must hold); empty: every host CA", _rail_spec, "rail specs"),
), build=from_class(SlurmTopologySettings))


@register("slurm_topology", enabled="auto", interval=300.0, timeout=10.0, collector=("infiniband", "ethernet"),
          records=SchedulerTopologyData, options=OPTIONS)
class SlurmTopologySource(Source):
    def collect(self, io: HostIO, inputs: Inputs) -> SourceOutput:
        out = SourceOutput()
        s = self.sc.settings(SlurmTopologySettings)
        try:
            text = io.read_host_file(s.path)
        except FileNotFoundError:
            if self.sc.enabled != "auto":
                out.error("read", f"no topology.conf at {s.path}")
            else:                       # auto: no file here, quietly off (up, nothing to compare)
                out.data = SchedulerTopologyData(s.path, (), parse_rail(s.rail), configured=False)
            return out
        except OSError as exc:
            out.error("read", f"cannot read {s.path}: {exc.strerror or exc}")
            return out
        try:
            lines = parse_topology(text, s.path)
        except ParseError as exc:
            out.error("parse", f"{s.path}: {exc}")
            return out
        out.data = SchedulerTopologyData(s.path, tuple(lines), parse_rail(s.rail))
        return out


__all__ = ["SlurmTopologySource"]
