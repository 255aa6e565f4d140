"""Shared pytest fixtures, and the `sim` marker rule.

Every test that starts the ibsim simulator carries the `sim` marker, so `-m "not sim"` runs
no simulator: a test that requests `sim_fabric` (directly or through another fixture) is marked
at collection, and a guard checks it. For the whole run `ibsim` is found first on a PATH
directory holding a wrapper that notes which test started it (PYTEST_CURRENT_TEST) and then
execs the real ibsim; a test that started one without the marker fails at teardown, and any
start no test can be named for fails the session.
"""

from __future__ import annotations

import os
import shutil
import tempfile
from pathlib import Path

import pytest

from fabricmon.sim import fabric as simfabric
from fabricmon.sim import ports as simports
from fabricmon.sim.fabric import SimFabric, tools_available
from helpers import unavailable

#: fixtures that start the simulator: a test whose fixture closure holds one is marked `sim`.
SIM_FIXTURES = frozenset({"sim_fabric"})


@pytest.hookimpl(tryfirst=True)         # before -m deselects by marker
def pytest_collection_modifyitems(config, items) -> None:
    for item in items:
        if SIM_FIXTURES & set(getattr(item, "fixturenames", ())):
            item.add_marker(pytest.mark.sim)


class SimGuard:
    """Records every ibsim start of this run through a wrapper found first on PATH."""

    def __init__(self, real: str) -> None:
        self.dir = Path(tempfile.mkdtemp(prefix="fabricmon-simguard-"))
        self.log = self.dir / "starts.log"
        self.log.touch()
        self.seen = 0
        self.unnamed: list[str] = []
        self.by_test: dict[str, int] = {}       # test id -> ibsim starts
        self.unmarked: list[str] = []           # tests that started it without the sim marker
        wrapper = self.dir / "ibsim"
        wrapper.write_text("#!/bin/sh\n"
                           f"printf '%s\\n' \"${{PYTEST_CURRENT_TEST:-?}}\" >> '{self.log}'\n"
                           f"exec '{real}' \"$@\"\n")
        wrapper.chmod(0o755)
        self.old_path = os.environ.get("PATH", "")
        os.environ["PATH"] = os.pathsep.join(filter(None, [str(self.dir), self.old_path]))

    def new_starts(self) -> list[str]:
        """The starts recorded since the last call: the test id and phase each ran under."""
        lines = self.log.read_text().splitlines()
        new, self.seen = lines[self.seen:], len(lines)
        return new

    def close(self) -> None:
        os.environ["PATH"] = self.old_path
        shutil.rmtree(self.dir, ignore_errors=True)


_guard: SimGuard | None = None


def pytest_configure(config) -> None:
    global _guard
    # every port a simulator's service is told comes from this process's own block (fabricmon.sim.ports);
    # the processes tests start inherit the setting and claim blocks of their own
    os.environ[simports.ENV] = "1"
    real = simfabric._which("ibsim")
    if real and _guard is None:
        _guard = SimGuard(real)


def pytest_unconfigure(config) -> None:
    global _guard
    if _guard is not None:
        _guard.close()
        _guard = None


@pytest.fixture(autouse=True)
def _sim_marker_guard(request):
    """Fails a test that started ibsim without the `sim` marker."""
    yield
    if _guard is None:
        return
    nodeid = request.node.nodeid
    starts = _guard.new_starts()
    ours = [s for s in starts if s.rsplit(" (", 1)[0] == nodeid]
    _guard.unnamed += [s for s in starts if s not in ours]
    if ours:
        _guard.by_test[nodeid] = len(ours)
    if ours and request.node.get_closest_marker("sim") is None:
        _guard.unmarked.append(nodeid)
        pytest.fail(f"{nodeid} started the ibsim simulator ({len(ours)}x) but is not marked `sim`: "
                    "request the sim_fabric fixture or mark it @pytest.mark.sim", pytrace=False)


@pytest.fixture(autouse=True)
def _structlog_config_restored():
    """A test that runs a command in process (cli.main) configures structlog for that command (e.g.
    `topology slurm` at level error): the next tests get the configuration they started with."""
    import structlog
    saved = structlog.get_config()
    yield
    structlog.configure(**saved)


