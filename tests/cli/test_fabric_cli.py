"""`fabricmon fabric`: once/capture/replay on the recorded fat tree, promtool on the exposition,
the fabric: config section (every error names its key), --shard."""

from __future__ import annotations

import subprocess
import sys

import pytest

from fabricmon.config import DEFAULT_FABRIC_PORT, ConfigError, from_dict
from helpers import FIXTURES, promtool

BUNDLE = FIXTURES / "fabric" / "fat-tree"


def fabric(*args: str, timeout: float = 60) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "fabricmon", "fabric", *args], capture_output=True, text=True,
                          timeout=timeout)


def test_once_replay_exposition_passes_promtool() -> None:
    r = fabric("once", "--replay", str(BUNDLE))
    body = r.stdout
    # the exit code is the exposition's health (the fixture has a link trained at 1X: CRITICAL), one rule
    assert r.returncode == 2 and "\nfabricmon_health_status 2.0\n" in body, r.stderr
    assert 'fabricmon_fabric_switch_info{level="2",switch="spine01",switch_guid="0000000000200000"} 1.0' in body
    assert 'fabricmon_fabric_port_degraded{port="5",reason="width",switch_guid="0000000000200004"} 1.0' in body
    assert 'fabricmon_fabric_port_symbol_errors_total{port="3",switch_guid="0000000000200002"} 7.0' in body
    assert "fabricmon_fabric_switches 6.0" in body and "fabricmon_fabric_ports 48.0" in body
    assert "fabricmon_ib_port" not in body          # the node's families stay out of the collector
    assert "degraded_link" in r.stderr and "leaf03 port 5" in r.stderr      # the 1X uplink's finding
    lint = subprocess.run([promtool(), "check", "metrics"], input=body, capture_output=True, text=True)
    assert lint.returncode == 0, lint.stdout + lint.stderr


def test_shards_split_the_replayed_fabric() -> None:
    seen: dict[str, int] = {}
    for i in range(3):
        r = fabric("once", "--replay", str(BUNDLE), "--shard", f"{i}/3")
        assert f'fabricmon_fabric_shard_info{{shard="{i}",shards="3"}} 1.0' in r.stdout
        mine = 0
        for line in r.stdout.splitlines():
            if line.startswith("fabricmon_fabric_switch_info{"):
                guid = line.split('switch_guid="')[1].split('"')[0]
                seen[guid] = seen.get(guid, 0) + 1
                mine += 1
        # The bundle recorded an unsharded sweep (ibqueryerrors), not the per-switch perfquery a
        # shard runs: a shard with switches reads no counters from it, and says so in one line.
        if mine:
            assert r.returncode in (2, 3) and r.stderr.startswith("fabricmon: no switch could be read: sweep: switch ")
            assert len(r.stderr.splitlines()) == 1, r.stderr
            # the exit code is the exposition's verdict: UNKNOWN, or CRITICAL when a link seen down says so
            assert f"\nfabricmon_health_status {r.returncode}.0\n" in r.stdout
        else:
            assert r.returncode == 0, r.stderr
    assert len(seen) == 6 and set(seen.values()) == {1}


def test_bad_shard_flag_is_a_config_error() -> None:
    r = fabric("once", "--replay", str(BUNDLE), "--shard", "3/3")
    assert r.returncode == 2 and "config error at --shard" in r.stderr


