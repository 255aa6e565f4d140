"""`fabricmon fabric once` fails loudly (issue 18, item 4): when no switch could be read it exits 3
(UNKNOWN, issue 41: as the exposition's fabricmon_health_status) with ONE line on stderr saying why (no
umad device, permission denied on it, no SM, a missing tool), never raw tool errors; the exposition is
still written, with the failing sources at 0."""

from __future__ import annotations

import glob
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from fabricmon.config.fabric import import_sources
from fabricmon.model.fabric import DiscoveryData, SmData, SweepData, SwitchNode
from fabricmon.model.snapshot import BuildStats, Snapshot, SourceState
from fabricmon.pipeline.fabric_failure import why_nothing_read as why_neutral
from fabricmon.registry import failure_hints
from fabricmon.host import umad
from fabricmon.sources.infiniband import failure
from fabricmon.sources.infiniband.failure import UMAD_GLOB
from helpers import free_port, unavailable, wait_until

PREFIX = "fabricmon: no switch could be read: "


def why_nothing_read(snap: Snapshot, umad_glob: str = UMAD_GLOB) -> str | None:
    """As `fabric once` asks on an InfiniBand fabric: the infiniband collector's hints first."""
    assert failure_hints("infiniband") == [failure.explain]
    return why_neutral(snap, [lambda s, e: failure.explain(s, e, umad_glob)])


def test_fabric_once_without_umad_is_unknown_with_one_line(tmp_path: Path) -> None:
    if glob.glob(UMAD_GLOB):
        unavailable(f"this host has {UMAD_GLOB}: the test needs a host without an InfiniBand umad device")
    cfg = tmp_path / "fabricmon.yml"
    cfg.write_text(f"paths: {{state_dir: {tmp_path / 'state'}}}\nfabric: {{cache_dir: {tmp_path / 'cache'}}}\n")
    out = tmp_path / "fabric.prom"
    r = subprocess.run([sys.executable, "-m", "fabricmon", "fabric", "once", "--config", str(cfg), "--output", str(out)],
                       capture_output=True, text=True, timeout=120)
    assert r.returncode == 3, r.stdout + r.stderr
    lines = r.stderr.splitlines()
    assert len(lines) == 1 and lines[0].startswith(PREFIX), r.stderr
    tool = shutil.which("ibnetdiscover", path=os.pathsep.join([os.environ.get("PATH", ""), "/usr/sbin", "/sbin"]))
    if tool:
        assert "no umad device (/dev/infiniband/umad* does not exist)" in lines[0] and "modprobe ib_umad" in lines[0]
    else:
        assert "ibnetdiscover is not installed" in lines[0]
    text = out.read_text()          # the exposition is written all the same: the failure shows in it
    assert 'fabricmon_source_up{source="discovery"} 0.0' in text and "fabricmon_fabric_switches 0.0" in text
    assert "\nfabricmon_health_status 3.0\n" in text        # the exit code and the exposition agree


