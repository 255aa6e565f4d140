"""The README's deployment section stays true to the shipped files."""

from __future__ import annotations

import re

from ship_helpers import ROOT, load_generator

README = (ROOT / "README.md").read_text()
build_rules = load_generator("prometheus/build_rules.py")


def test_linked_files_exist():
    for path in re.findall(r"\]\(((?:systemd|prometheus|grafana|docs|contrib|examples)/[^)#]+)\)", README):
        assert (ROOT / path).is_file(), path


def test_scrape_job_is_the_rules_job():
    assert f"job_name: {build_rules.JOB}\n" in README
    assert f'absent(up{{job="{build_rules.JOB}"}})' in (ROOT / "prometheus" / "fabricmon.rules.yml").read_text()


def test_unit_path_matches_the_install_steps():
    unit = (ROOT / "systemd" / "fabricmon.service").read_text()
    exe = re.search(r"^ExecStart=(\S+)", unit, re.M).group(1)
    assert exe == "/opt/fabricmon/bin/fabricmon" and "python3 -m venv /opt/fabricmon" in README
