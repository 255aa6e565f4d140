"""NCCL RAS's text report (issue 52 item 6): real reports from NVIDIA/nccl's issues
(tests/fixtures/nccl_ras/PROVENANCE.md) become the records their JSON would give, and the same
findings; the layouts of 2.24-2.25 and of DEAD processes from client_support.cc's format strings."""

from __future__ import annotations

from pathlib import Path

import pytest

from fabricmon.checks import nccl_ras as ras_checks
from fabricmon.model.finding import OK, WARNING
from fabricmon.model.nccl import RasComm, RasData, RasMismatch, RasPeer, RasRank, ras_mismatch, ras_outlier
from fabricmon.parsers.errors import ParseError
from fabricmon.parsers.nccl_ras import parse_ras_status, refusal, version_of
from fabricmon.parsers.nccl_ras_text import parse_ras_text
from nccl_ras_answers import Comm, Rank, issue1730, issue1762, issue1911, json_answer

FIXTURES = Path(__file__).parent.parent / "fixtures" / "nccl_ras"


def text(name: str) -> str:
    return (FIXTURES / name).read_text()


def findings(version: str, comms: list[RasComm], polls: int = 2) -> list[tuple[str, str, int, str]]:
    """The findings of `polls` answers alike, one after the other."""
    state = ras_checks.StalledState()
    out: list = []
    for i in range(polls):
        out = ras_checks.evaluate(RasData(version, comms, queried_at=1000.0 + 30 * i), {}, state)
    return [(f.check, f.device, f.status, f.message) for f in out]


def test_ranks_at_different_operation_counts_issue_1911() -> None:
    version, comms = parse_ras_text(text("issue1911_2.26.2_mismatch.txt"))
    assert version == "2.26.2"
    assert comms == [RasComm("fa93daea854b060b", 32, 0, (), (RasMismatch(
        "AllGather", ((640, 30), (641, 2)),
        (RasRank(12, 641, "10.137.190.124", 323032, 4, 4), RasRank(13, 641, "10.137.190.124", 323033, 5, 5))),))]
    assert parse_ras_status(issue1911("2.26.2"))[1] == comms          # its JSON: the same records


def test_a_real_hang_issue_1762() -> None:
    version, comms = parse_ras_text(text("issue1762_2.27.3_incomplete.txt"))
    assert version == "2.27.3"
    assert comms == [RasComm("b3398875b8b2a063", 2, 1, (RasPeer(1, "10.4.109.13", 60004, 0, 0, True, False),))]
    assert parse_ras_status(issue1762("2.27.3"))[1] == comms


def test_a_healthy_report_issue_1730_names_no_communicator() -> None:
    assert parse_ras_text(text("issue1730_2.26.2_healthy.txt")) == ("2.26.2", [])


@pytest.mark.parametrize("name, twin", [("issue1911_2.26.2_mismatch.txt", issue1911),
                                        ("issue1762_2.27.3_incomplete.txt", issue1762),
                                        ("issue1730_2.26.2_healthy.txt", issue1730)])
def test_text_and_json_become_the_same_findings(name: str, twin) -> None:
    version, from_text = parse_ras_text(text(name))
    _, from_json = parse_ras_status(twin(version))
    assert findings(version, from_text) == findings(version, from_json)


def test_the_findings_of_the_real_reports() -> None:
    [peer_ok, stalled] = findings(*parse_ras_text(text("issue1911_2.26.2_mismatch.txt")))
    assert peer_ok[:3] == ("nccl_ras_peer", "", OK)
    assert stalled[:3] == ("nccl_ras_stalled", "comm:fa93daea854b060b", WARNING)
    assert ("different AllGather operation counts, the same in two RAS answers: 30 ranks at 640, 2 ranks at 641"
            in stalled[3])
    assert "rank 12 at 641 on 10.137.190.124 (pid 323032, CUDA device 4, NVML device 4)" in stalled[3]
    [missing, stall_ok] = findings(*parse_ras_text(text("issue1762_2.27.3_incomplete.txt")))
    assert missing[:3] == ("nccl_ras_peer", "comm:b3398875b8b2a063", WARNING)
    assert ("1 of its 2 ranks did not answer RAS: rank 1 on 10.4.109.13 (pid 60004, CUDA device 0, NVML device 0) "
            "is unresponsive") in missing[3]
    assert stall_ok[:3] == ("nccl_ras_stalled", "", OK)


def test_one_answer_with_a_mismatch_is_no_verdict() -> None:
    comms = parse_ras_text(text("issue1911_2.26.2_mismatch.txt"))[1]
    assert [f[:3] for f in findings("2.26.2", comms, polls=1)] == [("nccl_ras_peer", "", OK)]
    # the ranks moved on between the answers: still no verdict
    state = ras_checks.StalledState()
    ras_checks.evaluate(RasData("2.26.2", comms, queried_at=1.0), {}, state)
    moved = parse_ras_text(text("issue1911_2.26.2_mismatch.txt").replace("640", "700").replace("641", "701"))[1]
    out = ras_checks.evaluate(RasData("2.26.2", moved, queried_at=31.0), {}, state)
    assert [f.check for f in out] == ["nccl_ras_peer"]
    # the same answer judged again (a poll between queries) changes nothing
    assert ras_checks.evaluate(RasData("2.26.2", moved, queried_at=31.0), {}, state) == out