@pytest.mark.parametrize("command, rc, after", [
    (("fabric", "once", "--output", "{tmp}/fabric.prom"), 3, ""),
    (("fabric", "design", "save", "{tmp}/design.net"), 1, ": no design written"),
    (("topology", "slurm"), 1, ""),
])
def test_every_command_that_discovers_says_the_same_hint(tmp_path: Path, command: tuple, rc: int, after: str) -> None:
    """Issue 53, item 8: with no fabric, `fabric design save` and `topology slurm` printed libibnetdisc's raw
    `can't open MAD port ((null):0)` where `fabric once` says why (no umad device: modprobe ib_umad). All three
    say the one hint now, in the same line, and none of them the tool's text."""
    if glob.glob(UMAD_GLOB):
        unavailable(f"this host has {UMAD_GLOB}: the test needs a host without an InfiniBand umad device")
    cfg = tmp_path / "fabricmon.yml"
    cfg.write_text(f"paths: {{state_dir: {tmp_path / 'state'}}}\nfabric: {{cache_dir: {tmp_path / 'cache'}}}\n")
    argv = [a.format(tmp=tmp_path) for a in command]
    r = subprocess.run([sys.executable, "-m", "fabricmon", *argv, "--config", str(cfg)],
                       capture_output=True, text=True, timeout=120)
    assert r.returncode == rc, r.stdout + r.stderr
    lines = r.stderr.splitlines()
    assert len(lines) == 1 and lines[0].startswith(PREFIX) and lines[0].endswith(after), r.stderr
    tool = shutil.which("ibnetdiscover", path=os.pathsep.join([os.environ.get("PATH", ""), "/usr/sbin", "/sbin"]))
    if tool:
        assert lines[0] == (f"{PREFIX}no umad device (/dev/infiniband/umad* does not exist): no InfiniBand HCA on "
                            f"this host, or the ib_umad module is not loaded (modprobe ib_umad){after}"), lines[0]
    else:
        assert lines[0] == f"{PREFIX}ibnetdiscover is not installed (apt-get install infiniband-diags){after}"
    assert "MAD port" not in r.stderr and "ibnetdisc" not in r.stderr.replace("ibnetdiscover is not", "")


def get(url: str) -> tuple[int, str]:
    import urllib.error
    import urllib.request
    try:
        with urllib.request.urlopen(url, timeout=5) as r:
            return r.status, r.read().decode()
    except urllib.error.HTTPError as e:
        return e.code, e.read().decode()


def test_fabric_run_without_umad_is_unknown_says_why_and_retries(tmp_path: Path) -> None:
    """Issue 41.2: a collector that cannot reach its fabric looked healthy (/healthz 200, health 0, "waiting
    for the first ibnetdiscover run" forever, the raw ibnetdisc.c error in its log). Now: alive (/healthz 200)
    but not ready (/readyz 503 with the reason), fabricmon_health_status 3 (UNKNOWN), and the reason `fabric
    once` gives on its map and once in its log, while discovery keeps being retried."""
    import json
    if glob.glob(UMAD_GLOB):
        unavailable(f"this host has {UMAD_GLOB}: the test needs a host without an InfiniBand umad device")
    cfg = tmp_path / "fabricmon.yml"
    cfg.write_text(f"paths: {{state_dir: {tmp_path / 'state'}}}\nlogging: {{format: json}}\n"
                   f"fabric: {{cache_dir: {tmp_path / 'cache'}, discovery_interval: 1, sweep_interval: 1}}\n")
    port = free_port()
    url = f"http://127.0.0.1:{port}"
    log = tmp_path / "collector.log"
    with open(log, "w") as err:
        proc = subprocess.Popen([sys.executable, "-m", "fabricmon", "fabric", "run", "--config", str(cfg),
                                 "--listen", f"127.0.0.1:{port}"], stdout=subprocess.DEVNULL, stderr=err)
    try:
        def discovery_runs() -> int:
            assert proc.poll() is None, log.read_text()
            code, body = get(url + "/api/v1/findings")
            return json.loads(body)["sources"]["discovery"]["runs"] if code == 200 else 0
        # the event (a second discovery run), not the clock
        wait_until(discovery_runs, 60, "discovery retried", until=lambda runs: runs >= 2, interval=0.1,
                   ignore=(OSError,))
        once = subprocess.run([sys.executable, "-m", "fabricmon", "fabric", "once", "--config", str(cfg)],
                              capture_output=True, text=True, timeout=120)
        why = once.stderr.strip().removeprefix(PREFIX)
        assert once.returncode == 3 and why and why != once.stderr.strip(), once.stderr
        assert get(url + "/healthz")[0] == 200                     # alive: liveness only
        assert get(url + "/readyz") == (503, f"not ready: {PREFIX.removeprefix('fabricmon: ')}{why}\n")
        metrics = get(url + "/metrics")[1]
        assert "\nfabricmon_health_status 3.0\n" in metrics
        page = get(url + "/")[1]
        assert "waiting for the first" not in page and f"No switch could be read: {why}. Retrying." in page
    finally:
        proc.terminate()
        proc.wait(20)
    lines = [json.loads(ln) for ln in log.read_text().splitlines() if ln.startswith("{")]
    said = [ln for ln in lines if ln["event"] == "no switch could be read"]
    assert len(said) == 1 and said[0]["reason"] == why, said     # once, not once per retry


