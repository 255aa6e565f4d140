"""The Slurm and NHC wrappers (fabricmon/deploy/slurm, fabricmon/deploy/nhc) drain on CRITICAL and on nothing else, run against the real
`fabricmon check` on a sysfs tree (healthy, a down port, a bad config) and against fake programs
(hung, missing), with a fake `scontrol` that records what it was asked."""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

import pytest
import yaml

from fabricmon.sim import sysfs_tree
from helpers import fabricmon_script
from ship_helpers import ROOT

SLURM = ROOT / "fabricmon" / "deploy" / "slurm" / "fabricmon-healthcheck.sh"
NHC = ROOT / "fabricmon" / "deploy" / "nhc" / "fabricmon.nhc"

FAKE_SCONTROL = """#!/bin/sh
# records every call; `show node` answers with $FAKE_NODE_LINE
printf '%s\\n' "$*" >> "$FAKE_LOG"
if [ "$1" = show ]; then printf '%s\\n' "$FAKE_NODE_LINE"; fi
exit 0
"""


def fabricmon_exe() -> str:
    return fabricmon_script()


class Node:
    def __init__(self, tmp: Path):
        self.tmp = tmp
        self.sysfs = sysfs_tree.build(tmp / "sys", 2)
        self.bin = tmp / "bin"
        self.bin.mkdir()
        scontrol = self.bin / "scontrol"
        scontrol.write_text(FAKE_SCONTROL)
        scontrol.chmod(0o755)
        self.log = tmp / "scontrol.log"
        empty = tmp / "empty"
        empty.mkdir()
        self.config = tmp / "fabricmon.yml"
        self.config.write_text(yaml.safe_dump({
            "paths": {"sysfs": str(self.sysfs), "state_dir": str(tmp / "state"), "tool_dirs": [str(empty)]},
            "expected_links": [{"device": "mlx5_*", "width": "4X", "speed": "NDR", "count": 2}]}))
        self.env = {"PATH": f"{self.bin}:/usr/bin:/bin", "FABRICMON": fabricmon_exe(),
                    "FABRICMON_CONFIG": str(self.config), "FABRICMON_NODENAME": "gpu01",
                    "FABRICMON_DAEMON_URL": "http://127.0.0.1:9",     # nothing listens: local poll
                    "SCONTROL": str(self.bin / "scontrol"), "FAKE_LOG": str(self.log),
                    "FAKE_NODE_LINE": "NodeName=gpu01 State=IDLE Reason=(null)"}

    def fake(self, name: str, body: str) -> str:
        f = self.bin / name
        f.write_text("#!/bin/sh\n" + body + "\n")
        f.chmod(0o755)
        return str(f)

    def slurm(self, **env: str) -> subprocess.CompletedProcess:
        res = subprocess.run(["sh", str(SLURM)], env={**self.env, **env}, capture_output=True, text=True,
                             timeout=60)
        assert res.returncode == 0, res.stderr           # Slurm acts on the drain, not the exit code
        return res

    def calls(self) -> list[str]:
        return self.log.read_text().splitlines() if self.log.exists() else []

    def port_down(self) -> None:
        (self.sysfs / "class/infiniband/mlx5_1/ports/1/state").write_text("1: DOWN")


@pytest.fixture
def node(tmp_path: Path) -> Node:
    return Node(tmp_path)


# --- Slurm HealthCheckProgram -------------------------------------------------------------------

def test_slurm_healthy_node_is_left_alone(node: Node) -> None:
    node.slurm()
    assert node.calls() == ["show node -o gpu01"]            # only looked whether to resume


def test_slurm_critical_drains_with_the_first_critical_line(node: Node) -> None:
    node.port_down()
    res = node.slurm()
    [show] = [c for c in node.calls() if c.startswith("update")]
    assert show.startswith("update nodename=gpu01 state=drain reason=fabricmon: CRITICAL degraded_link: "
                           "mlx5_1 port 1 is DOWN/LinkUp")
    assert len(show.split("reason=", 1)[1]) <= 200
    assert "draining gpu01" in res.stderr


def test_slurm_an_adapter_that_vanished_drains(node: Node) -> None:
    shutil.rmtree(node.sysfs / "class/infiniband/mlx5_1")
    node.slurm()
    [upd] = [c for c in node.calls() if c.startswith("update")]
    assert "reason=fabricmon: CRITICAL expected_inventory: expected_links[0]" in upd and "1 of 2" in upd


def test_slurm_unknown_does_not_drain(node: Node) -> None:
    node.config.write_text("checks:\n  down_severty: warning\n")            # a config error: exit 3
    res = node.slurm()
    assert not [c for c in node.calls() if c.startswith("update")]
    assert "UNKNOWN (exit 3): FABRICMON UNKNOWN - config error at checks.down_severty" in res.stderr


def test_slurm_nothing_to_check_does_not_drain_and_a_lost_learned_adapter_does(node: Node) -> None:
    """The shipped config (no expected_links): a node without any RDMA device is UNKNOWN (no drain);
    one that lost an adapter it had seen healthy drains, naming it."""
    node.config.write_text(yaml.safe_dump({"paths": yaml.safe_load(node.config.read_text())["paths"]}))
    node.slurm()                                        # learns mlx5_0 and mlx5_1
    assert not [c for c in node.calls() if c.startswith("update")]
    shutil.rmtree(node.sysfs / "class/infiniband/mlx5_1")
    node.slurm()
    [upd] = [c for c in node.calls() if c.startswith("update")]
    assert "reason=fabricmon: CRITICAL expected_inventory: mlx5_1 port 1 is gone" in upd
    shutil.rmtree(node.sysfs / "class")
    (node.tmp / "state" / "inventory.json").unlink()    # a node that never had any
    node.log.unlink()
    res = node.slurm()
    assert not [c for c in node.calls() if c.startswith("update")]
    assert "UNKNOWN (exit 3): FABRICMON UNKNOWN - nothing to check: no InfiniBand or RoCE device found" in res.stderr


