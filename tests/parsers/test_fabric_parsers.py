"""ibnetdiscover and ibqueryerrors parsers, and levels/roles from the graph: on the outputs of
the real tools recorded from a simulated fat tree (tests/fixtures/fabric/fat-tree), on the
real 400-switch director capture when ../shared/captures is there, and on bad input."""

from __future__ import annotations

import json
from collections import Counter

import pytest

from fabricmon.model.fabric import build_topology, in_shard
from fabricmon.parsers.errors import ParseError
from fabricmon.parsers.ibnetdiscover import parse_ibnetdiscover
from fabricmon.parsers.ibqueryerrors import parse_ibqueryerrors
from helpers import CAPTURES, FIXTURES, skip_without_captures

BUNDLE = FIXTURES / "fabric" / "fat-tree"


def recorded(tool: str, *must: str, without: str | None = None) -> dict:
    cmds = json.loads((BUNDLE / "bundle.json").read_text())["commands"]
    return next(c for c in cmds if c["argv"][0] == tool and all(m in c["argv"] for m in must)
                and (without is None or without not in c["argv"]))


def test_ibnetdiscover_fat_tree_levels_roles_and_widths() -> None:
    d = parse_ibnetdiscover(recorded("ibnetdiscover")["stdout"])
    assert len(d.switches) == 6 and len(d.cas) == 8
    topo = build_topology(d)
    names = {sw.name: g for g, sw in d.switches.items()}
    assert {n: topo.levels[g] for n, g in names.items()} == {
        "spine01": 2, "spine02": 2, "leaf01": 1, "leaf02": 1, "leaf03": 1, "leaf04": 1}
    leaf1 = names["leaf01"]
    roles = {p: topo.ports[(leaf1, p)].role for p in range(1, 9)}
    assert roles == {1: "host", 2: "host", 3: "up", 4: "up", 5: "up", 6: "up", 7: "unconnected", 8: "unconnected"}
    assert {topo.ports[(names["spine01"], p)].role for p in range(1, 9)} == {"down"}
    lk = d.switches[leaf1].links[3]
    assert (lk.remote_name, lk.remote_port, lk.width, lk.speed, lk.remote_type) == ("spine01", 1, 4, "HDR", "Switch")
    assert d.switches[names["leaf03"]].links[5].width == 1          # the 1X uplink of the fixture
    assert d.switches[leaf1].links[1].remote_type == "Ca"
    assert d.switches[leaf1].lid is not None


def test_ibqueryerrors_counters_and_errors() -> None:
    counters = parse_ibqueryerrors(recorded("ibqueryerrors", "--counters")["stdout"])
    errors = parse_ibqueryerrors(recorded("ibqueryerrors", without="--counters")["stdout"])
    leaf1 = "0000000000200002"
    assert len({g for g, _ in counters.ports}) == 6
    assert set(counters.ports[(leaf1, 1)]) >= {"transmit_bytes", "receive_bytes", "transmit_packets",
                                               "receive_packets", "transmit_unicast_packets"}
    assert errors.ports[(leaf1, 3)] == {"symbol_errors": 7}
    assert errors.aggregates[leaf1]["symbol_errors"] == 7
    assert errors.ports[("0000000000200000", 2)] == {"transmit_wait": 1000}
    assert errors.nodes_checked == 6


def test_ibqueryerrors_sa_failed_is_an_error_whatever_the_exit_code() -> None:
    with pytest.raises(ParseError, match="Query SA failed"):
        parse_ibqueryerrors("", "Query SA failed: Connection timed out; sa call path_query failed\n")
    with pytest.raises(ParseError):
        parse_ibqueryerrors("garbage\n")


def test_ibnetdiscover_garbage_and_odd_lines() -> None:
    with pytest.raises(ParseError):
        parse_ibnetdiscover("ibwarn: something\n")
    text = ('Switch\t4 "S-00000000000000aa"\t\t# "sw \\"quoted\\" name" base port 0 lid 3 lmc 0\n'
            '[1]\t"H-00000000000000bb"[1](bc) \t\t# "host a" lid 4 4xNDR\n'
            '[2]\tgarbage line\n'
            '[3]\t"S-00000000000000cc"[2]\t\t# "other" lid 5 2xEDR\n\n'
            'Switch\t4 "S-00000000000000cc"\t\t# "other" base port 0 lid 5 lmc 0\n'
            '[2]\t"S-00000000000000aa"[3]\t\t# "sw" lid 3 2xEDR\n')
    d = parse_ibnetdiscover(text)
    sw = d.switches["00000000000000aa"]
    assert sorted(sw.links) == [1, 3] and sw.links[1].speed == "NDR" and sw.links[3].width == 2
    topo = build_topology(d)
    assert topo.levels == {"00000000000000aa": 1, "00000000000000cc": 2}


def test_shards_partition_the_switches() -> None:
    guids = [f"{0x0c42a10300000000 + i:016x}" for i in range(500)]
    for n in (1, 2, 3, 7):
        owners = Counter(sum(1 for i in range(n) if in_shard(g, i, n)) for g in guids)
        assert owners == {1: len(guids)}          # every switch in exactly one shard


def test_director_capture_levels() -> None:
    path = CAPTURES / "ibnetdiscover" / "director-hdr-400sw.ibsim.net"
    skip_without_captures(path)
    d = parse_ibnetdiscover(path.read_text())
    topo = build_topology(d)
    assert len(d.switches) == 400
    by_kind = Counter((topo.levels[g], "/L" in sw.name, "/S" in sw.name) for g, sw in d.switches.items())
    # leaf switches (MQM8700) carry the hosts; the director's line cards are one hop up and
    # its spine cards two: levels from the graph, whatever the names say.
    assert by_kind[(2, True, False)] == 160 and by_kind[(3, False, True)] == 80
    assert all(lv == 1 for g, lv in topo.levels.items()
               if any(lk.remote_type == "Ca" for lk in d.switches[g].links.values()))
    assert Counter(p.role for p in topo.ports.values())["host"] == 2328