DEAD_2_26 = """NCCL version 2.26.6 compiled with CUDA 12.8
CUDA runtime version 12080, driver version 12080

Communicators... (0.02s)
=============

Group     Comms     Nodes     Ranks     Ranks     Ranks    Status  Errors
    #  in group  per comm  per node  per comm  in group
    0         2         2         8        16        16   RUNNING  INCOMPLETE

Errors
======

DEAD
  1 job process is considered dead (unreachable via the RAS network)
  Process 7001 on node 10.0.0.2 managing GPU 2

#0-0 (00000000000000ab) INCOMPLETE
  Missing communicator data from 1 rank
  Rank 10 -- GPU 2 (NVML 5) managed by process 7001 on node 10.0.0.2

#0-1 (00000000000000cd) INCOMPLETE
  Missing communicator data from 12 ranks

Warnings
========

TIMEOUT
  Encountered 2 communication timeouts while gathering communicator data

"""


def test_dead_processes_nvml_numbers_and_uncounted_ranks() -> None:
    """The layout of client_support.cc @ v2.26.6-1 (DEAD, rasGpuToString's `C (NVML N)`, more missing
    ranks than the report names), constructed from its format strings."""
    _, comms = parse_ras_text(DEAD_2_26)
    assert comms == [RasComm("00000000000000ab", 16, 1, (RasPeer(10, "10.0.0.2", 7001, 2, 5, True, True),)),
                     RasComm("00000000000000cd", 16, 12)]
    out = ras_checks.evaluate(RasData("2.26.6", comms), {})
    assert [(f.check, f.device) for f in out] == [("nccl_ras_peer", "comm:00000000000000ab"),
                                                  ("nccl_ras_peer", "comm:00000000000000cd"), ("nccl_ras_stalled", "")]
    assert "rank 10 on 10.0.0.2 (pid 7001, CUDA device 2, NVML device 5) is dead" in out[0].message
    assert "12 of its 16 ranks did not answer RAS: 12 not named by RAS" in out[1].message


OLD_2_24 = """NCCL version 2.24.3 compiled with CUDA 12.6
CUDA runtime version 12060, driver version 12060

Group     Comms     Nodes     Ranks     Ranks     Ranks    Status  Errors
    #  in group  per comm  per node  per comm  in group
    0         1         2         4         8         8   RUNNING  INCOMPLETE,MISMATCH

Errors
======

#0-0 (5f3a9c0e1b2d4a6c) INCOMPLETE
  Missing communicator data from 2 ranks
  The missing ranks: 1,5

Warnings
========

#0-0 (5f3a9c0e1b2d4a6c) MISMATCH
  Communicator ranks have different status
  5 ranks have status RUNNING
  Rank 3 has status INIT
  Communicator ranks have different collective operation counts
  5 ranks have launched up to operation 12
  Rank 3 has launched up to operation 11 -- GPU 3 managed by process 99 on node 10.0.0.4

"""


def test_the_layout_of_2_24_and_2_25() -> None:
    """client_support.cc @ v2.24.3-1: missing ranks by number only, one count for every collective."""
    version, [c] = parse_ras_text(OLD_2_24)
    assert version == "2.24.3"
    assert c.missing == (RasPeer(1, "unknown", -1, -1, -1, True, False), RasPeer(5, "unknown", -1, -1, -1, True, False))
    assert c.mismatches == (RasMismatch("collective", ((12, 5), (11, 1)),
                                        (RasRank(3, 11, "10.0.0.4", 99, 3, 3),)),)
    [f] = ras_checks.evaluate(RasData(version, [c]), {})         # a mismatch once: no stalled verdict yet
    assert "rank 1 (its process not named by RAS) is unresponsive" in f.message


@pytest.mark.parametrize("bad, why", [
    ("Errors\n======\n", "no 'NCCL version' line"),
    ("NCCL version 2.27.3\nWarnings\n========\n\n#0-0 (ab) MISMATCH\n  Communicator ranks have different AllReduce "
     "operation counts\n  banana\n", "line 7: not a line of a MISMATCH block"),
])
def test_garbage_is_a_parse_error_naming_the_line(bad: str, why: str) -> None:
    with pytest.raises(ParseError, match=why):
        parse_ras_text(bad)


def test_crlf_endings_are_read() -> None:
    crlf = text("issue1762_2.27.3_incomplete.txt").replace("\n", "\r\n")
    assert parse_ras_text(crlf) == parse_ras_text(text("issue1762_2.27.3_incomplete.txt"))


def test_nccl_names_outliers_as_its_rule_says() -> None:
    """rasCountIsOutlier: one rank always; at most 10 and at most a quarter of the communicator."""
    assert ras_outlier(1, 2) and ras_outlier(8, 32) and not ras_outlier(9, 32) and not ras_outlier(11, 1000)
    m = ras_mismatch("AllReduce", {r: 5 if r < 20 else 4 for r in range(24)}, {}, 24)
    assert m is not None and m.groups == ((5, 20), (4, 4)) and [r.rank for r in m.named] == [20, 21, 22, 23]
    assert ras_mismatch("AllReduce", {0: 3, 1: 3}, {}, 2) is None


def test_versions_are_read_from_either_format_and_gated() -> None:
    assert version_of(text("issue1911_2.26.2_mismatch.txt")) == (2, 26, 2)
    assert version_of(issue1911("2.29.7")) == (2, 29, 7)
    assert "crashed NCCL before 2.27.3" in refusal((2, 26, 2))
    assert refusal((2, 26, 2), (2, 24, 0)) == "" and refusal((2, 27, 3)) == "" and refusal((2, 29, 7)) == ""
    assert refusal((2, 23, 4), (2, 24, 0)) != ""


def test_json_mismatch_on_several_collectives() -> None:
    ranks = [Rank(r, "n1", 10 + r, r, counts={"AllReduce": 7, "Broadcast": 2 if r else 1}) for r in range(4)]
    [c] = parse_ras_status(json_answer("2.29.7", [Comm(0x42, 4, ranks)]))[1]
    assert c.mismatches == (RasMismatch("Broadcast", ((2, 3), (1, 1)), (RasRank(0, 1, "n1", 10, 0, 0),)),)
