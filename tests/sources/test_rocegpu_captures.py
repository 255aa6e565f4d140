"""Compatibility with the real captures in ../shared/captures (not shipped with the project; CI
has them). Skips, saying so, when the folder is absent."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from fabricmon.pipeline.scheduler import Pipeline
from fabricmon.config import from_dict
from fabricmon.host import LiveIO
from fabricmon.host.runner import CommandResult
from fabricmon.sources.ethtool import EthtoolSource
from fabricmon.sources.mlnx_qos import MlnxQosSource
from fabricmon.model.roce import RoceTarget
from helpers import CAPTURES, roce_inputs, run_inputs, skip_without_captures


@pytest.fixture(autouse=True)
def _captures() -> None:
    """Every test here reads ../shared/captures: skip without it (fail under $CI)."""
    skip_without_captures(CAPTURES)


class OneCommand:
    def __init__(self, text: str, rc: int = 0):
        self.text, self.rc = text, rc

    def run(self, argv, timeout):
        return CommandResult(tuple(argv), self.rc, self.text, "", 0.0)


# One placeholder case when the folder is absent, so the skip (or CI failure) carries a clear reason.
@pytest.mark.parametrize("path", sorted(CAPTURES.glob("mlnx_qos/*")) or [None],
                         ids=lambda p: p.name if p else "absent")
def test_mlnx_qos_captures(path):
    assert path is not None, f"{CAPTURES / 'mlnx_qos'} holds no capture"
    out = MlnxQosSource(from_dict({}).sources["mlnx_qos"]).collect(OneCommand(path.read_text()), roce_inputs([RoceTarget("mlx5_0", 1, "eth2")]))
    assert not out.errors, out.errors
    q = out.data.netdevs["eth2"].qos
    assert q.trust in ("pcp", "dscp") and len(q.pfc_enabled) == 8 and q.traffic_classes


def test_ethtool_capture():
    text = (CAPTURES / "ethtool" / "prometheus-node_exporter__eth0_statistics").read_text()
    out = EthtoolSource(from_dict({}).sources["ethtool"]).collect(OneCommand(text), roce_inputs([RoceTarget("x", 1, "eth0")]))
    assert not out.errors and out.data.netdevs["eth0"].count > 5


def test_real_h100_sysfs_roce_bond(tmp_path):
    """The real H100 tree: 8 NDR IB HCAs and a BlueField-3 RoCE bond without device/ (no netdev, no
    PCI path). The bond becomes a RoCE view with its hw_counters; nothing crashes or errors."""
    (tmp_path / "class").mkdir()
    os.symlink(CAPTURES / "sysfs" / "leptonai-gpud__sys-class-infiniband-h100.0", tmp_path / "class" / "infiniband")
    cfg = from_dict({"paths": {"sysfs": str(tmp_path), "procfs": str(tmp_path)},
                     "sources": {n: {"enabled": False} for n in ("ibstat", "perfquery", "iblinkinfo", "gpu")}})
    col = Pipeline(cfg, LiveIO(cfg.sysfs, cfg.procfs))
    try:
        snap = col.collect()
    finally:
        col.close()
    views = snap.roce.views
    assert [(v.target.device, v.target.netdev) for v in views] == [("mlx5_bond_0", "")]
    assert "out_of_sequence" in views[0].hw
    for name in ("mlnx_qos", "ethtool", "netdev", "gpudirect"):
        assert not snap.sources[name].active_errors, name
    # the bond's netdev is unknown (no device/net in the capture): no DCB setting read, so no roce_pfc status
    assert not [f for f in snap.findings if f.check == "roce_pfc"]
    assert snap.gpu.affinity is None               # no GPU list (the gpu source is off): affinity not run
