"""Hostile names never break the exposition format; label cardinality stays bounded."""

from __future__ import annotations

import subprocess

import pytest
from prometheus_client.parser import text_string_to_metric_families

from fabricmon.pipeline.scheduler import Pipeline
from fabricmon.config import from_dict
from fabricmon.exporter import render
from fabricmon.host import LiveIO
from helpers import promtool

HOSTILE = ['ib"0', "ib 0\\x", "ib\n0", "ïb0€", "ib}0{,"]


def build_hostile(harness):
    base = harness.sysfs / "class" / "infiniband"
    (base / "mlx5_0").rename(base / 'mlx5_"evil\nname é')
    for i, name in enumerate(HOSTILE):
        (base / "mlx5_1" / "device" / "net" / name).mkdir(parents=True)
    (base / "mlx5_1" / "hca_type").write_text('MT4129 "quoted"\\ \n')


def test_hostile_names_render_valid_exposition(harness):
    build_hostile(harness)
    raw = harness.config()
    cfg = from_dict(raw)
    col = Pipeline(cfg, LiveIO(cfg.sysfs, cfg.procfs))
    text = render(col.collect()).decode()
    col.close()
    fams = {f.name: f for f in text_string_to_metric_families(text)}
    devices = {s.labels["device"] for s in fams["fabricmon_ib_port_up"].samples}
    assert 'mlx5_"evil\nname é' in devices
    info = [s for s in fams["fabricmon_ib_port_info"].samples if s.labels["device"] == "mlx5_1"][0]
    for name in HOSTILE:
        assert name in info.labels["netdev"]
    assert info.labels["hca_type"] == 'MT4129 "quoted"' + chr(92)
    # promtool parses the exposition and lints names and help: any complaint is a non-zero exit
    res = subprocess.run([promtool(), "check", "metrics"], input=text, capture_output=True, text=True)
    assert res.returncode == 0, res.stdout + res.stderr


def test_cardinality_is_bounded(harness):
    raw = harness.config()
    cfg = from_dict(raw)
    col = Pipeline(cfg, LiveIO(cfg.sysfs, cfg.procfs))
    text = render(col.collect()).decode()
    col.close()
    samples = [s for f in text_string_to_metric_families(text) for s in f.samples]
    labels = {k for s in samples for k in s.labels}
    assert not {"qp", "qpn", "lid", "remote_guid", "remote_port"} & labels
    per_port = [s for s in samples if s.labels.get("device") == "mlx5_0"]
    assert len(per_port) < 120, len(per_port)     # 2-HCA node: bounded per port, not per QP or peer
    assert len(samples) < 400


@pytest.mark.parametrize("bad", ["-P", "mlx5;rm -rf /", "a b", "x$(id)"])
def test_discovered_names_are_validated_before_becoming_arguments(bad):
    from fabricmon.host.runner import safe_arg
    with pytest.raises(ValueError):
        safe_arg(bad)
