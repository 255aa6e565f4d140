"""Parse `ibnetdiscover` output into switches, CAs and links (model.fabric.DiscoveryData).

Node headers: `Switch  41 "S-0c42a10300a9b026"  # "desc" enhanced port 0 lid 3894 lmc 0` and
`Ca 1 "H-..."  # "desc"`. Switch port lines: `[19]  "S-<guid>"[20]  # "remote desc" lid 175 4xHDR`
(a CA remote carries its port GUID in parentheses: `"H-<guid>"[1](<portguid>)`). Ports that are
not cabled are not listed. Lines we do not recognise are skipped, never fatal.

The header lines above each node (`vendid=0x2c9`, `devid=0xcf09`, `sysimgguid=0x...`,
`switchguid=`/`caguid=`) are its NodeInfo: the SystemImageGUID and DeviceID tell a CA inside a
switch (a SHARP Aggregation Node: devid 0xcf09, its sysimgguid the switch's) from a host.

A description is whatever the node's owner set (64 bytes; the tools print non-printable bytes as
spaces but keep quotes, backslashes and text that looks like the tools' own fields), and it is
never escaped. The tail after it has no quote, so a description runs to the last `"` of its line
and the LID, GUID and port numbers come only from the fixed parts around it.

A LID is a unicast LID (1-0xBFFF) or none: a CA port that no subnet manager configured prints
`lid 0`, or `lid 65535` (0xFFFF, ConnectX's value): the link's `remote_lid` is then None and
`remote_unassigned_lid` holds what was printed (checks.fabric_host_ports reports the port); a switch
whose port 0 has no LID has `lid` None.

Captures as sites hand them over (parsers.captured): CRLF or CR line endings, the tabs between the
fields expanded to spaces or lost altogether (`Switch41 "S-..."# "desc"`, `[1]"H-..."[1](...)` in a
PuTTY log), a session log's banner and the prompts around the output. With `strict` (a design
file, parsers.design) a node or port line that does not read is a ParseError naming its line,
never a node or a cable silently left out.
"""

from __future__ import annotations

import re

from fabricmon.model import ibspec
from fabricmon.model.fabric import DiscoveryData, Link, SwitchNode, unicast_lid
from fabricmon.parsers.captured import first_line, lines
from fabricmon.parsers.errors import ParseError

# the separators are tabs as the tool prints them, spaces where a terminal expanded them, or nothing where
# a session log lost them (`Switch41 "S-..."# "desc"`): never needed between fields that cannot run together
_NODE = re.compile(r'^(?P<type>Switch|Ca|Hca|Rt)\s*(?P<nports>\d+)\s*"(?P<kind>[SHR])-(?P<guid>[0-9A-Fa-f]+)"'
                   r'\s*(?:#\s*"(?P<desc>.*)"(?P<rest>[^"]*))?$')     # the description runs to the last quote
# a port line (a switch's, or a CA's: `[1](<portguid>) "S-..."[8]`); a CA remote carries its port GUID,
# `"H-<guid>"[1](<portguid>)`, after a space where the local end is a CA too
_LINK = re.compile(r'^\[(?P<port>\d+)\](?:\[ext \d+\])?(?:\([0-9A-Fa-f]+\))?\s*'
                   r'"(?P<kind>[SHR])-(?P<guid>[0-9A-Fa-f]+)"\[(?P<rport>\d+)\](?:\[ext \d+\])?'
                   r'(?:\s*\((?P<rportguid>[0-9A-Fa-f]+)\))?'
                   r'\s*(?:#\s*(?P<comment>.*))?$')
_COMMENT = re.compile(r'^"(?P<desc>.*)"\s*lid\s+(?P<lid>\d+)\s+(?P<width>\d+)x(?P<speed>[A-Za-z0-9]+)\s*$')
_LID = re.compile(r'\blid\s+(\d+)')
_HEADER = re.compile(r'^(?P<key>devid|sysimgguid)=0x(?P<value>[0-9A-Fa-f]+)')
# what a node line and a port line start with (strict: a line starting so that does not read is an error)
_NODE_START = re.compile(r'^(?:Switch|Ca|Hca|Rt)\s*\d+\s*"')
_PORT_START = re.compile(r'^\[\d+\]')


