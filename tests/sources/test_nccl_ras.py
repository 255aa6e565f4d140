"""The nccl_ras source (issue 38 item 3) against a RAS server in the test that speaks NCCL's client
protocol (src/ras/client.cc: CLIENT/SERVER PROTOCOL, SET FORMAT json, STATUS) and answers in the
layout of NCCL's rasDumpCommsToJSON (client_support.cc's format strings; 2.28.7's missing comma
after a missing rank's nvml_dev included). Never VERBOSE; at most one query per 30 s; old versions
get no STATUS; 2.28.7-2.29.6 are refused; a dead peer is a finding naming its host."""

from __future__ import annotations

import json
import socket
import threading
from collections.abc import Iterator

import pytest

from fabricmon.config import ConfigError, from_dict
from fabricmon.host.io import LiveIO
from fabricmon.model.finding import OK, WARNING
from fabricmon.model.ports import PortView
from fabricmon.checks import nccl_ras as ras_checks
from fabricmon.sources.nccl_ras import NcclRasSource
from helpers import run_inputs


def nccl_json(version: str, missing: list[dict], comma_bug: bool = False) -> str:
    """A STATUS answer as NCCL's jsonWrite* functions print it (one communicator of 4 ranks)."""
    out = ["{\n", f'  "nccl_version": "{version}",\n', '  "cuda_runtime_version": 12080,\n',
           '  "cuda_driver_version": 12080,\n', '  "timestamp": "2026-11-27 16:40:00",\n',
           '  "communicators_count": 1,\n', '  "communicators": [\n', "    {\n",
           '      "hash": "0x5f3a9c0e1b2d4a6c",\n', '      "secondary_hash": "0x1a2b:0x3c4d",\n',
           '      "size": 4,\n', f'      "ranks_count": {4 - len(missing)},\n',
           f'      "missing_ranks_count": {len(missing)},\n', '      "ranks": [\n']
    for i in range(4 - len(missing)):
        out.append(",\n" if i else "")
        out.append("        {\n" f'          "rank": {i},\n' '          "host": "node01",\n' '          "pid": 4242,\n'
                   f'          "cuda_dev": {i},\n' f'          "nvml_dev": {i},\n' '          "status": {\n'
                   '            "init_state": 0,\n' '            "async_error": 0,\n'
                   '            "finalize_called": false,\n' '            "destroy_flag": false,\n'
                   '            "abort_flag": false\n' "          },\n" '          "collective_counts": {\n'
                   '            "AllReduce": 1200\n' "          }\n" "        }")
    out.append("\n      ],\n")
    out.append('      "missing_ranks": [\n')
    for i, m in enumerate(missing):
        out.append(",\n" if i else "")
        out.append("        {\n" f'          "rank": {m["rank"]},\n' f'          "host": "{m["host"]}",\n'
                   f'          "pid": {m["pid"]},\n' f'          "cuda_dev": {m["cuda_dev"]},\n'
                   f'          "nvml_dev": {m["cuda_dev"]}' + ("\n" if comma_bug else ",\n") + '          "status": {\n'
                   f'            "unresponsive": {str(m["unresponsive"]).lower()},\n'
                   f'            "considered_dead": {str(m["dead"]).lower()}\n' "          }\n" "        }")
    out.append("\n      ]\n")
    out.append("    }")
    out.append("\n  ],\n" '  "ras": {\n' '    "collection_time_sec": 0.012,\n' '    "timeouts_count": 0\n' "  }\n"
               "}\n")
    return "".join(out)


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
                        f.write(b"OK\n" if self.json else b"ERROR: Unknown command\n")
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


def source(port: int) -> NcclRasSource:
    cfg = from_dict({"sources": {"nccl_ras": {"enabled": True, "address": "127.0.0.1", "port": port}}},
                    check_paths=False)
    return NcclRasSource(cfg, cfg.sources["nccl_ras"])


DEAD = {"rank": 3, "host": "node07", "pid": 5151, "cuda_dev": 3, "unresponsive": True, "dead": True}


def test_a_dead_peer_is_named_and_only_status_is_ever_sent(ras) -> None:
    r = FakeRas(nccl_json("2.29.7", [DEAD]))
    ras.append(r)
    src = source(r.port)
    out = src.collect(LiveIO(), run_inputs())
    assert out.errors == []
    data = out.data
    assert data.version == "2.29.7" and not data.refused
    [c] = data.comms
    assert (c.hash, c.size, c.ranks_count) == ("0x5f3a9c0e1b2d4a6c", 4, 3)
    [p] = c.missing
    assert (p.rank, p.host, p.pid, p.cuda_dev, p.dead, p.unresponsive) == (3, "node07", 5151, 3, True, True)
    assert r.commands == ["CLIENT PROTOCOL 2", "SET FORMAT json", "STATUS"]      # never VERBOSE STATUS
    [f] = ras_checks.evaluate(data, {})
    assert f.status == WARNING and f.device == "comm:0x5f3a9c0e1b2d4a6c"
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
    [f] = ras_checks.evaluate(data, ports)
    assert "(this node; its ports: mlx5_0 port 1 DOWN)" in f.message


def test_every_rank_answering_is_ok(ras) -> None:
    r = FakeRas(nccl_json("2.30.7", []))
    ras.append(r)
    [f] = ras_checks.evaluate(source(r.port).collect(LiveIO(), run_inputs()).data, {})
    assert f.status == OK and "every rank answered" in f.message


def test_an_nccl_without_json_gets_no_status(ras) -> None:
    r = FakeRas("NCCL version 2.27.7 ...", json=False)
    ras.append(r)
    out = source(r.port).collect(LiveIO(), run_inputs())
    assert "STATUS" not in r.commands and "VERBOSE STATUS" not in r.commands
    assert "before 2.28.7" in out.data.refused and out.errors == []
    assert ras_checks.evaluate(out.data, {}) == []


def test_2_28_versions_are_refused_for_their_invalid_json(ras) -> None:
    r = FakeRas(nccl_json("2.28.9", [DEAD], comma_bug=True))
    ras.append(r)
    src = source(r.port)
    out = src.collect(LiveIO(), run_inputs())
    assert out.data.version == "2.28.9" and "invalid JSON for missing ranks" in out.data.refused
    assert out.data.comms == [] and out.errors == []
    with pytest.raises(ValueError):                          # what 2.28.7-2.29.6 write: not JSON
        json.loads(nccl_json("2.28.9", [DEAD], comma_bug=True))
    json.loads(nccl_json("2.29.7", [DEAD]))


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
    assert [k for k, _ in out.errors] == ["parse"]


def test_the_port_is_checked() -> None:
    with pytest.raises(ConfigError, match="sources.nccl_ras.port"):
        from_dict({"sources": {"nccl_ras": {"port": 70000}}}, check_paths=False)
