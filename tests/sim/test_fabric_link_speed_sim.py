"""Links judged against what their ends can do, on ibsim fabrics that mix generations on purpose
(docs/fabric-collector.md "What a link is judged against"):

- an HDR fat tree with EDR storage hosts, and a QDR tree with a DDR host: no degraded_link, through the
  MAD engine (both ends' PortInfo read: the EDR host runs at the best both ends enable) and through the
  tools (no end's abilities known under ibsim's SA: slower than its class since first seen, a note on
  the port);
- a host link retrained below what it ran at (an SMP Set, `ibportstate`, narrows it under the collector)
  is still CRITICAL (on the tools path here; tests/ship/test_fabric_dashboard.py plants the same under a
  live `fabric run` through the engine); the uplink that is EDR by design is not held against
  the HDR uplinks of its ECMP group's balance on the engine's path, but it is a capacity finding
  (uplink_capacity: hashing gives it an equal share);
- a 4x8x4 fat tree with one uplink of one leaf enabled at 1X on both ends (issue 52 item 3): exactly one
  finding, uplink_capacity, naming that leaf, the port and the capacity it loses;
- ibsim trains every link at the best both ends enable, so a net file's `1xHDR` is a link both ends
  enable only 1X: the engine reads it as such (ibsim cannot make a link run below what both ends enable)."""

from __future__ import annotations

import re

import pytest

from fabricmon.config import from_dict
from fabricmon.host import LiveIO
from fabricmon.pages import fabric_map
from fabricmon.pipeline.fabric import fabric_pipeline
from fabricmon.sim.fabric import TrafficDriver, fat_tree_netfile
from helpers import fabric_once

pytestmark = pytest.mark.sim

EDR_HOSTS = {"node01 mlx5_0[1]": "4xEDR", "node06 mlx5_0[1]": "4xEDR"}
LEAF1 = "0000000000200002"          # leaf01 with two spines (switch GUIDs count spines first)
LEAF1_OF_ONE, LEAF2_OF_ONE = "0000000000200001", "0000000000200002"     # ... with one spine


def degraded(text: str) -> dict[str, str]:
    return {m[1]: m[2] for m in re.finditer(r'^fabricmon_fabric_port_degraded(\{[^}]*\}) (\S+)$', text, re.M)
            if m[2] != "0.0"}


def status(text: str, check: str) -> set[str]:
    return {m[1] for m in re.finditer(rf'^fabricmon_fabric_check_status\{{check="{check}",[^}}]*\}} (\S+)$',
                                      text, re.M)}


@pytest.mark.parametrize("method", ["mad", "tools"])
def test_slower_by_design_hosts_raise_no_degraded_link(sim_fabric, tmp_path, method) -> None:
    fab = sim_fabric(fat_tree_netfile(spines=2, leaves=2, hosts_per_leaf=4, degraded=EDR_HOSTS))
    fab.run_sm()
    r = fabric_once(fab, tmp_path, method, {"sweep_method": method})
    assert f'fabricmon_fabric_sweep_method{{method="{method}"}} 1.0' in r.stdout
    assert not degraded(r.stdout) and status(r.stdout, "degraded_link") == {"0.0"}
    assert "degraded_link" not in r.stderr and "reseat" not in r.stderr


def test_ddr_host_on_a_qdr_tree_through_the_engine(sim_fabric, tmp_path) -> None:
    fab = sim_fabric(fat_tree_netfile(spines=1, leaves=2, hosts_per_leaf=2, speed="QDR",
                                      degraded={"node01 mlx5_0[1]": "4xDDR"}))
    fab.run_sm()
    r = fabric_once(fab, tmp_path, "mad", {"sweep_method": "mad"})
    assert not degraded(r.stdout) and status(r.stdout, "degraded_link") == {"0.0"}


def test_a_1x_net_file_link_is_what_both_ends_enable_under_ibsim(sim_fabric, tmp_path) -> None:
    fab = sim_fabric(fat_tree_netfile(spines=1, leaves=2, hosts_per_leaf=2, degraded={"node02 mlx5_0[1]": "1x"}))
    fab.run_sm()
    mad = fabric_once(fab, tmp_path, "mad", {"sweep_method": "mad"})
    tools = fabric_once(fab, tmp_path, "tools", {"sweep_method": "tools"})
    assert not degraded(mad.stdout)                          # both ends enable 1X only: not a broken cable
    assert degraded(tools.stdout) == {f'{{port="2",reason="width",switch_guid="{LEAF1_OF_ONE}"}}': "1.0"}   # class


