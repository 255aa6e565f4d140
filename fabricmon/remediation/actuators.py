"""What carries a decision out, through the HostIO it is given (every command, every MAD): a fabric port
disabled or enabled, a node drained or resumed, and what each reads back to confirm it. A step that was
not confirmed failed (Outcome.ok False, with why): it is retried, never assumed done.

- InfiniBand ports: SubnSet(PortInfo) PortPhysicalState Disabled (3) / Polling (2, enable), as
  `ibportstate <lid> <port> disable|enable` sends it. Through the collector's own MAD engine
  (host/mad.py: the umad port the sweep uses, no process per action, the Set's answer is the port's
  PortInfo after it) where it opens (`isolate_port.method` auto or mad), else through the ibportstate tool
  (its "After PortInfo set" block read back). Confirmed by the end set: its PortPhysicalState (GUIDE 18: in
  ibsim the other end of a disabled link stays LinkUp, real hardware takes both down).
- Ethernet ports: the configured argv for the switch (`isolate_port.ethernet`), never a shell; a switch no
  entry names is a dry run. Confirmed by the command's exit status; the sweep's ifOperStatus says whether
  the port stays down.
- Slurm: `scontrol update nodename=X state=drain reason=...` and `state=resume`, read back with
  `sinfo -R -N -h -o '%N|%E|%u|%H|%T'` (node names, not %n's host names: every slurmd of a test cluster has
  the same host), and `sinfo -h -N -o '%N|%P|%T'` for the partitions."""

from __future__ import annotations

import re
import time
from collections.abc import Sequence
from dataclasses import dataclass
from fnmatch import fnmatchcase

from fabricmon.host.io import HostIO
from fabricmon.host.mad import MadSettings, Request
from fabricmon.host.runner import CommandResult
from fabricmon.model.remediation import Action
from fabricmon.remediation.policy import SlurmNode, SlurmView
from fabricmon.remediation.settings import DrainSettings, EthernetCommand, IsolateSettings
import fabricmon.sources.infiniband.mad.codec as codec

_NODE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,254}$")
PHYS_NAMES = {1: "Sleep", 2: "Polling", 3: "Disabled", 4: "PortConfigurationTraining", 5: "LinkUp",
              6: "LinkErrorRecovery", 7: "PhyTest"}


@dataclass(frozen=True, slots=True)
class Outcome:
    ok: bool
    detail: str = ""                 # what was confirmed, or why it failed (one line)
    how: str = ""                    # "mad", "ibportstate", the command, "scontrol"


@dataclass(frozen=True, slots=True)
class PortRead:
    """The set end's PortInfo as read back: PortState, PortPhysicalState."""
    state: int
    phys: int

    @property
    def disabled(self) -> bool:
        return self.phys == codec.PHYS_DISABLED

    @property
    def up(self) -> bool:
        return self.phys == codec.PHYS_LINK_UP and self.state not in (0, 1)

    def text(self) -> str:
        return f"PortPhysicalState {PHYS_NAMES.get(self.phys, self.phys)}"


