"""fabricmon/deploy/systemd/fabricmon.service and fabricmon-fabric.service: `systemd-analyze verify` without a single warning, a low exposure score from
`systemd-analyze security --offline`, and the least-privilege settings docs/security.md promises."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

from ship_helpers import ROOT, require_tool

import pytest

UNIT = ROOT / "fabricmon" / "deploy" / "systemd" / "fabricmon.service"
DEFAULTS = ROOT / "fabricmon" / "deploy" / "systemd" / "fabricmon.default"
FABRIC_UNIT = ROOT / "fabricmon" / "deploy" / "systemd" / "fabricmon-fabric.service"
FABRIC_DEFAULTS = ROOT / "fabricmon" / "deploy" / "systemd" / "fabricmon-fabric.default"
INSTALLED = "/opt/fabricmon/bin/fabricmon"
UNITS = pytest.mark.parametrize("unit_file", [UNIT, FABRIC_UNIT], ids=["node", "fabric"])


def directives(text: str) -> list[tuple[str, str]]:
    return [tuple(line.split("=", 1)) for line in text.splitlines() if re.match(r"^[A-Za-z_]+=", line)]


def local_unit(tmp_path: Path, unit_file: Path = UNIT) -> Path:
    """The unit with ExecStart pointing at this checkout's fabricmon (verify needs an executable there)."""
    exe = Path(sys.executable).parent / "fabricmon"
    assert exe.is_file(), f"{exe} missing: run the tests from the venv (make venv)"
    text = unit_file.read_text()
    assert INSTALLED in text
    out = tmp_path / unit_file.name
    out.write_text(text.replace(INSTALLED, str(exe)))
    return out


@UNITS
def test_systemd_analyze_verify_is_clean(tmp_path, unit_file):
    tool = require_tool("systemd-analyze", "systemd")
    unit = local_unit(tmp_path, unit_file)
    res = subprocess.run([tool, "verify", "--man=no", str(unit)], capture_output=True, text=True, timeout=60)
    # verify exits 0 on an unknown key or a bad value ("..., ignoring"): any line about our unit is a failure
    ours = [l for l in (res.stdout + res.stderr).splitlines() if "fabricmon" in l]
    assert res.returncode == 0 and not ours, res.stdout + res.stderr


def test_verify_catches_a_broken_unit(tmp_path):
    """The check above has teeth: a typo in a hardening key is reported."""
    tool = require_tool("systemd-analyze", "systemd")
    unit = local_unit(tmp_path)
    unit.write_text(unit.read_text().replace("ProtectSystem=strict", "ProtectSytem=strict"))
    res = subprocess.run([tool, "verify", "--man=no", str(unit)], capture_output=True, text=True, timeout=60)
    assert "Unknown key 'ProtectSytem'" in res.stdout + res.stderr


@UNITS
def test_security_exposure_is_low(tmp_path, unit_file):
    tool = require_tool("systemd-analyze", "systemd")
    unit = local_unit(tmp_path, unit_file)
    # --threshold is the exposure x 10: fail above 2.0 ("OK"; 10.0 is "UNSAFE")
    res = subprocess.run([tool, "security", "--offline=true", "--threshold=20", "--no-pager", str(unit)],
                         capture_output=True, text=True, timeout=60)
    assert res.returncode == 0, res.stdout[-3000:] + res.stderr
    assert re.search(rf"Overall exposure level for {unit_file.name}: [0-1]\.\d OK", res.stdout), res.stdout[-500:]


def test_least_privilege_settings():
    d = directives(UNIT.read_text())
    kv = {}
    for k, v in d:
        kv.setdefault(k, []).append(v)
    want = {"Restart": "on-failure", "User": "fabricmon", "SupplementaryGroups": "rdma", "ProtectSystem": "strict",
            "ProtectHome": "yes", "NoNewPrivileges": "yes", "PrivateTmp": "yes", "StateDirectory": "fabricmon",
            "DevicePolicy": "closed", "CapabilityBoundingSet": "", "AmbientCapabilities": "",
            "EnvironmentFile": "-/etc/default/fabricmon", "RestartPreventExitStatus": "2", "LimitNOFILE": "8192"}
    for k, v in want.items():
        assert kv.get(k) == [v], (k, kv.get(k))
    assert "char-infiniband_mad rw" in kv["DeviceAllow"]
    # PrivateDevices= would hide /dev/infiniband; PrivateUsers= would drop the rdma group
    assert "PrivateDevices" not in kv and "PrivateUsers" not in kv
    assert kv["ExecStart"] == [f"{INSTALLED} run $FABRICMON_ARGS"]


def test_environment_file_sets_the_arguments():
    d = dict(directives(DEFAULTS.read_text()))
    assert d == {"FABRICMON_ARGS": '""'}


def test_fabric_unit_least_privilege():
    """The collector's unit: the node unit's hardening, the umad devices only (no NVIDIA nodes, no netlink)."""
    kv = {}
    for k, v in directives(FABRIC_UNIT.read_text()):
        kv.setdefault(k, []).append(v)
    node = {}
    for k, v in directives(UNIT.read_text()):
        node.setdefault(k, []).append(v)
    for k in ("Restart", "User", "SupplementaryGroups", "ProtectSystem", "ProtectHome", "NoNewPrivileges",
              "PrivateTmp", "StateDirectory", "DevicePolicy", "CapabilityBoundingSet", "AmbientCapabilities",
              "RestartPreventExitStatus", "SystemCallFilter", "ProtectKernelModules", "RestrictNamespaces",
              "LimitNOFILE"):
        assert kv.get(k) == node[k], (k, kv.get(k))
    assert kv["DeviceAllow"] == ["char-infiniband_mad rw"]
    assert kv["RestrictAddressFamilies"] == ["AF_UNIX AF_INET AF_INET6"]
    assert "PrivateDevices" not in kv and "PrivateUsers" not in kv
    assert kv["EnvironmentFile"] == ["-/etc/default/fabricmon-fabric"]
    assert kv["ExecStart"] == [f"{INSTALLED} fabric run $FABRICMON_FABRIC_ARGS"]
    assert dict(directives(FABRIC_DEFAULTS.read_text())) == {"FABRICMON_FABRIC_ARGS": '""'}


def test_installed_files_name_only_installed_paths():
    """Issue 41.6: what `fabricmon install` writes under /etc names no path of the source tree
    (fabricmon/deploy/...), which an operator who installed the wheel does not have."""
    shipped = [DEFAULTS, FABRIC_DEFAULTS, UNIT, FABRIC_UNIT, ROOT / "fabricmon" / "deploy" / "fabricmon.yml"]
    for f in shipped:
        text = f.read_text()
        assert "fabricmon/deploy" not in text and "tests/" not in text, f.name
    assert "fabricmon install --print config" in DEFAULTS.read_text() + FABRIC_DEFAULTS.read_text()
