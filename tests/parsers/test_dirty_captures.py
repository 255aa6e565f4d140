"""Captures that are not clean (issue 52, item 4; parsers.captured): every parser of the InfiniBand tools'
text reads a capture with CRLF or CR line endings, with its tabs expanded to spaces or lost, with a
session log's banner and the shell prompts around it, exactly as it reads the clean text; garbage is
still the ParseError it was. The dirt is made here, from the real captures of ../shared/captures
(their PROVENANCE files; never copied into this repository) and the project's own recordings, never
committed as dirty copies. The one capture that came dirty (the director fabric's `ibnetdiscover`
through a PuTTY log: CRLF and CR endings, its tabs lost, the banner and the appliance's prompt) reads as
the fabric its cleaned copy is, and as a design."""

from __future__ import annotations

import dataclasses
import json
import lzma
import re
from collections.abc import Callable
from pathlib import Path

import pytest

from fabric_snap import ports_report_topology
from helpers import CAPTURES, FIXTURES, skip_without_captures

from fabricmon.model import design as dm
from fabricmon.model.fabric import build_topology
from fabricmon.parsers.captured import first_line, lines, terminal_line
from fabricmon.parsers.design import detect, parse_design
from fabricmon.parsers.errors import ParseError
from fabricmon.parsers.iblinkinfo import parse_iblinkinfo
from fabricmon.parsers.ibnetdiscover import parse_ibnetdiscover
from fabricmon.parsers.ibqueryerrors import parse_ibqueryerrors
from fabricmon.parsers.ibstat import parse_ibstat
from fabricmon.parsers.lft import parse_lft
from fabricmon.parsers.node_name_map import parse_node_name_map
from fabricmon.parsers.perfquery import parse_perfquery
from fabricmon.parsers.portinfo import parse_portinfo, parse_saquery_pir
from fabricmon.parsers.sminfo import parse_saquery_sm_lids, parse_sminfo

PUTTY = "=~=~=~=~=~=~=~=~=~=~=~= PuTTY log 2026.03.02 10:12:40 =~=~=~=~=~=~=~=~=~=~=~="
RAW_DIRECTOR = CAPTURES / "ibnetdiscover" / "Mellanox-ufm_sdk_3.0__ibnetdiscover_director.txt"
CLEAN_DIRECTOR = CAPTURES / "ibnetdiscover" / "director-hdr-400sw.ibsim.net"


# --- the dirt, made from clean text ----------------------------------------------------------------------

def crlf(text: str) -> str:
    return text.replace("\n", "\r\n")


def cr(text: str) -> str:
    return text.replace("\n", "\r")


def tabs_as_spaces(text: str) -> str:
    """What a terminal shows and a copy from it keeps: every tab expanded to the next 8-column stop."""
    return "\n".join(ln.expandtabs(8) for ln in text.split("\n"))


def tabs_lost(text: str) -> str:
    """What a session log kept of them: nothing (the terminal moved its cursor)."""
    return text.replace("\t", "")


def prompts(text: str, tool: str = "ibnetdiscover") -> str:
    """A session log's banner, the prompt and command before the output, the prompt after it."""
    return f"{PUTTY}\n[root@mgmt01 ~]# {tool}\n{text}{'' if text.endswith(chr(10)) else chr(10)}[root@mgmt01 ~]# \n"


def everything(text: str, tool: str = "ibnetdiscover") -> str:
    return crlf(tabs_lost(prompts(text, tool)))


DIRT: dict[str, Callable[[str], str]] = {"crlf": crlf, "cr": cr, "tabs as spaces": tabs_as_spaces,
                                         "tabs lost": tabs_lost, "banner and prompts": prompts,
                                         "all of it": everything}


def outcome(parse: Callable[[str], object], text: str) -> object:
    """What a parser makes of a text: its records, or the ParseError's message (without its whitespace: the
    message quotes the line it read, tabs or spaces as they came)."""
    try:
        return parse(text)
    except ParseError as exc:
        return ("ParseError", re.sub(r"\s+", "", str(exc)))


