"""Keep the README and the example config true to the code."""

from __future__ import annotations

import re
from pathlib import Path

from fabricmon.config import COUNTER_CHECKS, load
from helpers import ROOT



def test_example_config_is_valid():
    cfg = load(ROOT / "examples" / "fabricmon.yml", check_paths=False)
    assert cfg.port == 9879
    assert cfg.expected_links[0].width == 4


def test_every_exported_metric_is_documented(tmp_path):
    import sys
    from fabricmon.sim import sysfs_tree as nodetree
    from fabricmon.pipeline import Pipeline
    from fabricmon.config import from_dict
    from fabricmon.exporter import render
    from fabricmon.host import LiveIO

    nodetree.build(tmp_path, 2)
    cfg = from_dict({"paths": {"sysfs": str(tmp_path)},
                     "sources": {n: {"enabled": False} for n in ("ibstat", "perfquery", "iblinkinfo")}})
    col = Pipeline(cfg, LiveIO(cfg.sysfs, cfg.procfs))
    text = render(col.collect()).decode()
    col.close()
    readme = (ROOT / "README.md").read_text()
    names = set(re.findall(r"^# TYPE (\S+) ", text, re.M))
    assert names
    missing = []
    for name in names:
        stem = name
        if f"`{name}" in readme or f"`{name}_total`" in readme:
            continue
        # families documented in a combined row, e.g. `..._transmit_bytes_total`, `_receive_bytes_total`
        short = "_" + stem.removeprefix("fabricmon_ib_port_").removesuffix("_total") + "_total`"
        if short in readme:
            continue
        missing.append(name)
    assert not missing, f"metrics missing from README: {missing}"


def test_every_counter_check_is_documented():
    readme = (ROOT / "README.md").read_text()
    for name in COUNTER_CHECKS:
        assert f"| `{name}` |" in readme
