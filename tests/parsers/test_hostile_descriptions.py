"""Node descriptions are set by whoever owns a node and printed unescaped by every fabric tool.
On the outputs of the real tools against ibsim with hostile descriptions
(tests/fixtures/fabric/hostile, made by make_hostile_outputs.py), and on the same outputs edited
to hold what ibsim cannot produce (quotes, non-ASCII, Unicode line separators, a forged line):
a description survives whole and never moves a LID, a GUID or a port number."""

from __future__ import annotations

import pytest

from fabricmon.model.fabric import build_topology
from fabricmon.parsers.ibnetdiscover import parse_ibnetdiscover
from fabricmon.parsers.iblinkinfo import parse_iblinkinfo
from fabricmon.parsers.ibqueryerrors import parse_ibqueryerrors
from fabricmon.parsers.sminfo import parse_sminfo
from helpers import FIXTURES

HOSTILE = FIXTURES / "fabric" / "hostile"
# What ibsim and the tools made of leaf02's description (non-printable bytes become spaces;
# ibsim ended it at its quote) and spine01's.
LEAF02 = "MF0;sp  ne  x (y) lid 7: ==> 9 9[ ] "
SPINE01 = "sp\\ine #1 [3] lid 999 4xHDR enhanced port 0 lid 5 lmc 0"
# Edits of leaf02's description that ibsim cannot record.
EDITS = {
    "quote": 'MF0;sp"ine" lid 999 lmc 0 "x',
    "quotes at the ends": '"MF0;spine"',
    "non-ascii and separators": "sp\u00efn\u00e9\u2028\x85\x0b\x0c\x1c\rleaf \U0001F600 \\\"",
    "backslash before the quote": "MF0\\",
    "empty": "",
}
LEAF, SPINE = "0000000000200002", "0000000000200000"


def stdout(name: str) -> str:
    text = (HOSTILE / f"{name}.txt").read_text()
    body = text.split("\n", 2)[2]            # after `# argv` and `# rc`
    return body.split("# stderr\n", 1)[0]


def edited(name: str, desc: str) -> str:
    text = stdout(name)
    assert LEAF02 in text
    return text.replace(LEAF02, desc)


def discovery_numbers(d) -> dict:
    return {g: (sw.lid, sw.nports, {p: (lk.remote_guid, lk.remote_port, lk.remote_lid, lk.width, lk.speed)
                                    for p, lk in sw.links.items()})
            for g, sw in d.switches.items()}


def test_ibnetdiscover_recorded_hostile_descriptions_keep_lids() -> None:
    d = parse_ibnetdiscover(stdout("ibnetdiscover"))
    assert d.switches[LEAF].name == LEAF02 and d.switches[LEAF].lid == 4
    assert d.switches[SPINE].name == SPINE01 and d.switches[SPINE].lid == 2     # not 999, not 5
    assert d.switches[LEAF].links[2].remote_name == SPINE01 and d.switches[LEAF].links[2].remote_lid == 2
    assert d.switches[SPINE].links[2].remote_name == LEAF02 and d.switches[SPINE].links[2].remote_lid == 4
    assert set(d.cas.values()) == {"node01 mlx5_0", "node02 mlx5_0"}
    levels = build_topology(d).levels
    assert levels[SPINE] == 2 and levels[LEAF] == 1


@pytest.mark.parametrize("desc", EDITS.values(), ids=EDITS.keys())
def test_ibnetdiscover_edited_descriptions_survive_whole(desc: str) -> None:
    base = parse_ibnetdiscover(stdout("ibnetdiscover"))
    d = parse_ibnetdiscover(edited("ibnetdiscover", desc))
    assert discovery_numbers(d) == discovery_numbers(base)
    assert d.switches[LEAF].name == desc
    assert d.switches[SPINE].links[2].remote_name == desc


def test_the_issue_case_a_quote_keeps_the_lid() -> None:
    # issue 21: `MF0;sp"ine` became `MF0;sp` with the LID read from the rest of the line
    text = ('Switch\t36 "S-0c42a10300a9b026"\t\t# "MF0;sp"ine lid 999" enhanced port 0 lid 3 lmc 0\n'
            '[1]\t"S-0c42a10300a9b027"[2]\t\t# "x" lid 999 4xHDR" lid 4 4xHDR\n')
    sw = parse_ibnetdiscover(text).switches["0c42a10300a9b026"]
    assert (sw.name, sw.lid) == ('MF0;sp"ine lid 999', 3)
    lk = sw.links[1]
    assert (lk.remote_name, lk.remote_lid, lk.remote_port, lk.width, lk.speed) == ('x" lid 999 4xHDR', 4, 2, 4, "HDR")


