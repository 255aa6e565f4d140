"""A firmware-restricted function (HGX B200/B300, GB200): reading its port counters fails EINVAL
(and makes the driver log an ACCESS_REG failure per read). The test tree is served through FUSE
(tests/sources/fuse/failfs.c, built here with gcc and libfuse3-dev: a test-only server, no Python
FUSE binding at runtime) so that the read really fails with EINVAL, and the server counts the
failing reads. fabricmon must find the device on its first failing read, never read its counters
again (zero further reads on the FUSE side), say so once (an INFO finding and a metric), and keep
reading its state and rate and the other devices' counters.
"""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

import pytest

from cli.test_health_check import RunningDaemon, fabricmon, wait_for
from fabricmon.sim import sysfs_tree
from helpers import sample_value, scrape_samples, unavailable, wait_for_scrape

HERE = Path(__file__).resolve().parent


def fuse_missing() -> str:
    if not os.path.exists("/dev/fuse"):
        return "no /dev/fuse"
    if shutil.which("gcc") is None or shutil.which("pkg-config") is None or shutil.which("fusermount3") is None:
        return "gcc, pkg-config or fusermount3 missing (apt-get install gcc pkg-config fuse3 libfuse3-dev)"
    if subprocess.run(["pkg-config", "--exists", "fuse3"]).returncode != 0:
        return "libfuse3-dev missing"
    if os.geteuid() != 0:
        return "mounting the FUSE-served tree with allow_other needs root: run as root, as CI does"
    return ""


@pytest.fixture(autouse=True, scope="module")
def _fuse() -> None:
    """The restricted function is a tree served over FUSE by a test-only server built here: without FUSE,
    its build tools or root, every test here skips (fails under $CI, which installs them and runs as root)."""
    why = fuse_missing()
    if why:
        unavailable(why)


@pytest.fixture(scope="module")
def failfs(tmp_path_factory) -> Path:
    out = tmp_path_factory.mktemp("failfs") / "failfs"
    flags = subprocess.run(["pkg-config", "fuse3", "--cflags", "--libs"], capture_output=True, text=True,
                           check=True).stdout.split()
    subprocess.run(["gcc", "-Wall", "-O1", "-o", str(out), str(HERE / "fuse" / "failfs.c"), *flags], check=True)
    return out


