"""A hot-plugged or removed HCA: series appear and disappear, no stale duplicates, no fd leak. A
removed HCA that was seen healthy stays named by one CRITICAL expected_inventory series (the
learned inventory) until it comes back; a hot-plugged one is learned."""

from __future__ import annotations

import shutil
import sys
from pathlib import Path

from prometheus_client.parser import text_string_to_metric_families

from fabricmon.pipeline.scheduler import Pipeline
from fabricmon.config import from_dict
from fabricmon.exporter import render
from fabricmon.host import LiveIO
from fabricmon.sim import sysfs_tree as nodetree  # noqa: E402


def devices_up(text: str) -> list[str]:
    out = []
    for fam in text_string_to_metric_families(text):
        if fam.name == "fabricmon_ib_port_up":
            out += [s.labels["device"] for s in fam.samples]
    return sorted(out)


def test_hca_removed_and_added(tmp_path):
    nodetree.build(tmp_path, 3)
    cfg = from_dict({"paths": {"sysfs": str(tmp_path)},
                     "sources": {n: {"enabled": False} for n in ("ibstat", "perfquery", "iblinkinfo")}})
    io = LiveIO(cfg.sysfs, cfg.procfs)
    col = Pipeline(cfg, io)
    assert devices_up(render(col.collect()).decode()) == ["mlx5_0", "mlx5_1", "mlx5_2"]
    fds_before = io.open_files()
    shutil.rmtree(tmp_path / "class" / "infiniband" / "mlx5_1")
    text = render(col.collect(["sysfs"])).decode()
    assert devices_up(text) == ["mlx5_0", "mlx5_2"]
    # of the removed HCA only the learned inventory's verdict is left: it was there and is gone
    assert [ln for ln in text.splitlines() if 'device="mlx5_1"' in ln] == [
        'fabricmon_check_status{check="expected_inventory",class="fatal",device="mlx5_1",port="1"} 2.0']
    assert io.open_files() < fds_before            # the removed HCA's files were closed
    nodetree.build(tmp_path, 4)                     # mlx5_1 comes back, mlx5_3 is new
    text = render(col.collect(["sysfs"])).decode()
    assert devices_up(text) == ["mlx5_0", "mlx5_1", "mlx5_2", "mlx5_3"]
    assert text.count('fabricmon_ib_port_up{device="mlx5_1",port="1"}') == 1
    assert 'check="expected_inventory",device="mlx5_1"' not in text        # back: nothing is missing
    assert sorted(p.device for p in col.model.learned.inventory.ports.values()) == [f"mlx5_{i}" for i in range(4)]
    col.close()