# Never two series with one label set (Prometheus keeps one of them silently): every exposition the
# suite renders in process (each Daemon's /metrics, `fabricmon check`, the goldens, the bundles) goes
# through Renderer.render, which is wrapped here; the test that rendered one fails.
_repeated: list[str] = []


def _guard_renderer() -> None:
    from fabricmon.exporter.render import Renderer
    from helpers import repeated_series
    if getattr(Renderer.render, "guarded", False):
        return
    real = Renderer.render

    def render(self, snap, *sets):
        body = real(self, snap, *sets)
        dups = repeated_series(body)
        if dups:
            _repeated.append(f"{len(dups)} series twice, e.g. {dups[:3]}")
        return body
    render.guarded = True
    Renderer.render = render


@pytest.fixture(autouse=True)
def _no_series_twice():
    """Fails a test during which an exposition was rendered with a series twice."""
    _guard_renderer()
    _repeated.clear()
    yield
    if _repeated:
        found, _repeated[:] = list(_repeated), []
        pytest.fail("an exposition rendered during this test has a series twice with one label set: "
                    + "; ".join(found[:3]), pytrace=False)


@pytest.fixture(scope="session", autouse=True)
def _no_leftover_processes(tmp_path_factory):
    """Every test that starts a service or a job stops it (issue 41.5: slurmstepd and `srun sleep 600`
    outlived the suite, one set per run). The session carries a mark in its environment, which every
    process a test starts inherits; when the session ends, what still runs of it (helpers.leftover_processes)
    is named, with the test that started it, killed, and the session errors."""
    import time
    import uuid

    from fabricmon.sim.procs import kill_with_environment
    from helpers import SESSION_MARK, leftover_processes
    mark = uuid.uuid4().hex
    os.environ[SESSION_MARK] = mark
    since = time.time() - 1.0
    yield
    dirs = (str(tmp_path_factory.getbasetemp()),)
    deadline = time.monotonic() + 10.0         # a service a teardown just signalled may still be exiting
    left = leftover_processes(mark, since, dirs)
    while left and time.monotonic() < deadline:
        time.sleep(0.5)
        left = leftover_processes(mark, since, dirs)
    if left:
        import psutil

        from fabricmon.sim.procs import end
        kill_with_environment(SESSION_MARK, mark)
        end(psutil.Process().children(recursive=True))
        pytest.fail(f"{len(left)} process(es) the suite started still run after it (now killed):\n  "
                    + "\n  ".join(left), pytrace=False)


def pytest_terminal_summary(terminalreporter) -> None:
    if _guard is not None:
        line = (f"sim guard: ibsim started {sum(_guard.by_test.values())} time(s), "
                f"by {len(_guard.by_test)} test(s)")
        if _guard.unmarked:
            line += ", unmarked: " + " ".join(_guard.unmarked)
        terminalreporter.write_line(line)


def pytest_sessionfinish(session, exitstatus) -> None:
    if _guard is None:
        return
    unnamed = _guard.unnamed + _guard.new_starts()
    if unnamed:
        session.config.get_terminal_writer().line(
            "ibsim was started outside any test's run or by a test that could not be named: "
            + "; ".join(unnamed), red=True)
        if session.exitstatus == 0:
            session.exitstatus = pytest.ExitCode.TESTS_FAILED


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
    """Factory: ``sim_slurm(nodes, topology_conf=None) -> SimSlurm``: a real slurmctld and one slurmd per node name on
    127.0.0.1, in tmp_path, stopped (jobs cancelled, daemons by PID) at teardown. Skips when
    slurm-wlm/munge are missing, and fails instead when $CI is set."""
    from fabricmon.sim.slurm import SimSlurm
    from fabricmon.sim.slurm import tools_available as slurm_available
    ok, why = slurm_available()
    if not ok:
        unavailable(why)
    clusters: list[SimSlurm] = []

    def factory(nodes: list[str], topology_conf: str | None = None) -> SimSlurm:
        s = SimSlurm(nodes, tmp_path / f"slurm{len(clusters)}", cluster=f"fm{len(clusters)}",
                     topology_conf=topology_conf)
        clusters.append(s)
        s.start()
        return s

    yield factory
    for s in reversed(clusters):
        s.stop()
