"""Keep the README, the reference in docs/ and the example config true to the code."""

from __future__ import annotations

import dataclasses
import re
from pathlib import Path

from fabricmon.config import load
from fabricmon.checks.settings import COUNTER_CHECKS
from helpers import ROOT, skip_without_captures



EXAMPLE = ROOT / "fabricmon" / "deploy" / "fabricmon.yml"


def example_blocks() -> dict[str, str]:
    """The commented `expected_links` examples of the example config, uncommented, by title."""
    blocks, title, lines = {}, None, []
    for ln in EXAMPLE.read_text().splitlines() + [""]:
        m = re.match(r"^# --- (.+) ---$", ln)
        if m:
            title, lines = m.group(1), []
        elif title and ln.startswith("#"):
            lines.append(ln[2:])
        elif title:
            blocks[title] = "\n".join(lines) + "\n"
            title = None
    return blocks


def test_example_config_is_valid_and_expects_nothing():
    """Copied to /etc as it is, it must not turn a healthy node of any fabric CRITICAL."""
    cfg = load(EXAMPLE, check_paths=False)
    assert cfg.port == 9879
    assert cfg.expected_links == ()
    assert cfg.sources["ibstat"].enabled == "auto" and cfg.sources["iblinkinfo"].enabled == "auto"
    # every value it shows is the default
    assert dataclasses.replace(cfg, path=None) == load(None, check_paths=False)


def test_example_config_has_a_valid_commented_example_per_common_fabric():
    import yaml
    from fabricmon.config import from_dict
    blocks = example_blocks()
    titles = " | ".join(blocks)
    for fabric in ("NDR InfiniBand", "HDR InfiniBand", "RoCE 400GbE", "RoCE 200GbE"):
        assert fabric in titles, f"no commented example for {fabric}"
    for title, text in blocks.items():
        cfg = from_dict(yaml.safe_load(text), check_paths=False)
        assert len(cfg.expected_links) == 1 and cfg.expected_links[0].count, title


def test_the_ndr_example_fits_the_recorded_h100_node(tmp_path):
    from helpers import CAPTURES
    import yaml
    from fabricmon.config import from_dict
    from fabricmon.host import LiveIO
    from fabricmon.pipeline.scheduler import Pipeline
    h100 = CAPTURES / "sysfs" / "leptonai-gpud__sys-class-infiniband-h100.0"
    skip_without_captures(h100)
    (tmp_path / "class").mkdir()
    (tmp_path / "class" / "infiniband").symlink_to(h100)
    ndr = next(text for title, text in example_blocks().items() if title.startswith("NDR"))
    doc = yaml.safe_load(ndr)
    doc["paths"] = {"sysfs": str(tmp_path), "tool_dirs": []}
    doc["sources"] = {n: {"enabled": False} for n in ("ibstat", "perfquery", "iblinkinfo", "mlnx_qos", "ethtool")}
    cfg = from_dict(doc)
    pipe = Pipeline(cfg, LiveIO(cfg.sysfs, cfg.procfs, tool_dirs=[]))
    try:
        snap = pipe.collect()
    finally:
        pipe.close()
    bad = [f.line() for f in snap.findings if f.status]
    assert bad == []
    assert any(f.check == "expected_inventory" and "8 port(s) found" in f.message for f in snap.findings)


def test_every_exported_metric_is_documented(tmp_path):
    import sys
    from fabricmon.sim import sysfs_tree as nodetree
    from fabricmon.pipeline.scheduler import Pipeline
    from fabricmon.config import from_dict
    from fabricmon.exporter import render
    from fabricmon.host import LiveIO

    nodetree.build(tmp_path, 2)
    cfg = from_dict({"paths": {"sysfs": str(tmp_path)},
                     "sources": {n: {"enabled": False} for n in ("ibstat", "perfquery", "iblinkinfo")}})
    col = Pipeline(cfg, LiveIO(cfg.sysfs, cfg.procfs))
    text = render(col.collect()).decode()
    col.close()
    doc = (ROOT / "docs" / "metrics.md").read_text()
    names = set(re.findall(r"^# TYPE (\S+) ", text, re.M))
    assert names
    # every exported family is a row of the generated reference (tests/exporter/test_metrics_doc.py)
    missing = sorted(n for n in names if f"| `{n}` |" not in doc and f"| `{n}_total` |" not in doc
                     and f"| `{n}` (`_bucket`" not in doc)
    assert not missing, f"metrics missing from docs/metrics.md: {missing}"


def test_every_counter_check_is_documented():
    readme = (ROOT / "docs" / "checks.md").read_text()
    for name in COUNTER_CHECKS:
        assert f"| `{name}` |" in readme


def test_the_readme_configuration_essentials_are_a_valid_config():
    """The YAML block under "Configuration essentials" loads, and says what it claims."""
    import yaml
    from fabricmon.config import from_dict
    readme = (ROOT / "README.md").read_text()
    section = readme.split("## Configuration essentials", 1)[1]
    block = re.search(r"```yaml\n(.*?)```", section, re.S).group(1)
    cfg = from_dict(yaml.safe_load(block), check_paths=False)
    assert cfg.expected_links and cfg.expected_links[0].count == 8


def test_the_readme_answers_a_new_users_first_questions():
    """Issue 41.6: how long `make test` takes, how to run the demo for a bounded time, and a venv the
    service user can run (the distribution's Python, not a pyenv/conda one under a home directory)."""
    readme = (ROOT / "README.md").read_text()
    assert 'make demo DEMO_ARGS="--duration 60"' in readme
    assert re.search(r"# \(about [\d,]+ tests, \d+ minutes on a 2-core machine\):\nmake test\n", readme)
    venvs = re.findall(r"^(\S*python3) -m venv /opt/fabricmon", readme, re.M)
    assert venvs and set(venvs) == {"/usr/bin/python3"}, venvs
    cli = (ROOT / "docs" / "cli.md").read_text()
    row = next(ln for ln in cli.splitlines() if ln.startswith("| `status` |"))
    assert "`3` UNKNOWN" in row and "| `unknown` |" in cli
