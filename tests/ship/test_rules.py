"""The Prometheus rules: generated file up to date, `promtool check rules` and `promtool test rules` pass,
every alert follows the mixin conventions, has a runbook and a unit test that fires it and one that must
not, and every metric the rules read is one fabricmon exports."""

from __future__ import annotations

import re
import subprocess

import pytest
import yaml

from ship_helpers import (FABRICMON, ROOT, ber_exposition, ethernet_exposition, exported_names, load_generator,
                          nccl_exposition, remediation_exposition, require_tool, vitals_exposition)

RULES = ROOT / "fabricmon" / "deploy" / "prometheus" / "fabricmon.rules.yml"
RULE_TESTS = ROOT / "fabricmon" / "deploy" / "prometheus" / "fabricmon.rules.test.yml"
RUNBOOKS = ROOT / "docs" / "runbooks.md"

build_rules = load_generator("prometheus/build_rules.py")


def rules() -> list[dict]:
    return [r for g in yaml.safe_load(RULES.read_text())["groups"] for r in g["rules"]]


def alerts() -> list[dict]:
    return [r for r in rules() if "alert" in r]


def runbook_anchors() -> set[str]:
    """GitHub's heading anchors: lower case, punctuation dropped, spaces to dashes."""
    out = set()
    for m in re.finditer(r"^#+ (.+)$", RUNBOOKS.read_text(), re.M):
        out.add(re.sub(r"[^a-z0-9 _-]", "", m.group(1).strip().lower()).replace(" ", "-"))
    return out


def test_committed_rules_are_generated():
    assert RULES.read_text() == build_rules.build(), "run: python prometheus/build_rules.py"


def test_promtool_check_rules():
    """With every lint on and lint errors fatal (issue 30: a duplicate-rule lint failure made the shipped rules
    look broken)."""
    promtool = require_tool("promtool", "prometheus")
    res = subprocess.run([promtool, "check", "rules", "--lint=all", "--lint-fatal", str(RULES)],
                         capture_output=True, text=True, timeout=60)
    assert res.returncode == 0 and "SUCCESS" in res.stdout, res.stdout + res.stderr
    assert "lint" not in (res.stdout + res.stderr).lower(), res.stdout + res.stderr


def test_promtool_unit_tests():
    promtool = require_tool("promtool", "prometheus")
    res = subprocess.run([promtool, "test", "rules", str(RULE_TESTS)], capture_output=True, text=True,
                         timeout=400, cwd=RULE_TESTS.parent)       # 45 s alone; a loaded 2-core run, several times
    assert res.returncode == 0, res.stdout + res.stderr
    assert "SUCCESS" in res.stdout


def test_every_alert_follows_the_conventions():
    anchors = runbook_anchors()
    seen = alerts()
    assert len(seen) >= 20
    for a in seen:
        name = a["alert"]
        assert re.fullmatch(r"Fabricmon(?:[A-Z][a-z0-9]*)+", name), name
        assert a["labels"]["severity"] in ("critical", "warning"), name
        ann = a["annotations"]
        assert set(ann) >= {"summary", "description", "runbook_url"}, name
        assert ann["summary"].strip() and ann["description"].strip(), name
        # absolute: the daemon that raised it serves the runbooks (an absent() alert: any fabricmon target up)
        url = ann["runbook_url"]
        # absent(), or an aggregate over a job's targets (FabricmonFabricShardAbsent): no instance to name
        no_instance = a["expr"].startswith("absent(") or name in build_rules.NO_INSTANCE
        if no_instance:
            assert re.fullmatch(r"http://\{\{ with query `up\{[^`]+` \}\}.+\{\{ end \}\}/runbooks#\w+", url), url
        else:
            assert url.startswith("http://{{ $labels.instance }}/runbooks#"), url
        assert url.split("#", 1)[1] == name.lower() and name.lower() in anchors, f"{name}: no heading in docs/runbooks.md"
        if not no_instance:
            assert "{{ $labels.instance }}" in ann["description"], name
        fabric = re.search(r"fabricmon_(fabric|ecmp)_", a["expr"])
        if fabric:
            # switch-level alerts name the switch; switch-port alerts the port and its remote end too
            if not no_instance and "sm_master" not in a["expr"] and "check_status" not in a["expr"]:
                assert "{{ $labels.switch }}" in ann["description"], name
            if '"switch_port", "$1", "port"' in a["expr"]:          # a switch-port alert (build_rules.named)
                assert "{{ $labels.port }}" in ann["description"] and "{{ $labels.remote_name }}" in ann["description"], name
        # port-level alerts of the node daemon name the device and the port
        elif re.search(r"\bport\b", a["expr"]) and "by (instance, job, device, netdev" not in a["expr"]:
            assert "{{ $labels.device }}" in ann["description"] and "{{ $labels.port }}" in ann["description"], name