def assert_reads_the_same(parse: Callable[[str], object], text: str, where: str) -> int:
    """Every kind of dirt on `text` reads as `text` itself does; how many kinds were tried."""
    clean = outcome(parse, text)
    for kind, dirty in DIRT.items():
        assert outcome(parse, dirty(text)) == clean, f"{where}: {kind}"
    return len(DIRT)


# --- the texts: the project's own recordings, and the real captures where ../shared has them --------------

BUNDLE = json.loads((FIXTURES / "fabric" / "fat-tree" / "bundle.json").read_text())["commands"]
HOSTILE = FIXTURES / "fabric" / "hostile"


def recorded(tool: str, *must: str) -> str:
    return next(c["stdout"] for c in BUNDLE if c["argv"][0] == tool and all(m in c["argv"] for m in must))


def hostile(name: str) -> str:
    body = (HOSTILE / f"{name}.txt").read_text().split("\n", 2)[2]          # after `# argv` and `# rc`
    return body.split("# stderr\n", 1)[0]


def fixtures(tool: str) -> list[Path]:
    return sorted(p for p in (FIXTURES / tool).iterdir() if p.suffix == ".txt")


def captures(tool: str) -> list[Path]:
    d = CAPTURES / tool
    return sorted(p for p in d.iterdir() if p.is_file()) if d.is_dir() else []


OWN: list[tuple[str, Callable[[str], object], Callable[[], str]]] = [
    ("ibnetdiscover fat tree", parse_ibnetdiscover, lambda: recorded("ibnetdiscover")),
    ("ibnetdiscover hostile", parse_ibnetdiscover, lambda: hostile("ibnetdiscover")),
    ("ibnetdiscover topograph NDR", parse_ibnetdiscover,
     lambda: lzma.open(FIXTURES / "ibnetdiscover" / "real" / "topograph-ndr-40sw.ibnetdiscover.xz", "rt").read()),
    ("ibnetdiscover hwloc avakas", parse_ibnetdiscover,
     lambda: ports_report_topology(lzma.open(FIXTURES / "ibnetdiscover" / "real" / "hwloc-avakas-qdr.ports.xz",
                                             "rt").read())),
    ("ibqueryerrors counters", parse_ibqueryerrors, lambda: recorded("ibqueryerrors", "--counters")),
    ("ibqueryerrors errors", parse_ibqueryerrors, lambda: hostile("ibqueryerrors-details")),
    ("iblinkinfo hostile", parse_iblinkinfo, lambda: hostile("iblinkinfo")),
    ("iblinkinfo -l hostile", parse_iblinkinfo, lambda: hostile("iblinkinfo-l")),
    ("sminfo", parse_sminfo, lambda: recorded("sminfo")),
    ("saquery -s", parse_saquery_sm_lids, lambda: recorded("saquery", "-s")),
    ("dump_fts", parse_lft, lambda: recorded("dump_fts")),
    ("saquery PIR", parse_saquery_pir, lambda: (FIXTURES / "portinfo" / "saquery-pir.txt").read_text()),
    *[(f"smpquery portinfo {p.name}", parse_portinfo, lambda p=p: p.read_text())
      for p in sorted((FIXTURES / "portinfo").glob("*-port.txt"))],
    *[(f"iblinkinfo {p.name}", parse_iblinkinfo, lambda p=p: p.read_text()) for p in fixtures("iblinkinfo")],
    *[(f"ibstat {p.name}", parse_ibstat, lambda p=p: p.read_text()) for p in fixtures("ibstat")],
    *[(f"perfquery {p.name}", parse_perfquery, lambda p=p: p.read_text()) for p in fixtures("perfquery")],
]


@pytest.mark.parametrize("parse, text", [(p, t) for _, p, t in OWN], ids=[n for n, _, _ in OWN])
def test_every_parser_reads_a_dirty_recording_as_the_clean_one(parse, text) -> None:
    assert_reads_the_same(parse, text(), "")


REAL = {"ibnetdiscover": parse_ibnetdiscover, "iblinkinfo": parse_iblinkinfo, "ibstat": parse_ibstat,
        "ibstatus": parse_ibstat, "perfquery": parse_perfquery, "ibqueryerrors": parse_ibqueryerrors}