# A MAD that went unanswered, as libibnetdisc and libibmad report it on stderr:
# `./libibnetdisc/query_smp.c:186; umad (DR path slid 0; dlid 0; 0,1,4 Attr 0x11:0) bad status 110; ...`,
# `ibwarn: [123] mad_rpc: _do_madrpc failed; dport (Lid 6)`.
_UNANSWERED = re.compile(r"bad status \d+|_do_madrpc failed|query failed", re.I)


def count_unanswered(stderr: str) -> int:
    """How many MADs a tool's stderr says went unanswered (timed out or failed)."""
    return sum(1 for line in stderr.splitlines() if _UNANSWERED.search(line))


def guid_hex(text: str) -> str:
    """A GUID as 16 lower-case hex digits without 0x (`0x200003`, `0000000000200003`)."""
    return f"{int(text, 16):016x}"


def parse_ibnetdiscover(text: str, strict: bool = False) -> DiscoveryData:
    """Raises ParseError when the output holds no node at all; with `strict`, also at the first node or
    port line that does not read (naming it)."""
    data = DiscoveryData(reads_lids=True)
    cur: SwitchNode | None = None
    nodes = 0
    header: dict[str, str] = {}         # the NodeInfo lines above the next node
    for n, raw in enumerate(lines(text), 1):     # not splitlines(): a description may hold \x85 or \u2028
        line = raw.strip()
        if not line or line.startswith("#"):
            continue
        h = _HEADER.match(line)
        if h:
            header[h["key"]] = h["value"]
            continue
        m = _NODE.match(line)
        if m:
            nodes += 1
            guid = guid_hex(m["guid"])
            if "sysimgguid" in header:
                data.system_guids[guid] = guid_hex(header["sysimgguid"])
            if "devid" in header:
                data.device_ids[guid] = int(header["devid"], 16)
            header = {}
            desc = m["desc"] if m["desc"] is not None else ""
            if m["type"] == "Switch":
                lid = _LID.search(m["rest"] or "")
                cur = SwitchNode(guid=guid, name=desc, nports=int(m["nports"]),
                                 lid=int(lid.group(1)) if lid and unicast_lid(int(lid.group(1))) else None)
                data.switches[guid] = cur
            else:
                data.cas[guid] = desc
                cur = None
            continue
        if strict and _NODE_START.match(line):
            raise ParseError(f"line {n}: a node line that does not read: {line[:120]!r} (expected "
                             '`Switch <ports> "S-<guid>" # "<description>" ...` or `Ca <ports> "H-<guid>" # ...`)')
        if not line.startswith("["):
            continue
        m = _LINK.match(line)
        if not m:
            if strict and _PORT_START.match(line):
                raise ParseError(f"line {n}: a port line that does not read: {line[:120]!r} (expected "
                                 '`[<port>] "S-<guid>"[<port>] # "<description>" lid <lid> <width>x<speed>`)')
            continue
        if cur is None:                 # a CA's own port line: the switch's line carries the cable
            continue
        width = speed = rlid = unassigned = None
        desc = ""
        ca = m["kind"] != "S"
        c = _COMMENT.match(m["comment"] or "")
        if c:
            desc = c["desc"]
            far_lid = int(c["lid"])
            rlid = far_lid if unicast_lid(far_lid) else None
            unassigned = far_lid if ca and rlid is None else None
            width = int(c["width"])
            g = ibspec.generation(c["speed"])
            speed = g.name if g else c["speed"].upper()
        port = int(m["port"])
        cur.links[port] = Link(port=port, remote_guid=guid_hex(m["guid"]), remote_port=int(m["rport"]),
                               remote_type="Ca" if ca else "Switch", remote_name=desc,
                               width=width, speed=speed, remote_lid=rlid, remote_unassigned_lid=unassigned,
                               remote_port_guid=guid_hex(m["rportguid"]) if ca and m["rportguid"] else "")
    if nodes == 0:
        raise ParseError(f"no ibnetdiscover node found ({first_line(text)[:160]})")
    return data


__all__ = ["guid_hex", "parse_ibnetdiscover"]