@pytest.mark.parametrize("body,words", [("sleep 30", "did not finish within 1s"),
                                        ("exit 127", "UNKNOWN (exit 127)")], ids=["hung", "missing"])
def test_slurm_a_broken_fabricmon_does_not_drain(node: Node, body: str, words: str) -> None:
    res = node.slurm(FABRICMON=node.fake("fabricmon", body), FABRICMON_TIMEOUT="1")
    assert not [c for c in node.calls() if c.startswith("update")]
    assert words in res.stderr


def test_slurm_warning_does_not_drain(node: Node) -> None:
    node.slurm(FABRICMON=node.fake("fabricmon", 'echo "FABRICMON WARNING - 0 critical, 1 warning on 2 port(s)"; exit 1'))
    assert not [c for c in node.calls() if c.startswith("update")]


def test_slurm_resumes_only_what_it_drained(node: Node) -> None:
    node.slurm(FAKE_NODE_LINE="NodeName=gpu01 State=IDLE+DRAIN Reason=fabricmon: CRITICAL degraded_link: x [root@t]")
    assert node.calls()[-1] == "update nodename=gpu01 state=resume"
    node.log.unlink()
    node.slurm(FAKE_NODE_LINE="NodeName=gpu01 State=IDLE+DRAIN Reason=bad DIMM [admin@t]")
    assert not [c for c in node.calls() if c.startswith("update")]                   # someone else's drain
    node.log.unlink()
    node.slurm(FAKE_NODE_LINE="NodeName=gpu01 State=IDLE+DRAIN Reason=fabricmon: x [root@t]", FABRICMON_RESUME="0")
    assert not [c for c in node.calls() if c.startswith("update")]


def test_slurm_asks_the_daemon_first(node: Node) -> None:
    args = node.tmp / "args"
    fake = node.fake("fabricmon", f'echo "$@" > {args}; echo "FABRICMON OK - 0 critical, 0 warning on 2 port(s)"')
    node.slurm(FABRICMON=fake, FABRICMON_DAEMON_URL="http://127.0.0.1:9879")
    assert args.read_text().split() == ["check", "--config", str(node.config), "--daemon", "http://127.0.0.1:9879"]
    node.slurm(FABRICMON=fake, FABRICMON_DAEMON_URL="", FABRICMON_ARGS="--no-state")
    assert args.read_text().split() == ["check", "--config", str(node.config), "--no-state"]


# --- LBNL NHC -----------------------------------------------------------------------------------

NHC_STUBS = """
die() { echo "DIE $*"; return 1; }
log() { echo "LOG $*"; }
"""


def nhc(node: Node, *args: str, **env: str) -> tuple[int, str]:
    """Source the check file in bash as NHC does (with stand-ins for NHC's die/log) and run it."""
    script = f'{NHC_STUBS}\n. "{NHC}"\ncheck_fabricmon "$@"\necho "RC $?"\n'
    res = subprocess.run(["bash", "-c", script, "nhc", *args], env={**node.env, **env},
                         capture_output=True, text=True, timeout=60)
    assert res.returncode == 0, res.stderr
    rc = int(res.stdout.strip().splitlines()[-1].split()[1])
    return rc, res.stdout


def test_nhc_healthy_passes(node: Node) -> None:
    rc, out = nhc(node, "-c", str(node.config), "-u", "")
    assert rc == 0 and "DIE" not in out and "LOG" not in out


def test_nhc_critical_fails_the_node_with_the_first_critical_line(node: Node) -> None:
    node.port_down()
    rc, out = nhc(node, "-c", str(node.config), "-u", "")
    assert rc == 1
    assert "DIE 1 fabricmon: CRITICAL degraded_link: mlx5_1 port 1 is DOWN/LinkUp" in out


def test_nhc_unknown_and_warning_do_not_fail_the_node(node: Node) -> None:
    node.config.write_text("checks:\n  down_severty: warning\n")
    rc, out = nhc(node, "-c", str(node.config), "-u", "")
    assert rc == 0 and "DIE" not in out and "LOG fabricmon: UNKNOWN (exit 3): FABRICMON UNKNOWN - config error" in out
    warn = node.fake("fabricmon", 'echo "FABRICMON WARNING - 0 critical, 1 warning on 2 port(s)"; '
                                  'echo "WARNING symbol_errors: mlx5_0 port 1: ..."; exit 1')
    rc, out = nhc(node, FABRICMON=warn)
    assert rc == 0 and "DIE" not in out and "not failing the node on WARNING" in out
    rc, out = nhc(node, "-w", FABRICMON=warn)
    assert rc == 1 and "DIE 1 fabricmon: WARNING symbol_errors: mlx5_0 port 1" in out
    rc, out = nhc(node, "-t", "1", FABRICMON=node.fake("fabricmon", "sleep 30"))
    assert rc == 0 and "did not finish within 1s" in out


def test_wrappers_pass_shell_syntax_checks() -> None:
    assert subprocess.run(["sh", "-n", str(SLURM)]).returncode == 0
    assert subprocess.run(["bash", "-n", str(NHC)]).returncode == 0
    assert os.access(SLURM, os.X_OK)