@pytest.mark.parametrize("tool", sorted(REAL))
def test_every_real_capture_reads_the_same_dirty(tool: str) -> None:
    """Each real capture of the tool (the folder's every file, errors included: an error stays the same
    error), with each kind of dirt. The director fabric, dirty and clean, is its own test (below)."""
    skip_without_captures(CAPTURES / tool)
    files = [p for p in captures(tool) if p not in (RAW_DIRECTOR, CLEAN_DIRECTOR)]
    assert files
    for f in files:
        assert_reads_the_same(REAL[tool], f.read_text(), f.name)


def test_the_real_dirty_capture_reads_as_its_clean_copy() -> None:
    """The director fabric's ibnetdiscover as it came (a PuTTY log: CRLF, CR CR LF and CR endings, its tabs
    lost, the log's banner, the UFM appliance's prompts after it) is the fabric of its cleaned copy
    (../shared's director-hdr-400sw.ibsim.net, made by hand as its PROVENANCE says), as a discovery and as
    a design; the clean copy made dirty again reads the same."""
    skip_without_captures(RAW_DIRECTOR)
    raw = RAW_DIRECTOR.read_bytes().decode()
    assert "\r\n" in raw and raw.startswith("=~=~=~") and "\t" not in raw and 'Switch41 "S-' in raw
    clean = CLEAN_DIRECTOR.read_text()
    d = parse_ibnetdiscover(raw)
    assert d == parse_ibnetdiscover(clean)
    assert (len(d.switches), len(d.cas), sum(len(sw.links) for sw in d.switches.values())) == (400, 2328, 15118)
    assert detect(raw) == "ibnetdiscover"
    design = parse_design(raw)
    assert len(design.cables) == 8723 and dm.compare(design, build_topology(d)) == []
    assert parse_ibnetdiscover(everything(clean)) == d           # (each kind alone: the smaller captures above)


# --- the design, both forms ------------------------------------------------------------------------------

def _fat_tree_topology():
    from fabric_snap import ibnetdiscover_text
    from fabricmon.sim.fabric import fat_tree_netfile
    return build_topology(parse_ibnetdiscover(ibnetdiscover_text(fat_tree_netfile(spines=2, leaves=2,
                                                                                  hosts_per_leaf=2))))


@pytest.mark.parametrize("form", ["ibnetdiscover", "csv"])
def test_a_design_reads_the_same_dirty(form: str) -> None:
    """A design as `fabric design save` writes it, then carried through a terminal (or opened on Windows)."""
    topo = _fat_tree_topology()
    text = dm.design_csv(topo) if form == "csv" else dm.design_ibnetdiscover(topo, "the design")
    design = parse_design(text)
    assert len(design.cables) == 8 and dm.compare(design, topo) == []
    for kind, dirty in DIRT.items():
        t = dirty(text) if kind not in ("banner and prompts", "all of it") else dirty(text, f"cat design.{form}")
        assert detect(t) == form, kind
        got = parse_design(t)               # the same nodes and cables (a banner moves the lines they are on)
        assert got.nodes == design.nodes and [dataclasses.replace(c, line=0) for c in got.cables] == \
            [dataclasses.replace(c, line=0) for c in design.cables], kind


