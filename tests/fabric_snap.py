"""Fabric snapshots for the map tests, built by the real FabricModel from records: a discovery
(parsed from an ibnetdiscover-syntax topology) and sweeps whose transmit counters advance at
given shares of the link rate, so rates, ECMP groups and findings come out as in a collector."""

from __future__ import annotations

import re

from fabricmon.model import ibspec
from fabricmon.config import from_dict
from fabricmon.model.fabric import DiscoveryData, SweepData
from fabricmon.model.snapshot import BuildStats, Snapshot, SourceState
from fabricmon.parsers.ibnetdiscover import parse_ibnetdiscover
from fabricmon.pipeline.fabric import FabricModel

HDR4X = 25e9          # bytes/s of a 4X HDR link
_NODE = re.compile(r'^(Switch|Hca|Ca)\s+(\d+)\s+"([^"]+)"(?:\s*#\s*"([^"]*)")?')
_HEADER = re.compile(r"^(devid|sysimgguid)=")
_LINK = re.compile(r'^\[(\d+)\]\s+"([^"]+)"\[(\d+)\]\s+#\s+"[^"]*"\s+lid\s+\d+\s+(\S+)')


def switch_guid(i: int) -> str:
    return f"{0x200000 + i:016x}"


def ibnetdiscover_text(netfile: str) -> str:
    """An ibsim topology (fabricmon.sim's netfiles, no GUIDs) as ibnetdiscover prints it: switch
    GUIDs 0x200000.. in order of appearance (as ibsim numbers them), CA GUIDs 0x100000..;
    a node's description is its header's comment where it has one (fabricmon.sim.fabric.plant),
    else its id; NodeInfo lines (devid=, sysimgguid=) are kept. Every CA port has a LID (0x100..,
    in order of appearance), as once a subnet manager configured it: a CA port without one is a
    finding (checks.fabric_host_ports)."""
    guids: dict[str, str] = {}
    lids: dict[str, int] = {}           # CA -> its LID (a switch remote keeps `lid 0`: its port 0's LID, unknown)
    kinds: dict[str, str] = {}
    descs: dict[str, str] = {}
    nsw = nca = 0
    for line in netfile.splitlines():
        m = _NODE.match(line)
        if m:
            kinds[m[3]] = m[1]
            descs[m[3]] = m[4] if m[4] is not None else m[3]
            if m[1] == "Switch":
                guids[m[3]] = switch_guid(nsw)
                nsw += 1
            else:
                guids[m[3]] = f"{0x100000 + nca:016x}"
                lids[m[3]] = 0x100 + nca
                nca += 1
    out = []
    for line in netfile.splitlines():
        if _HEADER.match(line):
            out.append(line)
            continue
        m = _NODE.match(line)
        if m:
            letter = "S" if m[1] == "Switch" else "H"
            tail = " enhanced port 0 lid 1 lmc 0" if letter == "S" else ""
            out.append(f'{m[1]}\t{m[2]} "{letter}-{guids[m[3]]}"\t\t# "{descs[m[3]]}"{tail}')
            continue
        m = _LINK.match(line)
        if m:
            r = m[2]
            letter = "S" if kinds[r] == "Switch" else "H"
            out.append(f'[{m[1]}]\t"{letter}-{guids[r]}"[{m[3]}]\t\t# "{descs[r]}" lid {lids.get(r, 0)} {m[4]}')
    return "\n".join(out) + "\n"


def drop_hosts(netfile: str, switch: str) -> str:
    """The net file with every host of `switch` gone, both ends (its hosts down or powered off)."""
    blocks = netfile.split("\n\n")
    gone: set[str] = set()
    for i, block in enumerate(blocks):
        if re.search(rf'^Switch\s+\d+\s+"{re.escape(switch)}"', block, re.M):
            keep = []
            for line in block.split("\n"):
                m = re.match(r'^\[\d+\]\s+"([^"]+)"', line)
                if m and re.search(rf'^(?:Hca|Ca)\s+\d+\s+"{re.escape(m[1])}"', netfile, re.M) \
                        and "Aggregation Node" not in line:
                    gone.add(m[1])
                    continue
                keep.append(line)
            blocks[i] = "\n".join(keep)
    return "\n\n".join(b for b in blocks
                        if not any(re.search(rf'^(?:Hca|Ca)\s+\d+\s+"{re.escape(h)}"', b, re.M) for h in gone))