def test_runbook_links_resolve():
    anchors = runbook_anchors()
    for link in re.findall(r"\]\(#([^)]+)\)", RUNBOOKS.read_text()):
        assert link in anchors, f"docs/runbooks.md links to a missing heading #{link}"


def test_every_alert_fires_and_stays_silent_in_a_unit_test():
    """For every (alert, severity) a promtool case expects it firing, and for every alert a case expects
    it silent (an empty exp_alerts)."""
    doc = yaml.safe_load(RULE_TESTS.read_text())
    fired, silent = set(), set()
    for t in doc["tests"]:
        for case in t.get("alert_rule_test", []):
            exp = case.get("exp_alerts") or []
            if not exp:
                silent.add(case["alertname"])
            for e in exp:
                fired.add((case["alertname"], e["exp_labels"]["severity"]))
    want = {(a["alert"], a["labels"]["severity"]) for a in alerts()}
    assert want - fired == set(), f"alerts never fired in a unit test: {sorted(want - fired)}"
    assert {n for n, _ in want} - silent == set(), "alerts without a must-not-fire case"


def test_every_daemon_check_has_an_alert(bundle_expositions):
    """A new daemon check without an alert fails here (checks seen in every fixture bundle's exposition)."""
    checks = set()
    for text in bundle_expositions.values():
        checks |= set(re.findall(r'^fabricmon_check_status\{check="([a-z_]+)"', text, re.M))
    assert len(checks) >= 21
    exprs = "\n".join(a["expr"] for a in alerts())
    covered = set(re.findall(r'check="([a-z_]+)"', exprs))
    # counter_saturation's default status is ok: its alert reads fabricmon_ib_port_saturated directly
    covered |= {"counter_saturation"} if re.search(r"fabricmon_ib_port_saturated(\{[^}]*\})? == 1", exprs) else set()
    assert checks - covered == set(), f"daemon checks without an alert: {sorted(checks - covered)}"


# Issue 10's metrics (routing balance from the LFTs, uplinks, the subnet manager): their alerts are written
# against these exact names, and this list goes once the collector exports them (the test then says so).
def test_rules_read_only_exported_metrics(bundle_expositions, fabric_exposition):
    """A renamed metric breaks the build: every fabricmon_* name in an expression or a template is exported
    by the node daemon or the fabric collector."""
    exported = exported_names(fabric_exposition) | exported_names(ethernet_exposition()) | exported_names(nccl_exposition())
    # the opt-in sets' families (the state set's fabricmon_fabric_port_up): the golden fabric exposition has every set
    exported |= exported_names((ROOT / "tests" / "golden" / "fabric-infiniband.prom").read_text())
    exported |= exported_names(ber_exposition()) | exported_names(vitals_exposition())
    exported |= exported_names(remediation_exposition())
    for text in bundle_expositions.values():
        exported |= exported_names(text)
    text = RULES.read_text()
    used = set(re.findall(r"(?<![:\w])(fabricmon_[a-z0-9_]+)(?![:\w])", text))   # not recorded names
    used = {u for u in used if not u.endswith(".yml")}
    missing = sorted(used - exported)
    assert not missing, f"rules read metrics fabricmon does not export: {missing}"


def test_fabric_alerts_cover_what_the_collector_judges():
    """Every kind of fabric verdict has an alert: the ECMP flag, down and degraded switch ports, the sweep."""
    exprs = "\n".join(a["expr"] for a in alerts())
    f = build_rules.FABRIC_SELECTOR
    for needle in (f"fabricmon_ecmp_imbalanced{{{f}}} == 1", f'fabricmon_fabric_port_degraded{{{f},reason="down"}}',
                   f'fabricmon_fabric_port_degraded{{{f},reason=~"width|speed"}}', f"up{{{f}}}", f"absent(up{{{f}}})",
                   f'fabricmon_check_status{{{f},check=~"symbol_errors"}}', f'fabricmon_check_status{{{f},check=~"link_flap"}}',
                   f'fabricmon_fabric_check_status{{{f},check="unresponsive"}}', 'source=~"sweep|discovery"'):
        assert needle in exprs, needle


# The only alerts that judge raw counters in Prometheus: what no daemon judges (issue 27, one set of thresholds).
RAW_COUNTER_ALERTS = {"FabricmonSourceErrors", "FabricmonQpTransportRetriesExceeded"}


