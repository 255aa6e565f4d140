"""Past one machine, end to end (issue 49): the reference deployment (fabricmon/deploy/scale: vmagent.yml, its
file_sd inventories and every component's command line in deployment.yml, run as they are apart from the
addresses and the times below) on 127.0.0.1, on a simulated fat tree (ibsim + a running opensm, the real
infiniband-diags):

  two shards x two replicas of `fabricmon fabric run` (4 processes), two `fabricmon run --replay` node
  daemons (a recorded DGX H100: no simulator client, see COLLECTOR);
  three vmagent members, each target scraped by two of them (-promscrape.cluster.replicationFactor=2),
  remote-writing into one VictoriaMetrics (-dedup.minScrapeInterval); two vmalerts evaluating the shipped
  rules on the store, each sending to both peers of an Alertmanager cluster (the shipped example); a
  webhook in the test receiving every notification.

Every sample of a shard's series is written four times (two replicas, two scrapers) and every alert sent
four times (two evaluators, two Alertmanagers). What is checked:

  (a) the store holds one copy of each series: for each shard, the set of (name, labels) in the store is
      the set in one of its collectors' own exposition (plus the target's labels), no series carries the
      replica label but the scraper's own (up, scrape_*), and the store keeps one sample per scrape
      interval of the four written;
  (b) a host cable pulled under a leaf of shard 1: one notification reaches the webhook (the shipped
      route's ticket, FabricmonFabricPortDown on that port), and nothing else does;
  (c) one replica of shard 1 SIGKILLed in the middle of a sweep: no gap in that shard's series in the store
      longer than one sweep interval, no notification at all; then its twin killed too: one notification,
      FabricmonFabricCollectorDown for the shard (FabricmonFabricShardAbsent muted by it), none about the
      shard's switches.

Test-time cuts, nothing else changed: the scrape and evaluation interval 1 s (15 s shipped), every `for:`
divided by 60 and the Alertmanager example's waits cut to 2 s (test_alerting_e2e's shorten_for and
shipped_alertmanager_config), the Alertmanager peers' --cluster.peer-timeout 2 s (15 s: how long the second
peer waits for the first's notification before sending its own), VictoriaMetrics' -search.latencyOffset 1 s
(30 s: how long a sample waits before queries see it). The fabric is smaller than bench's SuperPOD (7
switches): bench/scale_deployment.py runs the store side at SuperPOD size (docs/scale.md)."""

from __future__ import annotations

import json
import os
import signal
import time
import urllib.parse

import pytest
import yaml

from fabricmon.deploy import SCALE_FABRIC_TARGETS, SCALE_NODE_TARGETS, SCALE_VMAGENT, RULES
from fabricmon.sim.fabric import fat_tree_netfile
from helpers import free_port, scrape_samples
from ship_helpers import (ROOT, Pager, Prometheus, deployment_argv, http_get, shipped_alertmanager_config,
                          start_replay_daemon, wait_until)
from test_alerting_e2e import shorten_for

pytestmark = pytest.mark.sim

SPINES, LEAVES, HOSTS_PER_LEAF = 3, 4, 2     # shard 1 of 2 holds spine01 and leaf04 (their GUIDs hashed)
SCRAPE = "1s"                   # the scrape, evaluation and dedup interval (15s shipped)
SWEEP = 2.0                     # fabric.sweep_interval of every collector
# ibsim serves 10 clients at once: each collector's MAD engine is one, opensm one, and every tool a collector
# runs (discovery, the forwarding tables, the subnet manager's records) one while it runs; the node daemons
# replay a recorded DGX H100 (no client), and the four collectors start two at a time
COLLECTOR = {"sweep_interval": SWEEP, "discovery_interval": 60.0, "routing_interval": 120.0, "sm_interval": 30.0,
             "concurrency": 1}
NODE_BUNDLES = ("dgx-h100", "dgx-h100")
MEMBERS = 3                     # vmagent members (each target scraped by 2 of them)
QUIET = 8.0                     # seconds without a notification before an incident is judged
# what the scraper writes itself, per target (these carry `replica`)
SCRAPER_SERIES = ("up", "scrape_duration_seconds", "scrape_samples_scraped", "scrape_samples_post_metric_relabeling",
                  "scrape_series_added", "scrape_timeout_seconds")


