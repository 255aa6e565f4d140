"""fabricmon.sim.ports: the ports a simulator's services are told. Under FABRICMON_SIM_PORTS (which the
suite sets for every test process) each process draws from a block of its own, below the kernel's
ephemeral range, so that two pytest-xdist workers never hand out one port and no client socket takes it."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys

from fabricmon.sim import ports


def test_the_suite_sets_the_variable_for_its_processes() -> None:
    assert os.environ.get(ports.ENV) == str(ports.lock_dir())


def test_each_process_draws_from_its_own_block_below_the_ephemeral_range() -> None:
    mine = ports.free_ports(5)
    assert len(set(mine)) == 5
    assert all(ports.FIRST_PORT <= p < ports.ephemeral_low() for p in mine), mine
    first = ports._block.first
    assert all(first <= p < first + ports.BLOCK for p in mine), (first, mine)
    # another process (a second worker, the demo a test starts) holds another block while this one holds its own
    code = "import json; from fabricmon.sim import ports; print(json.dumps([ports.free_ports(5), ports._block.first]))"
    other, other_first = json.loads(subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                                                   timeout=60, check=True).stdout)
    assert other_first != first
    assert not set(other) & set(mine)


def test_a_port_someone_holds_is_never_handed_out() -> None:
    ahead = ports._block.next if ports._block else None
    if ahead is None:
        ports.free_port()
        ahead = ports._block.next
    udp = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    tcp = socket.socket()
    try:
        udp.bind(("127.0.0.1", ahead))                  # the next one, held over UDP
        tcp.bind(("127.0.0.1", ahead + 1))              # and the one after, over TCP
        got = ports.free_ports(3, socket.SOCK_STREAM)
        assert ahead not in got and ahead + 1 not in got, (ahead, got)
    finally:
        udp.close()
        tcp.close()


def test_without_the_variable_the_kernel_chooses(monkeypatch) -> None:
    monkeypatch.delenv(ports.ENV)
    got = ports.free_ports(4, socket.SOCK_DGRAM)
    assert len(set(got)) == 4
    assert all(p >= ports.ephemeral_low() for p in got), got
