"""Isolating a fabric port, end to end on ibsim with a running opensm: `fabricmon fabric run` (its own process,
its MAD engine on the simulator) with remediation in `act` disables a flapping inter-switch link and a link over
its BER budget with SubnSet(PortInfo) within two sweeps; the end it set reads Disabled (the real smpquery); once
the link is down at both ends as hardware takes it (ibsim does not: tests/remediation/simkit.py), opensm routes
around it (the real dump_fts); after the clean window the port is re-enabled and, trained, stays up. In
`dry_run` the same decisions are logged and nothing is touched; `off` decides nothing. A restart in the middle
of the clean window resumes the window; `fabricmon actions undo` re-enables a port at once; an SMP Set left
unanswered is reported failed and retried while the collector keeps serving."""

from __future__ import annotations

import time
import urllib.request

from helpers import sample_value, scrape_samples, scrape_until
from simkit import Collector, hardware_down, hardware_trains, lids, port_phys, routes_through

from fabricmon.sim.fabric import fat_tree_netfile

# leaf01: hosts on ports 1-2, uplinks 3-4 to spine01 (its ports 1-2), 5-6 to spine02 (its ports 1-2). The collector
# runs on node01, below leaf01: the ports set are leaf01's, so that the Set's answer never crosses the link it
# takes down (ibsim keeps routing through it until the SM reroutes, which its half-disabled link never lets it do)
NET = dict(spines=2, leaves=2, hosts_per_leaf=2, uplinks_per_spine=2)
BER_PORT, FLAP_PORT = 3, 5
SWEEP = 1.0
# counter windows of 30 s (the BER budget's over it: 1e-11 x 200 Gb/s x 30 s = 60 symbol errors); a clean window
# of 12 s
CHECKS = {"symbol_errors": {"window": 30}, "link_flap": {"window": 30}}


def doc(mode: str, **iso) -> dict:
    return {"fabric": {"sweep_interval": SWEEP, "discovery_interval": 3.0}, "checks": CHECKS,
            "remediation": {"isolate_port": {"mode": mode, "clean_window": 12, **iso}, "retry_first": 1.0,
                            "retry_max": 2.0}}


def ready(c: Collector) -> None:
    c.wait(lambda: (lambda s: sample_value(s, "fabricmon_fabric_switches") == 4
                    and sample_value(s, "fabricmon_fabric_sweep_method", method="mad") == 1)(scrape_samples(c.port)),
           60, "the collector reads the fabric through its MAD engine")
    time.sleep(2 * SWEEP)           # a few sweeps of history: the next error is a rise


def inject(fab) -> float:
    fab.set_counter("leaf01", BER_PORT, "PortCounters.SymbolErrorCounter", 5000)       # far over its budget
    fab.set_counter("leaf01", FLAP_PORT, "PortCounters.LinkDownedCounter", 4)          # flapped 4 times
    return time.monotonic()


def by_port(actions: list[dict]) -> dict[int, dict]:
    return {a["port"]: a for a in actions if a["kind"] == "isolate_port"}


def sweeps(c: Collector) -> float:
    return sample_value(scrape_samples(c.port), "fabricmon_source_runs_total", source="sweep") or 0.0


