"""The MAD engine against ibsim: libibumad through ctypes in a process started under umad2sim (the
engine's process must itself be preloaded; see docs/mad-engine.md), compared with what the
infiniband-diags tools read from the same simulator; the bare read (`python -m
fabricmon.sources.infiniband.mad`) asks what the daemon's sweep asks (mad.plan_targets): one end of each
inter-switch link, no counters of the ports never cabled.

ibsim changes both ends of a link for every fault these tests inject (Unlink, ReLink, and ibportstate's
width and espeed, which retrain the link at both ends, as hardware does). One thing ibsim does that
hardware cannot: `ibportstate <lid> <port> disable` leaves that end PhysState Disabled while the other
end stays LinkUp (on hardware the link goes down at both ends); a sweep that reads only the other end
reads such a link up. No test here or elsewhere in the suite disables a port that way."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from fabricmon.model.fabric import build_topology
from fabricmon.parsers.ibnetdiscover import parse_ibnetdiscover
from fabricmon.parsers.perfquery import parse_perfquery
from fabricmon.sim.fabric import fat_tree_netfile
from fabricmon.sources.infiniband.mad import plan_targets

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
        # each switch's traffic timed at its own answers (the sweep's SweepData.read_ago), within the read
        assert 0.0 <= r["read_s"] <= out["wall"], (disc.switches[g].name, r["read_s"], out["wall"])
        # the counters of every cabled port (a port never cabled and down exports none: not asked; where
        # the switch's error aggregate is not zero, its error counters from the per-port PortCounters)
        cabled = {str(p) for p in disc.switches[g].links}
        assert cabled <= set(r["ports"]) and all(v.get("transmit_bytes") is None for p, v in r["ports"].items() if p not in cabled)
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
    for b in (b for b in blocks if b.port in disc.switches[by_name["leaf01"]].links):
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
        assert len(s1["ports"]) >= len(disc.switches[spine01].links) - s1["unanswered"]
        # the switches reached through spine01 see some of its loss too; each answered (nearly) all
        for g, r in out.items():
            assert len(r["ports"]) + r["unanswered"] >= len(disc.switches[g].links), g


def silent_leaf(sim_fabric, tmp_path):
    """The simulated fabric with leaf04 silent (every MAD to it dropped): (fabric, topology, discovery, its GUID).
    A leaf: no other switch's MADs cross it."""
    fab = sim_fabric(fat_tree_netfile(**NET))
    fab.run_sm()
    topo, disc = discover(fab, tmp_path)
    dead = next(g for g, sw in disc.switches.items() if sw.name == "leaf04")
    for p in range(1, disc.switches[dead].nports + 1):
        fab.console(f'Error "leaf04"[{p}] 100')
    return fab, topo, disc, dead


def test_a_switch_that_does_not_answer_costs_only_its_own_requests(sim_fabric, tmp_path) -> None:
    fab, topo, disc, dead = silent_leaf(sim_fabric, tmp_path)
    out = engine_read(fab, topo, "--timeout-ms", "200")
    sw = out["switches"]
    assert sw[dead]["ports"] == {} and sw[dead]["unanswered"] >= 1
    # its inter-switch ports: the state read at their other ends (up); its host ports: unreached, not down
    isl = {str(p) for p, lk in disc.switches[dead].links.items() if lk.remote_type == "Switch"}
    assert sw[dead]["link_up"] == dict.fromkeys(isl, True)
    for g, r in sw.items():
        if g != dead:
            assert r["unanswered"] == 0 and len(r["ports"]) == len(disc.switches[g].links), disc.switches[g].name
    # ibsim answers a MAD it drops at once with a timed-out status (as the kernel does after the
    # timeout), so what a silent switch costs in time is tests/host/test_mad_engine.py's
    assert out["wall"] < 5, out["wall"]


def inter_switch_links(disc) -> list[tuple[tuple[str, int], tuple[str, int]]]:
    """Each link between two switches once, as ((guid, port) read, (guid, port) mirrored) in the plan."""
    targets, _ = plan_targets(build_topology(disc), set(disc.switches))
    return sorted(((t.guid, p), (g, q)) for t in targets for p, g, _lid, q in t.mirrors)


