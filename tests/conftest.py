"""Shared pytest fixtures, the test tiers, and the guards that keep them honest.

Tiers (docs/development.md): every test outside the fast tier carries the `slow` marker, and a bare
`pytest` runs `-m "not slow"` (pyproject's addopts); `make test` runs all of them in parallel. What takes
a test out of the fast tier is given here, never by hand in a test module: its directory
(DIRECTORY_MARKERS), a fixture it uses (FIXTURE_MARKERS), or its module or name in TEST_MARKERS; each
rule adds the marker that says why (sim, slurm, snmpsim, browser, kmsg, process, ship, soak) and `slow`
with it. A test that uses a module-scoped fixture runs on one pytest-xdist worker with the rest of its
module (`xdist_group`, for `--dist loadgroup`), and so does every test writing the machine's one kernel
ring buffer.

Every test that starts the ibsim simulator carries the `sim` marker, so `-m "not sim"` runs
no simulator: a test that requests `sim_fabric` (directly or through another fixture) is marked
at collection, and a guard checks it. For the whole run `ibsim` is found first on a PATH
directory holding a wrapper that notes which test started it (PYTEST_CURRENT_TEST) and then
execs the real ibsim; a test that started one without the marker fails at teardown, and any
start no test can be named for fails the session. Under pytest-xdist each worker keeps its own
guard and sends what it saw to the controller, which reports and judges the whole run.
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
from helpers import unavailable, wait_until

# --- the tiers ------------------------------------------------------------------------------------

TESTS = Path(__file__).resolve().parent

#: the markers that say why a test is not in the fast tier (pyproject.toml describes each); any of them
#: brings `slow` with it
REASONS = ("sim", "slurm", "snmpsim", "browser", "kmsg", "process", "ship", "soak")

#: directory under tests/ -> the markers of every test in it (slow alone: the simulator harnesses' own tests,
#: most of which start one)
DIRECTORY_MARKERS: dict[str, tuple[str, ...]] = {
    "sim": (),
    "faults": ("process",),             # a real daemon over fake tools that hang, die or print garbage
    "ship": ("ship",),                  # the shipped artefacts with the real Prometheus, Alertmanager, systemd
    "soak": ("soak",),
    "deployed": ("kmsg", "process"),    # fabricmon as the shipped unit's user (setpriv), writing /dev/kmsg
}

#: fixture -> the markers of a test whose fixture closure holds it
FIXTURE_MARKERS: dict[str, tuple[str, ...]] = {
    "sim_fabric": ("sim",),             # the ibsim simulator (and opensm)
    "sim_slurm": ("slurm",),            # slurmctld, a slurmd per node, munged
    "browser": ("browser",),            # headless Chromium
    "etcd_server": ("process",),        # a real etcd (Debian etcd-server) and lease holders as processes
}

#: module (or module::test) under tests/ -> its markers, for what no directory or fixture rule finds.
#: `process`: runs programs of its own for seconds (fabricmon as a process or a daemon, fake or hung
#: tools, a FUSE server, a network namespace); slow alone: in process, but it waits seconds by design
#: (a timeout, a settle time). An entry that names no module or test fails the run.
TEST_MARKERS: dict[str, tuple[str, ...]] = {
    "cli/test_health_check.py": ("process",),
    "cli/test_port_state_daemon.py": ("process",),
    "cli/test_learned_inventory.py": ("process",),
    "cli/test_cli_once_check.py": ("process",),
    "cli/test_rocegpu_bundles.py::test_check_with_state_on_a_live_tree_reports_rates": ("process",),
    "cli/test_rocegpu_bundles.py::test_live_tree_with_fake_nvml_matches_replay": ("process",),
    "cli/test_fabric_cli.py::test_shards_split_the_replayed_fabric": ("process",),
    "cli/test_install_cmd.py::test_dry_run_as_an_ordinary_user_says_what_privilege_it_needs": ("process",),
    "cli/test_install_cmd.py::test_install_as_an_ordinary_user_into_a_root_owned_tree_writes_nothing_and_says_why":
        ("process",),
    "cli/test_docs.py::test_the_ndr_example_fits_the_recorded_h100_node": ("process",),
    "cli/test_docs.py::test_every_exported_metric_is_documented": ("process",),
    "cli/test_ethernet_capture.py::test_a_live_capture_keeps_no_secret": ("snmpsim",),
    "cli/test_capture_replay.py::test_capture_then_replay_gives_the_same_metrics": ("process",),
    "cli/test_topology_slurm_cli.py::test_the_collector_without_the_file": ("process",),
    "cli/test_fabric_once_fails.py": ("process",),
    "cli/test_numeric_options.py::test_check_says_unknown_with_no_traceback": ("process",),
    "cli/test_python_version.py::test_code_needs_nothing_newer_than_3_10": ("process",),     # vermin over the package
    "host/test_runner.py": ("process",),
    # the real `fabricmon check` run (a process per step) on the recorded H100 tree
    "sources/test_pcie_real_tree.py::test_healthy_links_then_one_hca_at_gen4_and_one_at_x8": ("process",),
    "sources/test_pcie_real_tree.py::test_aer_correctable_rising_counted_and_fatal_critical": ("process",),
    "host/test_snmp_v3.py": ("snmpsim",),
    "host/test_kmsg_reader.py": ("kmsg",),
    "host/test_snmp_client.py::test_a_slow_name_never_stalls_the_other_switches": (),
    "host/test_snmp_client.py::test_a_silent_switch_times_out_after_its_retries_and_costs_only_itself": (),
    "pipeline/test_hung_tools.py": ("process",),
    # a live Pipeline's close() waits up to 2 s for the kernel log reader's poll(2000) to return
    "pipeline/test_hotplug.py": (),
    "pipeline/test_layout_cache_and_reference.py::test_fast_writer_matches_prometheus_client": (),
    "pipeline/test_layout_cache_and_reference.py::test_kept_families_render_as_a_fresh_render_would": (),
    "sources/test_rocegpu_captures.py::test_real_h100_sysfs_roce_bond": (),
    # the real 400-switch director capture as it came (../shared), parsed and built in process: a second or two
    "parsers/test_dirty_captures.py::test_the_real_dirty_capture_reads_as_its_clean_copy": (),
    "checks/test_fabric_host_ports.py::test_the_real_director_capture_as_it_came_every_lidless_port_once": (),
    "serve/test_serving_faults.py": ("process",),
    "serve/test_server_bounds.py::test_run_refuses_a_bad_web_config_with_exit_2": ("process",),
    "sources/test_kernel_log.py": ("kmsg", "process"),
    "sources/test_restricted_counters.py": ("process",),
    "sources/test_counters_ext.py": ("process",),
    "sources/test_ethtool_netns.py": ("process",),
    "sources/test_nccl_inspector_source.py": (),
}

#: the xdist group of every test that writes the kernel ring buffer: one machine has one
KMSG_GROUP = "kmsg"


def _tier_markers(item) -> set[str]:
    rel = Path(str(item.path)).resolve().relative_to(TESTS)
    module = rel.as_posix()
    names = set(DIRECTORY_MARKERS.get(rel.parts[0], ()))
    slow = rel.parts[0] in DIRECTORY_MARKERS
    fixtures = set(getattr(item, "fixturenames", ()))
    for fixture, marks in FIXTURE_MARKERS.items():
        if fixture in fixtures:
            names |= set(marks)
    base = item.originalname if hasattr(item, "originalname") else item.name
    for key in (module, f"{module}::{base}"):
        if key in TEST_MARKERS:
            names |= set(TEST_MARKERS[key])
            slow = True
    names |= {m.name for m in item.iter_markers() if m.name in REASONS}
    if names or slow:
        names.add("slow")
    return names


def _module_scoped(item) -> bool:
    """Whether the test uses a fixture set up once per module (its module's tests then share a worker)."""
    info = getattr(item, "_fixtureinfo", None)
    if info is None:
        return False
    return any(defs and defs[-1].scope == "module" for defs in info.name2fixturedefs.values())


def _stale_entries(items) -> list[str]:
    """TEST_MARKERS entries that name no module, or a test its collected module does not have."""
    collected = {Path(str(i.path)).resolve().relative_to(TESTS).as_posix() for i in items}
    names = {f"{Path(str(i.path)).resolve().relative_to(TESTS).as_posix()}::{getattr(i, 'originalname', i.name)}"
             for i in items}
    stale = [k for k in TEST_MARKERS if not (TESTS / k.split("::")[0]).is_file()]
    stale += [k for k in TEST_MARKERS if "::" in k and k.split("::")[0] in collected and k not in names]
    return stale


@pytest.hookimpl(tryfirst=True)         # before -m deselects by marker, and before xdist reads the groups
def pytest_collection_modifyitems(config, items) -> None:
    stale = _stale_entries(items)
    if stale:
        raise pytest.UsageError("tests/conftest.py TEST_MARKERS names what is not there (renamed? removed?): "
                                + ", ".join(stale))
    for item in items:
        for name in sorted(_tier_markers(item)):
            if item.get_closest_marker(name) is None:
                item.add_marker(name)
        if item.get_closest_marker("xdist_group") is None:
            if item.get_closest_marker("kmsg") is not None:
                item.add_marker(pytest.mark.xdist_group(KMSG_GROUP))
            elif _module_scoped(item):
                item.add_marker(pytest.mark.xdist_group(Path(str(item.path)).resolve().relative_to(TESTS).as_posix()))


#: grouped tests whose group will not keep them on one worker (pytest_collection_finish), and why: each
#: fails at its set-up rather than run beside what it must not
_ungrouped: dict[str, str] = {}


@pytest.hookimpl(trylast=True)          # after pytest-xdist's worker has put each group into its test's node id
def pytest_collection_finish(session) -> None:
    """In a pytest-xdist worker every grouped test must carry its group in its node id (`...::test@group`):
    that is how the controller keeps a group on one worker, under --dist loadgroup only. `-n N` alone
    spreads a group over the workers, and a pytest whose node ids xdist cannot change (9.2 with xdist 3.8,
    pytest-xdist issue 1386) drops the groups silently."""
    config = session.config
    if _worker(config) is None:
        return
    why = (f"--dist loadgroup did not keep its xdist_group (pytest {pytest.__version__} with this pytest-xdist, "
           "pytest-xdist issue 1386)" if config.getvalue("loadgroup") else
           "a parallel run needs --dist loadgroup to keep its xdist_group on one worker (make test gives it)")
    _ungrouped.update((i.nodeid, why) for i in session.items
                      if i.get_closest_marker("xdist_group") is not None and "@" not in i.nodeid)


@pytest.fixture(autouse=True)
def _xdist_group_kept(request):
    why = _ungrouped.get(request.node.nodeid)
    if why:
        pytest.fail(f"{why}: it would run beside what it must not", pytrace=False)


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
REAL_IBSIM = "FABRICMON_TEST_REAL_IBSIM"     # where the guard's wrappers exec the real ibsim from


def pytest_configure(config) -> None:
    global _guard
    # every port a simulator's service is told comes from this process's own block (fabricmon.sim.ports);
    # the processes tests start inherit the setting and claim blocks of their own
    os.environ.setdefault(simports.ENV, str(simports.lock_dir()))
    if _worker(config) is not None:
        # a pytest-xdist worker leads a process group of its own: what its tests start joins it, so the
        # leftover guard (_no_leftover_processes) finds this worker's processes and never another's
        os.setpgid(0, 0)
    # the real ibsim: a worker inherits the controller's PATH, whose wrapper is not the program
    real = os.environ.get(REAL_IBSIM) or simfabric._which("ibsim")
    if real and _guard is None:
        os.environ[REAL_IBSIM] = real
        _guard = SimGuard(real)


def _worker(config) -> str | None:
    """This process's pytest-xdist worker id (gw0, gw1, ...); None in a serial run and in the controller."""
    return getattr(config, "workerinput", {}).get("workerid")


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
    # the directory with a separator after it: a worker's popen-gw1/ is not popen-gw10/
    dirs = (os.path.join(str(tmp_path_factory.getbasetemp()), ""),)
    try:                                       # a service a teardown just signalled may still be exiting
        left = wait_until(lambda: leftover_processes(mark, since, dirs), 10.0, until=lambda left: not left,
                          interval=0.5)
    except AssertionError:
        left = leftover_processes(mark, since, dirs)
    if left:
        import psutil

        from fabricmon.sim.procs import end
        kill_with_environment(SESSION_MARK, mark)
        end(psutil.Process().children(recursive=True))
        pytest.fail(f"{len(left)} process(es) the suite started still run after it (now killed):\n  "
                    + "\n  ".join(left), pytrace=False)


GUARD_OUTPUT = "fabricmon_sim_guard"      # what a worker's guard saw, sent to the controller in workeroutput


@pytest.hookimpl(optionalhook=True)        # a pytest-xdist hook: the controller, as each worker ends
def pytest_testnodedown(node, error) -> None:
    seen = getattr(node, "workeroutput", {}).get(GUARD_OUTPUT)
    if _guard is not None and seen:
        _guard.by_test.update(seen["by_test"])
        _guard.unmarked += seen["unmarked"]
        _guard.unnamed += seen["unnamed"]


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
    _guard.unnamed += _guard.new_starts()
    if _worker(session.config) is not None:         # the controller reports and judges the whole run
        session.config.workeroutput[GUARD_OUTPUT] = {
            "by_test": _guard.by_test, "unmarked": _guard.unmarked, "unnamed": _guard.unnamed}
        return
    if _guard.unnamed:
        session.config.get_terminal_writer().line(
            "ibsim was started outside any test's run or by a test that could not be named: "
            + "; ".join(_guard.unnamed), red=True)
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
