"""What the InfiniBand fabric sources read beyond their own keys: the fabric's sweep scope
(fabricmon.sources.settings.FabricScope: the shard, the MAD settings, fabric.sweep_method,
fabric.concurrency, fabric.link_state_max_ports, fabric.cache_dir), built from the `fabric` keys and
provided by the config (fabricmon/config/fabric.py) before the sources' settings are built.

The config imports this module for an InfiniBand fabric, which registers the package's sources.
"""

from __future__ import annotations

from fabricmon.registry import shared_settings
from fabricmon.schema import Schema
from fabricmon.sources.settings import FabricScope

# the settings of the sources that read only the scope: routing, sm, sweep
SCOPE: Schema[FabricScope] = shared_settings(lambda ctx: ctx.take(FabricScope))

__all__ = ["SCOPE", "FabricScope"]