@pytest.mark.parametrize(("raw", "key"), [
    ({"fabric": {"sweep_intervall": 5}}, "fabric.sweep_intervall"),
    ({"fabric": {"sweep_interval": 0}}, "fabric.sweep_interval"),
    ({"fabric": {"shard": "1/1"}}, "fabric.shard"),
    ({"fabric": {"concurrency": 9}}, "fabric.concurrency"),
    ({"fabric": {"thresholds": {"ecmp_ratio": 0.5}}}, "fabric.thresholds.ecmp_ratio"),
    ({"fabric": {"thresholds": {"utilisation_floor": 2}}}, "fabric.thresholds.utilisation_floor"),
    ({"fabric": {"thresholds": {"consecutive_sweeps": 0}}}, "fabric.thresholds.consecutive_sweeps"),
    ({"fabric": {"sources": {"sweeper": {}}}}, "fabric.sources.sweeper"),
    ({"fabric": {"sources": {"sweep": {"timeout": "x"}}}}, "fabric.sources.sweep.timeout"),
    ({"fabric": {"timeouts": {"sweep": -1}}}, "fabric.timeouts.sweep"),
    ({"fabric": {"port": 70000}}, "fabric.port"),
    ({"fabric": {"routing_imbalance_threshold": 0.9}}, "fabric.routing_imbalance_threshold"),
    ({"fabric": {"sm_stalled_polls": 0}}, "fabric.sm_stalled_polls"),
    ({"fabric": {"down_port_max_age": "1d"}}, "fabric.down_port_max_age"),
    ({"fabric": {"routing_interval": 0}}, "fabric.routing_interval"),
    ({"fabric": {"timeouts": {"sm": 0}}}, "fabric.timeouts.sm"),
])
def test_fabric_config_errors_name_the_key(raw: dict, key: str) -> None:
    with pytest.raises(ConfigError) as exc:
        from_dict(raw, check_paths=False)
    assert exc.value.key == key


def test_fabric_config_defaults_and_overrides() -> None:
    cfg = from_dict({}, check_paths=False)
    f = cfg.fabric
    assert f.port == DEFAULT_FABRIC_PORT == 9881
    assert f.sources["sweep"].interval == 15.0 and f.sources["discovery"].interval == 300.0
    assert f.sources["sweep"].command == ("ibqueryerrors",) and f.shard == (0, 1)
    assert (f.thresholds.ecmp_ratio, f.thresholds.consecutive_sweeps, f.thresholds.utilisation_floor) == (1.2, 3, 0.3)
    f = from_dict({"paths": {"state_dir": "/srv/fm"}, "fabric": {
        "sweep_interval": 5, "discovery_interval": 60, "timeouts": {"sweep": 9}, "shard": "1/4",
        "sources": {"discovery": {"timeout": 20}}}}, check_paths=False).fabric
    assert f.sources["sweep"].interval == 5 and f.sources["sweep"].timeout == 9
    assert f.sources["discovery"].interval == 60 and f.sources["discovery"].timeout == 20
    assert f.shard == (1, 4) and f.cache_dir == "/srv/fm/fabric"


def test_fabric_routing_and_sm_config() -> None:
    f = from_dict({}, check_paths=False).fabric
    assert f.sources["routing"].interval == 300.0 and f.sources["routing"].command == ("dump_fts",)
    assert f.sources["sm"].interval == 30.0 and f.sources["sm"].command == ("sminfo",)
    assert (f.routing_imbalance_threshold, f.sm_stalled_polls, f.down_port_max_age) == (1.5, 2, 604800.0)
    f = from_dict({"fabric": {"routing_interval": 60, "sm_interval": 5, "timeouts": {"routing": 20},
                              "down_port_max_age": None, "routing_imbalance_threshold": 2}}, check_paths=False).fabric
    assert f.sources["routing"].interval == 60 and f.sources["routing"].timeout == 20
    assert f.sources["sm"].interval == 5 and f.down_port_max_age is None and f.routing_imbalance_threshold == 2


def test_every_fabric_metric_is_documented() -> None:
    import re

    from helpers import ROOT
    r = fabric("once", "--replay", str(BUNDLE))
    doc = (ROOT / "docs" / "metrics.md").read_text()
    names = set(re.findall(r"^# TYPE (\S+) ", r.stdout, re.M))
    missing = [n for n in names if f"| `{n}` |" not in doc and f"| `{n}_total` |" not in doc
               and f"| `{n}` (`_bucket`" not in doc]
    assert names and not missing, f"metrics missing from docs/metrics.md: {missing}"
