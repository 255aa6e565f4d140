"""The MAD engine's config keys: defaults, and errors that name the key."""

from __future__ import annotations

import pytest

from fabricmon.config import ConfigError, from_dict


def test_defaults_and_values() -> None:
    f = from_dict({}).fabric
    assert (f.sweep_method, f.mad_window, f.mad_window_per_switch, f.mad_retries) == ("auto", 32, 4, 2)
    f = from_dict({"fabric": {"sweep_method": "tools", "mad_window": 64, "mad_window_per_switch": 8, "mad_retries": 0}}).fabric
    assert (f.sweep_method, f.mad_window, f.mad_window_per_switch, f.mad_retries) == ("tools", 64, 8, 0)


@pytest.mark.parametrize("key,value", [("sweep_method", "fast"), ("mad_window", 0), ("mad_window_per_switch", 65),
                                       ("mad_retries", -1), ("mad_window", True)])
def test_bad_values_name_the_key(key, value) -> None:
    with pytest.raises(ConfigError, match=f"fabric.{key}"):
        from_dict({"fabric": {key: value}})
