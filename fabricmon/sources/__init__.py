"""The node daemon's sources, one module each, each registered once with its defaults
(fabricmon.pipeline.source.register). Sources fetch raw text and files through a HostIO,
with timeouts, and hand them to the pure parsers in fabricmon.parsers.

Importing this package registers them; the order here is the order they are listed in.
"""

from fabricmon.sources import (  # noqa: F401 - imported to register
    sysfs_ib, hw_counters, port_state, ibstat, perfquery, iblinkinfo, mlnx_qos, ethtool, netdev, gpudirect, gpu, slurm,
    optics, kernel_log, nccl_inspector, nccl_ras, mlxlink, fec, pcie,
)
