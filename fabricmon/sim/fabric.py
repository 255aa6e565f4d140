"""A real InfiniBand fabric on one machine: an ``ibsim`` harness.

``ibsim`` (package ``ibsim-utils``) simulates switches and HCAs; the real
``infiniband-diags`` tools and ``opensm`` talk to it when started with
``LD_PRELOAD`` set to the ``umad2sim`` library (package ``libumad2sim0``).
This module

* generates ibnetdiscover-syntax topology files for 2-tier fat trees
  (:func:`fat_tree_netfile`),
* starts and drives one simulator per :class:`SimFabric` (its own abstract
  socket name, console FIFO, opensm cache and logs under a work directory),
* tells whether the tools are installed (:func:`tools_available`).

Simulator behaviour worth knowing (ibsim 0.10, infiniband-diags 44, opensm
3.3.23):

* A link's width and speed come from the comment of the link line, e.g.
  ``# "leaf01" lid 0 4xHDR``. The ``lid N`` part is required for the width to
  be parsed ("cannot parse remote lid and connection type" otherwise) and is
  harmless with ``0``: opensm assigns the real LIDs.
* Clients always attach to port 1 of the CA named by ``SIM_HOST``.
* A client started while no simulator listens on ``IBSIM_SOCKNAME`` retries
  for ever (every 2 s); always run tools with a timeout.
* ibsim reads its console until EOF and then spins at 100 % CPU, so the
  FIFO's write end must stay open for the simulator's whole life.
* The console reads at most 126 characters per command.
"""

from __future__ import annotations

import atexit
import ctypes
import os
import re
import shutil
import signal
import stat
import subprocess
import threading
import time
import uuid
from pathlib import Path
from typing import Callable

__all__ = [
    "UMAD2SIM",
    "DEMO_PARAMS",
    "SimCommandError",
    "SimFabric",
    "TrafficDriver",
    "demo_netfile_path",
    "director_netfile",
    "fat_tree_netfile",
    "three_tier_netfile",
    "tools_available",
]

#: The umad2sim preload library that redirects libibumad to the simulator.
UMAD2SIM = "/usr/lib/x86_64-linux-gnu/umad2sim/libumad2sim.so"

#: Tools a simulated fabric test needs.
REQUIRED_TOOLS = ("ibsim", "opensm", "ibstat", "perfquery", "iblinkinfo")

#: Parameters of the committed demo topology ``fabricmon/sim/data/demo-fat-tree.net``.
DEMO_PARAMS: dict[str, int | str] = {
    "spines": 2,
    "leaves": 4,
    "hosts_per_leaf": 8,
    "uplinks_per_spine": 2,
    "speed": "HDR",
}

#: Link speeds ibsim 0.10 understands in a link comment.
SPEEDS = ("SDR", "DDR", "QDR", "FDR10", "FDR", "EDR", "HDR")
#: Link widths accepted in ``degraded``.
WIDTHS = ("1x", "2x", "4x", "8x", "12x")

#: What real fabrics show and the generators can plant: the SHARP Aggregation Node inside a
#: switch (a CA on the switch's last port, NodeInfo device 0xcf09, its SystemImageGUID the
#: switch's), and a host CA whose node description is the firmware's (no rdma-ndd ran).
AGGREGATION_NODE = "Mellanox Technologies Aggregation Node"
DEFAULT_DESCRIPTION = "MT4129 ConnectX7   Mellanox Technologies"
#: ibsim numbers the switches of a named topology from this GUID in file order (and the CAs
#: from 0x100000 by twos), which is how a planted Aggregation Node names its switch.
FIRST_SWITCH_GUID = 0x200000

_READY = "Network simulator ready."
_PROMPT = "sim> "
# ibsim's console buffer is 128 bytes including the newline and NUL.
_MAX_CONSOLE_LINE = 126
# sockaddr_un.sun_path is 108 bytes; clients bind "<name>:ctl<pid>".
_MAX_SOCKNAME = 64
_SBIN_DIRS = ("/usr/local/sbin", "/usr/sbin", "/sbin")
_NODE_HEADER = re.compile(r'^(Switch|Hca|Ca|Rt)\s+(\d+)\s+"([^"]+)"', re.M)


# --------------------------------------------------------------------------
# topology generator
# --------------------------------------------------------------------------


