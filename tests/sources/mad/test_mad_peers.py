"""Steps 4 and 5 of a MAD sweep (sources/infiniband/mad/reader.py): the far end of each host link is read
once for what it may train at, again only when the switch end's link changes, and a CA that does not
answer is never counted against its switch; an inter-switch link is read at one end, its other end
taking that end's state with its own ability (read the same way), and read itself where the read end
went unanswered; a port never cabled has no counters asked. On a FabricReader whose engine answers in
Python with ibsim's own PortInfo bytes (tests/fixtures/portinfo/). The plan (plan_targets) on a real
director's ibnetdiscover output."""

from __future__ import annotations

import lzma
import time
from pathlib import Path

import pytest

from fabricmon.model.fabric import build_topology, in_shard
from fabricmon.model.link_ability import best_common
from fabricmon.parsers.ibnetdiscover import parse_ibnetdiscover
from fabricmon.sources.infiniband.mad import codec
from fabricmon.sources.infiniband.mad.reader import FabricReader, SwitchTarget, plan_targets

PORTINFO = Path(__file__).parents[2] / "fixtures" / "portinfo"
SWITCH, CA_EDR, CA_SILENT = 10, 100, 101
OTHER = 11                                  # a second switch, cabled to SWITCH's port 1 by its own port 1


def portinfo(name: str) -> bytearray:
    return bytearray(bytes.fromhex("".join((PORTINFO / f"{name}.smpdump").read_text().split())))


class Engine:
    """Answers every Get() as a port would: counters all zero, PortInfo from the fixtures."""

    def __init__(self) -> None:
        self.switch_port = {1: portinfo("hdr-edr-switch-port"), 2: portinfo("hdr-edr-switch-port2")}
        self.other_port = {1: portinfo("hdr-edr-switch-port")}        # OTHER's end of SWITCH port 1's link
        self.sent: list[tuple[int, int, int]] = []        # (lid, attribute, modifier) of each request
        self.silent = {CA_SILENT}                         # LIDs that answer nothing
        self.symbol_errors: dict[tuple[int, int], int] = {}   # (lid, port) -> its SymbolErrorCounter
        self.refused: set[tuple[int, int]] = set()       # (lid, port) whose PortInfo is answered with an error status

    def run(self, reqs, deadline, times=None):
        out = []
        for r in reqs:
            attr, mod = int.from_bytes(r.mad[16:18], "big"), int.from_bytes(r.mad[20:24], "big")
            self.sent.append((r.lid, attr, mod))
            if r.lid in self.silent:
                out.append(None)
                continue
            ans = bytearray(r.mad)
            ans[3] = codec.METHOD_GET_RESP
            if attr == codec.ATTR_CLASS_PORT_INFO:
                ans[66:68] = (codec.CAP_ALL_PORT_SELECT | codec.CAP_EXT_WIDTH).to_bytes(2, "big")
            elif attr == codec.ATTR_PORT_INFO:
                ans[64:128] = {SWITCH: self.switch_port, OTHER: self.other_port}.get(r.lid, {}).get(
                    mod, portinfo("hdr-edr-ca-port"))
                if (r.lid, mod) in self.refused:
                    ans[5] = 0x1C                             # status: invalid attribute modifier
            elif attr == codec.ATTR_PORT_COUNTERS:        # PortSelect at data byte 1, SymbolErrorCounter at 4
                sel = r.mad[65]
                ans[68:70] = (sum(v for (lid, p), v in self.symbol_errors.items() if lid == r.lid and sel in (p, 255))
                              ).to_bytes(2, "big")
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


def down(pi: bytearray) -> bytearray:
    """The same PortInfo with the link down (PortState Down, PortPhysicalState Polling)."""
    out = bytearray(pi)
    out[32] = (out[32] & 0xF0) | 1
    out[33] = (out[33] & 0x0F) | (2 << 4)
    return out


def pair() -> tuple[SwitchTarget, SwitchTarget]:
    """SWITCH reads its port 1 (an inter-switch link) and OTHER's port 1 mirrors it; OTHER's port 2 is cabled
    to a CA (read by OTHER), its ports 3-4 never cabled (no counters asked)."""
    return (SwitchTarget("sw", SWITCH, 2, state_ports=(1,), mirrors=((1, "other", OTHER, 1),), counter_ports=(1, 2)),
            SwitchTarget("other", OTHER, 4, state_ports=(2,), peers=((2, CA_EDR, 1),), counter_ports=(1, 2)))