def add_cable(netfile: str, a: str, ap: int, b: str, bp: int, host: bool = False) -> str:
    """`a`[ap] cabled to `b`[bp] (both ends written; a new host CA `b` when `host`)."""
    lines = netfile.split("\n")
    for name, port, other, oport in ((a, ap, b, bp), (b, bp, a, ap)):
        head = next((i for i, ln in enumerate(lines) if re.match(rf'^(Switch|Hca)\s+\d+\s+"{re.escape(name)}"', ln)), None)
        if head is None:            # a new host
            lines += [f'Hca\t1 "{name}"', f'[{port}]\t"{other}"[{oport}]\t# "{other}" lid 0 4xHDR', ""]
            continue
        n = int(lines[head].split()[1])
        if port > n:
            lines[head] = lines[head].replace(f"\t{n} ", f"\t{port} ", 1)
        lines.insert(head + 1, f'[{port}]\t"{other}"[{oport}]\t# "{other}" lid 0 4xHDR')
    return "\n".join(lines)


def management_leaf(netfile: str, cores: tuple[str, ...], name: str = "mgmt") -> str:
    """The net file with a management leaf: two servers (ufm01, ufm02) and one cable to each of
    `cores` (ports 3.., each core's port 7)."""
    net = netfile.rstrip("\n") + f'\n\nSwitch\t8 "{name}"\n'
    net = add_cable(net, name, 1, "ufm01 mlx5_0", 1, host=True)
    net = add_cable(net, name, 2, "ufm02 mlx5_0", 1, host=True)
    for i, core in enumerate(cores):
        net = add_cable(net, name, 3 + i, core, 7)
    return net



def management_island(netfile: str, spines: tuple[str, ...], cores: tuple[str, ...]) -> str:
    """The net file with a management fabric beside the compute one, as issue 52 describes Selene's
    (its capture was not available to this work): two management leaves (`mgmt-leaf1`, `mgmt-leaf2`,
    a UFM server and a management host each) with one uplink to each of `spines` (a handful of a
    pod's spines), and a management spine (`mgmt-spine`) cabled to `cores` (one cable each) with a
    host-less management leaf (`mgmt-leaf3`, two cables) under it."""
    net = netfile.rstrip("\n") + "".join(f'\n\nSwitch\t16 "{n}"' for n in
                                          ("mgmt-leaf1", "mgmt-leaf2", "mgmt-spine", "mgmt-leaf3")) + "\n"
    for i, leaf in enumerate(("mgmt-leaf1", "mgmt-leaf2")):
        net = add_cable(net, leaf, 1, f"ufm0{i + 1} mlx5_0", 1, host=True)
        net = add_cable(net, leaf, 2, f"mgmthost0{i + 1} mlx5_0", 1, host=True)
        for j, sp in enumerate(spines):
            net = add_cable(net, leaf, 3 + j, sp, 40 + i)
    for j, core in enumerate(cores):
        net = add_cable(net, "mgmt-spine", 1 + j, core, 40)
    for p in (1, 2):
        net = add_cable(net, "mgmt-spine", 20 + p, "mgmt-leaf3", p)
    return net


def island_fabric() -> str:
    """Issue 52's Selene, scaled down: two pods of 4 leaves (8 hosts each) and 8 spines (every leaf 8 uplinks), 8
    cores, and a management island (fabric_snap.management_island: two management leaves with two
    uplinks to pod 1's spines, a management spine on four cores, a host-less leaf under it)."""
    from fabricmon.sim.fabric import three_tier_netfile
    net = three_tier_netfile(pods=2, leaves_per_pod=4, spines_per_pod=8, cores_per_spine=1, hosts_per_leaf=8)
    return management_island(net, ("p1s1", "p1s2"), ("core01", "core02", "core03", "core04"))


_PORT_LINE = re.compile(r"^(?P<t>CA|SW|RT)\s+(?P<lid>\d+)\s+(?P<port>\d+)\s+0x(?P<guid>[0-9a-fA-F]+)\s+(?P<w>\d+x)\s+(?P<s>\w+)"
                        r"\s+-\s+(?P<rt>CA|SW|RT)\s+(?P<rlid>\d+)\s+(?P<rport>\d+)\s+0x(?P<rguid>[0-9a-fA-F]+)"
                        r"\s+\(\s+'(?P<desc>.*)'\s+-\s+'(?P<rdesc>.*)'\s+\)\s*$")


