"""What a sweep reads over MADs: pure encoders and decoders (codec) and what a sweep asks each switch
(reader). The device I/O (rdma-core's libibumad, the engine keeping many requests in flight) is the
host interface's (HostIO.mad_open/mad_run, fabricmon/host/mad.py), so a capture bundle records the
exchanges and replays them. docs/mad-engine.md has the design and the measurements."""

from __future__ import annotations

from fabricmon.sources.infiniband.mad.reader import FabricReader, SwitchResult, SwitchTarget, plan_targets

__all__ = ["FabricReader", "SwitchResult", "SwitchTarget", "plan_targets"]
