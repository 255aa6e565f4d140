"""Counter sets (issue 40): the default exposition carries every family the shipped rules and dashboards
read, the rest is opt-in by config (`server.collect`) and per scrape (`collect[]`), and the golden fabric
expositions keep their content: default plus the opt-in sets is the golden file, family for family."""

from __future__ import annotations

import dataclasses

import json
import re

import pytest
from helpers import REPO
from test_golden import FABRIC_BUNDLES, GOLDEN, _DURATIONS, fabric_exposition, normalise

from fabricmon.exporter import counter_sets
from fabricmon.config import ConfigError, from_dict
from fabricmon.exporter.catalogue import CATALOGUE

RULES = REPO / "fabricmon" / "deploy" / "prometheus" / "fabricmon.rules.yml"
DASHBOARDS = sorted((REPO / "fabricmon" / "deploy" / "grafana").glob("*.json"))
ALL = counter_sets.parse(["all"])
NAME = re.compile(r"(?<![\w:])(fabricmon_[a-z0-9_]+)")


def _family(name: str) -> str:
    """The catalogue family a sample name belongs to (counters carry _total, histograms _bucket ...)."""
    for m in CATALOGUE:
        if name == m.exposed_name or (m.type == "histogram" and name in
                                      (m.name + "_bucket", m.name + "_sum", m.name + "_count")):
            return m.name
    raise AssertionError(f"{name}: read by a shipped rule or panel, but no catalogue family")


def read_by_shipped_files() -> dict[str, set[str]]:
    """Every metric name a shipped rule (expressions and the queries of its annotations) or dashboard
    panel's expr reads -> the files reading it. Recording rules' own names (level:metric:op) are not
    metrics of the exporter and are left out by the pattern."""
    out: dict[str, set[str]] = {}
    texts = [(RULES.name, RULES.read_text())]
    for d in DASHBOARDS:
        doc = json.loads(d.read_text())
        exprs: list[str] = []

        def walk(x: object) -> None:
            if isinstance(x, dict):
                for k, v in x.items():
                    if k in ("expr", "query") and isinstance(v, str):
                        exprs.append(v)
                    else:
                        walk(v)
            elif isinstance(x, list):
                for v in x:
                    walk(v)
        walk(doc)
        texts.append((d.name, "\n".join(exprs)))
    for fname, text in texts:
        for name in NAME.findall(text):
            out.setdefault(name, set()).add(fname)
    return out


def test_every_set_is_declared_and_used() -> None:
    used = {m.counter_set for m in CATALOGUE}
    assert used == set(counter_sets.SETS), "a set with no family, or a family in an undeclared set"


def test_every_metric_a_shipped_rule_or_panel_reads_is_in_the_default_set() -> None:
    """... but for the `state` set's own families, which a rule may read from the state jobs only (the port-down
    alerts' fast path: a selector naming a state job, every time)."""
    names = read_by_shipped_files()
    assert len(names) > 50          # the rules and both dashboards were read
    rules = RULES.read_text()
    state_only = re.compile(r'\{job="fabricmon(?:-fabric)?-state"')
    outside = {}
    for n, files in names.items():
        m = next(m for m in CATALOGUE if m.name == _family(n))
        if m.counter_set == counter_sets.DEFAULT:
            continue
        reads = [rules[i.end():i.end() + 40] for i in re.finditer(rf"(?<![\w:]){n}(?![\w:])", rules)]
        if m.counter_set == "state" and files == {RULES.name} and reads and all(state_only.match(r) for r in reads):
            continue
        outside[n] = sorted(files)
    assert outside == {}, f"read by shipped files but not in the default counter set: {outside}"


def test_the_default_fabric_exposition_has_every_switch_port_family_the_rules_read() -> None:
    """Proven on the golden InfiniBand fabric (a replayed fat tree): each fabricmon_fabric_port_* family a
    rule or panel reads has samples in its default exposition (the transceiver families, which no replayed
    bundle carries in full, are proven on snmpsim by tests/ship/test_ethernet_dashboard.py)."""
    body = fabric_exposition(FABRIC_BUNDLES["infiniband"], counter_sets.DEFAULT_SETS)
    present = set(re.findall(r"^# TYPE (\S+) ", body, re.M))
    wanted = {_family(n) for n in read_by_shipped_files()
              if n.startswith("fabricmon_fabric_port_") and "_optics_" not in n}
    # the state set's own port_up is read from the state scrape (the fast path), not the default one
    wanted = {next(m.exposed_name for m in CATALOGUE if m.name == w and m.counter_set == counter_sets.DEFAULT)
              for w in wanted if any(m.name == w and m.counter_set == counter_sets.DEFAULT for m in CATALOGUE)}
    # Ethernet-only families (pause frames, optics) are proven on the Ethernet golden
    eth = fabric_exposition(FABRIC_BUNDLES["ethernet"], counter_sets.DEFAULT_SETS)
    present |= set(re.findall(r"^# TYPE (\S+) ", eth, re.M))
    assert wanted - present == set()