def test_alerts_page_on_verdicts_not_on_raw_counters():
    """Every threshold that pages is fabricmon.yml's: no alert takes rate()/increase() of a counter and compares
    it with a number of its own, except the few no daemon judges; every expression names its scrape job, so the
    collector's findings (fabricmon_check_status by switch GUID) never fire a node alert and the other way round."""
    judged = sorted(a["alert"] for a in alerts() if re.search(r"\b(rate|increase|irate|delta)\(", a["expr"]))
    assert set(judged) <= RAW_COUNTER_ALERTS, judged
    for a in alerts():
        for sel in re.findall(r"(?<![:\w])(?:fabricmon_check_status|up)\{([^}]*)\}", a["expr"]):
            assert sel.startswith((build_rules.SELECTOR, build_rules.FABRIC_SELECTOR, build_rules.STATE_SELECTOR,
                                   build_rules.FABRIC_STATE_SELECTOR)), (a["alert"], sel)
    text = RULES.read_text()
    for gone in ("* 3600 >", "> 1000", "symbol_errors_total[", "pause_frames_total["):
        assert gone not in "\n".join(a["expr"] for a in alerts()), gone
    assert "FabricmonFabricSwitchUnreachable" not in text and "FabricmonFabricSwitchUnreadable" not in text


@pytest.mark.parametrize("base", ["https://git.example.org/hpc/fabricmon/-/blob/main/docs/runbooks.md"])
def test_runbook_base_is_configurable(base):
    text = build_rules.build(base)
    assert f"runbook_url: {base}#fabricmonportdown" in text


def test_the_wheel_carries_the_runbooks_it_serves():
    """fabricmon/pages/runbooks.md (served at /runbooks) is docs/runbooks.md, written by build_rules.py."""
    assert (ROOT / "fabricmon" / "pages" / "runbooks.md").read_text() == RUNBOOKS.read_text(), \
        "run: python prometheus/build_rules.py"


SITE = ("https://wiki.example.org/hpc/fabricmon", 'cluster="a",job="ib-nodes"', 'job=~"ibfab-.*"')


def test_print_fits_the_rules_to_a_site(tmp_path):
    """`install --print rules DIR --runbook-base URL --selector ... --fabric-selector ...`: every runbook_url is
    URL#<alert>, every job matcher the site's, the rules pass promtool with every lint fatal, and the tests
    written for the shipped selectors are left out."""
    from fabricmon.install import print_files
    print_files("rules", str(tmp_path), out=open(tmp_path / "out", "w"),
                rules_options={**dict(zip(("runbook_base", "selector", "fabric_selector"), SITE)),
                               "state_selector": 'job="ib-nodes-state"', "fabric_state_selector": 'job="ibfab-state"'})
    assert sorted(p.name for p in tmp_path.iterdir()) == ["fabricmon.rules.yml", "out"]
    text = (tmp_path / "fabricmon.rules.yml").read_text()
    assert 'job="fabricmon"' not in text and 'job="fabricmon-fabric"' not in text
    assert 'job="fabricmon-state"' not in text and 'job="fabricmon-fabric-state"' not in text     # the fast path's
    assert 'fabricmon_ib_port_degraded{job="ib-nodes-state",reason="down"}' in text
    assert 'fabricmon_fabric_port_up{job="ibfab-state"} == 0' in text
    doc = [r for g in yaml.safe_load(text)["groups"] for r in g["rules"] if "alert" in r]
    assert len(doc) == len(alerts())
    for a in doc:
        assert a["annotations"]["runbook_url"] == f"{SITE[0]}#{a['alert'].lower()}"
    assert 'up{cluster="a",job="ib-nodes"} == 0' in text and 'absent(up{job=~"ibfab-.*"})' in text
    promtool = require_tool("promtool", "prometheus")
    res = subprocess.run([promtool, "check", "rules", "--lint=all", "--lint-fatal", str(tmp_path / "fabricmon.rules.yml")],
                         capture_output=True, text=True, timeout=60)
    assert res.returncode == 0 and "SUCCESS" in res.stdout, res.stdout + res.stderr


