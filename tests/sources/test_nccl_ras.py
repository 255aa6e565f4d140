"""The nccl_ras source (issue 38 item 3, issue 52 item 6) against a RAS server in the test that speaks
NCCL's client protocol (src/ras/client.cc: CLIENT/SERVER PROTOCOL, SET FORMAT json, STATUS) and answers
in the layout of NCCL's rasDumpCommsToJSON (client_support.cc's format strings; 2.28.7's missing comma
after a missing rank's nvml_dev included) or with the real text reports of tests/fixtures/nccl_ras.
Never VERBOSE; at most one query per 30 s; an NCCL without JSON is read in text; one whose JSON is
invalid (2.28.7-2.29.6) in text from the next query; versions before text_since are refused; a dead
peer is a finding naming its host."""

from __future__ import annotations

import json
import socket
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest

from fabricmon.config import ConfigError, from_dict
from fabricmon.host.io import LiveIO
from fabricmon.model.finding import OK, WARNING
from fabricmon.model.ports import PortView
from fabricmon.checks import nccl_ras as ras_checks
from fabricmon.pipeline.source import SourceOutput
from fabricmon.sources.nccl_ras import NcclRasSource
from helpers import run_inputs
from nccl_ras_answers import Comm, Missing, Rank, issue1762, json_answer


def nccl_json(version: str, missing: list[dict], comma_bug: bool = False) -> str:
    """A STATUS answer as NCCL's jsonWrite* functions print it (one communicator of 4 ranks)."""
    ranks = [Rank(i, "node01", 4242, i, counts={"AllReduce": 1200}) for i in range(4 - len(missing))]
    gone = [Missing(m["rank"], m["host"], m["pid"], m["cuda_dev"], None, m["unresponsive"], m["dead"]) for m in missing]
    return json_answer(version, [Comm(0x5f3a9c0e1b2d4a6c, 4, ranks, gone)], comma_bug)


class FakeRas:
    """A RAS client port: answers as NCCL's rasClientRun does; `json` False answers SET FORMAT as an
    NCCL without it. Keeps every command it got."""

    def __init__(self, answer: str, json: bool = True):
        self.answer, self.json = answer, json
        self.commands: list[str] = []
        self.sock = socket.socket()
        self.sock.bind(("127.0.0.1", 0))
        self.sock.listen(4)
        self.port = self.sock.getsockname()[1]
        threading.Thread(target=self.serve, daemon=True).start()

    def serve(self) -> None:
        while True:
            try:
                conn, _ = self.sock.accept()
            except OSError:
                return
            with conn, conn.makefile("rwb") as f:
                for raw in f:
                    cmd = raw.decode().strip()
                    self.commands.append(cmd)
                    if cmd.startswith("CLIENT PROTOCOL"):
                        f.write(b"SERVER PROTOCOL 2\n")
                    elif cmd.upper() == "SET FORMAT JSON":
                        f.write(b"OK\n" if self.json else f"ERROR: Unknown command {cmd}\n".encode())
                    elif cmd.upper().endswith("STATUS"):
                        f.write(self.answer.encode())
                        f.flush()
                        break
                    f.flush()

    def close(self) -> None:
        self.sock.close()


@pytest.fixture
def ras() -> Iterator[list[FakeRas]]:
    made: list[FakeRas] = []
    yield made
    for r in made:
        r.close()


def source(port: int, **opts: object) -> NcclRasSource:
    cfg = from_dict({"sources": {"nccl_ras": {"enabled": True, "address": "127.0.0.1", "port": port, **opts}}},
                    check_paths=False)
    return NcclRasSource(cfg.sources["nccl_ras"])


def query_again(src: NcclRasSource, r: FakeRas, answer: str) -> SourceOutput:
    """The next query, 30 s on (the source's MIN_INTERVAL passed), to a RAS answering `answer`."""
    r.answer = answer
    src._last = float("-inf")
    return src.collect(LiveIO(), run_inputs())


