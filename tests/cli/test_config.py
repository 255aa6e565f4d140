"""Tests for fabricmon.config: every error names its key; `fabricmon run` refuses a bad file."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from fabricmon.config import ConfigError, from_dict, load, loads
from helpers import REPO, fabricmon_command



def error_of(raw: object, check_paths: bool = True) -> ConfigError:
    with pytest.raises(ConfigError) as exc:
        from_dict(raw, check_paths=check_paths)
    return exc.value


def test_defaults_are_valid() -> None:
    cfg = from_dict({})
    assert cfg.port == 9879
    assert cfg.sysfs == "/sys"
    assert set(cfg.sources) >= {"sysfs", "ibstat", "perfquery", "iblinkinfo"}
    assert cfg.sources["perfquery"].enabled == "auto"
    assert cfg.sources["ibstat"].command == ("ibstat",)
    assert cfg.sources["sysfs"].command == ()
    assert cfg.expected_links == ()
    assert cfg.checks.compare_with_supported is True
    assert cfg.checks.down_severity == 2 and cfg.checks.saturation_severity == 0
    assert cfg.checks.counters["symbol_errors"].warning == 120.0
    assert cfg.checks.counters["link_flap"].window == 43200.0


def test_full_config_round_trip(tmp_path: Path) -> None:
    doc = {
        "server": {"address": "127.0.0.1", "port": 9100},
        "paths": {"sysfs": str(tmp_path), "procfs": str(tmp_path), "state_dir": str(tmp_path / "st")},
        "sources": {"ibstat": {"enabled": False}, "perfquery": {"enabled": True, "timeout": 3,
                                                               "command": ["/opt/ibdiags/perfquery"]},
                    "iblinkinfo": {"command": "iblinkinfo"}},
        "exclude_devices": ["mlx5_bond_*", "mlx5_1[0-9]"],
        "expected_links": [{"device": "mlx5_[0-7]", "width": "4x", "speed": "ndr"},
                           {"device": "mlx5_bond_0", "rate_gbps": 200, "link_layer": "ethernet"}],
        "checks": {"down_severity": "warning", "symbol_errors": {"window": 600, "critical": None}},
        "logging": {"level": "debug", "format": "json"},
    }
    f = tmp_path / "fabricmon.yml"
    f.write_text(yaml.safe_dump(doc))
    cfg = load(f)
    assert cfg.path == str(f)
    assert (cfg.address, cfg.port) == ("127.0.0.1", 9100)
    assert cfg.sources["ibstat"].enabled is False
    assert cfg.sources["perfquery"].enabled is True
    assert cfg.sources["perfquery"].timeout == 3.0
    assert cfg.sources["perfquery"].command == ("/opt/ibdiags/perfquery",)
    assert cfg.sources["iblinkinfo"].command == ("iblinkinfo",)
    assert cfg.device_excluded("mlx5_bond_0") and cfg.device_excluded("mlx5_12")
    assert not cfg.device_excluded("mlx5_1")
    e0, e1 = cfg.expected_links
    assert (e0.width, e0.speed, e0.rate_gbps, e0.link_layer, e0.port) == (4, "NDR", None, "InfiniBand", "*")
    assert e0.matches("mlx5_3", 1, "InfiniBand") and not e0.matches("mlx5_8", 1, "InfiniBand")
    assert not e0.matches("mlx5_3", 1, "Ethernet")
    assert (e1.rate_gbps, e1.link_layer) == (200.0, "Ethernet")
    assert e1.matches("mlx5_bond_0", 1, "Ethernet") and not e1.matches("mlx5_bond_0", 1, "InfiniBand")
    assert cfg.checks.down_severity == 1
    assert cfg.checks.counters["symbol_errors"].window == 600.0
    assert cfg.checks.counters["symbol_errors"].critical is None
    assert cfg.checks.counters["symbol_errors"].warning == 120.0
    assert (cfg.log_level, cfg.log_format) == ("debug", "json")


@pytest.mark.parametrize("raw,key,hint", [
    ({"sourcs": {}}, "sourcs", "did you mean 'sources'"),
    ({"server": {"prot": 1}}, "server.prot", "did you mean 'port'"),
    ({"sources": {"ibstat": {"enabeld": True}}}, "sources.ibstat.enabeld", "did you mean 'enabled'"),
    ({"sources": {"ibsta": {}}}, "sources.ibsta", "did you mean 'ibstat'"),
    ({"checks": {"symbol_eror": {}}}, "checks.symbol_eror", "did you mean 'symbol_errors'"),
    ({"expected_links": [{"device": "mlx5_*", "widht": "4X"}]}, "expected_links[0].widht",
     "did you mean 'width'"),
])
def test_unknown_key_names_it_and_suggests(raw: dict, key: str, hint: str) -> None:
    e = error_of(raw)
    assert e.key == key
    assert "unknown key" in str(e) and hint in str(e)
    assert key in str(e)


@pytest.mark.parametrize("raw,key", [
    ({"sources": {"sysfs": {"interval": "fast"}}}, "sources.sysfs.interval"),
    ({"sources": {"perfquery": {"timeout": True}}}, "sources.perfquery.timeout"),
    ({"sources": {"ibstat": {"timeout": 0}}}, "sources.ibstat.timeout"),
    ({"sources": {"ibstat": {"enabled": "yes"}}}, "sources.ibstat.enabled"),
    ({"sources": {"ibstat": {"command": []}}}, "sources.ibstat.command"),
    ({"sources": {"ibstat": {"command": ["ibstat", 3]}}}, "sources.ibstat.command"),
    ({"sources": {"ibstat": []}}, "sources.ibstat"),
    ({"server": {"port": "abc"}}, "server.port"),
    ({"server": {"port": True}}, "server.port"),
    ({"server": {"address": ""}}, "server.address"),
    ({"server": "0.0.0.0:9879"}, "server"),
    ({"exclude_devices": "mlx5_*"}, "exclude_devices"),
    ({"expected_links": {"device": "mlx5_*"}}, "expected_links"),
    ({"expected_links": [{"device": "mlx5_*", "rate_gbps": "400"}]}, "expected_links[0].rate_gbps"),
    ({"checks": {"compare_with_supported": "yes"}}, "checks.compare_with_supported"),
    ({"checks": {"symbol_errors": {"warning": -1}}}, "checks.symbol_errors.warning"),
    ({"checks": {"link_flap": {"window": 0}}}, "checks.link_flap.window"),
    ({"checks": {"down_severity": "fatal"}}, "checks.down_severity"),
    ({"logging": {"level": "verbose"}}, "logging.level"),
    ({"logging": {"format": "xml"}}, "logging.format"),
])
def test_wrong_type_or_value_names_the_key(raw: dict, key: str) -> None:
    e = error_of(raw)
    assert e.key == key
    assert str(e).startswith(f"config error at {key}:")


@pytest.mark.parametrize("raw,key", [
    ({"expected_links": [{"device": "mlx5_[0-7", "width": "4X"}]}, "expected_links[0].device"),
    ({"expected_links": [{"device": "mlx5_*", "port": "[1-", "width": "4X"}]}, "expected_links[0].port"),
    ({"exclude_devices": ["mlx5_bond_*", "mlx5_[0-7"]}, "exclude_devices[1]"),
])
def test_bad_glob_is_refused(raw: dict, key: str) -> None:
    e = error_of(raw)
    assert e.key == key
    assert "bad glob" in e.reason and "mlx5_[0-7" in str(e) or "[1-" in str(e)


@pytest.mark.parametrize("raw,key,words", [
    ({"expected_links": [{"device": "mlx5_*", "speed": "HDRX"}]}, "expected_links[0].speed", "NDR"),
    ({"expected_links": [{"device": "mlx5_*", "speed": 400}]}, "expected_links[0].speed", "unknown speed"),
    ({"expected_links": [{"device": "mlx5_*", "width": "5Y"}]}, "expected_links[0].width", "4X"),
    ({"expected_links": [{"device": "mlx5_*"}]}, "expected_links[0]", "width, speed, rate_gbps or count"),
    ({"expected_links": [{"width": "4X"}]}, "expected_links[0].device", "required"),
    ({"expected_links": [{"device": "mlx5_*", "width": "4X", "link_layer": "roce"}]},
     "expected_links[0].link_layer", "Ethernet"),
    ({"expected_links": [{"device": "a", "width": "4X"}, {"device": "b", "speed": "EDRR"}]},
     "expected_links[1].speed", "unknown speed"),
])
def test_bad_expectation(raw: dict, key: str, words: str) -> None:
    e = error_of(raw)
    assert e.key == key
    assert words in e.reason


@pytest.mark.parametrize("port", [-1, 65536, 70000])
def test_port_out_of_range(port: int) -> None:
    e = error_of({"server": {"port": port}})
    assert e.key == "server.port" and str(port) in e.reason


def test_bad_paths(tmp_path: Path) -> None:
    e = error_of({"paths": {"sysfs": str(tmp_path / "no-such-sys")}})
    assert e.key == "paths.sysfs" and "not an existing directory" in e.reason
    f = tmp_path / "a-file"
    f.write_text("")
    assert error_of({"paths": {"procfs": str(f)}}).key == "paths.procfs"
    # --replay does not check host paths
    assert from_dict({"paths": {"sysfs": str(tmp_path / "no-such-sys")}}, check_paths=False).sysfs.endswith("no-such-sys")
    e = error_of({"server": {"tls": {"cert_file": str(tmp_path / "c.pem"), "key_file": str(tmp_path / "k.pem")}}})
    assert e.key == "server.tls.cert_file"
    assert error_of({"server": {"tls": {"cert_file": "/x"}}}).key == "server.tls"


def test_top_level_must_be_a_mapping() -> None:
    assert error_of(["a", "b"]).key == ""
    assert "<top>" in str(error_of(["a"]))


def test_load_reports_yaml_syntax_with_line(tmp_path: Path) -> None:
    f = tmp_path / "bad.yml"
    f.write_text("server:\n  port: 9879\n  address: [unclosed\n")
    with pytest.raises(ConfigError) as exc:
        load(f)
    assert "invalid YAML" in str(exc.value) and "line" in str(exc.value)


def test_load_missing_file(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="cannot read config file"):
        load(tmp_path / "nope.yml")


def test_empty_file_gives_defaults(tmp_path: Path) -> None:
    f = tmp_path / "empty.yml"
    f.write_text("# nothing\n")
    assert load(f).port == 9879


# --- the CLI refuses to start --------------------------------------------------------------


def _fabricmon() -> list[str]:
    return fabricmon_command()


@pytest.mark.parametrize("text,key", [
    ("expected_links:\n  - device: 'mlx5_[0-7'\n    width: 4X\n", "expected_links[0].device"),
    ("sourcs:\n  ibstat: {enabled: false}\n", "sourcs"),
    ("server:\n  port: 99999\n", "server.port"),
    ("paths:\n  sysfs: /nonexistent/fabricmon-test-sys\n", "paths.sysfs"),
    ("expected_links:\n  - {device: 'mlx5_*', speed: NDR5}\n", "expected_links[0].speed"),
])
def test_run_with_bad_config_exits_2_naming_the_key(tmp_path: Path, text: str, key: str) -> None:
    f = tmp_path / "bad.yml"
    f.write_text(text)
    res = subprocess.run([*_fabricmon(), "run", "--config", str(f)], capture_output=True, text=True,
                         timeout=60, cwd=tmp_path)
    assert res.returncode == 2, res.stderr
    assert key in res.stderr
    assert "config error" in res.stderr
    assert "Traceback" not in res.stderr


def test_the_unresponsive_rule_is_validated() -> None:
    cfg = from_dict({}, check_paths=False)
    assert (cfg.fabric.unresponsive_sweeps, cfg.fabric.unresponsive_window) == (5, 7)      # OpenSM's 5 of 7
    assert from_dict({"fabric": {"unresponsive_sweeps": 3, "unresponsive_window": 3}},
                     check_paths=False).fabric.unresponsive_sweeps == 3
    assert error_of({"fabric": {"unresponsive_sweeps": 8}}, False).key == "fabric.unresponsive_sweeps"
    assert error_of({"fabric": {"unresponsive_sweeps": 0}}, False).key == "fabric.unresponsive_sweeps"
    assert error_of({"fabric": {"unresponsive_window": True}}, False).key == "fabric.unresponsive_window"
    assert error_of({"fabric": {"stale_sweeps": 3}}, False).key.startswith("fabric")       # the old key is gone


# --- one key per setting; the fabric keys ----------------------------------------------------


def test_the_sweep_interval_drives_the_sweep_and_the_jobs_lookup() -> None:
    """fabric.sweep_interval is the one key: the sweep and slurm_jobs (once per sweep) run at it,
    in the pipeline the collector builds, for both fabric kinds."""
    from fabricmon.host.bundle import ReplayIO
    from fabricmon.pipeline.fabric import fabric_pipeline
    from helpers import FIXTURES
    cfg = from_dict({"fabric": {"sweep_interval": 20, "sources": {"sweep": {"interval": 20}}}}, check_paths=False)
    pipe = fabric_pipeline(cfg, ReplayIO(FIXTURES / "fabric" / "fat-tree"))
    try:
        assert pipe.states["sweep"].interval == pipe.states["slurm_jobs"].interval == 20.0
    finally:
        pipe.close()
    eth = from_dict({"fabric": {"kind": "ethernet", "sweep_interval": 5, "discovery_interval": 50,
                                "ethernet": {"switches": ["sw1"], "snmp": {"community": "x"}}}}, check_paths=False)
    assert (eth.fabric.sources["sweep"].interval, eth.fabric.sources["discovery"].interval) == (5.0, 50.0)


@pytest.mark.parametrize("fabric,key,other", [
    ({"sources": {"sweep": {"interval": 30}}}, "fabric.sources.sweep.interval", "fabric.sweep_interval (15)"),
    ({"sweep_interval": 10, "sources": {"sweep": {"interval": 30}}}, "fabric.sources.sweep.interval",
     "fabric.sweep_interval (10)"),
    ({"sources": {"slurm_jobs": {"interval": 60}}}, "fabric.sources.slurm_jobs.interval", "fabric.sweep_interval"),
    ({"sources": {"discovery": {"interval": 60}}}, "fabric.sources.discovery.interval",
     "fabric.discovery_interval (300)"),
    ({"routing_interval": 100, "sources": {"routing": {"interval": 60}}}, "fabric.sources.routing.interval",
     "fabric.routing_interval (100)"),
    ({"timeouts": {"sweep": 40}, "sources": {"sweep": {"timeout": 50}}}, "fabric.sources.sweep.timeout",
     "fabric.timeouts.sweep (40)"),
    ({"kind": "ethernet", "sweep_interval": 5, "sources": {"sweep": {"interval": 6}},
      "ethernet": {"switches": ["sw1"], "snmp": {"community": "x"}}}, "fabric.sources.sweep.interval",
     "fabric.sweep_interval (5)"),
])
def test_a_per_source_setting_that_contradicts_the_fabric_key_names_both(fabric: dict, key: str, other: str) -> None:
    e = error_of({"fabric": fabric}, check_paths=False)
    assert e.key == key and other in e.reason and "contradicts" in e.reason, e


def test_a_per_source_setting_that_agrees_is_accepted() -> None:
    cfg = from_dict({"fabric": {"sweep_interval": 30, "timeouts": {"sm": 4},
                                "sources": {"sweep": {"interval": 30}, "sm": {"timeout": 4}}}})
    assert (cfg.fabric.sources["sweep"].interval, cfg.fabric.sources["sm"].timeout) == (30.0, 4.0)
    assert cfg.fabric.sources["slurm_jobs"].interval == 30.0
    assert from_dict({"fabric": {"sources": {"sm": {"timeout": 7}}}}).fabric.sources["sm"].timeout == 7.0


def test_the_unresponsive_rule_keys() -> None:
    f = from_dict({}).fabric
    assert (f.unresponsive_sweeps, f.unresponsive_window) == (5, 7)
    f = from_dict({"fabric": {"unresponsive_sweeps": 2, "unresponsive_window": 3}}).fabric
    assert (f.unresponsive_sweeps, f.unresponsive_window) == (2, 3)
    e = error_of({"fabric": {"unresponsive_sweeps": 8}})
    assert e.key == "fabric.unresponsive_sweeps" and "fabric.unresponsive_window (7)" in e.reason
    assert error_of({"fabric": {"unresponsive_window": 0}}).key == "fabric.unresponsive_window"
    assert error_of({"fabric": {"stale_sweeps": 3}}).key == "fabric.stale_sweeps"     # replaced by the two above


def test_the_ethernet_section_lives_with_the_ethernet_sources() -> None:
    from fabricmon.sources.ethernet.settings import DEFAULT_EXCLUDE_PORTS, EthernetConfig
    # an InfiniBand config does not import the Ethernet package, and reads the Ethernet defaults if asked
    code = ("import sys; from fabricmon.config import from_dict; c = from_dict({}); "
            "print('fabricmon.sources.ethernet' in sys.modules, c.fabric.ethernet.concurrency)")
    res = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60, cwd=REPO)
    assert res.stdout.split() == ["False", "16"], res.stderr
    eth = {"switches": ["sw1"], "snmp": {"community": "x"}}
    cfg = from_dict({"fabric": {"kind": "ethernet", "ethernet": eth}})
    assert isinstance(cfg.fabric.ethernet, EthernetConfig)
    assert cfg.fabric.ethernet.exclude_ports == DEFAULT_EXCLUDE_PORTS
    names = ("eth0", "mgmt0", "Management1", "em0", "Ethernet1", "Ethernet10")
    assert tuple(p for p in names if any(re.fullmatch(r, p) for r in DEFAULT_EXCLUDE_PORTS)) == names[:4]
    cfg = from_dict({"fabric": {"kind": "ethernet", "ethernet": {**eth, "exclude_ports": ["oob.*"]}}})
    assert cfg.fabric.ethernet.exclude_ports == ("oob.*",)
    e = error_of({"fabric": {"kind": "ethernet", "ethernet": {**eth, "exclude_ports": ["mgmt", "("]}}})
    assert e.key == "fabric.ethernet.exclude_ports[1]" and "bad regular expression" in e.reason
    e = error_of({"fabric": {"kind": "ethernet", "ethernet": {**eth, "concurency": 3}}})
    assert e.key == "fabric.ethernet.concurency" and "did you mean 'concurrency'" in e.reason


def test_the_pfc_storm_thresholds_are_the_checks() -> None:
    """fabric.pfc_storm (the pfc_storm check's, whatever sweep reads pause frames); the keys it had
    in the Ethernet section are refused with where they went."""
    from fabricmon.checks.fabric_pfc import PfcStormSettings
    assert from_dict({}).fabric.pfc_storm == PfcStormSettings(1000.0, 2)
    set_ = from_dict({"fabric": {"pfc_storm": {"rate": 50, "sweeps": 3}}}).fabric.pfc_storm
    assert set_ == PfcStormSettings(50.0, 3)
    eth = {"switches": ["sw1"], "snmp": {"community": "x"}, "pfc_storm_sweeps": 3}
    e = error_of({"fabric": {"kind": "ethernet", "ethernet": eth}})
    assert e.key == "fabric.ethernet.pfc_storm_sweeps" and "moved to fabric.pfc_storm.sweeps" in e.reason
    e = error_of({"fabric": {"pfc_storm": {"sweeps": 0}}})
    assert e.key == "fabric.pfc_storm.sweeps" and "1-1000" in e.reason


@pytest.mark.parametrize("raw,key,words", [
    ({"fabric": {"port": 70000}}, "fabric.port", "0-65535"),
    ({"fabric": {"concurrency": 3}}, "fabric.concurrency", "1-2"),
    ({"fabric": {"mad_timeout_ms": 5}}, "fabric.mad_timeout_ms", "10-60000"),
    ({"fabric": {"thresholds": {"utilisation_floor": 1.5}}}, "fabric.thresholds.utilisation_floor",
     "share of link rate must be <= 1"),
    ({"fabric": {"shard": "4/4"}}, "fabric.shard", "0 <= i < n"),
    ({"fabric": {"timeouts": {"sweeps": 3}}}, "fabric.timeouts.sweeps", "did you mean 'sweep'"),
    ({"slurm": {"max_job_switch_series": -1}}, "slurm.max_job_switch_series", ">= 0"),
    ({"server": {"max_connections": 4}}, "server.max_connections", "8-65536"),
    ({"paths": {"tool_dirs": ["sbin"]}}, "paths.tool_dirs[0]", "absolute directory"),
])
def test_bounds_name_the_key_and_the_range(raw: dict, key: str, words: str) -> None:
    e = error_of(raw, check_paths=False)
    assert e.key == key and words in e.reason, e


def test_a_source_declares_its_own_keys_where_it_is_registered() -> None:
    """register(..., options=Schema(...)): the keys are validated under sources.<name> beside
    enabled/interval/timeout/command, and arrive built in SourceConfig.options."""
    from dataclasses import dataclass

    from fabricmon.registry import source_schema
    from fabricmon.registry import SourceSpec
    from fabricmon.schema import Context, Schema, from_class, integer, number

    @dataclass(frozen=True)
    class Budget:
        ber_budget: float = 1e-12
        lanes: int = 4

    spec = SourceSpec("optics", object, "auto", 60.0, 10.0, ("mlxlink",), (), False, "node", 1, None,
                      Schema((number("ber_budget", 1e-12, "pre-FEC BER budget", lo=0),
                              integer("lanes", 4, "lanes per port", lo=1, hi=8)), build=from_class(Budget)))
    schema = source_schema(spec)
    sc = schema.load({"interval": 30, "lanes": 8}, "sources.optics", Context())
    assert (sc.interval, sc.command, sc.options) == (30.0, ("mlxlink",), Budget(1e-12, 8))
    assert sc.settings(Budget).lanes == 8            # what the source reads: its own type
    with pytest.raises(TypeError, match="source optics: its options are Budget, not int"):
        sc.settings(int)
    assert schema.load(None, "sources.optics", Context()).options == Budget()
    with pytest.raises(ConfigError) as exc:
        schema.load({"lanes": 9}, "sources.optics", Context())
    assert exc.value.key == "sources.optics.lanes" and "1-8" in exc.value.reason
    with pytest.raises(ConfigError) as exc:
        schema.load({"ber_budjet": 1}, "sources.optics", Context())
    assert exc.value.key == "sources.optics.ber_budjet" and "did you mean 'ber_budget'" in exc.value.reason


def test_fabric_collector_refuses_two_values_for_one_setting(tmp_path: Path) -> None:
    f = tmp_path / "bad.yml"
    f.write_text("fabric:\n  sweep_interval: 15\n  sources:\n    sweep: {interval: 30}\n")
    res = subprocess.run([*_fabricmon(), "fabric", "once", "--config", str(f)], capture_output=True, text=True,
                         timeout=60, cwd=tmp_path)
    assert res.returncode == 2, res.stderr
    assert "config error at fabric.sources.sweep.interval: 30 contradicts fabric.sweep_interval (15)" in res.stderr
    assert "Traceback" not in res.stderr


def test_uplinks_critical_fraction_is_a_share() -> None:
    """fabric.uplinks_critical_fraction (issue 27): from this share of its expected uplinks missing a switch's
    uplinks check is CRITICAL; a share outside 0-1 is an error naming the key."""
    assert from_dict({}, check_paths=False).fabric.uplinks_critical_fraction == 0.5
    assert from_dict({"fabric": {"uplinks_critical_fraction": 1}}, check_paths=False).fabric.uplinks_critical_fraction == 1.0
    for bad in (1.5, -0.1, "half", True):
        assert error_of({"fabric": {"uplinks_critical_fraction": bad}}, False).key == "fabric.uplinks_critical_fraction"


# --- a key given twice (issue 53) ---------------------------------------------------------

EXAMPLE = REPO / "fabricmon" / "deploy" / "fabricmon.yml"


def _uncommented(text: str, *headings: str) -> str:
    """The example config with the commented-out blocks under these `# --- ... ---` headings uncommented."""
    out, on = [], False
    for line in text.splitlines():
        if line.startswith("# --- "):
            on = any(h in line for h in headings)
        elif on and line.startswith("# "):
            line = line[2:]
        elif not line.strip():
            on = False
        out.append(line)
    return "\n".join(out) + "\n"


def _line_of(text: str, needle: str, nth: int = 0) -> int:
    return [i for i, line in enumerate(text.splitlines(), 1) if line == needle][nth]


@pytest.mark.parametrize("keep_empty", [True, False])
def test_the_example_config_with_two_expected_links_examples_names_the_key_and_both_lines(keep_empty: bool) -> None:
    """Uncommenting both shipped `expected_links` examples used to keep the last, without a word."""
    text = _uncommented(EXAMPLE.read_text(), "NDR InfiniBand", "HDR InfiniBand")
    if not keep_empty:          # the operator replaced the empty list by the first example
        text = text.replace("\nexpected_links: []\n", "\n")
    first, second = (_line_of(text, "expected_links:", i) for i in (0, 1))
    if keep_empty:
        first, second = _line_of(text, "expected_links: []"), first
    with pytest.raises(ConfigError) as exc:
        loads(text, str(EXAMPLE), check_paths=False)
    assert exc.value.key == "expected_links"
    assert str(exc.value) == f"config error at expected_links: duplicate key (lines {first} and {second})"
    # one example uncommented in place of the empty list loads
    one = _uncommented(EXAMPLE.read_text(), "NDR InfiniBand").replace("\nexpected_links: []\n", "\n")
    assert loads(one, str(EXAMPLE), check_paths=False).expected_links[0].speed == "NDR"


@pytest.mark.parametrize("text,key,lines", [
    ("checks:\n  link_flap: {window: 600}\n  down_severity: warning\n  link_flap: {window: 60}\n",
     "checks.link_flap", (2, 4)),
    ("expected_links:\n  - device: mlx5_0\n    speed: NDR\n    speed: HDR\n", "expected_links[0].speed", (3, 4)),
    ("fabric:\n  kind: ethernet\n  ethernet:\n    switches:\n      - {address: 10.0.0.1}\n"
     "      - {address: 10.0.0.2, name: a, name: b}\n", "fabric.ethernet.switches[1].name", (6, 6)),
    ("server: {port: 9100}\nlogging: {level: info}\nserver: {port: 9200}\n", "server", (1, 3)),
])
def test_a_nested_duplicate_names_its_dotted_key_and_both_lines(text: str, key: str, lines: tuple[int, int]) -> None:
    with pytest.raises(ConfigError) as exc:
        loads(text, "f.yml", check_paths=False)
    assert exc.value.key == key
    assert exc.value.reason == f"duplicate key (lines {lines[0]} and {lines[1]})"


def test_the_same_key_in_different_mappings_or_over_a_merge_is_no_duplicate() -> None:
    text = ("checks:\n  link_flap: &flap {window: 600, warning: 1, critical: 3}\n"
            "  receive_errors: {window: 600, warning: 1, critical: 3}\n"
            "  link_error_recovery:\n    <<: *flap\n    window: 60\n")
    cfg = loads(text, "f.yml", check_paths=False)
    assert cfg.checks.counters["link_error_recovery"].window == 60.0     # overrides the merged value
    assert cfg.checks.counters["link_flap"].window == 600.0
    assert loads(EXAMPLE.read_text(), str(EXAMPLE), check_paths=False).expected_links == ()


def test_the_web_config_refuses_a_duplicate_too() -> None:
    from fabricmon.serve import webconfig
    with pytest.raises(ConfigError) as exc:
        webconfig.loads("basic_auth_users:\n  alice: $2b$x\n  bob: $2b$y\n  alice: $2b$z\n", "/etc/fabricmon/web.yml",
                        check_paths=False)
    assert str(exc.value) == ("config error at server.web_config_file: basic_auth_users.alice: "
                              "duplicate key (lines 2 and 4)")


def test_check_prints_the_duplicate_as_its_one_line(tmp_path: Path) -> None:
    f = tmp_path / "fabricmon.yml"
    f.write_text(_uncommented(EXAMPLE.read_text(), "NDR InfiniBand", "HDR InfiniBand"))
    res = subprocess.run([*_fabricmon(), "check", "--no-state", "--config", str(f)], capture_output=True, text=True,
                         timeout=60, cwd=tmp_path)
    lines = (_line_of(f.read_text(), "expected_links: []"), _line_of(f.read_text(), "expected_links:"))
    assert res.returncode == 3, res.stdout + res.stderr
    assert res.stdout.splitlines() == [f"FABRICMON UNKNOWN - config error at expected_links: duplicate key "
                                       f"(lines {lines[0]} and {lines[1]})"]
    assert "Traceback" not in res.stderr