def test_site_selector_pages_for_its_job_only(tmp_path):
    """The fitted rules' expressions select the site's job and no longer the default one (promtool, both
    directions): FabricmonSymbolErrors (critical) evaluated over a series of each job."""
    from fabricmon.deploy.rules import render
    fitted = [r for g in yaml.safe_load(render(selector='job="ib-nodes"'))["groups"] for r in g["rules"]
              if r.get("alert") == "FabricmonSymbolErrors" and r["labels"]["severity"] == "critical"]
    series = 'fabricmon_check_status{{instance="{i}",job="{j}",device="mlx5_0",port="1",check="symbol_errors"}}'
    (tmp_path / "t.yml").write_text(yaml.safe_dump({"rule_files": [], "evaluation_interval": "1m", "tests": [
        {"interval": "1m", "input_series": [{"series": series.format(i="a:9879", j="ib-nodes"), "values": "2x10"},
                                            {"series": series.format(i="b:9879", j="fabricmon"), "values": "2x10"}],
         "promql_expr_test": [{"expr": fitted[0]["expr"], "eval_time": "5m", "exp_samples": [
             {"labels": series.format(i="a:9879", j="ib-nodes"), "value": 2}]}]}]}))
    promtool = require_tool("promtool", "prometheus")
    res = subprocess.run([promtool, "test", "rules", "t.yml"], capture_output=True, text=True, timeout=60, cwd=tmp_path)
    assert res.returncode == 0 and "SUCCESS" in res.stdout, res.stdout + res.stderr


@pytest.mark.parametrize("opt, value", [("--selector", "job=fabricmon"), ("--fabric-selector", '"x"'),
                                        ("--runbook-base", "wiki/runbooks")])
def test_bad_print_options_name_the_option(tmp_path, opt, value):
    res = subprocess.run([*FABRICMON, "install", "--print", "rules", str(tmp_path / "out"), opt, value],
                         capture_output=True, text=True, timeout=60, cwd=ROOT)
    assert res.returncode == 2 and opt in res.stderr, res.stderr
    assert not (tmp_path / "out").exists()


def test_fabric_alerts_about_a_switch_link_to_its_map():
    """A fabric alert whose labels name a switch carries map_url: the collector's fabric map opened
    on that switch (tests/pages/test_fabric_interaction.py opens such a URL in a browser)."""
    with_map = {a["alert"]: a["annotations"]["map_url"] for a in alerts() if "map_url" in a["annotations"]}
    assert {"FabricmonEcmpImbalance", "FabricmonFabricPortDown", "FabricmonFabricPortDegraded",
            "FabricmonRoutingImbalance", "FabricmonMissingUplinks"} <= set(with_map)
    # a node's alert about the switch its path crosses opens the map of the collector that flags it
    assert with_map.pop("FabricmonNcclSlowOnFlaggedPath") == \
        "http://{{ $labels.fabric_instance }}/#select=switch:{{ $labels.switch_guid }}"
    assert set(with_map.values()) == {"http://{{ $labels.instance }}/#select=switch:{{ $labels.switch_guid }}"}
    for a in alerts():
        if "map_url" not in a["annotations"]:
            assert "switch_guid" not in a["annotations"]["description"], a["alert"]
    text = build_rules.build(build_rules.DEFAULT_RUNBOOK_BASE, "https")
    assert "map_url: https://{{ $labels.instance }}/#select=switch:{{ $labels.switch_guid }}" in text


def test_children_carry_the_labels_their_parents_mute_them_by():
    """Issue 27: a switch port alert carries its switch and its peer (switch_guid, switch, remote_guid) and the
    port as switch_port; a node's port alert carries the switch and port it is cabled to (switch, switch_port,
    from fabricmon_ib_port_peer_info); the parent carries the switch both as itself and as the peer of the
    ports facing it. The shipped Alertmanager example's inhibit_rules use exactly these (test_alertmanager.py)."""
    by_name: dict[str, list[str]] = {}
    for a in alerts():
        by_name.setdefault(a["alert"], []).append(a["expr"])
    for name in ("FabricmonFabricPortDown", "FabricmonFabricPortDegraded", "FabricmonFabricSymbolErrors",
                 "FabricmonFabricLinkFlapping", "FabricmonFabricReceiveErrors", "FabricmonFabricPortErrors"):
        for e in by_name[name]:
            assert "group_left (role, remote_guid, remote_name, remote_port)" in e and '"switch_port", "$1", "port"' in e
            assert "group_left (switch)" in e, name
    for name in ("FabricmonPortDown", "FabricmonPortDegraded", "FabricmonSymbolErrors", "FabricmonLinkFlapping",
                 "FabricmonReceiveErrors", "FabricmonLinkErrorRecovery", "FabricmonLinkIntegrityErrors"):
        for e in by_name[name]:
            assert "group_left (switch, switch_port)" in e and "fabricmon_ib_port_peer_info" in e, name
            # no peer known: still pages (once per job: FabricmonPortDown reads the state job's series too)
            assert e.count("or on (instance, job, device, port)") == (2 if name == "FabricmonPortDown" else 1), name
    for e in by_name["FabricmonFabricSwitchUnresponsive"]:
        assert '"remote_guid", "$1", "switch_guid"' in e or '"switch_guid", "$1", "remote_guid"' in e