def sent(eng: Engine, lid: int, attr: int) -> list[int]:
    return [mod for rl, a, mod in eng.sent if rl == lid and a == attr]


def test_an_inter_switch_link_is_read_at_one_end_and_both_ends_get_its_state_each_its_own_ability() -> None:
    eng = Engine()
    reader = FabricReader(eng.run)
    targets = pair()
    out = reader.read(list(targets), time.monotonic() + 10, ("symbol_errors",))
    sw, other = out["sw"], out["other"]
    assert sw.link_up == {1: True} and other.link_up == {1: True, 2: True}
    assert other.link[1][:2] == sw.link[1][:2] == (4, "EDR")
    own = bytearray(codec.encode_port_info(1, 0)) + bytearray(64)
    own[3], own[64:128] = codec.METHOD_GET_RESP, eng.other_port[1]
    assert other.link[1][2] == codec.decode_port_link(bytes(own))[3]                           # its own ability
    # OTHER's port 1: its PortInfo asked once (for its ability), never for its state; SWITCH's port 1 every sweep
    assert sent(eng, OTHER, codec.ATTR_PORT_INFO) == [2, 1] and reader.peer_reads == 2 and reader.fallback_reads == 0
    n = len(eng.sent)
    out = reader.read(list(targets), time.monotonic() + 10, ("symbol_errors",))
    assert out["other"].link_up == {1: True, 2: True} and out["other"].link[1] == other.link[1]
    assert sent(eng, OTHER, codec.ATTR_PORT_INFO) == [2, 1, 2] and len(eng.sent) - n == 2 * (2 + 1 + 1)   # a switch: 2 counters, the aggregate, 1 PortInfo
    # the never-cabled ports 3 and 4: no counters asked, none reported
    assert len(sent(eng, OTHER, codec.ATTR_PORT_COUNTERS_EXT)) == 2 * 2 and set(out["other"].ports) == {1, 2}
    # the link goes down (at both ends, as a link does): both read down in the same sweep; a link read
    # down has its other end read too (one MAD a down link), each end keeping its own reading
    eng.switch_port[1], eng.other_port[1] = down(eng.switch_port[1]), down(eng.other_port[1])
    out = reader.read(list(targets), time.monotonic() + 10, ("symbol_errors",))
    assert out["sw"].link_up[1] is False and out["other"].link_up[1] is False and reader.fallback_reads == 1
    assert out["other"].link[1][:2] == out["sw"].link[1][:2]
    # a cable moved away from the read end (now cabled elsewhere there and down, say) while the other
    # end is up on another cable: each end as read, never a down inferred at the end that is up
    eng.other_port[1] = portinfo("hdr-edr-switch-port")
    out = reader.read(list(targets), time.monotonic() + 10, ("symbol_errors",))
    assert out["sw"].link_up[1] is False and out["other"].link_up[1] is True and reader.fallback_reads == 2
    # the other end's read unanswered: it takes the read end's state (down), as a mirror, and the miss counts
    eng.silent.add(OTHER)
    out = reader.read(list(targets), time.monotonic() + 10, ("symbol_errors",))
    assert out["other"].link_up == {1: False} and "port state" in out["other"].failed
    eng.silent.discard(OTHER)
    # ... and up again at 1X: both ends at 1X, the other end's ability read again (the read end's link changed)
    eng.switch_port[1] = portinfo("hdr-edr-switch-port")
    eng.switch_port[1][31] = 0x01
    out = reader.read(list(targets), time.monotonic() + 10, ("symbol_errors",))
    assert out["sw"].link_up[1] and out["other"].link_up[1] and out["other"].link[1][:2] == (1, "EDR")
    assert sent(eng, OTHER, codec.ATTR_PORT_INFO)[-2:] == [2, 1] and reader.peer_reads == 3