class InfinibandPorts:
    """Disable, enable and read a switch port over SMPs (module doc)."""

    def __init__(self, io: HostIO, settings: IsolateSettings, mad: MadSettings):
        self.io, self.settings, self.mad = io, settings, mad
        self._engine_error = ""

    def _engine(self) -> bool:
        if self.settings.method == "tools":
            return False
        try:
            self.io.mad_open(self.mad)
            return True
        except OSError as exc:
            self._engine_error = str(exc.strerror or exc)
            if self.settings.method == "mad":
                raise
            return False

    def _mad(self, a: Action, mad: bytes | bytearray) -> bytes | None:
        deadline = time.monotonic() + self.settings.timeout
        return self.io.mad_run([Request(a.guid, a.lid, bytes(mad))], deadline)[0]

    def read(self, a: Action) -> PortRead | str:
        """The set end's PortInfo, or why it could not be read."""
        try:
            if self._engine():
                ans = self._mad(a, codec.encode_port_info(a.port, 0))
                if ans is None:
                    return f"PortInfo Get of LID {a.lid} port {a.port} unanswered"
                pi = codec.decode_port_info(ans)
                return PortRead(pi.state, pi.phys_state)
        except (OSError, codec.MadError) as exc:
            return f"MAD engine: {exc}"
        res = self.io.run([self.settings.ibportstate, str(a.lid), str(a.port), "query"], self.settings.timeout)
        got = _portinfo_blocks(res.stdout)
        return got[0] if got else res.describe()

    def set(self, a: Action, disable: bool) -> Outcome:
        phys = codec.PHYS_DISABLED if disable else codec.PHYS_POLLING
        verb = "disable" if disable else "enable"
        try:
            engine = self._engine()
        except OSError as exc:
            return Outcome(False, f"isolate_port.method is mad, but no umad port opens: {exc}", "mad")
        if engine:
            try:
                cur = self._mad(a, codec.encode_port_info(a.port, 0))
                if cur is None:
                    return Outcome(False, f"PortInfo Get of LID {a.lid} port {a.port} unanswered", "mad")
                codec.decode_port_info(cur)
                ans = self._mad(a, codec.encode_port_info_set(a.port, 0, cur, phys))
                if ans is None:
                    return Outcome(False, f"SubnSet(PortInfo) {verb} of LID {a.lid} port {a.port} unanswered "
                                   "(the port may be set: it is read back on the next try)", "mad")
                pi = codec.decode_port_info(ans)
            except (OSError, codec.MadError) as exc:
                return Outcome(False, f"SubnSet(PortInfo) {verb}: {exc}", "mad")
            got = PortRead(pi.state, pi.phys_state)
            return _confirm(got, disable, "SubnSet(PortInfo) answered", "mad")
        res = self.io.run([self.settings.ibportstate, str(a.lid), str(a.port), verb], self.settings.timeout)
        blocks = _portinfo_blocks(res.stdout, after_set=True)
        if not blocks:
            return Outcome(False, res.describe(), "ibportstate")
        # ibportstate then reads the peer port across the link it set: in ibsim (and on a link that went down)
        # that fails and it exits 255 although the Set was answered; the block after the Set is what counts
        return _confirm(blocks[0], disable, "ibportstate's PortInfo after the Set", "ibportstate")


def _confirm(got: PortRead, disable: bool, where: str, how: str) -> Outcome:
    if disable and got.disabled:
        return Outcome(True, f"{where}: {got.text()}", how)
    if not disable and not got.disabled:
        return Outcome(True, f"{where}: {got.text()} (the link trains)", how)
    return Outcome(False, f"{where}: {got.text()}, not what was set", how)


_FIELD = re.compile(r"^(LinkState|PhysLinkState):\.*(\S.*)$", re.M)
_STATES = {"Down": 1, "Initialize": 2, "Init": 2, "Armed": 3, "Active": 4}
_PHYS = {v: k for k, v in PHYS_NAMES.items()}


def _portinfo_blocks(text: str, after_set: bool = False) -> list[PortRead]:
    """ibportstate's PortInfo blocks (LinkState, PhysLinkState), in order; with after_set only the block
    after "After PortInfo set:"."""
    if after_set:
        if "After PortInfo set:" not in text:
            return []
        text = text.split("After PortInfo set:", 1)[1]
    out = []
    state = phys = None
    for m in _FIELD.finditer(text):
        if m[1] == "LinkState":
            state = _STATES.get(m[2].strip(), 0)
        else:
            phys = _PHYS.get(m[2].strip().split()[0], 0)
            if state is not None:
                out.append(PortRead(state, phys))
            state = phys = None
    return out


