"""The circuit breaker on ibsim at a size ibsim runs here in seconds (the 4,000-port case is the model test,
tests/remediation/test_port_policy.py): 11 of leaf01's 12 uplinks fail at once on a fabric of 52 cabled switch
ports; exactly max(10, 0.5% of 52) = 10 are disabled (by the real ibportstate: this collector runs in the test's
process, which is not under the simulator's preload, so its MAD engine does not open and the tools act), the
breaker's finding is raised, the 11th is reported and left up."""

from __future__ import annotations

import time

from helpers import sample_value, scrape_samples, scrape_until
from simkit import in_process_collector, lids, port_phys

from fabricmon.sim.fabric import fat_tree_netfile

NET = dict(spines=4, leaves=2, hosts_per_leaf=2, uplinks_per_spine=3)     # leaf01: hosts 1-2, uplinks 3-14
FAILING = list(range(3, 14))                                                # 11 of the 12


def test_eleven_links_failing_at_once_isolate_exactly_the_cap_of_ten(sim_fabric, tmp_path) -> None:
    fab = sim_fabric(fat_tree_netfile(**NET))
    fab.start_sm(extra_args=("-s", "1"))
    lid = lids(fab)
    doc = {"fabric": {"sweep_interval": 1.0, "discovery_interval": 3.0},
           "checks": {"symbol_errors": {"window": 60}},
           "remediation": {"isolate_port": {"mode": "act", "checks": ["symbol_errors"]}}}
    with in_process_collector(fab, tmp_path, doc) as d:
        end = time.monotonic() + 90
        while not (d.snapshot and d.snapshot.fabric and len(d.snapshot.fabric.switches) == 6
                   and sample_value(scrape_samples(d.port), "fabricmon_fabric_sweep_method", method="tools") == 1):
            assert time.monotonic() < end
            time.sleep(0.3)
        time.sleep(3)
        for p in FAILING:
            fab.set_counter("leaf01", p, "PortCounters.SymbolErrorCounter", 5000 + p)

        def settled():
            rem = d.snapshot.remediation
            done = [a for a in rem.actions if a.state == "done"]
            return (rem, done) if len(done) == 10 and rem.findings else None
        while not settled():
            assert time.monotonic() < end + 60, d.snapshot.remediation
            time.sleep(0.3)
        rem, done = settled()
        assert all("ibportstate" in a.note for a in done), done[0].note
        b = rem.breakers["isolate_port"]
        assert (b.cap, b.used, b.tripped) == (10, 10, True) and "52 cabled switch ports" in b.detail
        [left] = [r for r in rem.refused if r.why.startswith("the circuit breaker")]
        assert "10 links out of service, the cap is max(10, 0.005 x 52 cabled switch ports) = 10" in left.why
        left_port = int(left.target.rsplit(":", 1)[1])
        assert {a.port for a in done} | {left_port} == set(FAILING)
        assert [f.check for f in rem.findings] == ["remediation"] and "tripped" in rem.findings[0].message
        for a in done:
            assert port_phys(fab, lid["leaf01"], a.port) == "Disabled"
        assert port_phys(fab, lid["leaf01"], left_port) == "LinkUp"
        assert port_phys(fab, lid["leaf01"], 14) == "LinkUp"
        scrape_until(d.port, ("fabricmon_remediation_breaker_tripped", {"action": "isolate_port"}, 1),
                     ("fabricmon_remediation_isolated_ports", {"mode": "act"}, 10))
        time.sleep(3)
        assert len([a for a in d.snapshot.remediation.actions if a.open]) == 10
