"""The simulator killed mid-poll and restarted: the daemon recovers without a restart."""

from __future__ import annotations

import time

import psutil

from fault_harness import Harness, val

from fabricmon.config import from_dict
from fabricmon.serve.daemon import Daemon
from fabricmon.host import LiveIO
from fabricmon.sim.fabric import SimFabric, fat_tree_netfile

HOST = "node01 mlx5_0"


def test_simulator_killed_and_restarted(sim_fabric, tmp_path):
    net = fat_tree_netfile(spines=1, leaves=1, hosts_per_leaf=2)
    fab = sim_fabric(net)
    h = Harness(tmp_path)
    raw = h.config(**{n: {"interval": 0.3, "timeout": 1.0} for n in ("ibstat", "perfquery", "iblinkinfo")})
    raw["expected_links"] = [{"device": "ibsim0", "width": "4X", "speed": "HDR"}]
    cfg = from_dict(raw)
    h.daemon = Daemon(cfg, LiveIO(cfg.sysfs, cfg.procfs, env=fab.env(HOST)))
    h.daemon.start()
    try:
        h.wait(lambda s: val(s, "fabricmon_ib_port_up", device="ibsim0", port=1) == 1, 15)
        fab.stop()                                           # the fabric dies mid-poll
        s = h.wait(lambda s: val(s, "fabricmon_source_up", source="ibstat") == 0, 15)
        # counted: a timeout where ibstat hangs on the dead simulator's socket, an exit status where it is
        # refused at once (which one depends on where in its run the simulator died: both seen)
        assert sum(v for k, v in s.items() if k[0] == "fabricmon_source_errors_total"
                   and dict(k[1]).get("source") == "ibstat") >= 1, s
        h.assert_sysfs_keeps_reporting()
        # no client of the dead simulator is left retrying for ever. The sleep is what is tested, not a
        # wait: time passes beyond a run's timeout and its kill (3 s), so one left retrying is older than that
        time.sleep(3.5)
        stuck = [p for p in psutil.process_iter(["name", "ppid"])
                 if p.info["name"] in ("ibstat", "perfquery", "iblinkinfo")
                 and p.info["ppid"] == psutil.Process().pid]
        # sources run concurrently: only runs in flight, each younger than its 1 s timeout plus
        # time to be killed on a loaded machine (2 s); one left retrying since the stop is 3.5 s old
        assert all(time.time() - p.create_time() < 1.0 + 2.0 for p in stuck), stuck
        fab2 = SimFabric(net, tmp_path / "sim-restarted", sockname=fab.sockname).start()
        try:
            s = h.wait(lambda s: val(s, "fabricmon_source_up", source="ibstat") == 1
                       and val(s, "fabricmon_source_up", source="perfquery") == 1, 20)
            assert val(s, "fabricmon_ib_port_up", device="ibsim0", port=1) == 1
            assert h.daemon.alive()
        finally:
            fab2.stop()
    finally:
        h.daemon.stop()