def test_the_bare_read_asks_one_end_of_each_inter_switch_link_and_no_counters_of_ports_never_cabled(sim_fabric, tmp_path) -> None:
    """The MADs of a steady sweep: the old plan's (every port's counters, the aggregate, every cabled
    port's PortInfo) less one per inter-switch link and one per port never cabled, exactly; the first
    sweep also asks each switch's ClassPortInfo and each far end's ability once."""
    fab = sim_fabric(fat_tree_netfile(**NET))
    fab.run_sm()
    topo, disc = discover(fab, tmp_path)
    isl = inter_switch_links(disc)
    sws = disc.switches.values()
    never = sum(sw.nports - len(sw.links) for sw in sws)
    host = sum(1 for sw in sws for lk in sw.links.values() if lk.remote_type != "Switch")
    before = sum(sw.nports + 1 + len(sw.links) for sw in sws)
    assert len(isl) == 2 * 4 * 2 and never > 0
    out = engine_read(fab, topo, "--sweeps", "3")
    first, *steady = out["sweeps"]
    for s in steady:
        assert s["engine"]["sent"] - s["engine"]["retried"] == before - len(isl) - never
        assert s["peer_reads"] == 0 and s["fallback_reads"] == 0
    assert first["peer_reads"] == len(isl) + host
    assert first["engine"]["sent"] - first["engine"]["retried"] == before - len(isl) - never + len(disc.switches) + len(isl) + host
    # both ends of every link have their state, width and speed, each end its own ability
    for g, sw in disc.switches.items():
        r = out["switches"][g]
        assert set(r["link_up"]) == {str(p) for p in sw.links} and all(r["link_up"].values())
        assert all(r["link"][str(p)][:2] == [4, "HDR"] and r["link"][str(p)][2] for p in sw.links)


def test_an_inter_switch_link_reads_down_at_both_ends_whichever_end_is_read_and_up_again_with_its_rate(sim_fabric, tmp_path) -> None:
    fab = sim_fabric(fat_tree_netfile(**NET))
    fab.run_sm()
    topo, disc = discover(fab, tmp_path)
    name = {g: sw.name for g, sw in disc.switches.items()}
    isl = inter_switch_links(disc)
    # one link read at its leaf, one read at its spine
    at_leaf = next(x for x in isl if name[x[0][0]].startswith("leaf"))
    at_spine = next(x for x in isl if name[x[0][0]].startswith("spine"))
    ends = [e for x in (at_leaf, at_spine) for e in x]
    for (g, p), _ in (at_leaf, at_spine):
        fab.unlink(name[g], p)
    fab.run_sm()                                    # LID routes around the pulled cables, as they would
    out = engine_read(fab, topo, "--sweeps", "1")
    sw = out["switches"]
    assert {(g, p) for g, r in sw.items() for p, v in r["link_up"].items() if not v} == {(g, str(p)) for g, p in ends}
    assert out["fallback_reads"] == 2                # a link read down: its other end read too (each its own)
    for (g, p), _ in (at_leaf, at_spine):
        fab.relink(name[g], p)
    out = engine_read(fab, topo, "--sweeps", "1")
    for g, p in ends:
        assert out["switches"][g]["link_up"][str(p)] is True and out["switches"][g]["link"][str(p)][:2] == [4, "HDR"]
    # retrained narrower and slower by a Set at the end that is not read (ibsim retrains both ends, as
    # hardware does): both ends read at 1X and EDR, each with its own ability (the end set enables 1X
    # only, EDR only), in the next sweep of a running reader (the far end's ability read again)
    (rg, rp), (mg, mp) = at_leaf
    (sg, sp), (ng, nq) = at_spine
    fab.run_tool(fab.hosts[0], "ibportstate", str(disc.switches[mg].lid), str(mp), "width", "1", check=True)
    fab.run_tool(fab.hosts[0], "ibportstate", str(disc.switches[ng].lid), str(nq), "espeed", "2", check=True)
    sw = engine_read(fab, topo, "--sweeps", "2")["switches"]
    assert sw[rg]["link"][str(rp)][:2] == sw[mg]["link"][str(mp)][:2] == [1, "HDR"]
    assert sw[mg]["link"][str(mp)][2] == [1] and sw[rg]["link"][str(rp)][2] == [1, 4]
    assert sw[sg]["link"][str(sp)][:2] == sw[ng]["link"][str(nq)][:2] == [4, "EDR"]
    assert "HDR" not in sw[ng]["link"][str(nq)][3] and "EDR" in sw[ng]["link"][str(nq)][3]
    assert "HDR" in sw[sg]["link"][str(sp)][3]


def test_a_silent_switch_leaves_its_neighbours_ends_read_from_their_own_end(sim_fabric, tmp_path) -> None:
    fab, topo, disc, dead = silent_leaf(sim_fabric, tmp_path)
    read_there = [m for r, m in inter_switch_links(disc) if r[0] == dead]
    assert read_there and len(read_there) < len(disc.switches[dead].links)
    out = engine_read(fab, topo, "--sweeps", "1")
    sw = out["switches"]
    assert sw[dead]["unanswered"] >= 1
    # its inter-switch ports take the state read at their other ends (up: ibsim drops the MADs, the links
    # stay up); its host ports are unreached, not down
    isl = {str(p) for p, lk in disc.switches[dead].links.items() if lk.remote_type == "Switch"}
    assert sw[dead]["link_up"] == dict.fromkeys(isl, True)
    assert out["fallback_reads"] == len(read_there)
    for g, r in sw.items():
        if g != dead:
            assert set(r["link_up"]) == {str(p) for p in disc.switches[g].links} and all(r["link_up"].values()), name
            assert r["unanswered"] == 0
