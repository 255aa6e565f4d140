"""One incident, one page, measured (issue 27): the shipped rules and the shipped Alertmanager example, in the real
Prometheus and the real Alertmanager, on a simulated fat tree (ibsim + a running opensm, the real
infiniband-diags), with `fabricmon fabric run`'s collector and two `fabricmon run` node daemons under one leaf.
A webhook receiver in the test keeps every notification, and for each incident the test counts the
notification groups that paged an alert not paged before:

  quiet fabric 0; symbol errors under the configured threshold 0, over it 1 (a ticket); a flapping port 1 (a
  page, however often it flaps); a pulled leaf-spine cable 1 page (its uplinks) and 1 ticket (its port down);
  a dead spine 1 page (naming it); a dead leaf under two node daemons 1 page.

Each group is checked to reach its receiver (issue 41.1): critical the pager (fabricmon-pager), warning the
ticket queue (fabricmon-tickets), as the shipped route sends them; the webhook stands in for both.

The incidents come in two waves on one fabric, each incident on its own switch or port: first the three counter
incidents (leaf01 port 1 under the threshold, leaf02 port 1 over it, leaf01 port 2 flapping), then the cable
(leaf03 port 5), the spine (spine01) and the leaf (leaf04) at once. The route groups by switch, so each incident
is counted by the groups that page a new alert about its switch or port, and each wave must page exactly the
groups its incidents expect (2, then 4): an alert that a parent fails to mute, on any other switch, is a group
too many. `for:` is cut to 1/60 in a test-time copy of the rules (the parent's
3m to 3 s, the ports' 5m to 5 s), the Alertmanager example's group_wait and group_interval to 2 s; nothing else
changes. docs/alerting.md records the counts."""

from __future__ import annotations

import json
import re
import time

import pytest

from fabricmon.deploy import RULES
from fabricmon.sim.fabric import fat_tree_netfile
from helpers import fabric_collector
from ship_helpers import (Pager, http_get, require_tool, shipped_alertmanager, start_prometheus, start_sim_node,
                          wait_until)

pytestmark = pytest.mark.sim

SCALE = 60                      # every `for:` divided by this
# ibsim takes at most 10 clients at once: two node daemons and the collector poll slowly enough to stay
# under it (a refused client is a source error, which would page FabricmonSourceErrors for the simulator)
NODE_INTERVAL = 3.0
COLLECTOR = {"sweep_interval": 2.0, "discovery_interval": 4.0, "routing_interval": 10.0, "sm_interval": 5.0,
             "concurrency": 1}
SETTLE = 6.0                    # seconds with nothing new before an incident is counted
DEAD_LEAF_HOSTS = ("node07 mlx5_0", "node08 mlx5_0")


def test_copy_for():
    assert shorten_for("    for: 5m\n    for: 1h\n    for: 30s\n") == "    for: 5s\n    for: 60s\n    for: 1s\n"


def shorten_for(text: str) -> str:
    def cut(m):
        n, unit = int(m.group(2)), m.group(3)
        seconds = n * {"s": 1, "m": 60, "h": 3600}[unit]
        return f"{m.group(1)} {max(1, seconds // SCALE)}s"
    return re.sub(r"^(\s+for:) (\d+)([smh])$", cut, text, flags=re.M)


def firing(prom_url: str) -> list[dict]:
    doc = json.loads(http_get(f"{prom_url}/api/v1/alerts"))
    return [a for a in doc["data"]["alerts"] if a["state"] == "firing"]


def about(groups: dict[str, list[dict]], switch: str, port: str | None = None) -> dict[str, list[dict]]:
    """The groups (of one phase) that paged a new alert about this switch (port)."""
    return {k: v for k, v in groups.items()
            if any(a["labels"].get("switch") == switch and port in (None, a["labels"].get("port")) for a in v)}


