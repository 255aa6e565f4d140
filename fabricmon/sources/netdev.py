"""netdev source: MTU, speed and operstate of each RoCE netdev, read from sysfs
(/sys/class/net/<if>/{mtu,speed,operstate}) through the HostIO, so that bundles replay it.

`speed` fails with EINVAL (or reads -1) while the link is down: that is "unknown", not an error.
A netdev that vanished between discovery and reading (ENOENT) costs only its own values.
"""

from __future__ import annotations

import errno

from fabricmon.host.io import HostIO
from fabricmon.model.roce import NetdevData, NetdevInfo, roce_netdevs
from fabricmon.pipeline.source import INVENTORY, Inputs, Source, SourceOutput, register

# Errors that mean "no value now" rather than "cannot read": absent file, link down, no such device.
_QUIET = (errno.ENOENT, errno.EINVAL, errno.ENODEV, errno.EOPNOTSUPP)


@register("netdev", enabled=True, interval=60.0, timeout=5.0, needs=(INVENTORY,), records=NetdevData)
class NetdevSource(Source):

    def _read(self, io: HostIO, rel: str, out: SourceOutput) -> str | None:
        try:
            return io.read("sysfs", rel).strip()
        except OSError as exc:
            if exc.errno not in _QUIET:
                out.error("read", f"/sys/{rel}: {exc.strerror or exc}")
            return None

    def _int(self, text: str | None, rel: str, out: SourceOutput) -> int | None:
        if text is None:
            return None
        try:
            return int(text)
        except ValueError:
            out.error("parse", f"/sys/{rel}: not an integer: {text[:40]!r}")
            return None

    def collect(self, io: HostIO, inputs: Inputs) -> SourceOutput:
        out = SourceOutput()
        data = NetdevData()
        for nd in roce_netdevs(inputs.inventory.devices, inputs.inventory.ports):
            if "/" in nd or nd in (".", ".."):
                out.error("parse", f"refusing netdev name {nd!r}")
                continue
            base = f"class/net/{nd}"
            info = NetdevInfo()
            info.mtu = self._int(self._read(io, f"{base}/mtu", out), f"{base}/mtu", out)
            speed = self._int(self._read(io, f"{base}/speed", out), f"{base}/speed", out)
            info.speed_mbps = speed if speed is not None and speed > 0 else None
            info.operstate = self._read(io, f"{base}/operstate", out) or None
            data.netdevs[nd] = info
        out.data = data
        return out