def _families(text: str) -> dict[str, list[str]]:
    out: dict[str, list[str]] = {}
    name = ""
    for ln in text.splitlines():
        if ln.startswith("# HELP "):
            name = ln.split()[2]
        out.setdefault(name, []).append(ln)
    return out


@pytest.mark.parametrize("kind", sorted(FABRIC_BUNDLES))
def test_the_default_exposition_is_the_golden_one_less_the_opt_in_families(kind: str) -> None:
    """The golden file is rendered with every set (so that it did not change); the default exposition is
    it, family for family and byte for byte, without the families of the opt-in sets."""
    golden = _families((GOLDEN / f"fabric-{kind}.prom").read_text())
    default = _families(normalise(fabric_exposition(FABRIC_BUNDLES[kind], counter_sets.DEFAULT_SETS), _DURATIONS))
    opt_in = {m.exposed_name for m in CATALOGUE if m.counter_set != counter_sets.DEFAULT}
    assert set(golden) - set(default) <= opt_in and set(golden) - set(default), "no family moved out"
    assert set(default) <= set(golden)
    for name, lines in default.items():
        assert lines == golden[name], name


def test_a_selection_adds_its_families_only() -> None:
    bundle = FABRIC_BUNDLES["infiniband"]
    default = set(re.findall(r"^# TYPE (\S+) ", fabric_exposition(bundle, counter_sets.DEFAULT_SETS), re.M))
    packets = set(re.findall(r"^# TYPE (\S+) ", fabric_exposition(bundle, frozenset({"packets"})), re.M))
    assert packets == {"fabricmon_fabric_port_transmit_packets_total", "fabricmon_fabric_port_receive_packets_total"}
    both = set(re.findall(r"^# TYPE (\S+) ",
                          fabric_exposition(bundle, counter_sets.parse(["default", "packets"])), re.M))
    assert both == default | packets


def test_the_config_names_its_sets() -> None:
    assert from_dict({}).serve.collect == ("default",)
    assert from_dict({"server": {"collect": ["default", "packets", "all"]}}).serve.collect == \
        ("default", "packets", "all")
    with pytest.raises(ConfigError, match=r"server\.collect\[1\].*unknown counter set 'packet'.*packets"):
        from_dict({"server": {"collect": ["default", "packet"]}})
    with pytest.raises(ValueError, match="unknown counter set"):
        counter_sets.parse(["nope"])
    assert counter_sets.parse(["all"]) == ALL == frozenset(counter_sets.SETS)


def test_the_shipped_scrape_config_names_its_sets() -> None:
    """The shipped Prometheus scrape config scrapes the default set at the sweep interval (no collect[]),
    and names the opt-in sets where it asks for them."""
    scrape = REPO / "fabricmon" / "deploy" / "prometheus" / "prometheus.yml"
    text = scrape.read_text()
    assert "fabricmon-fabric" in text
    for sets in re.findall(r"collect\[\]:\s*\[([^\]]*)\]", text):
        counter_sets.parse([s.strip().strip("'\"") for s in sets.split(",") if s.strip()])


@pytest.mark.parametrize("sets", [["default"], ["all"]])
def test_the_switch_port_fast_path_writes_what_prometheus_client_writes(sets: list[str]) -> None:
    """The renderer walks a section's switch ports once for every switch port family (Metric.port_value);
    prometheus_client's generate_latest over the same snapshot (Metric.samples) writes the same bytes, on a
    fabric with down, degraded and never-cabled ports (tests/fabric_snap.py)."""
    from fabric_snap import fabric_snapshot

    from fabricmon.exporter.render import Renderer, render_reference
    from fabricmon.model.snapshot import BUILD_BUCKETS, BuildStats
    from fabricmon.sim.fabric import fat_tree_netfile
    snap = fabric_snapshot(fat_tree_netfile(spines=2, leaves=3, hosts_per_leaf=2), sweeps=3,
                           errors={("leaf01", 1): 5}, drop=[("leaf02", 1)])
    snap = dataclasses.replace(snap, builds=BuildStats(1, 0.5, [1] * len(BUILD_BUCKETS)))     # a histogram prometheus_client can write
    chosen = counter_sets.parse(sets)
    ours = Renderer().render(snap, chosen)
    assert b"fabricmon_fabric_port_symbol_errors_total{" in ours
    assert ours == render_reference(snap, chosen)
