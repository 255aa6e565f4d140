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
    assert "8 inhibit rules" in res.stdout and "2 receivers" in res.stdout


def routes(route: dict) -> list[dict]:
    """Every route of the tree, depth first."""
    return [route] + [r for child in route.get("routes", []) for r in routes(child)]


def route_test(amtool: str, *labels: str) -> str:
    """The receiver the real amtool picks for an alert with these labels."""
    res = subprocess.run([amtool, "config", "routes", "test", f"--config.file={ALERTMANAGER}", *labels],
                         capture_output=True, text=True, timeout=60)
    assert res.returncode == 0, res.stdout + res.stderr
    return res.stdout.strip()


def test_critical_pages_and_warning_opens_a_ticket():
    """Issue 41: a warning (45 of the 74 alerts) must not page the on-call; two placeholder receivers."""
    amtool = require_tool("amtool", "prometheus-alertmanager")
    sev = {r["labels"]["severity"] for r in rules()}
    assert sev == {"critical", "warning"}, sev
    for labels in (["alertname=FabricmonFabricSwitchUnresponsive", "switch=leaf02"],
                   ["alertname=FabricmonPortDown", "switch=leaf01", "instance=node01:9879"],
                   ["alertname=FabricmonGpuNicAffinity", "instance=node01:9879"]):
        assert route_test(amtool, *labels, "severity=critical") == "fabricmon-pager", labels
        assert route_test(amtool, *labels, "severity=warning") == "fabricmon-tickets", labels
    assert route_test(amtool, "alertname=SomethingElse") == "fabricmon-tickets"      # no severity: no page
    cfg = yaml.safe_load(ALERTMANAGER.read_text())
    assert [r["name"] for r in cfg["receivers"]] == ["fabricmon-pager", "fabricmon-tickets"]
    assert all(set(r) == {"name"} for r in cfg["receivers"])       # placeholders: the operator fills them


def test_routes_send_a_switch_and_the_hosts_on_it_to_one_group():
    amtool = require_tool("amtool", "prometheus-alertmanager")
    cfg = yaml.safe_load(ALERTMANAGER.read_text())
    per_switch = [r for r in routes(cfg["route"]) if r.get("group_by") == ["switch"]]
    assert len(per_switch) == 2 and all('switch=~".+"' in r["matchers"] for r in per_switch)
    for severity, receiver in (("critical", "fabricmon-pager"), ("warning", "fabricmon-tickets")):
        for labels in (["alertname=FabricmonPortDown", "switch=leaf01", "instance=node01:9879"],
                       ["alertname=FabricmonFabricPortDown", "switch=leaf01"]):
            res = subprocess.run([amtool, "config", "routes", "test", f"--config.file={ALERTMANAGER}",
                                  f"--verify.receivers={receiver}", *labels, f"severity={severity}"],
                                 capture_output=True, text=True, timeout=60)
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
    grouped = {lab for r in routes(cfg["route"]) for lab in r.get("group_by", [])}
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
