"""Regression tests for fixes found in review."""

from __future__ import annotations

import pytest

from fabricmon.config import ConfigError, from_dict
from fabricmon.history import CounterHistory
from fabricmon.parsers.sysfs_ib import port_guid_from_gid


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
    assert h2.last_delta(key) is None              # from a saturated sample: unknown
