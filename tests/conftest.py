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