def settle(pager: Pager, start: float, until=None, timeout: float = 90.0) -> None:
    """Wait for `until` (if any), then until no notification came for SETTLE seconds."""
    deadline = time.monotonic() + timeout
    if until is not None:
        wait_until(until, timeout, "the incident's alert")
    start = max(start, time.monotonic())        # counted from when the incident's alert fires in Prometheus
    # a quiet spell (SETTLE s without a notification) is the condition, time itself: checked each second, and
    # at the deadline what came so far is judged
    while time.monotonic() < deadline:
        quiet_for = time.monotonic() - max(pager.last(), start)
        if quiet_for >= SETTLE:
            return
        time.sleep(1.0)


def test_one_incident_one_page(sim_fabric, processes, tmp_path):
    began = time.monotonic()
    for tool in ("prometheus", "prometheus-alertmanager"):
        require_tool(tool, tool)
    fab = sim_fabric(fat_tree_netfile(spines=3, leaves=4, hosts_per_leaf=2, uplinks_per_spine=1))
    fab.start_sm()
    nodes = [start_sim_node(processes, fab, h, tmp_path, NODE_INTERVAL,
                                ready=b'fabricmon_ib_port_up{device="ibsim0",port="1"} 1', timeout=60)
                 for h in DEAD_LEAF_HOSTS]
    pager = Pager()
    results: dict[str, dict[str, list[dict]]] = {}
    try:
        with fabric_collector(fab, tmp_path / "collector", COLLECTOR, journal=False) as collector:
            am = shipped_alertmanager(processes, tmp_path, pager.port, waits="2s")
            rules = tmp_path / "fabricmon.rules.yml"
            rules.write_text(shorten_for(RULES.read_text()))
            prom = start_prometheus(processes, tmp_path, [
                {"job_name": "fabricmon", "static_configs": [{"targets": [f"127.0.0.1:{p}" for p in nodes]}]},
                {"job_name": "fabricmon-fabric", "static_configs": [{"targets": [f"127.0.0.1:{collector.port}"]}]}],
                rule_files=[rules], alertmanager_port=am)

            def incident(name: str, act, until=None) -> dict[str, list[dict]]:
                before, start = pager.seen(), time.monotonic()
                act()
                settle(pager, start, until)
                results[name] = pager.paged(start, before)
                return results[name]

            def fires(alert: str, **labels):
                return lambda: any(a["labels"]["alertname"] == alert
                                   and all(a["labels"].get(k) == v for k, v in labels.items())
                                   for a in firing(prom.url))

            # 0. a quiet fabric: both daemon kinds scraped, the node daemons have learned their leaf
            wait_until(lambda: len([t for t in json.loads(http_get(f"{prom.url}/api/v1/targets"))["data"]["activeTargets"]
                                    if t["health"] == "up"]) == 3, 60, "three targets up")
            wait_until(lambda: b'peer="leaf04"' in http_get(f"http://127.0.0.1:{nodes[0]}/metrics"), 60,
                       "node07 learned its leaf")
            quiet = incident("quiet fabric", lambda: time.sleep(5))        # what is tested: 5 s of nothing pages nothing
            assert quiet == {}, quiet

            # 1-3. at once, each on its own port: symbol errors under checks.symbol_errors' warning (720 in its
            # window) on leaf01 port 1, over it on leaf02 port 1, and leaf01 port 2 flapping (LinkDownedCounter
            # rises three times)
            def counters():
                fab.set_counter("leaf01", 1, "PortCounters.SymbolErrorCounter", 100)
                fab.set_counter("leaf02", 1, "PortCounters.SymbolErrorCounter", 1000)
                for n in (1, 2, 3):
                    fab.set_counter("leaf01", 2, "PortCounters.LinkDownedCounter", n)
                    time.sleep(3)       # what is tested: the counter moves between sweeps (every 2 s), three times
            both = incident("counters", counters, lambda: fires("FabricmonFabricSymbolErrors", switch="leaf02",
                                                                port="1")()
                            and fires("FabricmonFabricLinkFlapping", switch="leaf01", port="2")())
            # the collector read the burst under the threshold (so its silence is a verdict, not a miss)
            read = prom.query('fabricmon_fabric_port_symbol_errors_total{port="1"} * on (instance, job, switch_guid)'
                              ' group_left (switch) fabricmon_fabric_switch_info{switch="leaf01"}')
            assert [float(r["value"][1]) for r in read] == [100.0], read
            results["symbol errors under the threshold"] = under = about(both, "leaf01", "1")
            results["symbol errors over the threshold"] = over = about(both, "leaf02", "1")
            results["flapping port"] = flapping = about(both, "leaf01", "2")
            assert under == {}, under
            assert len(over) == 1, over
            assert {a["labels"]["alertname"] for a in next(iter(over.values()))} == {"FabricmonFabricSymbolErrors"}
            assert len(flapping) == 1, flapping
            assert len(both) == 2, both     # nothing else paged
            # issue 41.1: a warning opens a ticket, a critical alert pages
            assert [pager.receiver[k] for k in over] == ["fabricmon-tickets"], over
            assert [pager.receiver[k] for k in flapping] == ["fabricmon-pager"], flapping

            # 4-6. at once, on switches the counters left alone: a pulled leaf-spine cable (leaf03 port 5 to
            # spine03: both ends go down), a dead spine (every cable of spine01) and a dead leaf under the two
            # node daemons (every other cable of leaf04); each is one group, and nothing else pages (the four
            # leaves' ports and uplinks facing spine01 and the hosts' ports under leaf04 are muted)
            def failures():
                fab.unlink("leaf03", 5)
                for p in (1, 2, 3, 4):
                    fab.unlink("spine01", p)
                for p in (1, 2, 4, 5):
                    fab.unlink("leaf04", p)
            down = incident("switches and a cable", failures,
                            lambda: fires("FabricmonFabricPortDown", switch="leaf03", port="5")()
                            and fires("FabricmonMissingUplinks", switch="leaf03")()
                            and fires("FabricmonFabricSwitchUnresponsive", switch="spine01")()
                            and fires("FabricmonFabricSwitchUnresponsive", switch="leaf04")())
            results["pulled cable"] = cable = about(down, "leaf03")     # its port alert, and the uplinks one (no port)
            results["dead spine"] = spine = about(down, "spine01")
            results["dead leaf under node daemons"] = leaf = about(down, "leaf04")
            # the cable: one page (leaf03's uplinks check is critical) and one ticket (its port down, a warning)
            assert {pager.receiver[k]: sorted({a["labels"]["alertname"] for a in v}) for k, v in cable.items()} == {
                "fabricmon-pager": ["FabricmonMissingUplinks"], "fabricmon-tickets": ["FabricmonFabricPortDown"]}, cable
            assert len(spine) == 1, spine
            (alerts,) = spine.values()
            assert {a["labels"]["alertname"] for a in alerts} == {"FabricmonFabricSwitchUnresponsive"}, alerts
            assert {a["labels"]["switch"] for a in alerts} == {"spine01"}
            assert "It hides: " in alerts[0]["annotations"]["description"]
            assert len(leaf) == 1, leaf
            parent = [a for a in next(iter(leaf.values())) if a["labels"]["alertname"] == "FabricmonFabricSwitchUnresponsive"]
            assert parent and parent[0]["labels"]["switch"] == "leaf04", leaf
            hides = parent[0]["annotations"]["description"]
            assert "2 host port(s) cabled to it" in hides and "ibsim0" in hides, hides
            assert len(down) == 4, down     # nothing else paged: 3 pages (one per incident) and the cable's ticket
            assert [pager.receiver[k] for k in (*spine, *leaf)] == ["fabricmon-pager"] * 2
    finally:
        pager.close()
        lines = [f"{name}: {len(groups)} notification group(s): "
                 + "; ".join(f"{k} -> {sorted({a['labels']['alertname'] for a in v})}" for k, v in groups.items())
                 for name, groups in results.items()]
        lines += sorted({f"{a['labels']} {a['annotations'].get('description')}" for groups in results.values()
                         for v in groups.values() for a in v
                         if a["labels"]["alertname"] == "FabricmonFabricSwitchUnresponsive"})
        lines.append(f"the whole test: {time.monotonic() - began:.0f} s")
        (tmp_path / "counts.txt").write_text("\n".join(lines) + "\n")
        print("\n".join(lines))
