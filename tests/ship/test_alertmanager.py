"""The shipped Alertmanager example (fabricmon/deploy/alertmanager/, issue 27): valid for the real amtool, handed
out by `fabricmon install --print alertmanager DIR` (and `all`), and written against labels the shipped rules
really give: every label its route groups by and its inhibit_rules compare is one the alerts carry, and every
alert name its matchers name exists. test_alerting_e2e.py measures what it does in a real Alertmanager."""

from __future__ import annotations

import re
import subprocess

import yaml

from fabricmon.deploy import ALERTMANAGER, PRINTABLE, RULES
from ship_helpers import FABRICMON, ROOT, require_tool


def rules() -> list[dict]:
    return [r for g in yaml.safe_load(RULES.read_text())["groups"] for r in g["rules"] if "alert" in r]


def test_amtool_accepts_the_example():
    amtool = require_tool("amtool", "prometheus-alertmanager")
    res = subprocess.run([amtool, "check-config", str(ALERTMANAGER)], capture_output=True, text=True, timeout=60)
    assert res.returncode == 0 and "SUCCESS" in res.stdout, res.stdout + res.stderr
    assert "7 inhibit rules" in res.stdout


def test_routes_send_a_switch_and_the_hosts_on_it_to_one_group():
    amtool = require_tool("amtool", "prometheus-alertmanager")
    cfg = yaml.safe_load(ALERTMANAGER.read_text())
    assert cfg["route"]["routes"][0]["group_by"] == ["switch"]
    for labels in (["alertname=FabricmonPortDown", "switch=leaf01", "instance=node01:9879"],
                   ["alertname=FabricmonFabricPortDown", "switch=leaf01"]):
        res = subprocess.run([amtool, "config", "routes", "test", f"--config.file={ALERTMANAGER}", "--verify.receivers=fabricmon-oncall",
                              *labels], capture_output=True, text=True, timeout=60)
        assert res.returncode == 0, res.stdout + res.stderr


def test_every_label_and_alert_the_example_names_is_one_the_rules_give():
    cfg = yaml.safe_load(ALERTMANAGER.read_text())
    alerts = rules()
    names = {a["alert"] for a in alerts}
    text = RULES.read_text()
    produced = {"alertname", "instance", "job", "severity", "device", "port", "check"}
    for label in ("switch", "switch_guid", "switch_port", "remote_guid"):
        if re.search(rf'\b{label}\b', text):
            produced.add(label)
    grouped = set(cfg["route"]["group_by"]) | {lab for r in cfg["route"]["routes"] for lab in r["group_by"]}
    assert grouped <= produced, grouped - produced
    for rule in cfg["inhibit_rules"]:
        assert set(rule["equal"]) <= produced, rule
        for m in rule["source_matchers"] + rule["target_matchers"]:
            lab, op, val = re.fullmatch(r'(\w+)(=~|!=|=|!~)"(.*)"', m).groups()
            assert lab in produced, m
            if lab == "alertname" and op in ("=", "=~"):
                matched = {n for n in names if re.fullmatch(val, n)}
                assert matched, f"{m} names no shipped alert"
                if op == "=~":           # every alternative names an alert
                    for alt in top_level_alternatives(val):
                        assert any(re.fullmatch(alt, n) for n in names), f"{m}: {alt} names no shipped alert"


def top_level_alternatives(pattern: str) -> list[str]:
    out, depth, cur = [], 0, ""
    for ch in pattern:
        depth += {"(": 1, ")": -1}.get(ch, 0)
        if ch == "|" and depth == 0:
            out.append(cur)
            cur = ""
        else:
            cur += ch
    return out + [cur]


def test_print_hands_out_the_example(tmp_path):
    assert ALERTMANAGER in PRINTABLE["alertmanager"]
    res = subprocess.run([*FABRICMON, "install", "--print", "alertmanager", str(tmp_path)], capture_output=True,
                         text=True, timeout=60, cwd=ROOT)
    assert res.returncode == 0, res.stderr
    assert (tmp_path / "fabricmon.alertmanager.yml").read_text() == ALERTMANAGER.read_text()
