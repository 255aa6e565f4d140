"""Shared pytest fixtures."""

from __future__ import annotations

import pytest

from fabricmon.sim.fabric import SimFabric, tools_available
from helpers import unavailable


def require_sim_tools() -> None:
    """Skip (or, when $CI is set, fail) unless ibsim, opensm and infiniband-diags are installed."""
    ok, why = tools_available()
    if ok:
        return
    unavailable(f"the fabric simulator cannot run ({why}): install ibsim-utils libumad2sim0 infiniband-diags opensm, "
                "as make test does")


@pytest.fixture
def sim_fabric(tmp_path):
    """Factory: ``sim_fabric(netfile_text, sockname=None) -> SimFabric``, started in tmp_path.

    Every fabric it made is stopped (by PID) at teardown. Skips when the
    simulator tools are missing, and fails instead when $CI is set.
    """
    require_sim_tools()
    fabrics: list[SimFabric] = []

    def factory(netfile_text: str, sockname: str | None = None) -> SimFabric:
        fab = SimFabric(netfile_text, tmp_path / f"sim{len(fabrics)}", sockname=sockname)
        fabrics.append(fab)
        fab.start()
        return fab

    yield factory
    for fab in reversed(fabrics):
        fab.stop()


@pytest.fixture
def sim_slurm(tmp_path):
    """Factory: ``sim_slurm(nodes) -> SimSlurm``: a real slurmctld and one slurmd per node name on
    127.0.0.1, in tmp_path, stopped (jobs cancelled, daemons by PID) at teardown. Skips when
    slurm-wlm/munge are missing, and fails instead when $CI is set."""
    from fabricmon.sim.slurm import SimSlurm
    from fabricmon.sim.slurm import tools_available as slurm_available
    ok, why = slurm_available()
    if not ok:
        unavailable(why)
    clusters: list[SimSlurm] = []

    def factory(nodes: list[str]) -> SimSlurm:
        s = SimSlurm(nodes, tmp_path / f"slurm{len(clusters)}", cluster=f"fm{len(clusters)}")
        clusters.append(s)
        s.start()
        return s

    yield factory
    for s in reversed(clusters):
        s.stop()
