"""The node dashboard: generated JSON up to date, Grafana conventions (datasource, job, instance and device
variables on every query), and every panel's queries proven to return data from a real Prometheus scraping
real fabricmon daemons (replaying fixture bundles) with the real rules loaded, and from VictoriaMetrics
scraping the same daemons with vmalert evaluating the same rules (the reference deployment's store)."""

from __future__ import annotations

import json
import math
import re

import pytest

from ship_helpers import (ROOT, Prometheus, load_generator, start_prometheus, start_replay_daemon,
                          start_victoriametrics, wait_until)

DASHBOARD = ROOT / "fabricmon" / "deploy" / "grafana" / "fabricmon-node.json"
RULES = ROOT / "fabricmon" / "deploy" / "prometheus" / "fabricmon.rules.yml"
# Between them these bundles give every panel data: failing GPU checks and expected rates (miswired),
# RoCE netdevs with PFC, pauses and storms (roce-pfc-off-storm).
BUNDLES = ("dgx-h100-miswired", "roce-pfc-off-storm")
# What Grafana substitutes when "All" is selected (allValue) and for $__rate_interval (4 x a 1 s scrape
# interval would be Grafana's own choice; a little more leaves room on a slow machine).
VARS = {"job": ".*", "instance": ".*", "device": ".*"}
RATE_INTERVAL = "30s"

build_dashboards = load_generator("grafana/build_dashboards.py")


def dashboard() -> dict:
    return json.loads(DASHBOARD.read_text())


def panels(d: dict) -> list[dict]:
    out = []
    for p in d["panels"]:
        out.append(p)
        out.extend(p.get("panels", []))          # collapsed rows keep their panels inside
    return [p for p in out if p["type"] != "row"]


def substitute(expr: str) -> str:
    expr = expr.replace("$__rate_interval", RATE_INTERVAL)
    for name, value in VARS.items():
        expr = re.sub(rf"\$(?:{name}\b|\{{{name}(?::[a-z]+)?\}})", value, expr)
    assert "$" not in expr, f"unsubstituted variable in {expr}"
    return expr


def test_committed_dashboard_is_generated():
    assert DASHBOARD.read_text() == build_dashboards.render(), "run: python grafana/build_dashboards.py"


def test_dashboard_conventions():
    d = dashboard()
    variables = {v["name"]: v for v in d["templating"]["list"]}
    assert variables["datasource"]["type"] == "datasource" and variables["datasource"]["query"] == "prometheus"
    for name in ("job", "instance", "device"):
        assert variables[name]["type"] == "query" and variables[name]["datasource"]["uid"] == "${datasource}"
    ids = [p["id"] for p in d["panels"]]
    assert len(ids) == len(set(ids))
    ps = panels(d)
    assert len(ps) >= 25
    for p in ps:
        assert p["title"] and p.get("description"), p["id"]
        assert p["datasource"]["uid"] == "${datasource}", p["title"]
        assert p["targets"], p["title"]
        for t in p["targets"]:
            assert t["datasource"]["uid"] == "${datasource}", p["title"]
            # every query follows the job and instance variables; port-level series follow device too
            assert 'instance=~"$instance"' in t["expr"] and 'job=~"$job"' in t["expr"], (p["title"], t["expr"])
            if re.search(r"fabricmon_(ib_port|roce|netdev)_|instance_device", t["expr"]):
                assert 'device=~"$device"' in t["expr"], (p["title"], t["expr"])
    gp = [(p["gridPos"]["x"], p["gridPos"]["w"]) for p in d["panels"]]
    assert all(x + w <= 24 for x, w in gp)


def _has_data(result: list) -> bool:
    """A non-empty result with at least one real number (not NaN from 0/0 or an empty histogram)."""
    return any(not math.isnan(float(r["value"][1])) for r in result)