def ports_report_topology(text: str) -> str:
    """`ibnetdiscover -p` (the ports report: `SW 18 36 0x... 4x QDR - SW 2 19 0x... ( 'desc' - 'rdesc' )`,
    every cable from both ends) as the topology ibnetdiscover prints by default, which ibsim loads:
    nodes by GUID, their descriptions, LIDs, every cable with its width and speed. Ports without a
    remote end (down) and discovery's progress lines are left out."""
    nodes: dict[str, list] = {}           # guid -> [type, desc, lid, {port: (rtype, rguid, rport, rdesc, rlid, w, s)}]
    for line in text.splitlines():
        m = _PORT_LINE.match(line.strip())
        if not m:
            continue
        node = nodes.setdefault(m["guid"].lower(), [m["t"], m["desc"], int(m["lid"]), {}])
        node[3][int(m["port"])] = (m["rt"], m["rguid"].lower(), int(m["rport"]), m["rdesc"], int(m["rlid"]),
                                   m["w"], m["s"])
    out = []
    for guid, (typ, desc, lid, ports) in sorted(nodes.items(), key=lambda kv: (kv[1][0] != "SW", kv[0])):
        letter = "S" if typ == "SW" else "H"
        n = max(ports)
        if typ == "SW":
            out.append(f'Switch\t{n} "S-{guid:0>16}"\t\t# "{desc}" base port 0 lid {lid} lmc 0')
        else:
            out.append(f'Ca\t{n} "H-{guid:0>16}"\t\t# "{desc}"')
        for port, (rt, rguid, rport, rdesc, rlid, w, sp) in sorted(ports.items()):
            r = "S" if rt == "SW" else "H"
            out.append(f'[{port}]\t"{r}-{rguid:0>16}"[{rport}]\t\t# "{rdesc}" lid {rlid} {w}{sp}')
        out.append("")
    return "\n".join(out)


def _state(records: type, data: object, t: float) -> SourceState:
    return SourceState(name=records.__name__, enabled=True, interval=1, timeout=1, records=records, up=True,
                       ran=True, data=data, data_time=t)


def fabric_snapshot(topology: str, traffic: dict[str, dict[int, float]] | None = None, sweeps: int = 4,
                    errors: dict[tuple[str, int], int] | None = None, drop: list[tuple[str, int]] | None = None,
                    link_bytes: float = HDR4X, abilities: dict[tuple[str, int], object] | None = None,
                    ability: object = None) -> Snapshot:
    """`traffic`: switch name -> {port: share of link rate}; `errors`: (switch name, port) ->
    symbol errors added in the last sweep; `drop`: (switch name, port) cables gone at the last
    discovery (reported down); `abilities`: (switch name, port) -> what the port enables
    (model.link_ability.LinkAbility, as the sweep's PortInfo reads it), `ability` for every other
    switch port (None: no ability read, as before the sweep read PortInfo)."""
    cfg = from_dict({"fabric": {"thresholds": {"consecutive_sweeps": 3}}}, check_paths=False)
    t0 = 1_800_000_000.0
    clock = [t0]
    model = FabricModel(cfg, clock=lambda: clock[0])
    if "S-" not in topology:
        topology = ibnetdiscover_text(topology)
    disc: DiscoveryData = parse_ibnetdiscover(topology)
    by_name = {sw.name: g for g, sw in disc.switches.items()}
    scale = ibspec.COUNTER_BY_NAME["transmit_bytes"].scale
    traffic = traffic or {}
    states = {"discovery": _state(DiscoveryData, disc, t0)}
    sec, findings = model.build(states)
    for i in range(sweeps):
        t = t0 + 10.0 * (i + 1)
        clock[0] = t
        if drop and i == sweeps - 1:
            import copy
            d2 = copy.deepcopy(disc)
            for name, port in drop:
                g = by_name[name]
                lk = d2.switches[g].links.pop(port)
                if lk.remote_guid in d2.switches:
                    d2.switches[lk.remote_guid].links.pop(lk.remote_port, None)
            states["discovery"] = _state(DiscoveryData, d2, t)
        sw = SweepData()
        for g, node in disc.switches.items():
            for port in node.links:
                share = traffic.get(node.name, {}).get(port, 0.0)
                vals = {"transmit_bytes": int(1e9 + share * link_bytes * 10.0 * i / scale), "receive_bytes": 0,
                        "symbol_errors": 0}
                if errors and i == sweeps - 1:
                    vals["symbol_errors"] = errors.get((node.name, port), 0)
                sw.ports[(g, port)] = vals
            sw.switches.add(g)
            for port in node.links:
                a = (abilities or {}).get((node.name, port), ability)
                if a is not None:
                    sw.abilities[(g, port)] = a
        states["sweep"] = _state(SweepData, sw, t)
        sec, findings = model.build(states)
    return Snapshot(time=clock[0], findings=findings, sources=states, builds=BuildStats(), fabric=sec["fabric"])
