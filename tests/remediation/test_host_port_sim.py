"""A failing host port while its node runs a job, on ibsim beside a real Slurm (slurmd names = the ibsim hosts):
the collector drains the node first (the real scontrol: running jobs finish, no new ones), leaves the port up
under the job, and disables it (the real ibportstate: this collector runs in the test's process) once the job
has ended; the port and the node come back together after the clean window."""

from __future__ import annotations

import time

from simkit import hardware_down, hardware_trains, in_process_collector, lids, port_phys

from fabricmon.sim.fabric import fat_tree_netfile

NET = dict(spines=2, leaves=2, hosts_per_leaf=2, uplinks_per_spine=2)   # leaf01: node01 on port 1, node02 on port 2
HOSTS = ["node01", "node02", "node03", "node04"]


def reasons(slurm) -> dict[str, str]:
    out = slurm.run(["sinfo", "-R", "-N", "-h", "-o", "%N|%E"]).stdout
    return dict(ln.split("|", 1) for ln in out.splitlines() if "|" in ln)


def wait(pred, timeout: float, what: str):
    end = time.monotonic() + timeout
    while True:
        got = pred()
        if got:
            return got
        assert time.monotonic() < end, what
        time.sleep(0.3)


def test_a_host_port_under_a_job_drains_its_node_first_and_is_isolated_once_idle(sim_fabric, sim_slurm, tmp_path,
                                                                               monkeypatch) -> None:
    fab = sim_fabric(fat_tree_netfile(**NET))
    fab.start_sm(extra_args=("-s", "1"))
    slurm = sim_slurm(HOSTS)
    monkeypatch.setenv("SLURM_CONF", str(slurm.conf))
    lid = lids(fab)
    job = slurm.submit("train", ["node02"])
    slurm.wait_running(job)
    doc = {"fabric": {"sweep_interval": 1.0, "discovery_interval": 3.0},
           "checks": {"symbol_errors": {"window": 30}},
           "remediation": {"isolate_port": {"mode": "act", "clean_window": 10}, "drain_node": {"mode": "act"},
                           "retry_first": 1.0, "retry_max": 2.0}}
    with in_process_collector(fab, tmp_path, doc) as d:
        wait(lambda: d.snapshot and d.snapshot.jobs and job in d.snapshot.jobs.jobs, 60, "the job is known")
        time.sleep(3)
        fab.set_counter("leaf01", 2, "PortCounters.SymbolErrorCounter", 5000)

        def acts():
            rem = d.snapshot.remediation
            return {a.kind: a for a in rem.actions} if rem else {}
        got = wait(lambda: (lambda a: a if a.get("drain_node") and a["drain_node"].state == "done" else None)(acts()),
                   40, "node02 drained")
        iso, drain = got["isolate_port"], got["drain_node"]
        assert iso.state == "waiting" and iso.waits == f"node02 to be idle (jobs {job})", iso
        assert drain.parent == iso.id and drain.node == "node02"
        assert reasons(slurm)["node02"] == drain.reason and drain.reason.startswith(
            "fabricmon: CRITICAL symbol_errors: leaf01 (0x") and "host port to isolate" in drain.reason
        assert slurm.run(["sinfo", "-h", "-n", "node02", "-o", "%T"]).stdout.strip() == "draining"   # the job runs on
        assert port_phys(fab, lid["leaf01"], 2) == "LinkUp"
        time.sleep(3)
        assert acts()["isolate_port"].state == "waiting" and port_phys(fab, lid["leaf01"], 2) == "LinkUp"

        slurm.cancel(job)
        done = wait(lambda: (lambda a: a["isolate_port"] if a["isolate_port"].state == "done" else None)(acts()), 40,
                    "the port isolated once node02 is idle")
        assert "ibportstate" in done.note and port_phys(fab, lid["leaf01"], 2) == "Disabled"
        hardware_down(fab, "leaf01", 2)
        # the clean window: the port re-enabled, then the node resumed
        wait(lambda: (lambda a: a if a["isolate_port"].state == "returned" and a["drain_node"].state == "returned"
                      else None)(acts()), 60, "both returned")
        assert "node02" not in reasons(slurm)
        hardware_trains(fab, "leaf01", 2)
        wait(lambda: port_phys(fab, lid["leaf01"], 2) == "LinkUp", 20, "the host link trained")