def test_act_isolates_within_two_sweeps_the_sm_routes_around_and_the_port_comes_back(sim_fabric, tmp_path) -> None:
    fab = sim_fabric(fat_tree_netfile(**NET))
    fab.start_sm(extra_args=("-s", "1"))
    lid = lids(fab)
    c = Collector(fab, tmp_path, doc("act")).start()
    try:
        ready(c)
        assert port_phys(fab, lid["leaf01"], BER_PORT) == "LinkUp"
        before = routes_through(fab, "leaf01", BER_PORT)
        assert before, "opensm routes some destinations through leaf01 port 3 to begin with"
        n0 = sweeps(c)
        t0 = inject(fab)
        # the sweeps counted in the scrape that first shows both isolated (not after a `fabricmon actions`,
        # a process that takes seconds on a loaded machine while the sweeps go on)
        s = c.wait(lambda: (lambda s: s if (sample_value(s, "fabricmon_remediation_isolated_ports", mode="act") or 0) >= 2
                            else None)(scrape_samples(c.port)), 30, "both ports isolated")
        took = time.monotonic() - t0
        swept = (sample_value(s, "fabricmon_source_runs_total", source="sweep") or 0) - n0
        assert swept <= 2 + 1, f"isolated after {swept:g} sweeps ({took:.1f} s)"     # +1: the sweep in flight
        got = by_port(c.actions())
        assert {BER_PORT, FLAP_PORT} <= {p for p, x in got.items() if x["state"] == "done"}, got
        ber, flap = got[BER_PORT], got[FLAP_PORT]
        assert (ber["check"], flap["check"]) == ("symbol_errors", "link_flap")
        assert ber["mode"] == "act" and ber["reason"].startswith("CRITICAL symbol_errors: leaf01")
        assert "SubnSet(PortInfo) answered: PortPhysicalState Disabled" in ber["note"]
        # the end fabricmon set, read by the real smpquery (GUIDE 18: check the end you set)
        assert port_phys(fab, lid["leaf01"], BER_PORT) == "Disabled"
        assert port_phys(fab, lid["leaf01"], FLAP_PORT) == "Disabled"
        # one log line per decision: what, why, the evidence, the cap
        done = [ln for ln in c.lines() if ln.get("event") == "remediation isolated"]
        assert len(done) == 2 and all(ln["cap"] and ln["evidence"] and ln["why"] for ln in done), done
        print(f"\nisolated within {swept:g} sweeps, {took:.1f} s after the errors")
        # the map marks them and says the mode (from the build after the record: waited for)
        def map_page() -> str | None:
            page = urllib.request.urlopen(f"http://127.0.0.1:{c.port}/", timeout=10).read().decode()
            return page if page.count('data-isolated="') == 2 else None
        page = c.wait(map_page, 10, "the map marks both isolated links")
        assert 'data-remediation="isolate_port act, drain_node off"' in page

        # the hardware takes the links down at both ends; opensm routes around them
        for p in (BER_PORT, FLAP_PORT):
            hardware_down(fab, "leaf01", p)
        c.wait(lambda: not routes_through(fab, "leaf01", BER_PORT) and not routes_through(fab, "leaf01", FLAP_PORT)
               and not routes_through(fab, "spine01", 1) and not routes_through(fab, "spine02", 1), 30,
               "opensm's forwarding tables stop using the isolated links")
        scrape_until(c.port, ("fabricmon_remediation_isolated_ports", {"mode": "act"}, 2))

        # the clean window (12 s without a new error) ends: re-enabled; trained, the links stay up
        back = c.wait(lambda: (lambda a: a if all(a[p]["state"] == "returned" for p in (BER_PORT, FLAP_PORT))
                               else None)(by_port(c.actions())), 40, "both ports re-enabled")
        assert "re-enabled" in back[BER_PORT]["note"]
        assert port_phys(fab, lid["leaf01"], BER_PORT) == "Polling"          # enabled: the link trains
        for p in (BER_PORT, FLAP_PORT):
            hardware_trains(fab, "leaf01", p)
        c.wait(lambda: port_phys(fab, lid["leaf01"], BER_PORT) == "LinkUp", 20, "the link trained")
        time.sleep(6 * SWEEP)
        assert port_phys(fab, lid["leaf01"], BER_PORT) == "LinkUp" == port_phys(fab, lid["leaf01"], FLAP_PORT)
        assert [a for a in c.actions() if a["state"] not in ("returned",)] == [], "not isolated again"
        c.wait(lambda: routes_through(fab, "leaf01", BER_PORT), 30, "opensm routes through it again")
    finally:
        c.stop()


