"""Every forwarding table read, however large: `dump_fts` output cut at the host's bound
(host.runner.MAX_OUTPUT, 256 MiB; a SuperPOD-class fabric prints about 40 MB) is an error of the routing
source, and no switch is blamed for a table the cut-off left out. On ibsim, with the bound lowered below
this fabric's own dump_fts (about 5 KB) rather than a 40 MB fabric."""

from __future__ import annotations

import time

import pytest

from fabricmon.config import from_dict
from fabricmon.host import LiveIO, runner
from fabricmon.model.fabric import build_topology
from fabricmon.parsers.ibnetdiscover import parse_ibnetdiscover
from fabricmon.pipeline.source import Inputs
from fabricmon.sim.fabric import fat_tree_netfile
from fabricmon.sources.infiniband.routing import RoutingSource

pytestmark = pytest.mark.sim


def test_a_cut_off_dump_fts_is_an_error_of_the_source_never_of_the_switches(sim_fabric, monkeypatch) -> None:
    fab = sim_fabric(fat_tree_netfile(spines=2, leaves=4, hosts_per_leaf=2))
    host = fab.hosts[0]
    topo = build_topology(parse_ibnetdiscover(fab.run_tool(host, "ibnetdiscover", check=True).stdout))
    cfg = from_dict({})
    src, io = RoutingSource(cfg.fabric.sources["routing"]), LiveIO(env=fab.env(host))

    whole = src.collect(io, Inputs(deadline=time.monotonic() + 60, inventory=topo))
    assert not whole.errors and set(whole.data.tables) == set(topo.switches)
    size = len(fab.run_tool(host, "dump_fts", "-n", check=True).stdout)

    monkeypatch.setattr(runner, "MAX_OUTPUT", size // 2)      # half of the tables fit
    cut = src.collect(io, Inputs(deadline=time.monotonic() + 60, inventory=topo))
    assert cut.data is None                                    # no tables this run: the last ones stay
    assert [k for k, _ in cut.errors] == ["read"]
    assert "output longer than" in cut.errors[0][1] and "forwarding tables not judged this run" in cut.errors[0][1]
    assert not any("returned no forwarding table" in m for _, m in cut.errors)
