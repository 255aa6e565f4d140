"""The SA subscription and the SM's reports as bytes (sources/infiniband/mad/notice.py): the requests laid out
from the spec's offsets, decoded against what opensm 3.3.23 answered on ibsim (tests/fixtures/sa/, captured
by this code's own engine and SA port) and against reports built as opensm's send_report builds them from
what ibsim's switches send (trap 128) and what opensm sends itself (64, 65)."""

from __future__ import annotations

import json
import struct
from pathlib import Path

import pytest

from fabricmon.sources.infiniband.mad import notice
from fabricmon.sources.infiniband.mad.codec import MadError

FIX = json.loads((Path(__file__).parents[2] / "fixtures" / "sa" / "opensm-ibsim.json").read_text())


def raw(name: str) -> bytes:
    return bytes.fromhex(FIX[name])


def test_a_subscription_is_an_sa_set_of_inform_info_for_one_trap_from_every_port() -> None:
    m = notice.encode_subscribe(128, 0x1234)
    assert len(m) == 256
    assert tuple(m[:4]) == (1, 0x03, 2, 0x02)                  # base version, SA, class version 2, Set
    assert struct.unpack_from(">QH", m, 8) == (0x1234, 0x0003)   # TID, InformInfo
    ii = m[56:92]
    assert ii[:16] == bytes(16)                                 # GID 0: by LID range ...
    assert struct.unpack_from(">HH", ii, 16) == (0xFFFF, 0)      # ... every port the SM manages
    assert (ii[22], ii[23]) == (1, 1)                           # generic, subscribe
    assert struct.unpack_from(">HH", ii, 24) == (0xFFFF, 128)    # any type, trap 128
    assert struct.unpack_from(">I", ii, 28)[0] == (1 << 8) | 19  # QPN 1 (the GSI), RespTimeValue 19
    assert ii[33:36] == b"\xff\xff\xff"                         # any producer
    assert notice.encode_subscribe(128, 1, subscribe=False)[56 + 23] == 0


def test_opensm_accepts_a_subscription_and_its_unsubscription_and_refuses_a_bad_lid_range() -> None:
    ok = notice.decode_subscribe_answer(raw("subscribe_128_accepted"))
    assert (ok.trap, ok.status, ok.subscribed, ok.accepted) == (128, 0, True, True)
    bad = notice.decode_subscribe_answer(raw("subscribe_lid_range_0x7000_refused"))
    # osm_sa_informinfo.c: ERR 4302 (LIDs out of range) -> IB_SA_MAD_STATUS_REQ_INVALID, Subscribe cleared (o13-13.1.1)
    assert (bad.status, bad.subscribed, bad.accepted) == (0x0200, False, False)
    assert notice.status_text(bad.status) == "0x0200 (request invalid)"
    # an unsubscription carries the QPN opensm stored (match_inf_rec compares it): accepted
    assert notice.decode_subscribe_answer(raw("unsubscribe_128_accepted")).status == 0
    with pytest.raises(MadError):
        notice.decode_subscribe_answer(raw("sm_info"))


def test_the_local_port_and_the_master_sm_as_ibsim_and_opensm_answer() -> None:
    assert notice.decode_local_port_info(raw("local_port_info")) == (4, 1)       # node02's LID, the SM's LID
    sm = notice.decode_sm_info(raw("sm_info"))
    assert (sm.guid, sm.priority, sm.state) == ("0000000000100001", 0, "MASTER") and sm.activity > 0
    dr = notice.encode_local_port_info(7)
    assert dr[1] == 0x81 and dr[7] == 0 and struct.unpack_from(">HH", dr, 32) == (0xFFFF, 0xFFFF)   # 0 hops, permissive
    assert struct.unpack_from(">H", notice.encode_sm_info(3), 16)[0] == 0x0020


def test_a_forwarded_trap_128_names_the_switch_and_is_answered_by_its_tid() -> None:
    mad = notice.encode_report(notice.trap128_notice(6, "0000000000200002"), 0x02DAB001)
    n = notice.decode_report(mad)
    assert (n.generic, n.type, n.producer, n.trap, n.issuer_lid, n.lid, n.port) == (True, 1, 2, 128, 6, 6, None)
    assert n.issuer_gid == "fe800000000000000000000000200002" and n.tid == 0x02DAB001
    with pytest.raises(MadError):
        notice.decode_report(notice.encode_subscribe(128, 1))


def test_traps_129_to_131_name_a_port_and_64_65_a_gid() -> None:
    n = bytearray(80)
    n[0], n[1:4] = 0x80 | 1, (2).to_bytes(3, "big")
    struct.pack_into(">HH", n, 4, 129, 9)
    struct.pack_into(">HHB", n, 10, 0, 9, 17)                  # pad, LID, port
    got = notice.decode_report(notice.encode_report(bytes(n), 5))
    assert (got.trap, got.lid, got.port) == (129, 9, 17)
    g = bytearray(80)
    g[0], g[1:4] = 0x80 | 4, (4).to_bytes(3, "big")              # informational, from the class manager (the SM)
    struct.pack_into(">HH", g, 4, 65, 1)
    struct.pack_into(">QQ", g, 16, 0xFE80000000000000, 0x100004)
    got = notice.decode_report(notice.encode_report(bytes(g), 6))
    assert (got.trap, got.lid, got.port_guid) == (65, None, "0000000000100004")