def test_dry_run_only_logs_and_off_touches_nothing(sim_fabric, tmp_path) -> None:
    fab = sim_fabric(fat_tree_netfile(**NET))
    fab.start_sm(extra_args=("-s", "1"))
    lid = lids(fab)
    (tmp_path / "dry").mkdir()
    dry = Collector(fab, tmp_path / "dry", doc("dry_run"), "dry").start()
    try:
        ready(dry)
        inject(fab)
        got = dry.wait(lambda: (lambda a: a if {BER_PORT, FLAP_PORT} <= set(a) else None)(by_port(dry.actions())), 30,
                       "both decisions made")
        assert {a["mode"] for a in got.values()} == {"dry_run"}
        assert all(a["note"].startswith("dry run: would have disabled") for a in got.values())
        assert port_phys(fab, lid["leaf01"], BER_PORT) == "LinkUp" == port_phys(fab, lid["leaf01"], FLAP_PORT)
        lines = [ln for ln in dry.lines() if ln.get("event") == "remediation isolate (dry run)"]
        assert len(lines) == 2 and {ln["result"] for ln in lines} == {"dry_run"}
        scrape_until(dry.port, ("fabricmon_remediation_actions_total",
                                {"action": "isolate_port", "mode": "dry_run", "result": "dry_run"}, 2),
                     ("fabricmon_remediation_mode", {"action": "isolate_port"}, 1))
        time.sleep(3 * SWEEP)
        assert port_phys(fab, lid["leaf01"], BER_PORT) == "LinkUp"
    finally:
        dry.stop()
    (tmp_path / "off").mkdir()
    off = Collector(fab, tmp_path / "off", doc("off"), "off").start()
    try:
        ready(off)
        fab.set_counter("leaf01", BER_PORT, "PortCounters.SymbolErrorCounter", 20000)
        off.wait(lambda: any(f["check"] == "symbol_errors" and f["status"] == 2 and f["port"] == BER_PORT
                             for f in findings(off.port)), 30, "the finding is raised")
        time.sleep(3 * SWEEP)
        assert off.actions() == [] and port_phys(fab, lid["leaf01"], BER_PORT) == "LinkUp"
        assert not [ln for ln in off.lines() if str(ln.get("event", "")).startswith("remediation isol")]
    finally:
        off.stop()


def findings(port: int) -> list[dict]:
    import json
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/api/v1/findings", timeout=5) as r:
        return json.loads(r.read())["findings"]


def action_of(c: Collector, port: int, state: str | None = None):
    def pred():
        a = by_port(c.actions()).get(port)
        return a if a is not None and (state is None or a["state"] == state) else None
    return pred


def test_a_restart_resumes_the_clean_window_a_hand_enable_is_respected_and_undo_acts_at_once(sim_fabric, tmp_path) -> None:
    fab = sim_fabric(fat_tree_netfile(**NET))
    fab.start_sm(extra_args=("-s", "1"))
    lid = lids(fab)
    c = Collector(fab, tmp_path, doc("act", clean_window=25)).start()
    try:
        ready(c)
        inject(fab)
        ber = c.wait(action_of(c, BER_PORT, "done"), 30, "port 3 isolated")
        c.wait(action_of(c, FLAP_PORT, "done"), 30, "port 5 isolated")
        returns_at = ber["returns_at"]
        assert returns_at == ber["clean_since"] + 25
        time.sleep(5)
        c.stop()                                            # mid-window
        # while it is down, an operator re-enables port 5 by hand and its link trains
        r = fab.run_tool(fab.hosts[0], "ibportstate", str(lid["leaf01"]), str(FLAP_PORT), "enable")
        assert "After PortInfo set" in r.stdout, r.stdout + r.stderr
        hardware_down(fab, "leaf01", FLAP_PORT)
        hardware_trains(fab, "leaf01", FLAP_PORT)
        time.sleep(3)
        t_restart = time.time()
        c.start()
        ready(c)
        # the window resumes (the record's start, not the restart's); port 3 was never set again
        a = c.wait(action_of(c, BER_PORT), 10, "the record read back")
        assert a["state"] == "done" and a["returns_at"] == returns_at and a["clean_since"] == ber["clean_since"]
        assert port_phys(fab, lid["leaf01"], BER_PORT) == "Disabled"
        # the hand-enabled port: released, and not disabled again although its finding's window still holds it
        hand = c.wait(action_of(c, FLAP_PORT, "released"), 30, "port 5 released")
        assert "re-enabled by someone else" in hand["note"]
        time.sleep(3 * SWEEP)
        assert port_phys(fab, lid["leaf01"], FLAP_PORT) == "LinkUp"
        assert [x for x in c.actions() if x["port"] == FLAP_PORT and x["state"] != "released"] == []
        # port 3 returns when its original window ends (not 25 s after the restart)
        back = c.wait(action_of(c, BER_PORT, "returned"), 40, "port 3 returned")
        assert back["closed"] < t_restart + 25 - 3, (back["closed"] - t_restart, returns_at - t_restart)
        assert back["closed"] >= returns_at - 0.01

        # undo: an operator puts a port fabricmon isolated back at once
        fab.set_counter("leaf01", 4, "PortCounters.SymbolErrorCounter", 9000)
        p4 = c.wait(action_of(c, 4, "done"), 30, "port 4 isolated")
        assert port_phys(fab, lid["leaf01"], 4) == "Disabled"
        r = c.cli("actions", "undo", p4["id"])
        assert r.returncode == 0, r.stdout + r.stderr
        assert f"{p4['id']} leaf01" in r.stdout and "undone by an operator" in r.stdout
        assert port_phys(fab, lid["leaf01"], 4) == "Polling"
        # at once: closed well before its clean window (12 s) would have returned it (the action's own times,
        # not the CLI's, which a loaded machine stretches past the window)
        undone = by_port(c.actions())[4]
        assert undone["state"] == "undone" and undone["closed"] < p4["returns_at"] - 5, (undone, p4["returns_at"])
        time.sleep(3 * SWEEP)
        assert by_port(c.actions())[4]["state"] == "undone" and port_phys(fab, lid["leaf01"], 4) == "Polling"
        listing = c.cli("actions", "--all")
        assert listing.returncode == 0 and f"{p4['id']} isolate_port act undone" in listing.stdout, listing.stdout
    finally:
        c.stop()


