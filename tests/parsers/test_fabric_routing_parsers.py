"""sminfo, saquery -s and dump_fts/ibroute parsers on outputs of the real tools recorded against
ibsim (tests/fixtures/fabric/make_tool_outputs.py regenerates them), and on odd input."""

from __future__ import annotations

import pytest

from fabricmon.model.fabric import NO_ROUTE
from fabricmon.parsers.errors import ParseError
from fabricmon.parsers.lft import parse_lft
from fabricmon.parsers.sminfo import no_sm_answered, parse_saquery_sm_lids, parse_sminfo
from helpers import recorded_tool

def test_sminfo_master() -> None:
    rc, out, _ = recorded_tool("sminfo-master")
    sm = parse_sminfo(out)
    assert rc == 0 and sm.lid == 1 and sm.guid == "0000000000100001" and sm.priority == 0
    assert sm.state == "MASTER" and sm.activity_count > 0


def test_sminfo_without_an_sm_is_no_master_not_garbage() -> None:
    rc, out, err = recorded_tool("sminfo-no-sm")
    assert rc == 255 and no_sm_answered(out + err)
    with pytest.raises(ParseError):
        parse_sminfo(out + err)
    assert not no_sm_answered(recorded_tool("sminfo-master")[1])


def test_sminfo_states_and_saquery_lids() -> None:
    s = parse_sminfo("sminfo: sm lid 7 sm guid 0xabc, activity count 12 priority 15 state 2 SMINFO_STANDBY\n")
    assert (s.lid, s.guid, s.activity_count, s.priority, s.state) == (7, "0000000000000abc", 12, 15, "STANDBY")
    assert parse_saquery_sm_lids(recorded_tool("saquery-s")[1]) == [1]
    two = "PortInfoRecord dump:\n\t\tEndPortLid..............1\nPortInfoRecord dump:\n\t\tEndPortLid..............9\n"
    assert parse_saquery_sm_lids(two + two) == [1, 9]
    assert parse_saquery_sm_lids("") == []


def test_ibroute_one_switch() -> None:
    _, out, _ = recorded_tool("ibroute-leaf")
    tables = parse_lft(out)
    assert list(tables) == ["0000000000200002"]
    t = tables["0000000000200002"]
    assert len(t) == 0xe + 1 and t[0] == NO_ROUTE
    assert t[4] == 0                          # its own LID: port 0
    assert all(0 <= p <= 6 for p in t[1:])    # hosts on 1-2, uplinks on 3-6


def test_dump_fts_every_switch_same_format() -> None:
    _, out, _ = recorded_tool("dump_fts")
    tables = parse_lft(out)
    assert len(tables) == 6
    assert tables["0000000000200002"] == parse_lft(recorded_tool("ibroute-leaf")[1])["0000000000200002"]


def test_lft_garbage_and_ports_out_of_range() -> None:
    with pytest.raises(ParseError):
        parse_lft("ibwarn: something\n")
    t = parse_lft("Unicast lids [0x0-0x3] of switch Lid 2 guid 0x0002c9 (x):\n0x0001 001 \n0x0002 255 \n"
                  "0x0009 003 \nnonsense\n")["00000000000002c9"]
    assert list(t) == [NO_ROUTE, 1, NO_ROUTE, NO_ROUTE]