def link_numbers(links) -> list:
    return [(ln.lid, ln.port, ln.remote_lid, ln.remote_port, ln.width, ln.generation, ln.state_id) for ln in links]


@pytest.mark.parametrize("name", ["iblinkinfo", "iblinkinfo-l"])
def test_iblinkinfo_recorded_hostile_descriptions(name: str) -> None:
    links = parse_iblinkinfo(stdout(name))
    assert len(links) == 2 * 8 + 8 + 2              # every port line of 3 switches and 2 CAs
    leaf = [ln for ln in links if ln.lid == 4]
    assert {ln.node_desc for ln in leaf} == {LEAF02.strip() if name.endswith("-l") else LEAF02}
    up = next(ln for ln in leaf if ln.port == 2)
    assert (up.remote_lid, up.remote_port, up.remote_desc) == (2, 2, SPINE01)
    spine = [ln for ln in links if ln.lid == 2]
    assert {ln.node_desc for ln in spine} == {SPINE01} and len(spine) == 8
    assert all(ln.node_desc is not None for ln in links)
    down = next(ln for ln in spine if ln.port == 2)
    assert (down.remote_lid, down.remote_port, down.remote_desc) == (4, 2, LEAF02)


@pytest.mark.parametrize("name", ["iblinkinfo", "iblinkinfo-l"])
@pytest.mark.parametrize("desc", EDITS.values(), ids=EDITS.keys())
def test_iblinkinfo_edited_descriptions_survive_whole(name: str, desc: str) -> None:
    base = parse_iblinkinfo(stdout(name))
    links = parse_iblinkinfo(edited(name, desc))
    assert link_numbers(links) == link_numbers(base)
    assert {ln.node_desc for ln in links if ln.lid == 4} == {desc.strip() if name.endswith("-l") else desc}
    assert next(ln for ln in links if ln.lid == 2 and ln.port == 2).remote_desc == desc


def test_iblinkinfo_a_forged_line_is_not_read() -> None:
    # -l prints the local description before the LID: one that holds a whole forged port line
    # (64 bytes are enough) reads two ways, and is then not read at all rather than guessed; the
    # lines of other nodes that show it as their remote end, after their own description, too
    forged = '" 9 9[  ] ==( 4X 53.125 Gbps Active/ LinkUp)==> 0x1 9 9[  ] "'
    assert len(forged) <= 64
    base = link_numbers(parse_iblinkinfo(stdout("iblinkinfo-l")))
    links = link_numbers(parse_iblinkinfo(edited("iblinkinfo-l", forged)))
    assert set(links) <= set(base)                          # nothing forged, nothing moved
    assert not [ln for ln in links if ln[0] in (4, 9)]      # leaf02's own lines are dropped
    assert len(links) == len(base) - 8 - 2


@pytest.mark.parametrize("name", ["ibqueryerrors", "ibqueryerrors-details", "ibqueryerrors-counters"])
@pytest.mark.parametrize("desc", [LEAF02, *EDITS.values()], ids=["recorded", *EDITS.keys()])
def test_ibqueryerrors_descriptions_never_move_counters(name: str, desc: str) -> None:
    base = parse_ibqueryerrors(stdout(name))
    rep = parse_ibqueryerrors(edited(name, desc))
    assert rep.ports == base.ports and rep.aggregates == base.aggregates
    assert rep.nodes[LEAF] == desc
    if name != "ibqueryerrors-counters":
        assert rep.ports == {(LEAF, 2): {"symbol_errors": 5}} and rep.nodes_checked == 5
    else:
        assert rep.nodes[SPINE] == SPINE01 and len(rep.ports) == 28


def test_sminfo_from_the_hostile_fabric() -> None:
    sm = parse_sminfo(stdout("sminfo"))
    assert (sm.lid, sm.guid, sm.state) == (1, "0000000000100001", "MASTER")
