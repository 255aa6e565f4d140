"""The fabric dashboard and rules on an Ethernet fabric, unchanged: a real Prometheus with the shipped
rules scraping `fabricmon fabric run` (fabric.kind: ethernet) on a snmpsim leaf/spine with leaf02
polarised onto spine01 and a 100G uplink among 400G. The "Top uplink utilisation per leaf" and
"ECMP imbalance (max/mean) per switch" panels return the Ethernet switches, the recording rules
show leaf02's hot uplink at about twice its uplinks' mean, every rule evaluates cleanly, and the
collector's verdicts reach FabricmonEcmpImbalance and FabricmonFabricPortDegraded.

The switches serve transceiver sensors (ENTITY-SENSOR-MIB, fabricmon.sim.ethernet), with one receiver
planted at -12 dBm (leaf01 Ethernet0 lane 2, under the switch's -8.4 dBm low warning threshold): every
query of the Optics row returns every switch by name, and the dimmest-receivers table shows the planted
lane with its reading and its margin to the threshold."""

from __future__ import annotations

import json
import math
import re

import pytest

from helpers import community_file, unavailable

from fabricmon.sim.ethernet import RX_LIMITS_DBM, SnmpSimFabric, leaf_spine, set_rate, set_rx_power, tools_available
from ship_helpers import FABRICMON, ROOT, free_port, http_get, start_prometheus, start_victoriametrics, wait_until
from test_fabric_dashboard import ETHERNET_ONLY, RULES, build_rules, dashboard, panels, substitute

# panel -> switches it must show (leaf01's and spine02's groups keep one link once the 100G one is left out: no ratio)
PANELS = {"Top uplink utilisation per leaf": {"leaf01", "leaf02"},
          "ECMP imbalance (max/mean) per switch": {"leaf02", "spine01"}}