@pytest.mark.parametrize("text, error", [
    # a banner and prompts are no header: the header is the next line, and a bad one is still an error there
    (f"{PUTTY}\r\n[root@mgmt01 ~]# cat plan.csv\r\nstart_device,start_port,end_device\r\nleaf01,1,node01\r\n",
     "line 3: the header 'start_device,start_port,end_device' lacks end_port"),
    ("admin@ufm01:~$ cat plan.csv\rstart_device,start_port,end_device,end_port\rleaf01,x,node01,1\r",
     "line 3: start_port 'x' is not a port"),
    ("start_device,start_port,end_device,end_port\r\nleaf01,1,node01,1\r\nthis is no row\r\n",
     "line 3: 1 fields where the header has 4"),
    # a node or port line of an ibnetdiscover design that does not read is named, never left out
    ('Switch\t8 "S-0000000000200000"\t\t# "spine01" enhanced port 0 lid 1 lmc 0\r\n'
     '[1]\t"S-0000000000200002"[3]\t\t# "leaf01" lid 3 4xHDR\r\n'
     '[2]\t"S-00000000002000\r\n',
     "line 3: a port line that does not read: '[2]\\t\"S-00000000002000'"),
    ('Switch\t8 "S-0000000000200000"\t\t# "spine01" enhanced port 0 lid 1 lmc 0\n'
     '[1]\t"S-0000000000200002"[3]\t\t# "leaf01" lid 3 4xHDR\n'
     'Switch\t8 "S-00000000002000g2"\t\t# "leaf01" enhanced port 0 lid 3 lmc 0\n',
     "line 3: a node line that does not read: "),
])
def test_garbage_in_a_dirty_design_is_still_an_error_naming_the_line(text: str, error: str) -> None:
    with pytest.raises(ParseError) as exc:
        parse_design(text)
    assert str(exc.value).startswith(error), str(exc.value)


def test_garbage_is_still_a_parse_error_naming_what_it_read() -> None:
    """Dirt around garbage: the error quotes the garbage, not the banner or the prompt."""
    junk = everything("ibwarn: [1234] mad_rpc_open_port: can't open UMAD port ((null):0)\n")
    for parse, what in ((parse_ibnetdiscover, "no ibnetdiscover node found"), (parse_ibstat, "no 'CA' block"),
                        (parse_perfquery, "no perfquery counter block"), (parse_iblinkinfo, "no iblinkinfo port line"),
                        (parse_ibqueryerrors, "ibqueryerrors: no node reported"), (parse_lft, "no forwarding table"),
                        (parse_sminfo, "no sminfo line"), (parse_portinfo, "no LinkState")):
        with pytest.raises(ParseError) as exc:
            parse(junk)
        assert what in str(exc.value) and "mad_rpc_open_port: can't open UMAD port" in str(exc.value), str(exc.value)
        assert "PuTTY" not in str(exc.value) and "root@" not in str(exc.value)
    # the node name map refuses a line without a GUID, a prompt too: a map is the site's file, never a capture
    with pytest.raises(ParseError, match=r"^line 2: 'garbage' starts with no GUID"):
        parse_node_name_map('0x0008f104003f125c "ib1"\r\ngarbage\r\n')
    assert parse_node_name_map('0x0008f104003f125c "ib1"\r\n0x8f104003f125d leaf02\r') == {
        "0008f104003f125c": "ib1", "0008f104003f125d": "leaf02"}


def test_the_line_helpers() -> None:
    assert lines("a\r\nb\r\r\nc\rd\n") == ["a", "b", "c\rd", ""]       # a CR inside a line of an LF text stays
    assert lines("a\rb\rc") == ["a", "b", "c"]
    for line in (PUTTY, "Script started on 2026-03-02 10:12:40+00:00 [TERM=\"xterm\"]", "[root@mgmt01 ~]# ibstat",
                 "[admin@ufm-01 /tmp]$", "root@mgmt01:~# ibnetdiscover --ports", "admin@ufm01:/var/tmp$ ",
                 "sat11-0101-0902-02ufm [ mgmt-ha-active ] (config) # ibnetdiscover",
                 "ufm01 [ standalone: master ] > show ib", "mgmt01# ibstat", "$ ibstat"):
        assert terminal_line(line), line
    for line in ('Switch\t41 "S-0c42a10300a9b026"\t\t# "MF0;sat11:MQM8700/U1" enhanced port 0 lid 3894 lmc 0',
                 '[1]"H-1c34da03005503dc"[1](1c34da03005503dc) # "SAT111092710053 ibp11s0f0" lid 65535 4xHDR',
                 "# Topology file: generated on Tue Jun 15 19:06:08 2021", "vendid=0x2c9", "CA 'mlx5_0'",
                 "State: Active", "leaf01,1,node01 mlx5_0,1,HDR,4X,0x0000000000200002,0x0000000000100000",
                 "# Port counters: Lid 1 port 1 (CapMask: 0x1600)", "PortSelect:......................1",
                 "Unicast lids [0x0-0xe] of switch DR path slid 0; dlid 0; 0,1,3,7 guid 0x0000000000200005 (leaf04):",
                 "0x0001 003 ", "   GUID 0x200002 port 3: [SymbolErrorCounter == 5]", "## Summary: 6 nodes checked"):
        assert not terminal_line(line), line
    assert first_line(f"{PUTTY}\r\n\r\n[root@mgmt01 ~]# ibstat\r\nibpanic: [1] main: stat of IB device 'mlx5_0' failed\r\n") \
        == "ibpanic: [1] main: stat of IB device 'mlx5_0' failed"