FIXTURES = Path(__file__).parent.parent / "fixtures" / "nccl_ras"
DEAD = {"rank": 3, "host": "node07", "pid": 5151, "cuda_dev": 3, "unresponsive": True, "dead": True}


def test_a_dead_peer_is_named_and_only_status_is_ever_sent(ras) -> None:
    r = FakeRas(nccl_json("2.29.7", [DEAD]))
    ras.append(r)
    src = source(r.port)
    out = src.collect(LiveIO(), run_inputs())
    assert out.errors == []
    data = out.data
    assert (data.version, data.format, data.refused) == ("2.29.7", "json", "")
    [c] = data.comms
    assert (c.hash, c.size, c.unreachable) == ("5f3a9c0e1b2d4a6c", 4, 1)
    [p] = c.missing
    assert (p.rank, p.host, p.pid, p.cuda_dev, p.dead, p.unresponsive) == (3, "node07", 5151, 3, True, True)
    assert r.commands == ["CLIENT PROTOCOL 2", "SET FORMAT json", "STATUS"]      # never VERBOSE STATUS
    [f, _] = ras_checks.evaluate(data, {})
    assert f.status == WARNING and f.device == "comm:5f3a9c0e1b2d4a6c"
    assert "rank 3 on node07 (pid 5151, CUDA device 3, NVML device 3) is dead" in f.message
    # at most one query every 30 s, whatever the interval: the next poll answers from the last
    again = src.collect(LiveIO(), run_inputs())
    assert again.data.comms == data.comms and r.commands.count("STATUS") == 1


def test_a_peer_on_this_node_names_its_ports(ras) -> None:
    r = FakeRas(nccl_json("2.29.7", [DEAD]))
    ras.append(r)
    data = source(r.port).collect(LiveIO(), run_inputs()).data
    data.local_host = "node07"
    ports = {("mlx5_0", 1): PortView(device="mlx5_0", port=1, state_id=1, phys_state_id=2)}
    f = ras_checks.evaluate(data, ports)[0]
    assert "(this node; its ports: mlx5_0 port 1 DOWN)" in f.message


def test_every_rank_answering_is_ok(ras) -> None:
    r = FakeRas(nccl_json("2.30.7", []))
    ras.append(r)
    out = ras_checks.evaluate(source(r.port).collect(LiveIO(), run_inputs()).data, {})
    assert [(f.check, f.status) for f in out] == [("nccl_ras_peer", OK), ("nccl_ras_stalled", OK)]
    assert "every rank of every communicator answered" in out[0].message


def test_an_nccl_without_json_is_read_in_text(ras) -> None:
    """A real hang reported by NCCL 2.27.3 (issue #1762): the text report, the same finding as its JSON."""
    r = FakeRas((FIXTURES / "issue1762_2.27.3_incomplete.txt").read_text(), json=False)
    ras.append(r)
    src = source(r.port)
    out = src.collect(LiveIO(), run_inputs())
    assert out.errors == [] and r.commands == ["CLIENT PROTOCOL 2", "SET FORMAT json", "STATUS"]
    assert (out.data.version, out.data.format, out.data.refused) == ("2.27.3", "text", "")
    text_findings = ras_checks.evaluate(out.data, {})
    assert [(f.check, f.device, f.status) for f in text_findings] == [
        ("nccl_ras_peer", "comm:b3398875b8b2a063", WARNING), ("nccl_ras_stalled", "", OK)]
    # the next query asks in text straight away (no SET FORMAT json for an NCCL that has none)
    assert query_again(src, r, r.answer).errors == []
    assert r.commands[3:] == ["CLIENT PROTOCOL 2", "STATUS"]
    # the same state in 2.29.7's JSON: the same findings
    j = FakeRas(issue1762("2.27.3"))
    ras.append(j)
    assert ras_checks.evaluate(source(j.port).collect(LiveIO(), run_inputs()).data, {}) == text_findings


