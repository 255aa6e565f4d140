"""The MAD engine's config keys: defaults, and errors that name the key."""

from __future__ import annotations

import pytest

from fabricmon.config import ConfigError, from_dict
from fabricmon.sources.infiniband.events import EventsSettings
from fabricmon.sources.settings import FabricScope


def test_defaults_and_values() -> None:
    f = from_dict({}).fabric
    assert (f.sweep_method, f.mad.window, f.mad.per_target, f.mad.retries, f.mad.timeout_ms) == ("auto", 32, 4, 2, 200)
    f = from_dict({"fabric": {"sweep_method": "tools", "mad_window": 64, "mad_window_per_switch": 8, "mad_retries": 0,
                              "mad_timeout_ms": 50, "shard": "1/3"}}).fabric
    assert (f.sweep_method, f.mad.window, f.mad.per_target, f.mad.retries, f.mad.timeout_ms) == ("tools", 64, 8, 0, 50)
    # the keys reach the sources that read them as their typed settings, and nothing else of the config
    for name in ("sweep", "sm", "routing"):
        scope = f.sources[name].settings(FabricScope)
        assert (scope.mad, scope.sweep_method, scope.shard) == (f.mad, "tools", (1, 3))
    assert f.sources["events"].settings(EventsSettings).scope.mad == f.mad


@pytest.mark.parametrize("key,value", [("sweep_method", "fast"), ("mad_window", 0), ("mad_window_per_switch", 65),
                                       ("mad_retries", -1), ("mad_window", True)])
def test_bad_values_name_the_key(key, value) -> None:
    with pytest.raises(ConfigError, match=f"fabric.{key}"):
        from_dict({"fabric": {key: value}})