def wait_for_every_panel(stores: dict[str, Prometheus], queries: list[tuple[str, str, str]], timeout: float) -> None:
    """Until every query returns data from every store (Prometheus, and VictoriaMetrics with vmalert: the
    reference deployment's store, whose MetricsQL is not PromQL in every corner)."""
    pending = {(name, *q): None for name in stores for q in queries}

    def without_data() -> dict:
        for q in list(pending):
            result = stores[q[0]].query(q[3])
            if _has_data(result):
                del pending[q]
            else:
                pending[q] = result
        return pending
    wait_until(without_data, timeout, lambda: "panels without data:\n" + "\n".join(
        f"  {s}: {t} [{r}]: {e} -> {res}" for (s, t, r, e), res in pending.items()), until=lambda p: not p, interval=1)


def test_every_panel_returns_data_from_real_prometheus_and_victoriametrics(processes, tmp_path):
    ports = [start_replay_daemon(processes, b) for b in BUNDLES]
    scrape = [{"job_name": "fabricmon", "static_configs": [{"targets": [f"127.0.0.1:{p}" for p in ports]}]}]
    prom = start_prometheus(processes, tmp_path, scrape, rule_files=[RULES])
    vm = start_victoriametrics(processes, tmp_path, scrape, rule_files=[RULES])

    queries = [(p["title"], t["refId"], substitute(t["expr"])) for p in panels(dashboard()) for t in p["targets"]]
    wait_for_every_panel({"prometheus": prom, "victoria-metrics": vm}, queries, 60)

    # the template variables' own queries list the targets and devices
    for v in dashboard()["templating"]["list"]:
        m = re.fullmatch(r"label_values\((.+), (\w+)\)", v.get("definition", ""))
        if not m:
            continue
        values = prom.api(f"label/{m.group(2)}/values", **{"match[]": substitute(m.group(1))})
        assert values, f"variable {v['name']} lists nothing"
        if v["name"] == "instance":
            assert sorted(values) == sorted(f"127.0.0.1:{p}" for p in ports)

    # the rules evaluate cleanly on real data, and the daemon's verdicts reach the alerts
    groups = prom.api("rules")["groups"]
    bad = [(r["name"], r.get("lastError")) for g in groups for r in g["rules"] if r["health"] not in ("ok",)]
    assert not bad, bad
    alerts = {(a["labels"]["alertname"], a["labels"].get("device"), a["labels"].get("port"), a["labels"]["severity"]):
              a for a in prom.api("alerts")["alerts"]}
    pfc = alerts.get(("FabricmonRocePfcDisabled", "mlx5_0", "1", "critical"))
    assert pfc is not None, sorted(alerts)
    assert pfc["annotations"]["description"].startswith(f"127.0.0.1:{ports[1]} mlx5_0 port 1: PFC does not")
    assert ("FabricmonGpuNicAffinity", "GPU3", None, "warning") in alerts
    assert ("FabricmonRoceTrustMismatch", "mlx5_0", "1", "warning") in alerts
    assert ("FabricmonRoceMtuLow", "mlx5_0", "1", "warning") in alerts


@pytest.mark.parametrize("expr,want", [
    ('rate(x{job=~"$job", instance=~"$instance"}[$__rate_interval])', f'rate(x{{job=~".*", instance=~".*"}}[{RATE_INTERVAL}])'),
    ('y{device=~"${device}"}', 'y{device=~".*"}'),
])
def test_substitute(expr, want):
    assert substitute(expr) == want


def test_node_health_shows_unknown_for_a_node_with_nothing_to_check():
    """fabricmon_health_status 3 (nothing to check, what `check` exits 3 for) reads UNKNOWN, not CRITICAL red."""
    [health] = [p for p in panels(dashboard()) if p["title"] == "Node health"]
    options = health["fieldConfig"]["defaults"]["mappings"][0]["options"]
    assert options["3"]["text"] == "UNKNOWN" and options["3"]["color"] not in ("red", "orange", "green")
    assert {options[str(v)]["text"] for v in range(3)} == {"OK", "WARNING", "CRITICAL"}
