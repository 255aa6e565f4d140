"""Bad configs: a clear error naming the key, and exit 2 (3, UNKNOWN, for `check`)."""

from __future__ import annotations

import subprocess
import sys

import pytest


@pytest.mark.parametrize("text, key, reason", [
    ("sources:\n  ibstat:\n    timeout: soon\n", "sources.ibstat.timeout", "expected a number"),
    ("sources:\n  ibstat:\n    timout: 5\n", "sources.ibstat.timout", "did you mean 'timeout'"),
    ("expected_link: []\n", "expected_link", "did you mean 'expected_links'"),
    ("expected_links:\n  - device: 'mlx5_[0-7'\n    width: 4X\n", "expected_links[0].device", "unclosed '['"),
    ("expected_links:\n  - device: 'mlx5_*'\n    speed: ZDR\n", "expected_links[0].speed", "unknown speed"),
    ("paths:\n  sysfs: /nonexistent/sys\n", "paths.sysfs", "not an existing directory"),
    ("server:\n  port: 99999\n", "server.port", "0-65535"),
    ("server: [1, 2]\n", "server", "expected a mapping"),
    ("exclude_devices: mlx5_0\n", "exclude_devices", "expected a list"),
    ("sources: {perfquery: {enabled: sometimes}}\n", "sources.perfquery.enabled", "true, false or 'auto'"),
    ("a: [unclosed\n", "", "invalid YAML"),
], ids=lambda v: v if isinstance(v, str) and len(v) < 30 else None)
@pytest.mark.parametrize("command", ["run", "once", "check"])
def test_bad_config_exits_2_naming_the_key(tmp_path, text, key, reason, command):
    cfg = tmp_path / "bad.yml"
    cfg.write_text(text)
    res = subprocess.run([sys.executable, "-m", "fabricmon", command, "--config", str(cfg)],
                         capture_output=True, text=True, timeout=30)
    if command == "check":      # Nagios/NHC: "could not check" is UNKNOWN, never CRITICAL
        assert res.returncode == 3
        assert res.stdout.startswith(f"FABRICMON UNKNOWN - config error at {key or '<top>'}:")
    else:
        assert res.returncode == 2
    assert f"config error at {key or '<top>'}:" in res.stderr
    assert reason in res.stderr
    assert "Traceback" not in res.stderr


def test_missing_config_file(tmp_path):
    res = subprocess.run([sys.executable, "-m", "fabricmon", "once", "--config", str(tmp_path / "nope.yml")],
                         capture_output=True, text=True, timeout=30)
    assert res.returncode == 2
    assert "cannot read config file" in res.stderr
