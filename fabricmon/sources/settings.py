"""What the sources read of the sections beside `sources`: declared here, beside the sources that read
them, and composed by the config (fabricmon/config/__init__.py, fabricmon/config/fabric.py), which builds each
and provides it (`Context.provide`) before it builds the sources' settings:

- `gpu` (GpuConfig): the gpu source's NCCL env file;
- `slurm` (SlurmConfig): the Slurm sources' node name and retry (and the fabric model's series cap);
- the fabric's sweep scope (FabricScope): the shard, the MAD engine's settings, the topology cache,
  built from the `fabric.*` keys the InfiniBand and Ethernet sources share;
- `exclude_devices` (fabricmon.schema.DeviceFilter).

A source never sees the whole config: its registered options build its typed settings from its own
keys and these (`fabricmon.registry.shared_settings`).
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

from fabricmon.host.mad import MadSettings
from fabricmon.schema import ConfigError, Context, Schema, absolute, integer, number, string


@dataclass(frozen=True, slots=True)
class GpuConfig:
    nccl_env_file: str | None = None               # env file whose NCCL_IB_HCA is checked


GPU: Schema[GpuConfig] = Schema(fields=(
    string("nccl_env_file", None, "env file whose `NCCL_IB_HCA` is checked against the GPU/HCA affinity "
           "(e.g. `/etc/nccl.conf`)", null=True, check=absolute, kind="absolute path"),
), build=lambda v, key, ctx: GpuConfig(**v))


@dataclass(frozen=True, slots=True)
class SlurmConfig:
    node_name: str | None = None         # this node's Slurm name; None: the short host name
    lookup_retry: float = 60.0           # seconds before a failed job lookup (slurmctld down) is tried again
    max_job_switch_series: int = 20000   # fabricmon_fabric_job_switch_info series at most (the rest counted)


def _slurm_node(value: str, key: str, ctx: Context) -> str:
    if not re.fullmatch(r"[A-Za-z0-9][A-Za-z0-9._-]{0,254}", value):
        raise ConfigError(key, f"expected a Slurm node name (letters, digits, '.', '_', '-'), got {value!r}")
    return value


_D_SLURM = SlurmConfig()
SLURM: Schema[SlurmConfig] = Schema(fields=(
    string("node_name", None, "this node's Slurm name", null=True, check=_slurm_node,
           default_doc="the short host name"),
    number("lookup_retry", _D_SLURM.lookup_retry,
           "seconds before a failed job lookup (slurmctld down or slow) is tried again", lo=1),
    integer("max_job_switch_series", _D_SLURM.max_job_switch_series,
            "fabric collector: `fabricmon_fabric_job_switch_info` series at most "
            "(the rest counted)", lo=0),
), build=lambda v, key, ctx: SlurmConfig(**v), doc="Which jobs a finding hurts ([jobs.md](jobs.md)).")


@dataclass(frozen=True, slots=True)
class FabricScope:
    """What the fabric sources share of the `fabric` section: which switches this collector sweeps and
    how it reaches them."""
    shard: tuple[int, int] = (0, 1)      # (index, count): the switches whose GUID hash % count == index
    mad: MadSettings = field(default_factory=MadSettings)   # fabric.mad_*: the engine's, and the tools' -t
    sweep_method: str = "auto"           # mad, tools or auto
    concurrency: int = 2                 # ibqueryerrors passes in flight at once (1 or 2)
    link_state_max_ports: int = 512      # PortInfo reads per sweep the SM's records leave uncovered
    cache_dir: str = "/var/lib/fabricmon/fabric"


__all__ = ["GPU", "SLURM", "FabricScope", "GpuConfig", "SlurmConfig"]
