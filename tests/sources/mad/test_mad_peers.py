"""Step 4 of a MAD sweep (sources/infiniband/mad/reader.py): the far end of each host link is read once
for what it may train at, again only when the switch end's link changes, and a CA that does not answer
is never counted against its switch. On a FabricReader whose engine answers in Python with ibsim's own
PortInfo bytes (tests/fixtures/portinfo/)."""

from __future__ import annotations

import time
from pathlib import Path

from fabricmon.model.link_ability import best_common
from fabricmon.sources.infiniband.mad import codec
from fabricmon.sources.infiniband.mad.reader import FabricReader, SwitchTarget

PORTINFO = Path(__file__).parents[2] / "fixtures" / "portinfo"
SWITCH, CA_EDR, CA_SILENT = 10, 100, 101


def portinfo(name: str) -> bytearray:
    return bytearray(bytes.fromhex("".join((PORTINFO / f"{name}.smpdump").read_text().split())))


class Engine:
    """Answers every Get() as a port would: counters all zero, PortInfo from the fixtures."""

    def __init__(self) -> None:
        self.switch_port = {1: portinfo("hdr-edr-switch-port"), 2: portinfo("hdr-edr-switch-port2")}
        self.sent: list[tuple[int, int, int]] = []        # (lid, attribute, modifier) of each request

    def run(self, reqs, deadline):
        out = []
        for r in reqs:
            attr, mod = int.from_bytes(r.mad[16:18], "big"), int.from_bytes(r.mad[20:24], "big")
            self.sent.append((r.lid, attr, mod))
            if r.lid == CA_SILENT:
                out.append(None)
                continue
            ans = bytearray(r.mad)
            ans[3] = codec.METHOD_GET_RESP
            if attr == codec.ATTR_CLASS_PORT_INFO:
                ans[66:68] = (codec.CAP_ALL_PORT_SELECT | codec.CAP_EXT_WIDTH).to_bytes(2, "big")
            elif attr == codec.ATTR_PORT_INFO:
                ans[64:128] = self.switch_port[mod] if r.lid == SWITCH else portinfo("hdr-edr-ca-port")
            out.append(bytes(ans))
        return out


def peer_reads(engine: Engine) -> int:
    return sum(1 for lid, attr, _ in engine.sent if attr == codec.ATTR_PORT_INFO and lid != SWITCH)


def test_far_ends_read_once_again_only_when_the_link_changes_and_never_against_the_switch() -> None:
    eng = Engine()
    reader = FabricReader(eng.run)
    t = SwitchTarget("sw", SWITCH, 2, state_ports=(1, 2), peers=((1, CA_EDR, 1), (2, CA_SILENT, 1)))
    r = reader.read([t], time.monotonic() + 10, ("symbol_errors",))["sw"]
    assert r.link_up == {1: True, 2: True} and r.link[1][:2] == (4, "EDR") and r.link[2][:2] == (4, "HDR")
    assert best_common(r.link[1][2], r.peer_ability[1]) == (4, "EDR")        # the EDR host at its best
    assert not r.peer_ability[2].known                                      # the silent CA: unknown
    assert r.unanswered == 0 and not r.failed                               # ... and not the switch's fault
    assert peer_reads(eng) == 2 and reader.peer_reads == 2
    # nothing changed: no far-end MAD, the last reads stand
    r = reader.read([t], time.monotonic() + 10, ("symbol_errors",))["sw"]
    assert peer_reads(eng) == 2 and best_common(r.link[1][2], r.peer_ability[1]) == (4, "EDR")
    # port 1 retrains at 1X: its far end is read again; the silent one is not asked again
    eng.switch_port[1][31] = 0x01
    r = reader.read([t], time.monotonic() + 10, ("symbol_errors",))["sw"]
    assert r.link[1][:2] == (1, "EDR") and peer_reads(eng) == 3
    assert [s for s in eng.sent if s[0] != SWITCH][-1] == (CA_EDR, codec.ATTR_PORT_INFO, 1)
