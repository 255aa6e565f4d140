"""The MAD engine against ibsim: libibumad through ctypes in a process started under umad2sim (the
engine's process must itself be preloaded; see docs/mad-engine.md), compared with what the
infiniband-diags tools read from the same simulator."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from fabricmon.parsers.ibnetdiscover import parse_ibnetdiscover
from fabricmon.parsers.perfquery import parse_perfquery
from fabricmon.sim.fabric import fat_tree_netfile

pytestmark = pytest.mark.sim

NET = dict(spines=2, leaves=4, hosts_per_leaf=2, uplinks_per_spine=2)


def engine_read(fab, topo, *args: str) -> dict:
    r = subprocess.run([sys.executable, "-m", "fabricmon.sources.infiniband.mad", str(topo), *args],
                       env=fab.env(fab.hosts[0]), capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stderr
    return json.loads(r.stdout)


def discover(fab, tmp_path):
    disc = fab.run_tool(fab.hosts[0], "ibnetdiscover", timeout=60, check=True).stdout
    topo = tmp_path / "topology.txt"
    topo.write_text(disc)
    return topo, parse_ibnetdiscover(disc)


def test_engine_reads_what_perfquery_reads_and_the_link_state_of_every_cabled_port(sim_fabric, tmp_path) -> None:
    fab = sim_fabric(fat_tree_netfile(**NET))
    fab.run_sm()
    fab.set_counter("leaf01", 3, "PortCounters.SymbolErrorCounter", 7)
    fab.set_counter("spine02", 2, "PortCounters.PortXmitWait", 1000)
    fab.set_counter("leaf02", 4, "PortCountersExtended.PortXmitData", 5_000_000_000)
    fab.unlink("leaf03", 5)
    fab.run_sm()                                    # the SM routes around the pulled cable, as it would
    topo, disc = discover(fab, tmp_path)
    by_name = {sw.name: g for g, sw in disc.switches.items()}
    out = engine_read(fab, topo)
    sw = out["switches"]
    assert set(sw) == set(disc.switches)
    for g, r in sw.items():
        assert r["errors_ok"] and r["unanswered"] == 0 and r["failed"] == [], (disc.switches[g].name, disc.switches[g].lid, r["failed"], r["unanswered"])
        assert set(r["ports"]) == {str(p) for p in range(1, disc.switches[g].nports + 1)}
        assert set(r["link_up"]) == {str(p) for p in disc.switches[g].links}
    leaf01, spine02, leaf02 = sw[by_name["leaf01"]], sw[by_name["spine02"]], sw[by_name["leaf02"]]
    assert leaf01["ports"]["3"]["symbol_errors"] == 7
    assert all(v["symbol_errors"] == 0 for p, v in leaf01["ports"].items() if p != "3")
    assert spine02["ports"]["2"]["transmit_wait"] == 1000
    # 64-bit, raw (4-octet words); ibsim counts the MADs that crossed the port since as traffic
    assert 5_000_000_000 <= leaf02["ports"]["4"]["transmit_bytes"] < 5_000_100_000
    # every port's error counters equal perfquery's (the traffic counters move: ibsim counts MADs as traffic)
    lid = disc.switches[by_name["leaf01"]].lid
    pq = fab.run_tool(fab.hosts[0], "perfquery", "-l", str(lid), "255", check=True).stdout
    blocks = [b for b in parse_perfquery(pq) if b.port != 255]
    assert len(blocks) == disc.switches[by_name["leaf01"]].nports
    for b in blocks:
        for name in ("symbol_errors", "link_downed", "receive_errors", "transmit_discards", "vl15_dropped"):
            assert leaf01["ports"][str(b.port)][name] == b.counters[name], (b.port, name)
    # the pulled cable: down on both ends (ibnetdiscover ran after the Unlink, so the topology no
    # longer lists it; its peer's own ports are all read)
    leaf03 = by_name["leaf03"]
    assert "5" not in sw[leaf03]["link_up"]
    assert all(sw[g]["link_up"].values() for g in sw)


def test_a_pulled_cable_reads_down_and_30_percent_loss_on_a_switch_reads_no_port_down(sim_fabric, tmp_path) -> None:
    fab = sim_fabric(fat_tree_netfile(**NET))
    fab.run_sm()
    topo, disc = discover(fab, tmp_path)            # the topology before the cable is pulled
    by_name = {sw.name: g for g, sw in disc.switches.items()}
    leaf03, spine01 = by_name["leaf03"], by_name["spine01"]
    peer = disc.switches[leaf03].links[5]
    fab.unlink("leaf03", 5)
    fab.run_sm()                                    # LID routes around the pulled cable
    out = engine_read(fab, topo)["switches"]
    assert out[leaf03]["link_up"]["5"] is False
    assert out[peer.remote_guid]["link_up"][str(peer.remote_port)] is False
    assert sum(not v for r in out.values() for v in r["link_up"].values()) == 2
    fab.relink("leaf03", 5)
    for p in range(1, disc.switches[spine01].nports + 1):
        fab.console(f'Error "spine01"[{p}] 30')
    for _ in range(2):
        res = engine_read(fab, topo)
        assert res["engine"]["retried"] > 0             # the loss happened, and was retried
        out = res["switches"]
        assert set(out) == set(disc.switches)
        down = [(g, p) for g, r in out.items() for p, v in r["link_up"].items() if not v]
        assert not down, f"30% loss on spine01: ports read down: {down}"
        # the lossy switch: retries got (nearly) everything; what stayed unanswered is counted, not zero
        s1 = out[spine01]
        assert len(s1["link_up"]) + s1["unanswered"] >= len(disc.switches[spine01].links)
        assert len(s1["ports"]) >= disc.switches[spine01].nports - s1["unanswered"]
        # the switches reached through spine01 see some of its loss too; each answered (nearly) all
        for g, r in out.items():
            assert len(r["ports"]) + r["unanswered"] >= disc.switches[g].nports, g


def test_a_switch_that_does_not_answer_costs_only_its_own_requests(sim_fabric, tmp_path) -> None:
    fab = sim_fabric(fat_tree_netfile(**NET))
    fab.run_sm()
    topo, disc = discover(fab, tmp_path)
    by_name = {sw.name: g for g, sw in disc.switches.items()}
    dead = by_name["leaf04"]                        # a leaf: no other switch's MADs cross it
    for p in range(1, disc.switches[dead].nports + 1):
        fab.console(f'Error "leaf04"[{p}] 100')
    out = engine_read(fab, topo, "--timeout-ms", "200")
    sw = out["switches"]
    assert sw[dead]["ports"] == {} and sw[dead]["link_up"] == {} and sw[dead]["unanswered"] >= 1
    for g, r in sw.items():
        if g != dead:
            assert r["unanswered"] == 0 and len(r["ports"]) == disc.switches[g].nports, disc.switches[g].name
    # ibsim answers a MAD it drops at once with a timed-out status (as the kernel does after the
    # timeout), so what a silent switch costs in time is tests/host/test_mad_engine.py's
    assert out["wall"] < 5, out["wall"]