def _switch_ports(needed: int) -> int:
    """Round a switch's port count up to a multiple of 8 (unused ports are Down)."""
    return max(8, -(-needed // 8) * 8)


def _link_kind(width: str, speed: str) -> str:
    return f"{width}{speed}"


def _parse_degraded(value: str, speed: str) -> str:
    m = re.fullmatch(r"(\d+)[xX]([A-Za-z0-9]*)", value.strip())
    if not m or f"{m.group(1)}x" not in WIDTHS:
        raise ValueError(f"degraded width {value!r}: expected one of {WIDTHS}, optionally with a speed (e.g. '1x', '4xEDR')")
    sp = m.group(2).upper() or speed
    if sp not in SPEEDS:
        raise ValueError(f"degraded speed {sp!r}: expected one of {SPEEDS}")
    return _link_kind(f"{m.group(1)}x", sp)


def fat_tree_netfile(
    spines: int = 2,
    leaves: int = 4,
    hosts_per_leaf: int = 8,
    uplinks_per_spine: int = 1,
    speed: str = "HDR",
    host_ports: int = 1,
    degraded: dict[str, str] | None = None,
    host_prefix: str = "node",
    aggregation_nodes: bool = False,
    unnamed: int = 0,
) -> str:
    """Return an ibnetdiscover-syntax topology of a 2-tier fat tree for ibsim.

    Switches are named ``spine01``.. and ``leaf01``.. (node id and node
    description are the same string). Hosts are numbered globally across
    leaves, zero-padded to two digits: leaf01 carries ``node01 mlx5_0`` ..
    ``node08 mlx5_0`` with the defaults, leaf02 ``node09 mlx5_0`` ... Each
    host is a CA with ``host_ports`` ports, every one cabled to its leaf.

    Port layout of a leaf: host cables first (host 1 port 1, host 1 port 2,
    ..., host 2 port 1, ...), then the uplinks, grouped by spine
    (spine01 x ``uplinks_per_spine``, spine02 ...). A spine's ports go to
    leaf01 (``uplinks_per_spine`` cables), then leaf02, ... Switch port
    counts are rounded up to a multiple of 8, so a few switch ports are
    unconnected (Down/Polling), as on real switches.

    Every link carries a comment such as ``# "leaf01" lid 0 4xHDR``: that is
    where ibsim takes the link's width and speed from. ``lid 0`` only makes
    ibsim's parser happy; opensm assigns the LIDs.

    Args:
        spines: number of spine switches.
        leaves: number of leaf switches.
        hosts_per_leaf: hosts (CAs) per leaf.
        uplinks_per_spine: cables between each leaf and each spine.
        speed: link speed for every link, one of :data:`SPEEDS`.
        host_ports: ports per host CA, each cabled to the host's leaf.
        degraded: maps ``"<host desc>[<port>]"`` (e.g. ``"node03 mlx5_0[1]"``)
            to a width such as ``"1x"`` (or a width and speed such as
            ``"4xEDR"``) for that host cable; written on both ends.
        host_prefix: prefix of host names (``"node"`` gives ``node01``).
        aggregation_nodes: a SHARP Aggregation Node in every switch (see :func:`plant`).
        unnamed: the first ``unnamed`` hosts keep the firmware's node description.

    Returns:
        The net file text, ending in a newline.

    Raises:
        ValueError: for impossible sizes, unknown speeds or widths, or a
            ``degraded`` key that names no host port of the fabric.
    """
    for name, val, low in (
        ("spines", spines, 1),
        ("leaves", leaves, 1),
        ("hosts_per_leaf", hosts_per_leaf, 0),
        ("uplinks_per_spine", uplinks_per_spine, 1),
        ("host_ports", host_ports, 1),
    ):
        if not isinstance(val, int) or val < low:
            raise ValueError(f"{name} must be an integer >= {low}, got {val!r}")
    speed = speed.upper()
    if speed not in SPEEDS:
        raise ValueError(f"speed {speed!r}: expected one of {SPEEDS}")
    if not host_prefix or any(c in host_prefix for c in '"#@[]\n\t'):
        raise ValueError(f"bad host_prefix {host_prefix!r}")

    leaf_host_ports = hosts_per_leaf * host_ports
    leaf_needed = leaf_host_ports + spines * uplinks_per_spine
    spine_needed = leaves * uplinks_per_spine
    if leaf_needed > 254 or spine_needed > 254 or host_ports > 254:
        raise ValueError("too many ports on one node (ibsim allows up to 254)")
    leaf_nports = _switch_ports(leaf_needed)
    spine_nports = _switch_ports(spine_needed)

    normal = _link_kind("4x", speed)

    def spine_name(s: int) -> str:
        return f"spine{s + 1:02d}"

    def leaf_name(l: int) -> str:
        return f"leaf{l + 1:02d}"

    def host_name(h: int) -> str:
        return f"{host_prefix}{h + 1:02d} mlx5_0"

    # link kind per host cable
    kinds: dict[tuple[str, int], str] = {}
    for h in range(leaves * hosts_per_leaf):
        for p in range(1, host_ports + 1):
            kinds[(host_name(h), p)] = normal
    degraded_ports: set[tuple[str, int]] = set()
    for key, value in (degraded or {}).items():
        m = re.fullmatch(r"(.+)\[(\d+)\]", key.strip())
        if not m or (m.group(1), int(m.group(2))) not in kinds:
            raise ValueError(f"degraded key {key!r} names no host port of this fabric (e.g. '{host_name(0)}[1]')")
        kinds[(m.group(1), int(m.group(2)))] = _parse_degraded(value, speed)
        degraded_ports.add((m.group(1), int(m.group(2))))

    def leaf_uplink_port(s: int, u: int) -> int:
        return leaf_host_ports + s * uplinks_per_spine + u + 1

    def spine_port(l: int, u: int) -> int:
        return l * uplinks_per_spine + u + 1

    def link(local_port: int, remote: str, remote_port: int, kind: str) -> str:
        return f'[{local_port}]\t"{remote}"[{remote_port}]\t# "{remote}" lid 0 {kind}'

    out: list[str] = [
        "# fabricmon simulated 2-tier fat tree (ibsim topology, ibnetdiscover syntax)",
        "# generated by fabricmon.sim.fat_tree_netfile("
        f"spines={spines}, leaves={leaves}, hosts_per_leaf={hosts_per_leaf}, "
        f"uplinks_per_spine={uplinks_per_spine}, speed={speed!r}, host_ports={host_ports}, "
        f"host_prefix={host_prefix!r})",
        f"# {spines} spines x {spine_nports} ports, {leaves} leaves x {leaf_nports} ports, "
        f"{leaves * hosts_per_leaf} hosts x {host_ports} ports",
    ]
    if degraded:
        out.append("# degraded: " + ", ".join(f"{host}[{port}] {kinds[(host, port)]}" for host, port in sorted(degraded_ports)))
    out.append("")

    for s in range(spines):
        out.append(f'Switch\t{spine_nports} "{spine_name(s)}"')
        for l in range(leaves):
            for u in range(uplinks_per_spine):
                out.append(link(spine_port(l, u), leaf_name(l), leaf_uplink_port(s, u), normal))
        out.append("")

    for l in range(leaves):
        out.append(f'Switch\t{leaf_nports} "{leaf_name(l)}"')
        port = 0
        for i in range(hosts_per_leaf):
            h = l * hosts_per_leaf + i
            for p in range(1, host_ports + 1):
                port += 1
                out.append(link(port, host_name(h), p, kinds[(host_name(h), p)]))
        for s in range(spines):
            for u in range(uplinks_per_spine):
                out.append(link(leaf_uplink_port(s, u), spine_name(s), spine_port(l, u), normal))
        out.append("")

    for l in range(leaves):
        for i in range(hosts_per_leaf):
            h = l * hosts_per_leaf + i
            out.append(f'Hca\t{host_ports} "{host_name(h)}"')
            for p in range(1, host_ports + 1):
                leaf_port = i * host_ports + p
                out.append(link(p, leaf_name(l), leaf_port, kinds[(host_name(h), p)]))
            out.append("")

    return plant("\n".join(out), aggregation_nodes, unnamed)


def plant(text: str, aggregation_nodes: bool = False, unnamed: int = 0) -> str:
    """A generated topology with what real fabrics carry: with ``aggregation_nodes``, every
    switch one port more, cabled to a CA inside it (``Mellanox Technologies Aggregation Node``,
    ``devid=0xcf09``, ``sysimgguid=`` the switch's GUID as ibsim numbers it, like NVIDIA Quantum
    switches with SHARP); the first ``unnamed`` hosts (in file order) with the firmware's
    default description (DEFAULT_DESCRIPTION) instead of their name: their node id becomes
    ``H-<n>`` (ibsim gives them GUIDs of its own all the same). Unchanged when neither is asked."""
    if not aggregation_nodes and not unnamed:
        return text
    lines = text.split("\n")
    hosts = [m.group(3) for m in _NODE_HEADER.finditer(text) if m.group(1) in ("Hca", "Ca")][:unnamed]
    rename = {h: f"H-{0xA0000000 + i:016x}" for i, h in enumerate(hosts)}
    out: list[str] = []
    extra: list[str] = []
    switch_index = -1
    for i, line in enumerate(lines):
        m = _NODE_HEADER.match(line)
        if m and m.group(1) == "Switch":
            switch_index += 1
            name, nports = m.group(3), int(m.group(2))
            if aggregation_nodes:
                port = nports + 1
                an = f"H-{0xAB000000 + switch_index:016x}"
                lid0 = re.search(r"lid 0 (\S+)", text[text.index(line):])
                assert lid0 is not None, line       # every switch line of a netfile names its LID
                kind = lid0.group(1)
                line = f'Switch\t{port} "{name}"'
                end = next((j for j in range(i + 1, len(lines)) if not lines[j].strip()), len(lines))
                lines.insert(end, f'[{port}]\t"{an}"[1]\t# "{AGGREGATION_NODE}" lid 0 {kind}')
                extra += [f"devid=0x{0xCF09:x}", f"sysimgguid=0x{FIRST_SWITCH_GUID + switch_index:x}",
                          f'Ca\t1 "{an}"\t# "{AGGREGATION_NODE}"', f'[1]\t"{name}"[{port}]\t# "{name}" lid 0 {kind}', ""]
        elif m and m.group(3) in rename:
            line = f'{m.group(1)}\t{m.group(2)} "{rename[m.group(3)]}"\t# "{DEFAULT_DESCRIPTION}"'
        else:
            for old, new in rename.items():
                if f'"{old}"[' in line:
                    line = line.replace(f'"{old}"[', f'"{new}"[').replace(f'# "{old}"', f'# "{DEFAULT_DESCRIPTION}"')
        out.append(line)
    if extra:       # ibsim keeps a `devid=` for every node after it: what follows is no Aggregation Node
        extra.append("devid=0x0")
    return "\n".join(out + ([""] if out and out[-1] else []) + extra)


def three_tier_netfile(pods: int = 2, leaves_per_pod: int = 2, spines_per_pod: int = 2, cores_per_spine: int = 1,
                       hosts_per_leaf: int = 2, speed: str = "HDR", aggregation_nodes: bool = False,
                       unnamed: int = 0) -> str:
    """A three-tier fat tree like an NVIDIA SuperPOD: pods (scalable units) of leaves and spines,
    every leaf cabled to every spine of its pod, and spine ``j`` of every pod cabled to core group
    ``j`` (``cores_per_spine`` cores each). Levels must come out 1 (``pNlM``), 2 (``pNsM``) and 3
    (``coreNN``) from the graph alone. Options as :func:`plant`."""
    speed = speed.upper()
    if speed not in SPEEDS:
        raise ValueError(f"speed {speed!r}: expected one of {SPEEDS}")
    kind = _link_kind("4x", speed)
    cores = [f"core{i + 1:02d}" for i in range(spines_per_pod * cores_per_spine)]
    spine = [[f"p{p + 1}s{j + 1}" for j in range(spines_per_pod)] for p in range(pods)]
    leaf = [[f"p{p + 1}l{i + 1}" for i in range(leaves_per_pod)] for p in range(pods)]
    host = [f"node{i + 1:03d} mlx5_0" for i in range(pods * leaves_per_pod * hosts_per_leaf)]
    switches = cores + [n for row in spine for n in row] + [n for row in leaf for n in row]
    links: dict[str, dict[int, tuple[str, int]]] = {n: {} for n in switches + host}
    nxt = dict.fromkeys(switches, 1)

    def cable(a: str, b: str, bp: int | None = None) -> None:
        ap, bp = nxt[a], bp if bp is not None else nxt[b]
        links[a][ap] = (b, bp)
        links[b][bp] = (a, ap)
        nxt[a] += 1
        if b in nxt:
            nxt[b] += 1

    h = 0
    for p in range(pods):
        for lf in leaf[p]:
            for _ in range(hosts_per_leaf):
                cable(lf, host[h], 1)
                h += 1
            for sp in spine[p]:
                cable(lf, sp)
    for p in range(pods):
        for j, sp in enumerate(spine[p]):
            for c in range(cores_per_spine):
                cable(sp, cores[j * cores_per_spine + c])
    out = [f"# fabricmon simulated three-tier fat tree: {pods} pods of {leaves_per_pod} leaves and {spines_per_pod} "
           f"spines, {len(cores)} cores (ibsim topology)", ""]
    for n in switches:
        out.append(f'Switch\t{_switch_ports(max(links[n], default=1))} "{n}"')
        out += [f'[{p}]\t"{r}"[{rp}]\t# "{r}" lid 0 {kind}' for p, (r, rp) in sorted(links[n].items())]
        out.append("")
    for n in host:
        r, rp = links[n][1]
        out += [f'Hca\t1 "{n}"', f'[1]\t"{r}"[{rp}]\t# "{r}" lid 0 {kind}', ""]
    return plant("\n".join(out), aggregation_nodes, unnamed)


def director_netfile(leaves: int = 4, hosts_per_leaf: int = 2, lines: int = 4, spines: int = 2,
                     uplinks_per_leaf: int = 2, speed: str = "HDR") -> str:
    """A 3-level fabric with a director-like core: leaf switches carrying hosts, and one
    director chassis whose internal line switches (``core/L01``..) face the leaves and whose
    internal spine switches (``core/S01``..) connect every line switch. Levels must come out
    1 (leaves), 2 (line switches) and 3 (spine switches), from the graph alone.

    Leaf ``l`` has hosts on ports 1..hosts_per_leaf, then ``uplinks_per_leaf`` cables to line
    switches ``(l * uplinks_per_leaf + u) % lines``. Every line switch has one cable to each
    spine switch after its leaf-facing ports.
    """
    speed = speed.upper()
    if speed not in SPEEDS:
        raise ValueError(f"speed {speed!r}: expected one of {SPEEDS}")
    kind = _link_kind("4x", speed)
    leaf = [f"leaf{i + 1:02d}" for i in range(leaves)]
    line = [f"core/L{i + 1:02d}" for i in range(lines)]
    spine = [f"core/S{i + 1:02d}" for i in range(spines)]
    host = [f"host{i + 1:02d} mlx5_0" for i in range(leaves * hosts_per_leaf)]
    links: dict[str, dict[int, tuple[str, int]]] = {n: {} for n in leaf + line + spine + host}

    def cable(a: str, ap: int, b: str, bp: int) -> None:
        links[a][ap] = (b, bp)
        links[b][bp] = (a, ap)

    line_next = {n: 1 for n in line}
    for li, lf in enumerate(leaf):
        for h in range(hosts_per_leaf):
            cable(lf, h + 1, host[li * hosts_per_leaf + h], 1)
        for u in range(uplinks_per_leaf):
            ln = line[(li * uplinks_per_leaf + u) % lines]
            cable(lf, hosts_per_leaf + u + 1, ln, line_next[ln])
            line_next[ln] += 1
    for i, ln in enumerate(line):
        for j, sp in enumerate(spine):
            cable(ln, line_next[ln] + j, sp, i + 1)
    out = ["# fabricmon simulated 3-level fabric with a director-like core (ibsim topology)", ""]
    for n in leaf + line + spine:
        out.append(f'Switch\t{_switch_ports(max(links[n], default=1))} "{n}"')
        for p, (r, rp) in sorted(links[n].items()):
            out.append(f'[{p}]\t"{r}"[{rp}]\t# "{r}" lid 0 {kind}')
        out.append("")
    for n in host:
        out.append(f'Hca\t1 "{n}"')
        r, rp = links[n][1]
        out.append(f'[1]\t"{r}"[{rp}]\t# "{r}" lid 0 {kind}')
        out.append("")
    return "\n".join(out)


def demo_netfile_path() -> Path:
    """Path of the committed demo topology (``fat_tree_netfile(**DEMO_PARAMS)``)."""
    return Path(__file__).resolve().parent / "data" / "demo-fat-tree.net"


# --------------------------------------------------------------------------
# tool discovery
# --------------------------------------------------------------------------


def _tool_path(path: str | None = None) -> str:
    """PATH plus the sbin directories (opensm, ibstat ... live in /usr/sbin)."""
    parts = [p for p in (path if path is not None else os.environ.get("PATH", "")).split(os.pathsep) if p]
    for d in _SBIN_DIRS:
        if d not in parts:
            parts.append(d)
    return os.pathsep.join(parts)


def _which(tool: str) -> str | None:
    return shutil.which(tool, path=_tool_path())


def tools_available() -> tuple[bool, str]:
    """Tell whether a simulated fabric can run here.

    Returns:
        ``(True, "")`` when ``ibsim``, ``opensm``, ``ibstat``, ``perfquery``
        and ``iblinkinfo`` are found (on PATH, or in the sbin directories,
        which non-root PATHs often lack) and :data:`UMAD2SIM` exists;
        otherwise ``(False, reason)`` naming what is missing.
    """
    missing = [t for t in REQUIRED_TOOLS if _which(t) is None]
    if not os.path.exists(UMAD2SIM):
        missing.append(UMAD2SIM)
    if missing:
        return False, (
            "missing: " + ", ".join(missing)
            + " (apt-get install ibsim-utils libumad2sim0 infiniband-diags opensm)"
        )
    return True, ""


# --------------------------------------------------------------------------
# the simulator
# --------------------------------------------------------------------------


class SimCommandError(RuntimeError):
    """ibsim answered a console command with an error line (``# ...``)."""


def pdeathsig_fn() -> Callable[[], None] | None:
    """A preexec_fn asking the kernel to SIGTERM the child when we die.

    ibsim spins at 100 % CPU once its console FIFO hits EOF, so an orphaned
    simulator must not outlive the Python process that started it.
    """
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        prctl = libc.prctl
    except (OSError, AttributeError):  # pragma: no cover - non-Linux
        return None
    pr_set_pdeathsig = 1
    sig = int(signal.SIGTERM)

    def _fn() -> None:
        try:
            prctl(pr_set_pdeathsig, sig, 0, 0, 0)
        except Exception:  # pragma: no cover - best effort only
            pass

    return _fn


def _parse_nodes(netfile_text: str) -> dict[str, tuple[str, int]]:
    """Map node id -> (type, number of ports) from a net file's header lines."""
    return {m.group(3): (m.group(1), int(m.group(2))) for m in _NODE_HEADER.finditer(netfile_text)}


def _ctl_socket_inode(sockname: str) -> str | None:
    """Inode of the bound abstract socket ``@<sockname>:ctl`` (from /proc/net/unix), or None."""
    target = f"@{sockname}:ctl"
    try:
        with open("/proc/net/unix", encoding="ascii", errors="replace") as f:
            for line in f:
                parts = line.split()
                if len(parts) >= 8 and parts[7].rstrip("@") == target:
                    return parts[6]
    except OSError:  # pragma: no cover - no procfs
        return None
    return None


def _owns_socket(pid: int, inode: str) -> bool:
    """True when process ``pid`` holds the socket with this inode."""
    want = f"socket:[{inode}]"
    try:
        for fd in os.listdir(f"/proc/{pid}/fd"):
            try:
                if os.readlink(f"/proc/{pid}/fd/{fd}") == want:
                    return True
            except OSError:
                continue
    except OSError:
        return False
    return False


def log_tail(path: Path, nbytes: int = 3000) -> str:
    try:
        with open(path, "rb") as f:
            f.seek(0, os.SEEK_END)
            size = f.tell()
            f.seek(max(0, size - nbytes))
            return f.read().decode("utf-8", "replace")
    except OSError as exc:
        return f"<cannot read {path}: {exc}>"


def stop_process(proc: subprocess.Popen[bytes] | None, grace: float = 3.0) -> None:
    """SIGTERM one process by PID, wait, SIGKILL if it lingers, reap it."""
    if proc is None or proc.poll() is not None:
        return
    try:
        proc.send_signal(signal.SIGTERM)
        proc.wait(timeout=grace)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait(timeout=grace)
    except ProcessLookupError:  # pragma: no cover - raced with its exit
        pass


class SimFabric:
    """One running ibsim fabric, driven through its console FIFO.

    Usage::

        with SimFabric(fat_tree_netfile(), tmp_path) as fab:
            subprocess.run(["ibstat"], env=fab.env("node01 mlx5_0"), timeout=15)
            fab.set_counter("node01 mlx5_0", 1, "PortCounters.SymbolErrorCounter", 7)

    Files under ``workdir``: ``fabric.net`` (the topology), ``console.fifo``
    (ibsim's stdin; other processes may write console lines to it too),
    ``ibsim.log`` (ibsim's stdout and stderr), ``osm-cache/`` (opensm's
    ``OSM_CACHE_DIR``), ``opensm.log`` and ``opensm.out``.

    Each fabric uses its own abstract-socket name (``IBSIM_SOCKNAME``), so
    several fabrics can run side by side. ibsim serves at most 10 attached
    clients at once (opensm counts as one while it runs).

    ibsim and opensm are started with ``start_new_session=True`` and a
    parent-death signal (SIGTERM when the *thread* that started them ends),
    and are stopped by PID in :meth:`stop`, which is also registered with
    :mod:`atexit`.
    """

    def __init__(self, netfile_text: str, workdir: Path, sockname: str | None = None) -> None:
        """Prepare (but do not start) a fabric.

        Args:
            netfile_text: ibnetdiscover-syntax topology (see :func:`fat_tree_netfile`).
            workdir: directory for the net file, FIFO, logs and opensm cache
                (created if missing).
            sockname: ``IBSIM_SOCKNAME``; default ``fm<pid>_<8 hex>``, unique.
                At most 64 characters, no whitespace.
        """
        self.netfile_text = netfile_text
        self.workdir = Path(workdir)
        self.sockname = sockname or f"fm{os.getpid()}_{uuid.uuid4().hex[:8]}"
        if len(self.sockname) > _MAX_SOCKNAME or not re.fullmatch(r"[A-Za-z0-9_.:\-]+", self.sockname):
            raise ValueError(
                f"sockname {self.sockname!r}: use at most {_MAX_SOCKNAME} characters from [A-Za-z0-9_.:-] "
                "(it becomes an abstract unix socket name; sun_path holds 108 bytes)"
            )
        #: node id -> (type, port count), parsed from the net file's headers.
        self.nodes: dict[str, tuple[str, int]] = _parse_nodes(netfile_text)
        cas = self.hosts
        #: the CA that opensm runs on (the first host CA of the net file), or None.
        self.sm_host: str | None = cas[0] if cas else None

        self.netfile = self.workdir / "fabric.net"
        self.fifo = self.workdir / "console.fifo"
        self.log = self.workdir / "ibsim.log"
        self.osm_cache = self.workdir / "osm-cache"
        self.osm_log = self.workdir / "opensm.log"
        self.osm_out = self.workdir / "opensm.out"

        self._proc: subprocess.Popen[bytes] | None = None
        self._sm_proc: subprocess.Popen[bytes] | None = None
        self._master_sm: subprocess.Popen[bytes] | None = None     # a running opensm (start_sm)
        self._fifo_fd: int | None = None
        self._lock = threading.RLock()
        self._atexit = False

    # ---------------------------------------------------------------- basics

    @property
    def pid(self) -> int | None:
        """PID of the (last) ibsim process; None before :meth:`start`. Kept after :meth:`stop`."""
        return self._proc.pid if self._proc is not None else None

    @property
    def running(self) -> bool:
        """True while the ibsim process is alive."""
        return self._proc is not None and self._proc.poll() is None

    @property
    def hosts(self) -> list[str]:
        """Node ids of the host CAs in the net file, in file order (SIM_HOST values); Aggregation
        Nodes (CAs inside a switch) are no hosts."""
        inside = set(re.findall(r'^(?:Hca|Ca)\s+\d+\s+"([^"]+)"\s*#\s*"' + AGGREGATION_NODE + '"', self.netfile_text, re.M))
        return [n for n, (t, _) in self.nodes.items() if t in ("Hca", "Ca") and n not in inside]

    def __enter__(self) -> "SimFabric":
        if not self.running:
            self.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def __repr__(self) -> str:
        return f"<SimFabric sockname={self.sockname!r} pid={self.pid} workdir={str(self.workdir)!r}>"

    def env(self, host: str) -> dict[str, str]:
        """Environment for running a real tool "on" ``host`` of this fabric.

        Returns ``os.environ`` plus ``IBSIM_SOCKNAME``, ``LD_PRELOAD``
        (:data:`UMAD2SIM`, replacing any previous value) and
        ``SIM_HOST=host``; PATH gains the sbin directories when missing.
        Under it the local CA is called ``ibsim0`` and the tool attaches to
        port 1 of ``host``.

        Raises:
            ValueError: ``host`` is not a node of the net file (when the file
                has no ``include`` lines that could define more nodes).
        """
        if self.nodes and host not in self.nodes and not re.search(r"^include\b", self.netfile_text, re.M):
            raise ValueError(f"{host!r} is not a node of this fabric (known CAs: {', '.join(self.hosts[:5])}...)")
        env = dict(os.environ)
        env["IBSIM_SOCKNAME"] = self.sockname
        env["LD_PRELOAD"] = UMAD2SIM
        env["SIM_HOST"] = host
        env["PATH"] = _tool_path(env.get("PATH", ""))
        return env

    def run_tool(self, host: str, *argv: str, timeout: float = 20,
                 check: bool = False) -> subprocess.CompletedProcess[str]:
        """Run a tool on ``host`` (e.g. ``run_tool("node01 mlx5_0", "ibstat")``), capturing text output.

        A timeout is always applied: clients of a vanished simulator retry for ever.
        """
        return subprocess.run(
            list(argv),
            env=self.env(host),
            capture_output=True,
            text=True,
            timeout=timeout,
            check=check,
            start_new_session=True,
            cwd=self.workdir,       # a killed tool leaves ./sys-<pid>/ (umad2sim) here, not in the caller's directory
        )

    # --------------------------------------------------------------- start

    def start(self, timeout: float = 20, sm: bool = True) -> "SimFabric":
        """Start ibsim on a FIFO console, wait until it is ready, run opensm once.

        Writes ``fabric.net``, creates ``console.fifo`` (the write end stays
        open in this process), starts ``ibsim -s fabric.net``, waits for
        "Network simulator ready." and then runs ``opensm --once`` so every
        cabled port is Active with a LID. With ``sm=False`` no subnet manager
        runs: every port is Initializing with the LID the net file gives it (or
        none) until :meth:`run_sm` (so that a test can keep ports from it).

        Returns:
            self.

        Raises:
            RuntimeError: tools missing, already started, ibsim exited or was
                not ready within ``timeout`` seconds, or opensm failed; the
                message carries the tail of ``ibsim.log`` (or opensm's output).
        """
        ok, why = tools_available()
        if not ok:
            raise RuntimeError(f"cannot start a simulated fabric: {why}")
        with self._lock:
            if self.running:
                raise RuntimeError(f"{self!r} is already started")
            if _ctl_socket_inode(self.sockname) is not None:
                raise RuntimeError(
                    f"IBSIM_SOCKNAME {self.sockname!r} is already in use by another simulator; pick another sockname"
                )
            deadline = time.monotonic() + timeout
            self.workdir.mkdir(parents=True, exist_ok=True)
            self.netfile.write_text(self.netfile_text)
            if self.fifo.exists() or self.fifo.is_symlink():
                self.fifo.unlink()
            os.mkfifo(self.fifo, 0o600)
            # Open the read end non-blocking first so opening the write end does not block.
            rfd = os.open(self.fifo, os.O_RDONLY | os.O_NONBLOCK)
            try:
                self._fifo_fd = os.open(self.fifo, os.O_WRONLY)
                os.set_blocking(rfd, True)
                env = dict(os.environ)
                env.pop("LD_PRELOAD", None)
                env["IBSIM_SOCKNAME"] = self.sockname
                with open(self.log, "wb") as logf:
                    self._proc = subprocess.Popen(
                        [_which("ibsim") or "ibsim", *self._size_args(), "-s", str(self.netfile)],
                        stdin=rfd,
                        stdout=logf,
                        stderr=subprocess.STDOUT,
                        cwd=self.workdir,
                        env=env,
                        start_new_session=True,
                        preexec_fn=pdeathsig_fn(),
                    )
            except BaseException:
                self._close_fifo()
                raise
            finally:
                os.close(rfd)
            atexit.register(self.stop)
            self._atexit = True
            try:
                self._wait_ready(deadline)
                if sm:
                    self.run_sm(timeout=max(1.0, deadline - time.monotonic()))
            except BaseException:
                self.stop()
                raise
        return self

    def _size_args(self) -> list[str]:
        """``-S/-N/-P`` when the topology exceeds ibsim's defaults (256 switches, 2048 nodes,
        ports), e.g. the 400-switch director capture."""
        switches = sum(1 for t, _ in self.nodes.values() if t == "Switch")
        nodes = len(self.nodes)
        ports = sum(n + 1 for _, n in self.nodes.values())
        args: list[str] = []
        if switches > 200:
            args += ["-S", str(switches + 64)]
        if nodes > 1500:
            args += ["-N", str(nodes + 256)]
        if ports > 8000:
            args += ["-P", str(ports + 1024)]
        return args

    def _wait_ready(self, deadline: float) -> None:
        # ibsim prints "Network simulator ready." *before* it binds its sockets
        # (and then dies if the name is taken), so also wait until this very
        # process holds "@<sockname>:ctl".
        check_socket = os.path.exists("/proc/net/unix")
        while True:
            text = self.log.read_text(errors="replace") if self.log.exists() else ""
            assert self._proc is not None
            if _READY in text and self._proc.poll() is None:
                if not check_socket:
                    return
                inode = _ctl_socket_inode(self.sockname)
                if inode is not None and _owns_socket(self._proc.pid, inode):
                    return
            if self._proc.poll() is not None:
                raise RuntimeError(
                    f"ibsim exited with status {self._proc.returncode} before it was ready "
                    f"(sockname {self.sockname!r}); {self.log} ends with:\n{log_tail(self.log)}"
                )
            if time.monotonic() > deadline:
                raise RuntimeError(f"ibsim not ready in time; {self.log} ends with:\n{log_tail(self.log)}")
            time.sleep(0.02)

    # --------------------------------------------------------------- opensm

    def run_sm(self, timeout: float = 30) -> None:
        """Run ``opensm --once`` on :attr:`sm_host`: assigns LIDs, brings ports to Active.

        Uses ``OSM_CACHE_DIR=<workdir>/osm-cache`` (so LIDs stay stable across
        runs) and logs to ``opensm.log``/``opensm.out``.

        Raises:
            RuntimeError: opensm failed, timed out or did not report SUBNET UP.
        """
        with self._lock:
            if not self.running:
                raise RuntimeError(f"ibsim is not running; {self.log} ends with:\n{log_tail(self.log)}")
            self.osm_cache.mkdir(parents=True, exist_ok=True)
            env = dict(os.environ)
            env.update(IBSIM_SOCKNAME=self.sockname, LD_PRELOAD=UMAD2SIM, PATH=_tool_path(env.get("PATH", "")))
            env.pop("SIM_HOST", None)
            if self.sm_host:  # else ibsim attaches opensm to the first port of the net file
                env["SIM_HOST"] = self.sm_host
            env["OSM_CACHE_DIR"] = str(self.osm_cache)
            before = self._count_subnet_up()
            with open(self.osm_out, "ab") as out:
                self._sm_proc = subprocess.Popen(
                    [_which("opensm") or "opensm", "-f", str(self.osm_log), "--once"],
                    stdin=subprocess.DEVNULL,
                    stdout=out,
                    stderr=subprocess.STDOUT,
                    cwd=self.workdir,
                    env=env,
                    start_new_session=True,
                    preexec_fn=pdeathsig_fn(),
                )
            try:
                rc = self._sm_proc.wait(timeout=timeout)
            except subprocess.TimeoutExpired:
                stop_process(self._sm_proc)
                raise RuntimeError(
                    f"opensm --once did not finish in {timeout:.0f}s; {self.osm_out} ends with:\n{log_tail(self.osm_out)}"
                    f"\n{self.log} ends with:\n{log_tail(self.log)}"
                ) from None
            finally:
                self._sm_proc = None
            if rc != 0 or self._count_subnet_up() <= before:
                raise RuntimeError(
                    f"opensm --once failed (status {rc}, no new SUBNET UP in {self.osm_log}); "
                    f"{self.osm_out} ends with:\n{log_tail(self.osm_out)}\n{self.log} ends with:\n{log_tail(self.log)}"
                )

    def start_sm(self, timeout: float = 60, extra_args: tuple[str, ...] = ()) -> None:
        """Keep an ``opensm`` running (a master SM answering SA queries, which
        ``ibqueryerrors`` without ``--skip-sl`` and ``sminfo`` need); stopped by PID
        in :meth:`stop_sm` or :meth:`stop`. Waits until ``sminfo`` sees a master SM.
        ``extra_args`` go to opensm, e.g. ``("-R", "file", "-U", lfts)`` to load planted
        forwarding tables (the format ``ibroute``/``dump_fts`` print).

        Raises:
            RuntimeError: opensm exited or reported no SUBNET UP within ``timeout``.
        """
        with self._lock:
            if not self.running:
                raise RuntimeError(f"ibsim is not running; {self.log} ends with:\n{log_tail(self.log)}")
            if self._master_sm is not None and self._master_sm.poll() is None:
                return
            self.osm_cache.mkdir(parents=True, exist_ok=True)
            env = dict(os.environ)
            env.update(IBSIM_SOCKNAME=self.sockname, LD_PRELOAD=UMAD2SIM, PATH=_tool_path(env.get("PATH", "")))
            env.pop("SIM_HOST", None)
            if self.sm_host:
                env["SIM_HOST"] = self.sm_host
            env["OSM_CACHE_DIR"] = str(self.osm_cache)
            with open(self.osm_out, "ab") as out:
                self._master_sm = subprocess.Popen(
                    [_which("opensm") or "opensm", "-f", str(self.osm_log), *extra_args],
                    stdin=subprocess.DEVNULL, stdout=out, stderr=subprocess.STDOUT, cwd=self.workdir,
                    env=env, start_new_session=True, preexec_fn=pdeathsig_fn(),
                )
            deadline = time.monotonic() + timeout
            # opensm buffers its log while it runs: ask the SM itself (sminfo) instead.
            sminfo_env = dict(env, SIM_HOST=self.sm_host or "")
            while True:
                try:
                    r = subprocess.run([_which("sminfo") or "sminfo"], env=sminfo_env, capture_output=True,
                                       text=True, timeout=10, start_new_session=True, cwd=self.workdir)
                    if r.returncode == 0 and "SMINFO_MASTER" in r.stdout:
                        break
                except subprocess.TimeoutExpired:
                    pass
                if self._master_sm.poll() is not None or time.monotonic() > deadline:
                    stop_process(self._master_sm)
                    self._master_sm = None
                    raise RuntimeError(f"opensm did not bring the subnet up; {self.osm_out} ends with:\n"
                                       f"{log_tail(self.osm_out)}")
                time.sleep(0.05)

    def stop_sm(self) -> None:
        """Stop the opensm started by :meth:`start_sm` (by PID)."""
        with self._lock:
            stop_process(self._master_sm)
            self._master_sm = None

    def _count_subnet_up(self) -> int:
        try:
            return self.osm_log.read_text(errors="replace").count("SUBNET UP")
        except OSError:
            return 0

    # -------------------------------------------------------------- console

    def console(self, cmd: str, expect: str | None = None, timeout: float = 5) -> str:
        """Send one console line to ibsim and return its answer.

        Waits for ibsim's next ``sim> `` prompt (the answer is everything
        printed between the command and that prompt). With ``expect``, also
        waits until that substring appears in ibsim's output after the
        command.

        Returns:
            The output ibsim printed after the command, prompt included.

        Raises:
            ValueError: ``cmd`` has a newline or is longer than 126 bytes
                (ibsim would split it).
            SimCommandError: ``expect`` was given, the answer is complete,
                lacks it, and holds an ibsim error line (``# ...``).
            TimeoutError: no prompt, or ``expect`` not seen, within ``timeout``.
            RuntimeError: ibsim is not running.
        """
        if "\n" in cmd or "\r" in cmd:
            raise ValueError("one console line at a time (no newlines)")
        data = (cmd + "\n").encode()
        if len(data) - 1 > _MAX_CONSOLE_LINE:
            raise ValueError(f"console line longer than {_MAX_CONSOLE_LINE} bytes: {cmd!r}")
        with self._lock:
            if not self.running or self._fifo_fd is None:
                raise RuntimeError(f"ibsim is not running; {self.log} ends with:\n{log_tail(self.log)}")
            offset = self.log.stat().st_size
            os.write(self._fifo_fd, data)
            deadline = time.monotonic() + timeout
            text = ""
            with open(self.log, "rb") as f:
                while True:
                    f.seek(offset)
                    text = f.read().decode("utf-8", "replace")
                    prompted = _PROMPT in text
                    if prompted and (expect is None or expect in text):
                        return text
                    if prompted and expect is not None:
                        answer = text.split(_PROMPT, 1)[0]
                        if any(line.startswith("#") for line in answer.splitlines()):
                            raise SimCommandError(f"ibsim rejected {cmd!r}: {answer.strip()}")
                    if not self.running:
                        raise RuntimeError(f"ibsim died after {cmd!r}; {self.log} ends with:\n{log_tail(self.log)}")
                    if time.monotonic() > deadline:
                        want = f"{expect!r}" if expect is not None else "its prompt"
                        raise TimeoutError(f"ibsim: no {want} within {timeout}s after {cmd!r}; output since: {text[-2000:]!r}")
                    time.sleep(0.002)     # answers come within a few ms; traffic drivers set many counters

    def _checked(self, cmd: str, timeout: float) -> str:
        out = self.console(cmd, timeout=timeout)
        answer = out.split(_PROMPT, 1)[0]
        errors = [line for line in answer.splitlines() if line.startswith("#")]
        if errors:
            raise SimCommandError(f"ibsim rejected {cmd!r}: {' '.join(errors)}")
        return out

    def set_counter(self, node: str, port: int, field: str, value: int, timeout: float = 5) -> int:
        """Set a performance counter: ``PerformanceSet "node"[port] field=value``.

        ``field`` is ``Attribute.Field``, e.g. ``"PortCounters.SymbolErrorCounter"``
        or ``"PortCountersExtended.PortXmitData"``. Waits for ibsim's
        "has been set to" echo.

        Returns:
            The value ibsim actually stored (counters saturate at their
            width: 16-bit SymbolErrorCounter set to 70000 reads 65535).

        Raises:
            SimCommandError: unknown node or field.
        """
        out = self.console(f'PerformanceSet "{node}"[{port}] {field}={int(value)}', expect="has been set to", timeout=timeout)
        m = re.search(r"has been set to (\d+)", out)
        return int(m.group(1)) if m else int(value)

    def unlink(self, node: str, port: int, timeout: float = 5) -> None:
        """Pull the cable at ``node`` port ``port`` (``Unlink``): both ends go Down/Polling."""
        self._checked(f'Unlink "{node}"[{port}]', timeout)

    def relink(self, node: str, port: int, timeout: float = 30, sm: bool = True) -> None:
        """Restore a cable removed by :meth:`unlink` (``ReLink``), then run opensm once.

        Right after ``ReLink`` the ports are LinkUp/Initializing; the opensm
        sweep brings them back to Active (with their LID from opensm's cache).
        With ``sm=False`` no opensm runs: the ports stay LinkUp/Initializing
        and a CA port has no LID (``Unlink`` reset it to 0), as a port that came
        up after the subnet manager's last sweep.
        """
        self._checked(f'ReLink "{node}"[{port}]', min(timeout, 5))
        if sm:
            self.run_sm(timeout=timeout)

    def set_lid(self, node: str, port: int, lid: int, timeout: float = 5) -> None:
        """Set a port's LID in its PortInfo (``Baselid "node"[port] lid``), as firmware does: ConnectX
        reports 0xFFFF where no subnet manager assigned one (ibsim's own value for such a port is 0)."""
        self._checked(f'Baselid "{node}"[{port}] {int(lid)}', timeout)

    # ---------------------------------------------------------------- stop

    def _close_fifo(self) -> None:
        if self._fifo_fd is not None:
            try:
                os.close(self._fifo_fd)
            except OSError:
                pass
            self._fifo_fd = None

    def stop(self) -> None:
        """Stop opensm (if running) and ibsim by PID: SIGTERM, wait, SIGKILL.

        Then closes the FIFO's write end. Idempotent; registered with atexit.
        Log files stay in ``workdir``.
        """
        with self._lock:
            stop_process(self._sm_proc)
            self._sm_proc = None
            stop_process(self._master_sm)
            self._master_sm = None
            stop_process(self._proc)
            # Close the FIFO only once ibsim is gone: at EOF it would spin.
            self._close_fifo()
            try:
                if self.fifo.exists() and stat.S_ISFIFO(self.fifo.stat().st_mode):
                    self.fifo.unlink()
            except OSError:
                pass
            if self._atexit:
                atexit.unregister(self.stop)
                self._atexit = False


#: Data rate of a 4X HDR link in bytes/s.
HDR_4X_BYTES = 25e9


class TrafficDriver(threading.Thread):
    """Simulated traffic for the fabric collector: keeps ``PortXmitData`` (4-octet words) of
    each driven switch port at ``base + share x link x elapsed``, so that every sweep reads a
    steady transmit rate. ``plan`` maps a node to ``{port: share of link rate}``; assign a
    new dict to :attr:`plan` to change the traffic (a counter never goes backwards)."""

    def __init__(self, fab: SimFabric, plan: dict[str, dict[int, float]], link_bytes: float = HDR_4X_BYTES):
        super().__init__(daemon=True, name="fabricmon-sim-traffic")
        self.fab, self.plan, self.link = fab, plan, link_bytes
        self.stopping = threading.Event()
        self._words: dict[tuple[str, int], float] = {}
        self._last = time.monotonic()

    def run(self) -> None:
        while not self.stopping.is_set():
            now = time.monotonic()
            dt, self._last = now - self._last, now
            for node, ports in list(self.plan.items()):
                for port, share in ports.items():
                    w = self._words.get((node, port), 1_000_000.0) + share * self.link * dt / 4
                    self._words[(node, port)] = w
                    try:
                        self.fab.set_counter(node, port, "PortCountersExtended.PortXmitData", int(w))
                    except (RuntimeError, TimeoutError):
                        if self.stopping.is_set() or not self.fab.running:
                            return
            self.stopping.wait(0.005)

    def stop(self) -> None:
        self.stopping.set()
        self.join(5)