def test_an_unanswered_set_is_reported_failed_and_retried_while_the_collector_serves(sim_fabric, tmp_path) -> None:
    """The port is on the exclusion list for the first seconds (refused, then the entry expires); meanwhile every
    PortInfo MAD to leaf01 is dropped (ibsim's `Error`), so the Set's Get goes unanswered: failed, retried with
    backoff, reported; the counters (PerfMgt) still flow and the collector keeps serving. Then the drop ends and
    the next try disables the port."""
    fab = sim_fabric(fat_tree_netfile(**NET))
    fab.start_sm(extra_args=("-s", "1"))
    lid = lids(fab)
    until = time.time() + 25
    d = doc("act")
    d["remediation"]["exclude"] = [{"port": f"leaf01:{BER_PORT}", "until": until, "reason": "a test"}]
    c = Collector(fab, tmp_path, d).start()
    try:
        ready(c)
        fab.set_counter("leaf01", BER_PORT, "PortCounters.SymbolErrorCounter", 5000)
        c.wait(lambda: [ln for ln in c.lines() if ln.get("event") == "remediation refuse"
                        and "on the exclusion list (leaf01:3: a test, until" in ln.get("why", "")], 20, "excluded")
        assert c.actions() == []
        fab.console('Error "leaf01"[0] 100 0x15')       # every PortInfo MAD to leaf01 dropped
        a = c.wait(lambda: (lambda x: x if x and x["attempts"] >= 2 else None)(by_port(c.actions()).get(BER_PORT)),
                   until - time.time() + 30, "the Set tried and failed twice")
        assert a["state"] == "todo" and "unanswered" in a["error"] and a["next_try"], a
        # it keeps serving, and says so: the snapshot carries the second failure once the build after it ran
        def failed_twice():
            x = scrape_samples(c.port)
            n = sample_value(x, "fabricmon_remediation_actions_total", action="isolate_port", mode="act", result="failed")
            return x if (n or 0) >= 2 else None
        s = c.wait(failed_twice, 2 * SWEEP + 10, "the second failure in the scrape")
        assert sample_value(s, "fabricmon_remediation_failing", action="isolate_port") == 1
        f = [f for f in findings(c.port) if f["check"] == "remediation"]
        assert f and "could not be put out of service" in f[0]["message"] and f[0]["class"] == "watch", f
        t1 = sample_value(s, "fabricmon_snapshot_timestamp_seconds")
        time.sleep(2 * SWEEP)
        assert sample_value(scrape_samples(c.port), "fabricmon_snapshot_timestamp_seconds") > t1
        failed = [ln for ln in c.lines() if ln.get("event") == "remediation isolate" and ln.get("result") == "failed"]
        assert failed and "again in" in failed[0]["why"]
        fab.console('Error "leaf01"[0] 0')
        done = c.wait(action_of(c, BER_PORT, "done"), 30, "disabled once the MADs are answered")
        assert done["attempts"] == 0 and port_phys(fab, lid["leaf01"], BER_PORT) == "Disabled"
    finally:
        c.stop()


