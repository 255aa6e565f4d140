"""`fabricmon fabric once` fails loudly (issue 18, item 4): when no switch could be read it exits 1
with ONE line on stderr saying why (no umad device, permission denied on it, no SM, a missing
tool), never raw tool errors; the exposition is still written, with the failing sources at 0."""

from __future__ import annotations

import glob
import os
import shutil
import subprocess
import sys
from pathlib import Path

from fabricmon.model.fabric import DiscoveryData, SmData, SweepData, SwitchNode
from fabricmon.model.snapshot import BuildStats, Snapshot, SourceState
from fabricmon.pipeline.fabric_failure import why_nothing_read as why_neutral
from fabricmon.registry import failure_hints
from fabricmon.sources.infiniband import failure
from fabricmon.sources.infiniband.failure import UMAD_GLOB
from helpers import unavailable

PREFIX = "fabricmon: no switch could be read: "


def why_nothing_read(snap: Snapshot, umad_glob: str = UMAD_GLOB) -> str | None:
    """As `fabric once` asks on an InfiniBand fabric: the infiniband collector's hints first."""
    assert failure_hints("infiniband") == [failure.explain]
    return why_neutral(snap, [lambda s, e: failure.explain(s, e, umad_glob)])


def test_fabric_once_without_umad_exits_1_with_one_line(tmp_path: Path) -> None:
    if glob.glob(UMAD_GLOB):
        unavailable(f"this host has {UMAD_GLOB}: the test needs a host without an InfiniBand umad device")
    cfg = tmp_path / "fabricmon.yml"
    cfg.write_text(f"paths: {{state_dir: {tmp_path / 'state'}}}\nfabric: {{cache_dir: {tmp_path / 'cache'}}}\n")
    out = tmp_path / "fabric.prom"
    r = subprocess.run([sys.executable, "-m", "fabricmon", "fabric", "once", "--config", str(cfg), "--output", str(out)],
                       capture_output=True, text=True, timeout=120)
    assert r.returncode == 1, r.stdout + r.stderr
    lines = r.stderr.splitlines()
    assert len(lines) == 1 and lines[0].startswith(PREFIX), r.stderr
    tool = shutil.which("ibnetdiscover", path=os.pathsep.join([os.environ.get("PATH", ""), "/usr/sbin", "/sbin"]))
    if tool:
        assert "no umad device (/dev/infiniband/umad* does not exist)" in lines[0] and "modprobe ib_umad" in lines[0]
    else:
        assert "ibnetdiscover is not installed" in lines[0]
    text = out.read_text()          # the exposition is written all the same: the failure shows in it
    assert 'fabricmon_source_up{source="discovery"} 0.0' in text and "fabricmon_fabric_switches 0.0" in text


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
    monkeypatch.setattr(failure.os, "access", lambda path, mode: False)     # as a user outside group rdma
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
    assert failure_hints("ethernet") == []
