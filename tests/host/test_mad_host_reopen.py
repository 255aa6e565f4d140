"""A lost umad port (host/mad.py MadHost): a device error under a run closes it and logs once; open() opens it
again no sooner than 1 s later, then backing off 2, 4, 8, 16 and 30 s (the cap) between failed tries, raising
UmadLost meanwhile with the same words every sweep; the first open that succeeds is logged once with the tries
it took and is a new epoch; a port lost again before any run on it succeeded keeps backing off. On a port
and a clock in Python; the same on ibsim restarting under a collector: tests/sim/test_mad_reconnect_sim.py."""

from __future__ import annotations

import errno
import re
import time

import pytest
import structlog

from fabricmon.host.mad import REOPEN_MAX, MadHost, MadSettings, Request, UmadLost
from fabricmon.host.umad import UmadUnavailable
from fabricmon.sources.infiniband.mad import codec


class Port:
    """Answers every MAD at once (a GetResp echoing it) until `dead`, when a write fails as a umad device
    whose HCA was reset (ENODEV) or whose simulator went away (ENOTCONN)."""

    mad_offset = 64

    def __init__(self) -> None:
        self.dead = 0
        self.queue: list[bytes] = []
        self.closed = False

    def register(self, cls: int, version: int) -> int:
        return cls

    def writer(self, buf) -> int:
        if self.dead:
            raise OSError(self.dead, "device gone")
        mad = bytearray(bytes(buf)[self.mad_offset:])
        mad[3] = codec.METHOD_GET_RESP
        self.queue.append(bytes(self.mad_offset) + bytes(mad))
        return len(buf)

    def reader(self) -> bytes:
        if not self.queue:
            raise BlockingIOError(errno.EAGAIN, "nothing queued")
        return self.queue.pop(0)

    def wait(self, timeout_ms: int) -> bool:
        return bool(self.queue)

    def close(self) -> None:
        self.closed = True


class Host:
    """A MadHost on a clock the test moves, whose opener hands out new Ports or fails (`refuse`)."""

    def __init__(self) -> None:
        self.now = 1000.0
        self.refuse = False
        self.ports: list[Port] = []
        self.opens: list[tuple[float, bool]] = []          # (when, again)
        self.host = MadHost(opener=self.opener, clock=lambda: self.now)

    def opener(self, ca: str, port: int, again: bool) -> Port:
        self.opens.append((self.now, again))
        if self.refuse:
            raise UmadUnavailable(errno.ECONNREFUSED, "no simulator listens")
        self.ports.append(Port())
        return self.ports[-1]                               # type: ignore[return-value]

    def sweep(self) -> int:
        """One sweep: open (its epoch), one run of a PortInfo Get."""
        epoch = self.host.open(MadSettings())
        answers = self.host.run([Request("sw", 5, bytes(codec.encode_port_info(1, 0)))], time.monotonic() + 1)
        assert answers[0] is not None
        return epoch


def test_a_lost_port_is_reopened_with_a_capped_backoff_and_logged_once_each_way() -> None:
    h = Host()
    with structlog.testing.capture_logs() as logs:
        assert h.sweep() == 1 and h.opens == [(1000.0, False)]
        h.ports[0].dead = errno.ENOTCONN
        with pytest.raises(OSError, match="device gone"):
            h.sweep()
        assert h.ports[0].closed
        h.refuse = True
        said, tries = set(), []
        for _ in range(125):                                # a sweep a second for two minutes, no simulator
            h.now += 1.0
            with pytest.raises(UmadLost) as exc:
                h.sweep()
            said.add(re.sub(r"\d+", "#", str(exc.value.strerror)))
            tries = [t for t, again in h.opens if again]
        assert [round(b - a) for a, b in zip(tries, tries[1:])] == [2, 4, 8, 16, 30, 30, 30]
        assert tries[0] == 1001.0                           # the first try 1 s after the loss
        # the same words every sweep but the numbers (the pipeline logs an error once; a sweep before the first
        # try says "reopening, try # in # s")
        assert said == {"the MAD port was lost (device gone); reopening (try #: no simulator listens), try # in # s"}
        h.refuse = False
        while len(h.ports) == 1:
            h.now += 1.0
            try:
                assert h.sweep() == 2                       # a new epoch: what lived on the port is made again
            except UmadLost:
                pass
        assert h.now - tries[-1] <= REOPEN_MAX
        assert h.sweep() == 2 and len(h.ports) == 2
    lost = [e for e in logs if e["event"] == "MAD port lost; reopening"]
    back = [e for e in logs if e["event"] == "MAD port reopened"]
    assert len(lost) == 1 and lost[0]["error"] == "device gone" and lost[0]["log_level"] == "warning"
    assert len(back) == 1 and back[0]["tries"] == len(tries) + 1 and back[0]["log_level"] == "info"


def test_a_port_lost_again_before_a_run_on_it_worked_keeps_backing_off() -> None:
    h = Host()
    h.sweep()
    for delay in (1.0, 2.0, 4.0):                           # reopened, and lost at its first run, each time
        h.ports[-1].dead = errno.ENODEV
        with pytest.raises(OSError):
            h.sweep()
        h.now += delay - 0.5
        with pytest.raises(UmadLost):
            h.sweep()
        h.now += 0.5
        opened = len(h.ports)
        h.host.open(MadSettings())
        assert len(h.ports) == opened + 1
    h.host.run([Request("sw", 5, bytes(codec.encode_port_info(1, 0)))], time.monotonic() + 1)    # it works: the backoff starts over
    h.ports[-1].dead = errno.EIO
    with pytest.raises(OSError):
        h.sweep()
    h.now += 1.0
    assert h.sweep() == 5


def test_a_port_that_never_opened_is_no_lost_port() -> None:
    h = Host()
    h.refuse = True
    for _ in range(3):                                      # as before: UmadUnavailable, tried at each open
        with pytest.raises(UmadUnavailable) as exc:
            h.host.open(MadSettings())
        assert not isinstance(exc.value, UmadLost)
    assert h.opens == [(1000.0, False)] * 3
