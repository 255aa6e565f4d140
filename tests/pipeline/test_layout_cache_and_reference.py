"""Regression tests for fixes found in review."""

from __future__ import annotations

import pytest

from fabricmon.config import ConfigError, from_dict
from fabricmon.model.history import CounterHistory
from fabricmon.parsers.sysfs_ib import port_guid_from_gid
from helpers import roce_inputs, run_inputs


def test_warning_above_critical_is_refused():
    with pytest.raises(ConfigError, match=r"checks\.symbol_errors\.warning"):
        from_dict({"checks": {"symbol_errors": {"warning": 500, "critical": 100}}}, check_paths=False)


def test_zero_expected_rate_is_refused():
    with pytest.raises(ConfigError, match=r"expected_links\[0\]\.rate_gbps"):
        from_dict({"expected_links": [{"device": "*", "rate_gbps": 0}]}, check_paths=False)


@pytest.mark.parametrize("gid, guid", [
    ("fe80:0000:0000:0000:a288:c2ff:feab:cdef", "0xa288c2fffeabcdef"),
    ("0000:0000:0000:0000:0000:0000:0000:0000", None),
    ("garbage", None),
])
def test_port_guid_from_gid0(gid, guid):
    assert port_guid_from_gid(gid) == guid


def test_saturated_samples_round_trip_through_json():
    h = CounterHistory()
    key = ("mlx5_0", 1, "link_downed")
    h.add(key, 1.0, 254)
    h.add(key, 2.0, 255, saturated=True)
    h.add(key, 3.0, 255, saturated=True)
    h2 = CounterHistory.from_json(h.to_json())
    assert h2.increase(key, 100, 3.0)[0] == 1      # the step onto the maximum counts
    assert h2.last_step(key) is None               # from a saturated sample: unknown


def test_quiet_counter_keeps_two_samples_and_a_12h_window_stays_complete():
    h = CounterHistory(horizon=43200)
    key = ("mlx5_0", 1, "link_downed")
    h.add(key, 0.0, 0)
    h.add(key, 15.0, 3)                      # three flaps early on
    for i in range(2, 2870):                 # then almost 12 h of quiet polls every 15 s
        h.add(key, i * 15.0, 3)
    assert len(h._data[key]) <= 3
    assert h.increase(key, 43200, 2869 * 15.0)[0] == 3


def test_fast_writer_matches_prometheus_client(tmp_path):
    """Our exposition writer produces exactly prometheus_client's text, hostile names included."""
    import sys
    from pathlib import Path
    from fabricmon.sim import sysfs_tree as nodetree
    from fabricmon.pipeline.scheduler import Pipeline
    from fabricmon.exporter import render, render_reference
    from fabricmon.host import LiveIO
    nodetree.build(tmp_path, 3)
    base = tmp_path / "class" / "infiniband"
    (base / "mlx5_0").rename(base / 'mlx5_"q\\x\nz é')
    (base / "mlx5_1" / "device" / "net" / 'e"th 0\\').mkdir(parents=True)
    cfg = from_dict({"paths": {"sysfs": str(tmp_path)}, "sources": {
        n: {"enabled": False} for n in ("ibstat", "perfquery", "iblinkinfo", "ethtool", "mlnx_qos",
                                        "gpu", "gpudirect", "netdev")}})
    col = Pipeline(cfg, LiveIO(str(tmp_path)))
    snap = col.collect()
    col.close()
    assert render(snap) == render_reference(snap)


def test_static_layout_is_read_once_per_ttl_and_refreshed_after(tmp_path, monkeypatch):
    import sys
    from pathlib import Path
    from fabricmon.sim import sysfs_tree as nodetree
    from fabricmon.host import LiveIO
    from fabricmon.sources import sysfs_ib

    class CountingIO(LiveIO):
        reads: list[str] = []

        def read(self, root, rel):
            self.reads.append(rel)
            return super().read(root, rel)

    nodetree.build(tmp_path, 2)
    cfg = from_dict({"paths": {"sysfs": str(tmp_path)}})
    src = sysfs_ib.SysfsSource(cfg.sources["sysfs"])
    io = CountingIO(str(tmp_path))
    first = src.collect(io, run_inputs()).data.devices
    n_first = len(io.reads)
    io.reads.clear()
    (tmp_path / "class/infiniband/mlx5_0/fw_ver").write_text("28.99.9999")
    second = src.collect(io, run_inputs()).data.devices
    assert len(io.reads) < n_first                      # identity files are not re-read every poll
    assert not any(r.endswith("fw_ver") for r in io.reads)
    assert second["mlx5_0"].fw_ver == first["mlx5_0"].fw_ver == "28.40.1000"
    assert second["mlx5_0"].ports[1].counters == first["mlx5_0"].ports[1].counters
    monkeypatch.setattr(sysfs_ib, "STATIC_TTL", 0.0)   # the TTL has passed: a firmware update is seen
    assert src.collect(io, run_inputs()).data.devices["mlx5_0"].fw_ver == "28.99.9999"


def test_kept_families_render_as_a_fresh_render_would(tmp_path):
    """The renderer reuses a family's text while its samples stay the same: render after render of
    a tree whose counters move, a port that goes down, and one that vanishes, every exposition equals
    prometheus_client's for the same snapshot, and an unchanged family's bytes are the kept ones."""
    import shutil
    from fabricmon.sim import sysfs_tree as nodetree
    from fabricmon.pipeline.scheduler import Pipeline
    from fabricmon.exporter import render_reference
    from fabricmon.exporter.render import Renderer
    from fabricmon.host import LiveIO
    nodetree.build(tmp_path, 3)
    base = tmp_path / "class" / "infiniband"
    cfg = from_dict({"paths": {"sysfs": str(tmp_path)}, "sources": {
        n: {"enabled": False} for n in ("ibstat", "perfquery", "iblinkinfo", "ethtool", "mlnx_qos",
                                        "gpu", "gpudirect", "netdev")}})
    col = Pipeline(cfg, LiveIO(str(tmp_path)))
    renderer = Renderer()
    try:
        changes = [
            lambda: None,
            lambda: (base / "mlx5_0/ports/1/counters/port_xmit_data").write_text("123456789012\n"),
            lambda: (base / "mlx5_1/ports/1/state").write_text("1: DOWN\n"),
            lambda: (base / "mlx5_1/ports/1/counters/symbol_error").write_text("7\n"),
            lambda: None,
            lambda: shutil.rmtree(base / "mlx5_2"),
        ]
        for change in changes:
            change()
            snap = col.collect()
            assert renderer.render(snap) == render_reference(snap)
        before = dict(renderer._kept)
        snap = col.collect()
        assert renderer.render(snap) == render_reference(snap)
        assert renderer._kept["fabricmon_ib_port_up"][1] is before["fabricmon_ib_port_up"][1]
    finally:
        col.close()