def series_key(name: str, labels: dict) -> tuple:
    """(name, labels) as a store keeps a series: a label with an empty value is no label."""
    return (name, tuple(sorted((k, v) for k, v in labels.items() if v != "")))


def stored_series(store: Prometheus, selector: str) -> set[tuple]:
    """The store's series matching `selector` that have a sample in its lookback now, as (name, labels)."""
    out = set()
    for r in store.query(selector):
        labels = dict(r["metric"])
        out.add(series_key(labels.pop("__name__"), labels))
    return out


def notified(pager: Pager, since: float) -> list[tuple[str, str, tuple]]:
    """Every notification after `since`: (receiver, status, the alerts' alertnames and switches, sorted)."""
    with pager.lock:
        return [(n["receiver"], n["status"], tuple(sorted(
            (a["status"], a["labels"]["alertname"], a["labels"].get("switch", ""), a["labels"].get("instance", ""))
            for a in n["alerts"]))) for n in pager.notifications if n["at"] >= since]


def quiet_for(pager: Pager, seconds: float, start: float, timeout: float = 60.0) -> None:
    """Until no notification came for `seconds` (counted from `start` at the earliest)."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline and time.monotonic() - max(pager.last(), start) < seconds:
        time.sleep(0.5)


def test_two_shards_of_two_replicas_one_copy_one_page(sim_fabric, processes, tmp_path):
    began = time.monotonic()
    fab = sim_fabric(fat_tree_netfile(spines=SPINES, leaves=LEAVES, hosts_per_leaf=HOSTS_PER_LEAF))
    fab.start_sm()
    conf = tmp_path / "conf"
    conf.mkdir()
    log: list[str] = []

    # the collectors: one per shard per (simulated) host, as deployment.yml runs them
    collectors: dict[tuple[int, str], tuple[int, object]] = {}
    for shard in (0, 1):
        for replica in ("a", "b"):
            name = f"shard{shard}{replica}"
            (tmp_path / name / "fabric").mkdir(parents=True)
            cfg = tmp_path / f"{name}.yml"
            cfg.write_text(json.dumps({"paths": {"state_dir": str(tmp_path / name)}, "fabric": COLLECTOR}))
            port = free_port()
            p = processes.start(f"fabricmon-{name}", [*deployment_argv("fabricmon-fabric", shard=str(shard), shards="2",
                                                            listen=f"127.0.0.1:{port}"),
                                                      "--config", str(cfg), "--log-level", "warning"],
                                env=fab.env(fab.hosts[0]), cwd=ROOT)
            collectors[(shard, replica)] = (port, p)
        for replica in ("a", "b"):
            port, p = collectors[(shard, replica)]
            wait_until(lambda: p.poll() is None and b"fabricmon_fabric_sweep_duration_seconds " in http_get(
                f"http://127.0.0.1:{port}/metrics"), 60, lambda: f"collector {shard}{replica} swept: {processes.log(p)}")
    nodes = [start_replay_daemon(processes, b) for b in NODE_BUNDLES]

    # the inventories: the shipped examples' targets in order, each given a collector (node daemon) of the test
    fabric_targets = json.loads(SCALE_FABRIC_TARGETS.read_text())
    for group in fabric_targets:
        shard = int(group["labels"]["instance"].rsplit("shard", 1)[1])
        group["targets"] = [f"127.0.0.1:{collectors[(shard, group['labels']['replica'])][0]}"]
    (conf / SCALE_FABRIC_TARGETS.name).write_text(json.dumps(fabric_targets))
    node_targets = json.loads(SCALE_NODE_TARGETS.read_text())
    node_targets[0]["targets"] = [f"127.0.0.1:{p}" for p in nodes]
    (conf / SCALE_NODE_TARGETS.name).write_text(json.dumps(node_targets))
    scrape = yaml.safe_load(SCALE_VMAGENT.read_text())
    scrape["global"].update(scrape_interval=SCRAPE, scrape_timeout=SCRAPE)
    (conf / SCALE_VMAGENT.name).write_text(json.dumps(scrape))
    rules = conf / RULES.name
    rules.write_text(shorten_for(RULES.read_text()))
    pager = Pager()
    am_cfg = conf / "fabricmon.alertmanager.yml"
    am_cfg.write_text(json.dumps(shipped_alertmanager_config(pager.port, waits="2s")))

    # the store
    vm_port = free_port()
    vm = processes.start("victoria-metrics", [*deployment_argv("victoria-metrics", listen=f"127.0.0.1:{vm_port}",
                                                    data=str(tmp_path / "vm"), scrape_interval=SCRAPE),
                                              "-search.latencyOffset=1s", "-loggerLevel=WARN"])
    store = Prometheus(f"http://127.0.0.1:{vm_port}")
    wait_until(lambda: vm.poll() is None and http_get(f"{store.url}/health") == b"OK", 30, "victoria-metrics")
    # the Alertmanager pair
    am_ports, gossip = [free_port(), free_port()], [free_port(), free_port()]
    for i in (0, 1):
        processes.start(f"alertmanager{i}", [
            *deployment_argv("alertmanager", config_dir=str(conf), data=str(tmp_path / f"am{i}"),
                  listen=f"127.0.0.1:{am_ports[i]}", cluster_listen=f"127.0.0.1:{gossip[i]}",
                  peer=f"127.0.0.1:{gossip[1 - i]}"),
            "--cluster.peer-timeout=2s", "--log.level=warn"])
    for i in (0, 1):
        wait_until(lambda: len(json.loads(http_get(f"http://127.0.0.1:{am_ports[i]}/api/v2/status"))["cluster"]
                               ["peers"]) == 2, 30, f"alertmanager {i} sees its peer")
    # the scrapers and the evaluators
    for member in range(MEMBERS):
        processes.start(f"vmagent{member}", [
            *deployment_argv("vmagent", listen=f"127.0.0.1:{free_port()}", config_dir=str(conf), members=str(MEMBERS),
                  member=str(member), store=store.url, data=str(tmp_path / f"vmagent{member}")),
            "-loggerLevel=WARN"])
    for i in (0, 1):
        processes.start(f"vmalert{i}", [
            *deployment_argv("vmalert", listen=f"127.0.0.1:{free_port()}", rules=str(rules), store=store.url,
                  alertmanager_a=f"http://127.0.0.1:{am_ports[0]}", alertmanager_b=f"http://127.0.0.1:{am_ports[1]}",
                  scrape_interval=SCRAPE),
            "-loggerLevel=WARN"])
    up = 'up{job=~"fabricmon|fabricmon-fabric"} == 1'
    wait_until(lambda: len(store.query(up)) == 6, 60, lambda: f"six targets up in the store: {store.query(up)}")
    log.append(f"deployment up: {time.monotonic() - began:.0f} s")

    # (a) one copy of each series: the store's series of each shard are one collector's exposition's
    def one_copy(shard: int) -> bool:
        own = {series_key(name, {**dict(labels), "instance": f"rail0-shard{shard}", "job": "fabricmon-fabric",
                                 "fabric": "rail0"})
               for name, labels in scrape_samples(collectors[(shard, "a")][0])}
        held = {k for k in stored_series(store, f'{{job="fabricmon-fabric",instance="rail0-shard{shard}"}}')
                if k[0] not in SCRAPER_SERIES and ":" not in k[0]}
        one_copy.diff = (shard, len(own), len(held), sorted(own ^ held)[:5])
        return own == held
    for shard in (0, 1):
        wait_until(lambda: one_copy(shard), 30, lambda: f"the store holds one collector's series: {one_copy.diff}")
        log.append(f"shard {shard}: {one_copy.diff[1]} series in the exposition and in the store")
    replicated = store.query('count({job="fabricmon-fabric",replica!=""}) by (__name__)')
    assert {r["metric"]["__name__"] for r in replicated} <= set(SCRAPER_SERIES), replicated
    # four writers of every sample (two replicas, two scrapers), one sample a second kept
    kept = store.query('count_over_time(fabricmon_fabric_switches{instance="rail0-shard1"}[10s])')
    assert len(kept) == 1 and 8 <= float(kept[0]["value"][1]) <= 12, kept

    # (b) a cable pulled under shard 1: a leaf of shard 1's first host cable (to a host no daemon watches)
    switches = {dict(labels)["switch"] for name, labels in scrape_samples(collectors[(1, "a")][0])
                if name == "fabricmon_fabric_switch_info"}
    leaf = min(s for s in switches if s.startswith("leaf"))
    quiet_for(pager, 3.0, time.monotonic())
    start = time.monotonic()
    fab.unlink(leaf, 1)
    wait_until(lambda: notified(pager, start), 60, "the cable's notification")
    quiet_for(pager, QUIET, start)
    cable = notified(pager, start)
    log.append(f"cable on {leaf} port 1: {cable}")
    assert cable == [("fabricmon-tickets", "firing", (("firing", "FabricmonFabricPortDown", leaf, "rail0-shard1"),))], cable
    start = time.monotonic()
    fab.relink(leaf, 1)
    wait_until(lambda: [n for n in notified(pager, start) if n[1] == "resolved"], 60,
               lambda: f"the cable's alert resolved: {notified(pager, start)}")
    quiet_for(pager, 3.0, start)

    # (c) one replica of shard 1 SIGKILLed mid-sweep: its next sweep starts one interval after the last began
    port, victim = collectors[(1, "a")]
    last = scrape_samples(port)
    began_last = last[("fabricmon_snapshot_timestamp_seconds", ())] - last[("fabricmon_fabric_sweep_duration_seconds", ())]
    mid = began_last + SWEEP + last[("fabricmon_fabric_sweep_duration_seconds", ())] / 2
    while mid < time.time():
        mid += SWEEP
    time.sleep(mid - time.time())
    killed, start = time.time(), time.monotonic()
    os.kill(victim.pid, signal.SIGKILL)
    victim.wait(timeout=10)
    wait_until(lambda: store.query('up{instance="rail0-shard1",replica="a"} == 0'), 20, "the killed replica down")
    quiet_for(pager, QUIET + 5.0, start)      # CollectorDown's `for:` (5 s) and the route's waits would have passed
    assert notified(pager, start) == [], notified(pager, start)
    # no gap in the shard's series: each of its switches' samples in the store, from 10 s before the kill
    raw = http_get(f"{store.url}/api/v1/export?" + urllib.parse.urlencode({
        "match[]": '{__name__="fabricmon_fabric_switch_info",instance="rail0-shard1"}', "start": f"{killed - 10:.3f}"}))
    gaps = {}
    for line in raw.decode().splitlines():
        row = json.loads(line)
        ts = sorted(row["timestamps"])
        assert ts[0] / 1000 < killed - 5 and ts[-1] / 1000 > time.time() - 5, row["metric"]
        gaps[row["metric"]["switch"]] = max(b - a for a, b in zip(ts, ts[1:])) / 1000
    assert set(gaps) == switches and max(gaps.values()) <= SWEEP, gaps
    log.append(f"one replica killed: longest gap per switch {gaps}")

    # both replicas gone: the shard's collector is down, one page, nothing about its switches
    port, twin = collectors[(1, "b")]
    start = time.monotonic()
    os.kill(twin.pid, signal.SIGKILL)
    twin.wait(timeout=10)
    wait_until(lambda: notified(pager, start), 60, "the lost shard paged")
    quiet_for(pager, QUIET, start)
    lost = notified(pager, start)
    log.append(f"both replicas killed: {lost}")
    assert [(r, s, alerts) for r, s, alerts in lost] == [
        ("fabricmon-pager", "firing", (("firing", "FabricmonFabricCollectorDown", "", "rail0-shard1"),))], lost
    log.append(f"the whole test: {time.monotonic() - began:.0f} s")
    (tmp_path / "counts.txt").write_text("\n".join(log) + "\n")
    print("\n".join(log))
    pager.close()