def test_the_fabric_panels_and_rules_work_for_an_ethernet_fabric(processes, tmp_path):
    ok, why = tools_available()
    if not ok:
        unavailable(why)
    sw = leaf_spine(spines=2, leaves=2, hosts_per_leaf=1, uplink_rate=20e9, optics=True)
    set_rx_power(sw, "leaf01", "Ethernet0", -12.0, lane=2)     # a dim receiver under the low warning threshold
    set_rate(sw, "leaf02", "Ethernet4", 40e9)           # leaf02 polarised onto spine01
    set_rate(sw, "leaf02", "Ethernet8", 0.5e9)
    by = {s.name: s for s in sw}
    by["leaf01"].port("Ethernet8").speed_mbps = 100000     # leaf01 <-> spine02 at 100G
    by["spine02"].port("Ethernet0").speed_mbps = 100000
    set_rate(sw, "leaf01", "Ethernet8", 10e9, 10e9)
    with SnmpSimFabric(sw) as fab:
        comm = community_file(tmp_path)
        cfg = tmp_path / "fabricmon.yml"
        (tmp_path / "state").mkdir()
        cfg.write_text(json.dumps({
            "paths": {"state_dir": str(tmp_path / "state")},
            "fabric": {"kind": "ethernet", "sweep_interval": 1.0, "discovery_interval": 300.0,
                       "thresholds": {"consecutive_sweeps": 2},
                       # a loaded snmpsim answers late: a 2 s timeout and a retry, and optics read again
                       # every 10 s (not the default 300 s), so one walk given up on is not the test's end
                       "sources": {"optics": {"interval": 10.0}},
                       "ethernet": {"switches": fab.addresses(),
                                    "snmp": {"community_file": str(comm), "timeout": 2, "retries": 1}}},
        }))
        port = free_port()
        p = processes.start("fabricmon-fabric", [*FABRICMON, "fabric", "run", "--config", str(cfg), "--listen",
                                                 f"127.0.0.1:{port}", "--log-level", "warning"], cwd=ROOT)

        def flagged():
            if p.poll() is not None:
                raise AssertionError(f"fabricmon fabric run exited {p.returncode}: {processes.log(p)}")
            return re.search(rb'fabricmon_ecmp_imbalanced\{direction="up",switch="leaf02",switch_guid="[0-9a-f:]+"\} 1',
                             http_get(f"http://127.0.0.1:{port}/metrics"))
        wait_until(flagged, 40, "the polarised leaf flagged by the collector")
        scrape = [{"job_name": build_rules.FABRIC_JOB, "static_configs": [{"targets": [f"127.0.0.1:{port}"]}]}]
        prom = start_prometheus(processes, tmp_path, scrape, rule_files=[RULES])
        vm = start_victoriametrics(processes, tmp_path, scrape, rule_files=[RULES])

        chosen = [pn for pn in panels(dashboard()) if pn["title"] in PANELS]
        assert len(chosen) == len(PANELS)
        # on both stores (VictoriaMetrics with vmalert: the reference deployment's)
        pending = {(store, pn["title"]): substitute(pn["targets"][0]["expr"]) for pn in chosen for store in (prom, vm)}

        def without_leaves() -> dict:
            for (store, title), expr in list(pending.items()):
                switches = {r["metric"].get("switch") for r in store.query(expr)}
                if PANELS[title] <= switches:
                    del pending[(store, title)]
            return pending
        wait_until(without_leaves, 60, lambda: f"panels without the Ethernet leaves: {pending}",
                   until=lambda p: not p, interval=1)

        # the Optics row: every query returns every switch by name; the planted lane leads leaf01's dimmest
        names = {s.name for s in sw}
        optics = {(pn["title"], t["refId"]): substitute(t["expr"]) for pn in panels(dashboard())
                  if pn["title"] in ETHERNET_ONLY for t in pn["targets"]}
        assert len(optics) >= 4
        def missing(results: dict) -> dict:
            return {k: names - {r["metric"].get("switch") for r in res} for k, res in results.items()}
        last: dict = {}

        def optics_results() -> dict:
            last.update(results={k: prom.query(e) for k, e in optics.items()})
            return last["results"]
        results = wait_until(optics_results, 90, lambda: f"optics panels without switches: {missing(last['results'])}",
                             until=lambda res: not any(missing(res).values()), interval=1)
        wait_until(lambda: {k: vm.query(e) for k, e in optics.items()}, 90,
                   lambda: "optics panels without switches on victoria-metrics",
                   until=lambda res: not any(missing(res).values()), interval=1)
        dim = results[("Dimmest receivers per switch", "A")]
        assert len(dim) == 3 * len(names)
        (planted,) = [r for r in dim if r["metric"]["switch"] == "leaf01" and r["metric"]["port"] == "Ethernet0"
                      and r["metric"]["lane"] == "2"]
        assert float(planted["value"][1]) == pytest.approx(-12.0, abs=0.05)
        assert all(-4.05 <= float(r["value"][1]) <= -1.95 for r in dim if r is not planted)
        (margin,) = [r for r in results[("Dimmest receivers per switch", "B")] if r["metric"]["switch"] == "leaf01"
                     and r["metric"]["port"] == "Ethernet0" and r["metric"]["lane"] == "2"]
        assert float(margin["value"][1]) == pytest.approx(-12.0 - RX_LIMITS_DBM[1], abs=0.05)
        least = {r["metric"]["switch"]: float(r["value"][1]) for r in results[("Dimmest receiver per switch", "A")]}
        assert least["leaf01"] == pytest.approx(-12.0, abs=0.05) and least["leaf02"] > -4.05, least

        def ratio(switch):
            q = (f'switch:fabricmon_fabric_uplink_utilisation:max_ratio_rate5m{{switch="{switch}"}}'
                 f' / switch:fabricmon_fabric_uplink_utilisation:avg_ratio_rate5m{{switch="{switch}"}}')
            return float(prom.query(q)[0]["value"][1])
        # NaN (0/0) until the recording rules have seen the counters move between two scrapes: on a loaded
        # machine two scrapes can read one snapshot (a sweep slower than the scrape interval)
        wait_until(lambda: ratio("leaf02"), 30, "the uplink ratio of leaf02 (NaN: the counters not seen moving)",
                   until=lambda r: not math.isnan(r), interval=1)
        assert 1.8 < ratio("leaf02") < 2.1

        groups = prom.api("rules")["groups"]
        bad = [(r["name"], r.get("lastError")) for g in groups for r in g["rules"] if r["health"] != "ok"]
        assert not bad, bad

        def alerts():
            return {(a["labels"]["alertname"], a["labels"].get("switch"), a["labels"].get("port"))
                    for a in prom.api("alerts")["alerts"]}
        wait_until(lambda: ("FabricmonEcmpImbalance", "leaf02", None) in alerts(), 30, "the ECMP alert")
        wait_until(lambda: ("FabricmonFabricPortDegraded", "leaf01", "Ethernet8") in alerts(), 30,
                   "the degraded-link alert, labelled with the ifName")
        assert not any(a[1] == "leaf01" and a[0] == "FabricmonEcmpImbalance" for a in alerts())