def test_a_ca_port_without_a_lid_is_read_as_one() -> None:
    """`lid 65535` (ConnectX's value for a port no subnet manager configured) and `lid 0` (other HCAs', and
    ibsim's) on a CA end are no LID: remote_lid None, what was printed kept; a switch end's or a switch's
    LID 0 is none either; the CA end's port GUID is read. Dirty, the same."""
    text = ('Switch\t8 "S-0c42a10300a9b026"\t\t# "leaf01" enhanced port 0 lid 0 lmc 0\n'
            '[1]\t"H-1c34da03005503dc"[1](1c34da03005503dc) \t\t# "SAT111092710053 ibp11s0f0" lid 65535 4xHDR\n'
            '[2]\t"H-0002c90300a1b2c0"[2](2c90300a1b2c2) \t\t# "node02 HCA-1" lid 0 4xQDR\n'
            '[3]\t"H-0c42a10300fb53dc"[1](c42a10300fb53dc) \t\t# "node03 mlx5_0" lid 4049 4xHDR\n'
            '[4]\t"H-0c42a10300fb53e0"[1](c42a10300fb53e0) \t\t# "node04 mlx5_0" lid 49152 4xHDR\n'
            '[5]\t"S-0c42a10300a9b027"[3]\t\t# "spine01" lid 0 4xHDR\n')
    for t in (text, everything(text)):
        sw = parse_ibnetdiscover(t).switches["0c42a10300a9b026"]
        assert sw.lid is None
        got = {p: (lk.remote_lid, lk.remote_unassigned_lid, lk.remote_port_guid) for p, lk in sw.links.items()}
        assert got == {1: (None, 65535, "1c34da03005503dc"), 2: (None, 0, "0002c90300a1b2c2"),
                       3: (4049, None, "0c42a10300fb53dc"), 4: (None, 49152, "0c42a10300fb53e0"),
                       5: (None, None, "")}


class _Files:
    """The one HostIO call the design source makes."""

    def read_host_file(self, path: str) -> str:
        return Path(path).read_bytes().decode()          # as LiveIO: bytes, every CR kept


def test_the_design_source_loads_a_dirty_design_and_names_a_cut_line(tmp_path: Path) -> None:
    """fabric.sources.design on a design carried through a terminal: loaded; the same with a port line cut
    short: the source's parse error, naming the file and the line, nothing loaded."""
    from fabricmon.config import from_dict
    from fabricmon.sources.infiniband.design import DesignSource
    from helpers import run_inputs
    text = everything(dm.design_ibnetdiscover(_fat_tree_topology(), "the design"), "cat design.net")
    good, cut = tmp_path / "design.net", tmp_path / "cut.net"
    good.write_bytes(text.encode())
    lines_ = text.split("\r\n")
    n = next(i for i, ln in enumerate(lines_) if ln.startswith("[3]"))
    lines_[n] = lines_[n][:12]
    cut.write_bytes("\r\n".join(lines_).encode())
    for path, ok in ((good, True), (cut, False)):
        cfg = from_dict({"fabric": {"sources": {"design": {"path": str(path)}}}}, check_paths=False)
        out = DesignSource(cfg.fabric.sources["design"]).collect(_Files(), run_inputs())
        if ok:
            assert out.errors == [] and out.data is not None and len(out.data.design.cables) == 8
        else:
            assert out.data is None and [k for k, _ in out.errors] == ["parse"]
            assert out.errors[0][1].startswith(f"{cut}: line {n + 1}: a port line that does not read: "), out.errors