class EthernetPorts:
    """Shut and open an Ethernet switch port with the configured command (module doc)."""

    def __init__(self, io: HostIO, settings: IsolateSettings):
        self.io, self.settings = io, settings

    def command(self, a: Action) -> EthernetCommand | None:
        return next((c for c in self.settings.ethernet
                     if fnmatchcase(a.switch, c.switch) or fnmatchcase(a.guid, c.switch)), None)

    def set(self, a: Action, disable: bool) -> Outcome:
        c = self.command(a)
        if c is None:
            return Outcome(False, f"no isolate_port.ethernet command for switch {a.switch}", "")
        port = a.port_name or str(a.port)
        addr = a.address or a.guid
        argv = [arg.format(switch=a.switch, address=addr, port=port) for arg in (c.disable if disable else c.enable)]
        res = self.io.run(argv, self.settings.timeout)
        return Outcome(res.ok, res.describe() if not res.ok else f"{argv[0]} exited 0", argv[0])


class Slurm:
    """scontrol and sinfo (module doc)."""

    def __init__(self, io: HostIO, settings: DrainSettings):
        self.io, self.settings = io, settings

    def _run(self, argv: Sequence[str]) -> CommandResult:
        return self.io.run(list(argv), self.settings.timeout)

    def view(self) -> SlurmView | str:
        """Every node's state and reason, its partitions; or why Slurm could not be read."""
        s = self.settings.sinfo
        parts = self._run([s, "-h", "-N", "-o", "%N|%P|%T"])
        if not parts.ok:
            return parts.describe()
        reasons = self._run([s, "-R", "-N", "-h", "-o", "%N|%E|%u|%H|%T"])
        if not reasons.ok:
            return reasons.describe()
        partitions: dict[str, list[str]] = {}
        states: dict[str, str] = {}
        for line in parts.stdout.splitlines():
            f = line.split("|")
            if len(f) == 3 and f[0]:
                partitions.setdefault(f[0], []).append(f[1].rstrip("*"))
                states[f[0]] = f[2]
        nodes = {n: SlurmNode("", state=st) for n, st in states.items()}
        for line in reasons.stdout.splitlines():
            name, _, rest = line.partition("|")
            f = rest.rsplit("|", 3)
            if not name or len(f) != 4:
                continue
            reason, user, since, state = f
            nodes[name] = SlurmNode(reason.strip(), user.strip(), since.strip(), state.strip())
        return SlurmView(nodes, {n: tuple(ps) for n, ps in partitions.items()})

    def drain(self, node: str, reason: str) -> Outcome:
        if not _NODE.match(node):
            return Outcome(False, f"refusing an unsafe node name {node!r}", "scontrol")
        res = self._run([self.settings.scontrol, "update", f"nodename={node}", "state=drain", f"reason={reason}"])
        if not res.ok:
            return Outcome(False, res.describe(), "scontrol")
        got = self.view()
        if isinstance(got, str):
            return Outcome(False, f"drained, but not read back: {got}", "scontrol")
        n = got.nodes.get(node)
        if n is None or n.reason != reason:
            return Outcome(False, f"scontrol exited 0 but sinfo shows {node} with reason {n.reason if n else ''!r}",
                           "scontrol")
        return Outcome(True, f"sinfo: {node} {n.state} by {n.user} at {n.since}", "scontrol")

    def resume(self, node: str) -> Outcome:
        if not _NODE.match(node):
            return Outcome(False, f"refusing an unsafe node name {node!r}", "scontrol")
        res = self._run([self.settings.scontrol, "update", f"nodename={node}", "state=resume"])
        if not res.ok:
            return Outcome(False, res.describe(), "scontrol")
        got = self.view()
        if isinstance(got, str):
            return Outcome(False, f"resumed, but not read back: {got}", "scontrol")
        n = got.nodes.get(node)
        if n is not None and n.reason:
            return Outcome(False, f"scontrol exited 0 but {node} is still {n.state}: {n.reason!r}", "scontrol")
        return Outcome(True, f"sinfo: {node} {n.state if n else 'resumed'}", "scontrol")


__all__ = ["EthernetPorts", "InfinibandPorts", "Outcome", "PortRead", "Slurm"]
