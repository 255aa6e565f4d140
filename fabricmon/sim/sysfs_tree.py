"""Build a synthetic sysfs tree of an N-HCA NDR node (our own values, real file formats)."""

from __future__ import annotations

import os
from pathlib import Path

from fabricmon.model.ibspec import COUNTERS

HW_COUNTERS = ("duplicate_request", "implied_nak_seq_err", "lifespan", "local_ack_timeout_err",
               "out_of_buffer", "out_of_sequence", "packet_seq_err", "req_cqe_error",
               "rnr_nak_retry_err", "rx_read_requests", "rx_write_requests", "np_cnp_sent",
               "np_ecn_marked_roce_packets", "rp_cnp_handled", "rp_cnp_ignored")


def build(root: str | os.PathLike[str], hcas: int = 10) -> Path:
    """Write <root>/class/infiniband/mlx5_<i>/... and return the sysfs root."""
    base = Path(root) / "class" / "infiniband"
    for i in range(hcas):
        dev = base / f"mlx5_{i}"
        port = dev / "ports" / "1"
        (port / "counters").mkdir(parents=True, exist_ok=True)
        (port / "hw_counters").mkdir(exist_ok=True)
        (dev / "hca_type").write_text("MT4129")
        (dev / "fw_ver").write_text("28.40.1000")
        (dev / "board_id").write_text("MT_0000000838")
        (dev / "node_guid").write_text(f"b83f:d203:0012:{i:04x}")
        (port / "state").write_text("4: ACTIVE")
        (port / "phys_state").write_text("5: LinkUp")
        (port / "rate").write_text("400 Gb/sec (4X NDR)")
        (port / "link_layer").write_text("InfiniBand")
        for n, c in enumerate(COUNTERS):
            (port / "counters" / c.sysfs).write_text(str(1000 * (i + 1) + n if c.kind == "traffic" else 0))
        for h in HW_COUNTERS:
            (port / "hw_counters" / h).write_text("12" if h == "lifespan" else "0")
    return Path(root)