class Served:
    """`src` served at `mnt`, reads under `prefixes` failing EINVAL, each logged to `log`."""

    def __init__(self, failfs: Path, src: Path, mnt: Path, log: Path, prefixes: list[str]):
        mnt.mkdir()
        self.mnt, self.log = mnt, log
        self.proc = subprocess.Popen([str(failfs), str(src), str(log), ",".join(prefixes), str(mnt), "-f",
                                      "-o", "ro,allow_other,attr_timeout=0,entry_timeout=0"],
                                     stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        wait_for(lambda: os.path.ismount(mnt), 10)

    def failed_reads(self) -> list[str]:
        return self.log.read_text().splitlines() if self.log.exists() else []

    def stop(self) -> None:
        subprocess.run(["fusermount3", "-u", str(self.mnt)], capture_output=True)
        try:
            self.proc.wait(5)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()


@pytest.fixture
def served(tmp_path: Path, failfs: Path):
    src = sysfs_tree.build(tmp_path / "src", 3)
    s = Served(failfs, src, tmp_path / "mnt", tmp_path / "failed.log", ["/class/infiniband/mlx5_1/ports/1/counters/"])
    yield s
    s.stop()


def test_the_read_really_fails_with_einval(served: Served) -> None:
    with pytest.raises(OSError) as exc:
        (served.mnt / "class/infiniband/mlx5_1/ports/1/counters/link_downed").read_text()
    assert exc.value.errno == 22
    assert (served.mnt / "class/infiniband/mlx5_1/ports/1/state").read_text() == "4: ACTIVE"
    assert served.failed_reads() == ["/class/infiniband/mlx5_1/ports/1/counters/link_downed"]


def test_a_restricted_function_is_found_on_its_first_failing_read_and_never_read_again(tmp_path: Path,
                                                                                      served: Served) -> None:
    (tmp_path / "state").mkdir()
    # the default sysfs interval (15 s) is this test's 0.2 s, so that 20 s here are 1,500 default polls' worth
    d = RunningDaemon(tmp_path, served.mnt)
    try:
        samples = wait_for(lambda: (lambda s: s if sample_value(s, "fabricmon_ib_device_counters_restricted",
                                                                 device="mlx5_1") == 1 else None)(scrape_samples(d.port)),
                           10)
        first = served.failed_reads()
        assert len(first) == 1, first          # one read found it: not one per counter file
        # the other devices keep reporting counters; mlx5_1 keeps its state and rate, without counters
        assert sample_value(samples, "fabricmon_ib_port_transmit_bytes_total", device="mlx5_0", port="1") is not None
        assert sample_value(samples, "fabricmon_ib_port_transmit_bytes_total", device="mlx5_2", port="1") is not None
        assert sample_value(samples, "fabricmon_ib_port_transmit_bytes_total", device="mlx5_1", port="1") is None
        assert sample_value(samples, "fabricmon_ib_port_up", device="mlx5_1", port="1") == 1
        assert sample_value(samples, "fabricmon_ib_port_rate_bytes_per_second", device="mlx5_1", port="1") == 50e9
        polls0 = sample_value(samples, "fabricmon_source_runs_total", source="sysfs")
        samples = wait_for_scrape(d.port, lambda s: sample_value(s, "fabricmon_source_runs_total", source="sysfs")
                                  >= polls0 + 5, 15)             # five more polls
        polls = sample_value(samples, "fabricmon_source_runs_total", source="sysfs") - polls0
        assert polls >= 5, polls
        assert served.failed_reads() == first, "a restricted device's counters were read again"
        # said once: one INFO finding, no source error (WARNING), check stays OK
        res = fabricmon("check", "--daemon", d.url, "--verbose")
        assert res.returncode == 0, res.stdout
        info = [ln for ln in res.stdout.splitlines() if "restricted_counters" in ln]
        assert len(info) == 1 and info[0].startswith("OK restricted_counters: mlx5_1: port counters not read"), info
        said = [ln for ln in d.lines() if ln.get("event") == "port counters not read: a restricted function"]
        assert len(said) == 1 and said[0]["device"] == "mlx5_1"
    finally:
        d.stop()


def test_counters_exclude_devices_names_them_in_advance(tmp_path: Path, served: Served) -> None:
    (tmp_path / "state").mkdir()
    d = RunningDaemon(tmp_path, served.mnt, sources={"sysfs": {"interval": 0.2, "counters_exclude_devices": ["mlx5_1"]}})
    try:
        samples = wait_for(lambda: (lambda s: s if sample_value(s, "fabricmon_ib_device_counters_restricted",
                                                                 device="mlx5_1") == 1 else None)(scrape_samples(d.port)),
                           10)
        d.polls(5)              # five more polls
        assert served.failed_reads() == [], "an excluded device's counters were read"
        assert sample_value(samples, "fabricmon_ib_port_up", device="mlx5_1", port="1") == 1
    finally:
        d.stop()


def test_no_source_reads_a_restricted_functions_counters(tmp_path: Path, failfs: Path) -> None:
    """Every counter file of the restricted function fails (counters/ and hw_counters/, as on the real
    machines): once the sysfs source found it, the hw_counters source never reads it either, while it
    keeps reading the other devices' hw_counters."""
    src = sysfs_tree.build(tmp_path / "src", 3)
    served = Served(failfs, src, tmp_path / "mnt", tmp_path / "failed.log",
                    ["/class/infiniband/mlx5_1/ports/1/counters/", "/class/infiniband/mlx5_1/ports/1/hw_counters/"])
    (tmp_path / "state").mkdir()
    d = RunningDaemon(tmp_path, served.mnt, sources={"hw_counters": {"interval": 0.2}})
    try:
        wait_for(lambda: sample_value(scrape_samples(d.port), "fabricmon_ib_device_counters_restricted",
                                      device="mlx5_1") == 1, 10)
        samples = wait_for(lambda: (lambda s: s if (sample_value(s, "fabricmon_source_runs_total", source="hw_counters")
                                                    or 0) >= 5 else None)(scrape_samples(d.port)), 15)
        failed = served.failed_reads()
        assert len(failed) == 1 and "/counters/" in failed[0], failed
        hw = {dict(labels).get("device") for name, labels in samples if name == "fabricmon_ib_port_hw_counters_total"}
        assert "mlx5_0" in hw and "mlx5_2" in hw, hw          # the other devices' hw_counters are still read
        assert "mlx5_1" not in hw, hw
    finally:
        d.stop()
        served.stop()