def test_two_collectors_of_one_fabric_never_both_act_and_the_other_takes_over(sim_fabric, tmp_path) -> None:
    """An HA pair on one host (one state directory, `lease.kind: file`): both sweep and judge, only the holder of the
    lease disables; killed, its lease goes with it and the other acts on the next fault, on the same record."""
    fab = sim_fabric(fat_tree_netfile(**NET))
    fab.start_sm(extra_args=("-s", "1"))
    lid = lids(fab)
    d = doc("act", clean_window=600)      # port 3 stays out while the pair hands over, however slow the machine
    d["remediation"]["lease"] = {"kind": "file", "path": str(tmp_path / "state" / "remediation.lease")}
    a, b = Collector(fab, tmp_path, d, "a").start(), None
    try:
        ready(a)
        b = Collector(fab, tmp_path, d, "b").start()
        ready(b)
        assert sample_value(scrape_samples(a.port), "fabricmon_remediation_lease_held") == 1
        assert sample_value(scrape_samples(b.port), "fabricmon_remediation_lease_held") == 0
        fab.set_counter("leaf01", BER_PORT, "PortCounters.SymbolErrorCounter", 5000)
        a.wait(action_of(a, BER_PORT, "done"), 30, "port 3 isolated")
        # both judged it; one acted
        b.wait(lambda: any(f["check"] == "symbol_errors" and f["port"] == BER_PORT and f["status"] == 2
                           for f in findings(b.port)), 20, "the standby judges it too")
        time.sleep(2 * SWEEP)
        acted = [ln for c in (a, b) for ln in c.lines() if ln.get("event") == "remediation isolated"]
        assert len(acted) == 1 and not [ln for ln in b.lines() if ln.get("event", "").startswith("remediation isol")]
        assert len(a.actions()) == 1
        a.proc.kill()                                   # however it exits: the kernel releases its flock
        a.proc.wait(10)
        b.wait(lambda: sample_value(scrape_samples(b.port), "fabricmon_remediation_lease_held") == 1, 20,
               "the standby holds the lease")
        fab.set_counter("leaf01", FLAP_PORT, "PortCounters.LinkDownedCounter", 4)
        p5 = b.wait(action_of(b, FLAP_PORT, "done"), 30, "port 5 isolated by the other")
        acts = b.actions()
        assert {x["id"] for x in acts} == {"p1", "p2"} and p5["id"] == "p2"     # the holder's record, taken over
        assert port_phys(fab, lid["leaf01"], FLAP_PORT) == "Disabled"
        assert port_phys(fab, lid["leaf01"], BER_PORT) == "Disabled"             # not touched by the new holder
    finally:
        for c in (a, b):
            if c is not None:
                c.stop()


def test_a_leafs_last_healthy_uplink_is_never_isolated_whatever_it_does(sim_fabric, tmp_path) -> None:
    """leaf01 with two uplinks, one pulled (down at both ends): the other flaps and eats bits, and stays in
    service, refused on every round (logged once) while the collector judges it CRITICAL."""
    fab = sim_fabric(fat_tree_netfile(spines=2, leaves=2, hosts_per_leaf=2, uplinks_per_spine=1))   # uplinks 3, 4
    fab.start_sm(extra_args=("-s", "1"))
    lid = lids(fab)
    c = Collector(fab, tmp_path, doc("act")).start()
    try:
        ready(c)
        fab.unlink("leaf01", 4)
        c.wait(lambda: any(f["check"] == "degraded_link" and f["port"] == 4 and f["status"] == 2
                           for f in findings(c.port)), 30, "port 4 read down")
        for n in range(1, 4):
            fab.set_counter("leaf01", 3, "PortCounters.SymbolErrorCounter", 20000 * n)
            fab.set_counter("leaf01", 3, "PortCounters.LinkDownedCounter", 5 * n)
            time.sleep(2 * SWEEP)
        refused = c.wait(lambda: [ln for ln in c.lines() if ln.get("event") == "remediation refuse"], 20, "refused")
        assert refused[0]["why"] == "it is the last active uplink of leaf leaf01: isolating it cuts the leaf off the fabric"
        assert len(refused) == 1, refused                  # once, not every round
        assert any(f["check"] in ("symbol_errors", "link_flap") and f["port"] == 3 and f["status"] == 2
                   for f in findings(c.port))
        assert c.actions() == [] and port_phys(fab, lid["leaf01"], 3) == "LinkUp"
    finally:
        c.stop()