def test_an_edr_uplink_by_design_stays_out_of_its_hdr_ecmp_group(sim_fabric, tmp_path) -> None:
    net = fat_tree_netfile(spines=2, leaves=2, hosts_per_leaf=2, uplinks_per_spine=2)
    # leaf01's second cable to spine02 (leaf port 6, spine02 port 2) is EDR at both ends
    net = net.replace('[6]\t"spine02"[2]\t# "spine02" lid 0 4xHDR', '[6]\t"spine02"[2]\t# "spine02" lid 0 4xEDR')
    net = net.replace('[2]\t"leaf01"[6]\t# "leaf01" lid 0 4xHDR', '[2]\t"leaf01"[6]\t# "leaf01" lid 0 4xEDR')
    assert net.count("4xEDR") == 2, net
    fab = sim_fabric(net)
    fab.run_sm()
    # equal traffic on the HDR uplinks, a trickle on the EDR one: in the group it would read 1.3x imbalanced
    traffic = TrafficDriver(fab, {"leaf01": {3: 0.4, 4: 0.4, 5: 0.4, 6: 0.02}})
    traffic.start()
    try:
        r = fabric_once(fab, tmp_path, "mad", {"sweep_method": "mad"}, "--sweeps", "3", "--interval", "1")
    finally:
        traffic.stop()
    assert not degraded(r.stdout)
    ratio = re.search(rf'^fabricmon_ecmp_imbalance_ratio\{{direction="up",switch="leaf01",switch_guid="{LEAF1}"\}} (\S+)$',
                      r.stdout, re.M)
    assert ratio is not None and float(ratio[1]) < 1.1, r.stdout[-2000:]
    assert status(r.stdout, "uplink_capacity") == {"0.0", "1.0"}          # leaf01: its EDR uplink, equal share


def test_a_narrow_uplink_enabled_so_on_both_ends_is_one_capacity_finding(sim_fabric, tmp_path) -> None:
    """4 spines, 8 leaves, 4 hosts each; leaf03's uplink to spine02 (leaf03 port 6, spine02 port 3) 1X on
    both ends (ibsim trains a link at the best both ends enable: enabled 1X on both): not degraded, but
    the one finding of the fabric, naming leaf03, port 6 and the capacity lost."""
    net = fat_tree_netfile(spines=4, leaves=8, hosts_per_leaf=4)
    net = net.replace('[6]\t"spine02"[3]\t# "spine02" lid 0 4xHDR', '[6]\t"spine02"[3]\t# "spine02" lid 0 1xHDR')
    net = net.replace('[3]\t"leaf03"[6]\t# "leaf03" lid 0 4xHDR', '[3]\t"leaf03"[6]\t# "leaf03" lid 0 1xHDR')
    assert net.count("1xHDR") == 2, net
    fab = sim_fabric(net)
    fab.run_sm()            # opensm --once: routes, then no master (the sm source off: its finding is ibsim's)
    r = fabric_once(fab, tmp_path, "mad", {"sweep_method": "mad", "sources": {"sm": {"enabled": False}}},
                    "--sweeps", "2", "--interval", "1")
    assert not degraded(r.stdout)
    found = [ln for ln in r.stderr.splitlines() if re.match(r"^(WARNING|CRITICAL|UNKNOWN) ", ln)]
    assert len(found) == 1, found
    assert found[0].startswith("WARNING uplink_capacity: leaf03 uplink port 6 is narrower or slower than the other 3 "
                               'of its 4 uplinks (4X HDR, 200 Gb/s each): port 6 to "spine02"[3] at 1X HDR (50 Gb/s)')
    assert "the uplinks carry 650 of 800 Gb/s (150 Gb/s, 19% lost)" in found[0]
    assert "run at 25% of the others' rate" in found[0]


def test_a_host_link_retrained_below_its_past_is_critical(sim_fabric, tmp_path) -> None:
    fab = sim_fabric(fat_tree_netfile(spines=1, leaves=2, hosts_per_leaf=2, degraded={"node04 mlx5_0[1]": "4xEDR"}))
    fab.run_sm()
    cfg = from_dict({"paths": {"state_dir": str(tmp_path)},
                     "fabric": {"cache_dir": str(tmp_path), "sweep_method": "tools"}})
    pipe = fabric_pipeline(cfg, LiveIO(env=fab.env(fab.hosts[0])))
    try:
        first = pipe.collect()
        assert not [f for f in first.findings if f.check == "degraded_link"]
        # no end's abilities known on this path (ibsim's SA): the EDR host is noted slower than its class
        notes = {k: p.note for k, p in first.fabric.ports.items() if p.note}
        assert list(notes) == [(LEAF2_OF_ONE, 2)]
        assert notes[(LEAF2_OF_ONE, 2)].startswith("slower than its link class (4X HDR): it has run at 4X EDR")
        details = fabric_map.switch(first, {"guid": LEAF2_OF_ONE})     # the map's switch details show it
        assert details is not None and "slower than its link class (4X HDR)" in details
        # leaf01 port 2 (node02) and port 1 (node01) retrain: one to EDR, one to 1X
        leaf01 = first.fabric.switches[LEAF1_OF_ONE].lid
        fab.run_tool(fab.hosts[0], "ibportstate", str(leaf01), "2", "espeed", "2", check=True)
        fab.run_tool(fab.hosts[0], "ibportstate", str(leaf01), "1", "width", "1", check=True)
        second = pipe.collect()
    finally:
        pipe.close()
    found = {f.port: f for f in second.findings if f.check == "degraded_link"}
    assert set(found) == {1, 2} and all(f.device == LEAF1_OF_ONE and f.status == 2 for f in found.values())
    assert "runs at 4X EDR," in found[2].message and "below the 4X HDR it ran at earlier (speed)" in found[2].message
    assert "runs at 1X HDR" in found[1].message and "(width)" in found[1].message