def snap(sweep=None, sweep_errors=(), disc=None, disc_errors=(), sm=None, sm_errors=()) -> Snapshot:
    def st(name, records, data, errors):
        return SourceState(name, True, 15.0, 5.0, records=records, data=data, ran=True, active_errors=set(errors))
    return Snapshot(time=0.0, findings=[], builds=BuildStats(), sources={
        "discovery": st("discovery", DiscoveryData, disc, disc_errors),
        "sweep": st("sweep", SweepData, sweep, sweep_errors),
        "sm": st("sm", SmData, sm, sm_errors)})


UMAD_ERR = "sminfo -t 200: exit 255: ibwarn: [24225] mad_rpc_open_port: can't open UMAD port ((null):0)"
NO_TOPO = "no discovered topology yet (the discovery source has not completed)"


def test_a_sweep_that_read_a_switch_is_no_failure() -> None:
    assert why_nothing_read(snap(sweep=SweepData(switches={"0x1"}))) is None
    # a shard that owns no switch read all it had to
    assert why_nothing_read(snap(sweep=SweepData())) is None


def test_permission_denied_on_the_umad_device(tmp_path: Path, monkeypatch) -> None:
    (tmp_path / "umad0").write_text("")
    os.chmod(tmp_path / "umad0", 0o600)
    monkeypatch.setattr(umad.os, "access", lambda path, mode: False)   # as a user outside group rdma
    why = why_nothing_read(snap(sweep_errors=[NO_TOPO], sm_errors=[UMAD_ERR]), umad_glob=str(tmp_path / "umad*"))
    assert why.startswith(f"permission denied on {tmp_path / 'umad0'}: run as root or as a member of the group")


def test_umad_present_but_the_port_cannot_be_opened(tmp_path: Path) -> None:
    (tmp_path / "umad0").write_text("")
    why = why_nothing_read(snap(sm_errors=[UMAD_ERR]), umad_glob=str(tmp_path / "umad*"))
    assert why.startswith("cannot open the local umad port") and "ibstat" in why


def test_no_subnet_manager() -> None:
    topo = DiscoveryData(switches={"0x1": SwitchNode(guid="0000000000000001", name="leaf01", nports=36, lid=None)})
    why = why_nothing_read(snap(disc=topo, sm=SmData(answered=False),
                                sweep_errors=["switch leaf01 (0x1) has no LID in the discovered topology"]))
    assert why.startswith("no subnet manager answers") and "opensm" in why


def test_a_missing_tool_and_a_fabric_without_switches() -> None:
    why = why_nothing_read(snap(disc_errors=["ibnetdiscover --cache /x: command not found"], sweep_errors=[NO_TOPO]))
    assert why == "ibnetdiscover is not installed (apt-get install infiniband-diags)"
    why = why_nothing_read(snap(disc=DiscoveryData(cas={"0x2": "node01"}), sweep_errors=[NO_TOPO]))
    assert why.startswith("discovery found no switch")


def test_without_a_kind_s_hints_the_reason_is_generic() -> None:
    """The pipeline itself reads no tool's text and no device: without the InfiniBand hint a umad error
    is only the first error, and a discovery without switches is said without InfiniBand tools."""
    assert why_neutral(snap(sm_errors=[UMAD_ERR])) == f"sm: {UMAD_ERR}"
    assert why_neutral(snap(disc=DiscoveryData(), sweep_errors=[NO_TOPO])) == "discovery found no switch"
    import_sources("ethernet")      # registered as a config naming the kind registers it (alone, nothing has)
    assert failure_hints("ethernet") == []