def test_a_silent_read_end_has_the_other_end_read_itself_and_both_silent_leave_both_unread() -> None:
    eng = Engine()
    reader = FabricReader(eng.run)
    targets = pair()
    reader.read(list(targets), time.monotonic() + 10, ("symbol_errors",))
    eng.silent.add(SWITCH)
    out = reader.read(list(targets), time.monotonic() + 10, ("symbol_errors",))
    sw, other = out["sw"], out["other"]
    assert sw.unanswered > 0 and "port state" in sw.failed
    # its end: the link's state as read at the other end, its own ability unknown this sweep
    assert sw.link_up == {1: True} and sw.link[1][:2] == (4, "EDR") and not sw.link[1][2].known
    assert other.link_up == {1: True, 2: True} and other.link[1][:2] == (4, "EDR")     # read from its own end
    assert other.unanswered == 0 and not other.failed and reader.fallback_reads == 1
    eng.silent.add(OTHER)
    out = reader.read(list(targets), time.monotonic() + 10, ("symbol_errors",))
    assert out["sw"].link_up == {} and out["other"].link_up == {}
    assert "port state" in out["other"].failed and reader.fallback_reads == 2
    # the read end answers its counters but not the port's PortInfo (an error status): the other end is read
    eng.silent -= {SWITCH, OTHER}
    eng.refused.add((SWITCH, 1))
    out = reader.read(list(targets), time.monotonic() + 10, ("symbol_errors",))
    assert out["sw"].link_up[1] is True and out["other"].link_up[1] is True and reader.fallback_reads == 3
    assert out["other"].link[1][2].known and not out["sw"].link[1][2].known


def test_a_never_cabled_port_with_error_counters_keeps_them_where_its_switch_is_drilled() -> None:
    eng = Engine()
    eng.symbol_errors[(OTHER, 4)] = 9         # errors on a port never cabled since the collector started
    reader = FabricReader(eng.run)
    out = reader.read(list(pair()), time.monotonic() + 10, ("symbol_errors",))["other"]
    assert out.errors_ok and set(out.ports) == {1, 2, 3, 4}          # as drilled: every port's error counters
    assert out.ports[4]["symbol_errors"] == 9 and out.ports[4].get("transmit_bytes") is None
    assert out.ports[3]["symbol_errors"] == 0 and out.ports[3].get("receive_bytes") is None
    # no errors anywhere: no drill, and the never-cabled ports have no record at all
    eng.symbol_errors.clear()
    out = reader.read(list(pair()), time.monotonic() + 10, ("symbol_errors",))["other"]
    assert out.errors_ok and set(out.ports) == {1, 2}
    assert out.ports[1]["symbol_errors"] == 0 and out.ports[1]["transmit_bytes"] == 0


NDR = Path(__file__).parents[2] / "fixtures" / "ibnetdiscover" / "real" / "topograph-ndr-40sw.ibnetdiscover.xz"


@pytest.mark.parametrize("shard", [(0, 1), (1, 3)])
def test_the_plan_reads_each_inter_switch_link_at_one_end_half_of_each_switch_and_counts_only_cabled_ports(shard) -> None:
    topo = build_topology(parse_ibnetdiscover(lzma.open(NDR, "rt").read()))     # a real 40-switch NDR fabric
    mine = {g for g in topo.switches if in_shard(g, *shard)}
    targets, no_lid = plan_targets(topo, mine)
    assert targets == plan_targets(topo, set(mine))[0]                 # deterministic
    by = {t.guid: t for t in targets}
    assert set(by) | set(no_lid) == {g for g in mine if topo.switches[g].kind == "infiniband"}
    isl = both = 0
    for (g, p), info in topo.ports.items():
        lk = info.link
        if g not in by or lk is None:
            continue
        t = by[g]
        assert p in t.counter_ports
        if lk.remote_type == "Switch" and lk.remote_guid in by:
            isl += 1
            far = by[lk.remote_guid]
            mine_reads, far_reads = p in t.state_ports, lk.remote_port in far.state_ports
            assert mine_reads != far_reads, (g, p)                     # exactly one end read
            reader_t, port, other, oport = (t, p, far, lk.remote_port) if mine_reads else (far, lk.remote_port, t, p)
            assert (port, other.guid, other.lid, oport) in reader_t.mirrors
            both += 1
        else:
            assert p in t.state_ports                                 # a host link, or a switch of another shard
            if lk.remote_type == "Switch" or lk.remote_lid:
                assert any(x[0] == p for x in t.peers) == bool(lk.remote_lid and lk.remote_port)
    assert isl and both == isl and sum(len(t.mirrors) for t in targets) * 2 == isl
    for t in targets:
        n = sum(1 for p in range(1, t.nports + 1) if (i := topo.ports.get((t.guid, p))) is not None and i.link is not None
                and i.link.remote_type == "Switch" and i.link.remote_guid in by)
        assert n // 2 <= len(t.mirrors) <= -(-n // 2), (t.guid, n, len(t.mirrors))   # half, rounded either way
        assert set(t.counter_ports) == {p for p in range(1, t.nports + 1)
                                        if (i := topo.ports.get((t.guid, p))) is not None and i.link is not None}
