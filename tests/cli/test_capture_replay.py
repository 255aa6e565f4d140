"""`fabricmon capture` records every raw source output; `--replay` drives the same pipeline."""

from __future__ import annotations

import json
import subprocess
import sys

import yaml
from prometheus_client.parser import text_string_to_metric_families

from fabricmon.sim.fabric import fat_tree_netfile

HOST = "node02 mlx5_0"


def port_samples(text: str) -> dict:
    out = {}
    for fam in text_string_to_metric_families(text):
        if fam.name.startswith(("fabricmon_ib_", "fabricmon_check_status")):
            for s in fam.samples:
                out[(s.name, tuple(sorted(s.labels.items())))] = s.value
    return out


def fm(*args, env=None):
    return subprocess.run([sys.executable, "-m", "fabricmon", *args], env=env, capture_output=True,
                          text=True, timeout=60)


def test_capture_then_replay_gives_the_same_metrics(sim_fabric, tmp_path):
    fab = sim_fabric(fat_tree_netfile(spines=1, leaves=1, hosts_per_leaf=2, degraded={f"{HOST}[1]": "1x"}))
    fab.set_counter(HOST, 1, "PortCounters.SymbolErrorCounter", 42)
    (tmp_path / "sys").mkdir()
    cfg = tmp_path / "cfg.yml"
    cfg.write_text(yaml.safe_dump({"paths": {"sysfs": str(tmp_path / "sys")},
                                   "expected_links": [{"device": "*", "width": "4X", "speed": "HDR"}]}))
    bundle = tmp_path / "bundle"
    res = fm("capture", str(bundle), "--config", str(cfg), env=fab.env(HOST))
    assert res.returncode == 0, res.stderr
    manifest = json.loads((bundle / "bundle.json").read_text())
    argvs = [" ".join(c["argv"]) for c in manifest["commands"]]
    assert "ibstat" in argvs
    assert any(a.startswith("perfquery -x -C ibsim0 -P 1") for a in argvs)
    assert any(a.startswith("iblinkinfo -C ibsim0 -P 1 -D 0") for a in argvs)
    assert (bundle / "config.yml").is_file()

    fab.stop()                                      # the replay needs no fabric at all
    replay = fm("once", "--replay", str(bundle))    # uses the bundle's config.yml
    assert replay.returncode == 0, replay.stderr
    # the capture wrote the metrics it saw live; traffic counters move with every MAD, so
    # compare with that snapshot rather than with a second live poll
    a, b = port_samples((bundle / "metrics.prom").read_text()), port_samples(replay.stdout)
    assert a == b
    assert b[("fabricmon_ib_port_symbol_errors_total", (("device", "ibsim0"), ("port", "1")))] == 42
    chk = fm("check", "--replay", str(bundle))
    assert chk.returncode == 2
    assert "ibsim0 port 1 runs at 1X HDR" in chk.stdout


def test_replay_of_a_missing_bundle_is_a_clear_error(tmp_path):
    res = fm("once", "--replay", str(tmp_path / "nope"))
    assert res.returncode == 2
    assert "not a fabricmon bundle" in res.stderr