def test_ranks_stuck_at_different_counts_over_two_queries_issue_1911(ras) -> None:
    r = FakeRas((FIXTURES / "issue1911_2.26.2_mismatch.txt").read_text(), json=False)
    ras.append(r)
    src = source(r.port, text_since="2.26.2")
    check = ras_checks.NcclRas()
    first = ras_checks.evaluate(src.collect(LiveIO(), run_inputs()).data, {}, check.state)
    assert [f.check for f in first] == ["nccl_ras_peer"]        # one answer: no verdict on the counts yet
    second = ras_checks.evaluate(query_again(src, r, r.answer).data, {}, check.state)
    [stalled] = [f for f in second if f.check == "nccl_ras_stalled"]
    assert stalled.status == WARNING and stalled.device == "comm:fa93daea854b060b"
    assert "rank 12 at 641 on 10.137.190.124 (pid 323032, CUDA device 4, NVML device 4)" in stalled.message


def test_versions_before_text_since_are_refused(ras) -> None:
    r = FakeRas((FIXTURES / "issue1911_2.26.2_mismatch.txt").read_text(), json=False)
    ras.append(r)
    src = source(r.port)
    out = src.collect(LiveIO(), run_inputs())
    assert out.errors == [] and out.data.version == "2.26.2" and out.data.comms == []
    assert "crashed NCCL before 2.27.3" in out.data.refused and "text_since" in out.data.refused
    assert ras_checks.evaluate(out.data, {}) == []
    src._last = float("-inf")                               # 30 s on: still refused, nothing sent
    assert src.collect(LiveIO(), run_inputs()).data.refused and r.commands.count("STATUS") == 1


def test_2_28_versions_are_read_in_text_after_their_invalid_json(ras) -> None:
    r = FakeRas(nccl_json("2.28.9", [DEAD], comma_bug=True))
    ras.append(r)
    src = source(r.port)
    out = src.collect(LiveIO(), run_inputs())
    with pytest.raises(ValueError):                          # what 2.28.7-2.29.6 write: not JSON
        json.loads(r.answer)
    json.loads(nccl_json("2.29.7", [DEAD]))
    [(kind, message)] = out.errors
    assert kind == "parse" and "its text report is read from the next query" in message
    assert out.data is None                                 # nothing read: the last records ride it out
    assert src.collect(LiveIO(), run_inputs()).data is None  # nor does a poll before the next query invent any
    text = (FIXTURES / "issue1762_2.27.3_incomplete.txt").read_text().replace("2.27.3", "2.28.9")
    again = query_again(src, r, text)
    assert again.errors == [] and again.data.format == "text" and again.data.comms[0].unreachable == 1
    assert r.commands[3:] == ["CLIENT PROTOCOL 2", "STATUS"]
    # a 2.28 answer with nothing missing is valid JSON: read as it is
    fresh = source(r.port)
    r.answer = nccl_json("2.28.9", [], comma_bug=True)
    assert fresh.collect(LiveIO(), run_inputs()).data.format == "json"


def test_nothing_listening_is_no_job_not_an_error() -> None:
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
    s.close()
    out = source(port).collect(LiveIO(), run_inputs())
    assert out.errors == [] and out.data.comms == [] and not out.data.refused


def test_garbage_is_a_parse_error(ras) -> None:
    r = FakeRas('{"nccl_version": "2.29.7", "communicators": [ {"hash": ')
    ras.append(r)
    out = source(r.port).collect(LiveIO(), run_inputs())
    assert [k for k, _ in out.errors] == ["parse"] and out.data is None


def test_the_port_and_the_version_are_checked() -> None:
    with pytest.raises(ConfigError, match="sources.nccl_ras.port"):
        from_dict({"sources": {"nccl_ras": {"port": 70000}}}, check_paths=False)
    with pytest.raises(ConfigError, match="sources.nccl_ras.text_since.*not an NCCL version"):
        from_dict({"sources": {"nccl_ras": {"text_since": "2.27"}}}, check_paths=False)
    with pytest.raises(ConfigError, match="sources.nccl_ras.text_since.*has no RAS"):
        from_dict({"sources": {"nccl_ras": {"text_since": "2.21.5"}}}, check_paths=False)
