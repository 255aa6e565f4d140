"""Config keys for RoCE, GPU and the new sources: defaults, validation and error messages."""

from __future__ import annotations

import pytest

from fabricmon.config import ConfigError, from_dict
from fabricmon.config import registered


def err(raw) -> ConfigError:
    with pytest.raises(ConfigError) as ei:
        from_dict(raw, check_paths=False)
    return ei.value


def test_defaults():
    c = from_dict({})
    assert c.roce.priority == 3 and c.roce.lossless_priorities == (3,) and c.roce.trust == "dscp"
    assert c.roce.mtu == 4096 and c.roce.pause_rate_warning == 1000 and c.roce.pause_fraction_warning == 0.1
    assert c.gpu.nccl_env_file is None
    assert {n: c.sources[n].enabled for n in ("mlnx_qos", "ethtool", "netdev", "gpudirect", "gpu")} == {
        "mlnx_qos": "auto", "ethtool": "auto", "netdev": True, "gpudirect": True, "gpu": "auto"}
    assert c.sources["ethtool"].command == ("ethtool",) and c.sources["netdev"].command == ()


def test_lossless_priorities_default_to_the_rdma_priority():
    assert from_dict({"roce": {"priority": 5}}).roce.lossless_priorities == (5,)
    assert from_dict({"roce": {"priority": 5, "lossless_priorities": [5, 2]}}).roce.lossless_priorities == (2, 5)
    assert from_dict({"roce": {"lossless_priorities": []}}).roce.lossless_priorities == ()


def test_thresholds_are_configurable():
    c = from_dict({"roce": {"pause_rate_warning": 50, "pause_rate_critical": 500, "pause_fraction_warning": 0.05,
                            "pause_fraction_critical": None, "pause_window": 60, "drop_warning": 10,
                            "drop_critical": 1000, "cnp_ignored_warning": None, "storm_window": 600,
                            "trust": None, "mtu": 1024}})
    r = c.roce
    assert (r.pause_rate_warning, r.pause_rate_critical, r.pause_fraction_critical) == (50, 500, None)
    assert (r.drop_warning, r.drop_critical, r.cnp_ignored_warning, r.trust, r.mtu) == (10, 1000, None, None, 1024)


@pytest.mark.parametrize("raw, key, text", [
    ({"roce": {"priorty": 3}}, "roce.priorty", "did you mean 'priority'"),
    ({"roce": {"priority": 8}}, "roce.priority", "priority 0-7"),
    ({"roce": {"priority": True}}, "roce.priority", "priority 0-7"),
    ({"roce": {"lossless_priorities": [4]}}, "roce.lossless_priorities", "must include roce.priority (3)"),
    ({"roce": {"lossless_priorities": 3}}, "roce.lossless_priorities", "list of priorities"),
    ({"roce": {"lossless_priorities": [3, 9]}}, "roce.lossless_priorities[1]", "priority 0-7"),
    ({"roce": {"trust": "DSCP"}}, "roce.trust", "dscp, pcp or null"),
    ({"roce": {"mtu": 9000}}, "roce.mtu", "not the netdev MTU"),
    ({"roce": {"pause_fraction_warning": 5}}, "roce.pause_fraction_warning", "must be <= 1"),
    ({"roce": {"pause_rate_warning": -1}}, "roce.pause_rate_warning", ">= 0"),
    ({"roce": {"pause_window": "5m"}}, "roce.pause_window", "expected a number"),
    ({"roce": [1]}, "roce", "expected a mapping"),
    ({"gpu": {"nccl_env": "/etc/nccl.conf"}}, "gpu.nccl_env", "did you mean 'nccl_env_file'"),
    ({"gpu": {"nccl_env_file": "nccl.conf"}}, "gpu.nccl_env_file", "absolute path"),
    ({"rcoe": {}}, "rcoe", "did you mean 'roce'"),
    ({"sources": {"ethtol": {}}}, "sources.ethtol", "did you mean 'ethtool'"),
    ({"sources": {"gpu": {"enabled": "yes"}}}, "sources.gpu.enabled", "true, false or 'auto'"),
    ({"sources": {"mlnx_qos": {"command": []}}}, "sources.mlnx_qos.command", "argv list"),
])
def test_errors_name_the_key(raw, key, text):
    e = err(raw)
    assert e.key == key and text in e.reason, (e.key, e.reason)


def test_every_new_source_is_configurable():
    for name in ("mlnx_qos", "ethtool", "netdev", "gpudirect", "gpu"):
        assert name in registered("node")
        c = from_dict({"sources": {name: {"enabled": False, "interval": 120, "timeout": 3}}})
        s = c.sources[name]
        assert (s.enabled, s.interval, s.timeout) == (False, 120, 3)
    c = from_dict({"sources": {"ethtool": {"command": ["ip", "netns", "exec", "ns1", "ethtool"]}}})
    assert c.sources["ethtool"].command == ("ip", "netns", "exec", "ns1", "ethtool")
