"""The events source after the collector's umad port was lost and opened again (HostIO.mad_open's epoch changed:
an HCA reset, the simulator restarted): the SA port on that device is closed and opened again and the same
master SM is subscribed to again ("port reopened"), though its activity count only went on (an SM drops the
subscriptions of a port that left the subnet). While the port is lost the mode is sweep, saying so. On the
host interface of tests/sources/test_events_source.py; on ibsim: tests/sim/test_mad_reconnect_sim.py."""

from __future__ import annotations

import errno

import structlog

from fabricmon.host.mad import UmadLost
from test_events_source import FabricIO, run, source


class ReopeningIO(FabricIO):
    """FabricIO whose MAD port has an epoch, and can be lost (mad_open raises UmadLost)."""

    def __init__(self) -> None:
        super().__init__()
        self.epoch, self.lost = 1, False
        self.sa_opens = self.sa_closes = 0

    def mad_open(self, settings) -> int:
        if self.lost:
            raise UmadLost(errno.ENODEV, "the MAD port was lost (No such device); reopening, try 1 in 1 s")
        return self.epoch

    def sa_open(self) -> None:
        self.sa_opens += 1

    def sa_close(self) -> None:
        self.sa_closes += 1


def test_a_reopened_port_is_subscribed_again_on_a_reopened_sa_port() -> None:
    io, src = ReopeningIO(), source()
    assert run(src, io).mode == "events"
    run(src, io)
    n = len(io.sets)
    assert n and io.sa_closes == 0
    io.lost = True
    lost = run(src, io)
    assert lost.mode == "sweep" and "the MAD port was lost" in lost.reason
    io.lost, io.epoch = False, 2
    io.activity += 10                                        # the same master, counting on
    src._failed_at = None                                    # past the source's retry pause
    with structlog.testing.capture_logs() as logs:
        back = run(src, io)
    assert io.sa_closes == 1 and len(io.sets) == 2 * n
    assert [e["why"] for e in logs if e["event"] == "subscribed to the subnet manager's reports"] == ["port reopened"]
    assert back.mode == "events"
    run(src, io)                                             # the same epoch: nothing made again
    assert io.sa_closes == 1 and len(io.sets) == 2 * n
