"""How the Ethernet sources reach a switch: SNMPv2c and SNMPv3 in this process (host.snmp and
host.usm, through HostIO.snmp_walks); net-snmp's command-line tools, one process per walk, only as
the SNMPv3 fallback when the `cryptography` package (AES, DES) is missing.

Why (measured, bench/ethernet_sweep.py and docs/ethernet.md): a net-snmp process costs about 6 ms
of CPU to start, three per switch and sweep, which made a v3 sweep 4-5x prometheus-snmp-exporter's
CPU; the in-process GETBULK client (one thread for every switch) costs a few microseconds per
value and starts nothing. Its answer is the tool's text, so the parser, `fabric capture` and a
replay treat both paths alike.

The fallback is automatic, not a config switch: with `cryptography` importable (it is a declared
dependency) v3 is read in process; without it (or without DES in it, for `priv_protocol: DES`) the
collector says once, as a warning, why it runs `snmpbulkwalk` instead.

Secrets never go in argv (any user reads it with `ps`), in a recorded command, a log line or an
error: v2c's community goes only into the request datagrams; in process, v3's pass phrases become
keys once (host.usm.Usm) and only MACs and ciphertext leave; for the tools the user, protocols and
pass phrases are written once to `snmp.conf` in a private directory (0700, the file 0600) named by
SNMPCONFPATH in the tools' environment, which HostIO does not record. The argv names only the
address, the OID, the protocols and the timing options.
"""

from __future__ import annotations

import os
import re
import shutil
import tempfile
import threading
import time
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, TypeVar

import structlog

from fabricmon.sources.ethernet.settings import SnmpConfig, SnmpSourceSettings
from fabricmon.host.io import HostIO
from fabricmon.host.runner import CommandResult
from fabricmon.host import usm as _usm
from fabricmon.host.snmp import WalkSpec
from fabricmon.model.fabric import Topology, in_shard
from fabricmon.parsers.errors import ParseError
from fabricmon.pipeline.source import Inputs, Source, SourceOutput

T = TypeVar("T")

if TYPE_CHECKING:
    from fabricmon.registry import SourceConfig

log = structlog.get_logger("fabricmon.snmp")
WALK_PROGRAM = "snmpbulkwalk"
_warned: set[str] = set()
# net-snmp spells the SHA-2 protocols with a dash
_AUTH = {"MD5": "MD5", "SHA": "SHA", "SHA224": "SHA-224", "SHA256": "SHA-256", "SHA384": "SHA-384",
         "SHA512": "SHA-512"}
_AUTH_FAILURE = re.compile(r"authentication failure|unknown user name|decryption error|incorrect password|"
                           r"unsupported security level|usmStats", re.I)


LOOSE_SECRETS = "SNMP secret file is readable by group or others: chmod 600 it"


def warn_loose(snmp: SnmpConfig, say: Callable[[str, list[str]], None] | None = None) -> None:
    """The warning for the secret files the config found group- or world-readable (SnmpConfig.loose_files),
    once per file and process: logged (`fabric run`, at its first walk), or given to `say` (the quiet
    commands, `fabric once`, which print it on stderr before their first walk)."""
    loose = [f for f in snmp.loose_files if f not in _warned]
    if loose:
        _warned.update(loose)
        if say is None:
            log.warning(LOOSE_SECRETS, files=loose)
        else:
            say(LOOSE_SECRETS, loose)


def _quoted(value: str) -> str:
    return '"' + value.replace("\\", "\\\\").replace('"', '\\"') + '"'


class SnmpAccess:
    """One collector's SNMP settings as a private net-snmp config directory, made on first use
    and removed by close()."""

    def __init__(self, snmp: SnmpConfig):
        self.snmp = snmp
        self._dir: str | None = None
        self._lock = threading.Lock()
        self._usm: _usm.Usm | None = None
        self._inprocess: bool | None = None

    def conf_lines(self) -> list[str]:
        s = self.snmp
        lines = [f"persistentDir {self._dir}/persist", f"defVersion {s.version}"]
        if s.version == "2c":
            lines.append(f"defCommunity {_quoted(s.community)}")
        else:
            lines += [f"defSecurityName {_quoted(s.user)}", "defSecurityLevel authPriv",
                      f"defAuthType {_AUTH[s.auth_protocol]}", f"defPrivType {s.priv_protocol}",
                      f"defAuthPassphrase {_quoted(s.auth_password)}", f"defPrivPassphrase {_quoted(s.priv_password)}"]
            if s.context:
                lines.append(f"defContext {_quoted(s.context)}")
        return lines

    @property
    def inprocess(self) -> bool:
        """Walks in this process (host.snmp): always for v2c; for v3 when host.usm can (the
        `cryptography` package is there), else net-snmp's tools (said once, as a warning)."""
        if self._inprocess is None:
            ok, why = (True, "") if self.snmp.version == "2c" else _usm.supported(self.snmp.priv_protocol)
            if not ok:
                log.warning("SNMPv3 falls back to net-snmp's tools (snmpbulkwalk, a process per walk: "
                            "several times the CPU)", reason=why)
            self._inprocess = ok
        return self._inprocess

    def usm(self) -> _usm.Usm | None:
        """SNMPv3's keys (made once: the pass phrases are hashed to keys here and not kept by it)
        and the engines met, shared by every walk of this collector source."""
        s = self.snmp
        if s.version != "3":
            return None
        with self._lock:
            if self._usm is None:
                self._usm = _usm.Usm(s.user, s.auth_protocol, s.auth_password, s.priv_protocol, s.priv_password,
                                     s.context)
            return self._usm

    def spec(self, address: str, root: str, columns: tuple[str, ...] = ()) -> WalkSpec:
        """An in-process walk of `root`, or of only those columns of it."""
        with self._lock:
            warn_loose(self.snmp)
        s = self.snmp
        return WalkSpec(address, root, columns, community=s.community if s.version == "2c" else "",
                        timeout=s.timeout, retries=s.retries, max_repetitions=s.max_repetitions,
                        max_rows=s.max_rows, usm=self.usm())

    def env(self) -> dict[str, str]:
        with self._lock:
            warn_loose(self.snmp)
            if self._dir is None:
                d = tempfile.mkdtemp(prefix="fabricmon-snmp-")       # mode 0700
                os.makedirs(os.path.join(d, "persist"), mode=0o700)
                self._dir = d
                fd = os.open(os.path.join(d, "snmp.conf"), os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
                with os.fdopen(fd, "w") as fh:
                    fh.write("\n".join(self.conf_lines()) + "\n")
            return {"SNMPCONFPATH": self._dir, "MIBS": "", "MIBDIRS": os.path.join(self._dir, "no-mibs")}

    def walk_argv(self, address: str, root: str) -> list[str]:
        s = self.snmp
        return [WALK_PROGRAM, "-On", "-Oe", "-Ot", "-t", f"{s.timeout:g}", "-r", str(s.retries),
                f"-Cr{s.max_repetitions}", address, root]

    def walk(self, io: HostIO, address: str, root: str, timeout: float) -> CommandResult:
        """One walk of a whole subtree: in process, or by the tool (the v3 fallback)."""
        if self.inprocess:
            return io.snmp_walks([self.spec(address, root)], time.monotonic() + timeout, 1)[0]
        return io.run(self.walk_argv(address, root), timeout, env=self.env())

    def close(self) -> None:
        with self._lock:
            if self._dir is not None:
                shutil.rmtree(self._dir, ignore_errors=True)
                self._dir = None


def failure(res: CommandResult) -> tuple[str, str] | None:
    """A walk that failed -> (error kind, a message naming no secret), None when it answered. A
    switch that does not answer is `timeout`; a wrong credential says so. Values the client left
    out (wider than their type) do not fail the walk: they are logged once per switch."""
    if res.error == "timeout":
        return "timeout", "no answer before the sweep's deadline"
    if res.error == "parse":            # a datagram that is not SNMP, or OIDs that do not increase
        return "parse", (res.stderr.strip().splitlines() or ["not an SNMP answer"])[0][:200]
    if res.error:
        return "not_found", res.describe()
    text = res.stderr.strip()
    if "Timeout" in text and "No Response" in text:
        return "timeout", "no answer (SNMP timeout; with v3 a wrong pass phrase looks the same)"
    if _AUTH_FAILURE.search(text):
        return "exit_code", "SNMPv3 authentication failed (wrong user, protocol or pass phrase)"
    if res.returncode != 0:
        first = text.splitlines()[0][:200] if text else f"exit status {res.returncode}"
        return "exit_code", first
    if text.startswith("Bad value at ") and res.argv:
        address = _address(res.argv)
        if ("bad-value", address) not in _warned_values:
            _warned_values.add(("bad-value", address))
            log.warning("switch sent values that do not fit their type: left out", address=address,
                        first=text.splitlines()[0][:200])
    return None


def _address(argv: tuple[str, ...]) -> str:
    """The address in a walk's argv (the word after -Cr..., for the tool and in process alike)."""
    for i, a in enumerate(argv):
        if a.startswith("-Cr") and i + 1 < len(argv):
            return argv[i + 1]
    return "?"


_warned_values: set[tuple[str, str]] = set()


class SnmpSource(Source):
    """A source that reads switches over SNMP through one SnmpAccess (closed with the source)."""

    def __init__(self, sc: SourceConfig):
        super().__init__(sc)
        self.settings = sc.settings(SnmpSourceSettings)
        self.access = SnmpAccess(self.settings.ethernet.snmp)

    def collect(self, io: HostIO, inputs: Inputs) -> SourceOutput:
        """read_switches on this shard's discovered switches; before the discovery has completed, nothing read
        and the read error that says so."""
        out = SourceOutput()
        found = self.shard_switches(inputs, out)
        if found is not None:
            self.read_switches(io, inputs, out, *found)
        return out

    def read_switches(self, io: HostIO, inputs: Inputs, out: SourceOutput, topo: Topology, mine: list[str]) -> None:
        """What the source reads from `mine` (this shard's switches of `topo` with an address) into `out`."""
        raise NotImplementedError

    def shard_switches(self, inputs: Inputs, out: SourceOutput) -> tuple[Topology, list[str]] | None:
        """The discovered topology and the GUIDs of this shard's switches with an address; None (and
        a read error) before the discovery source has completed."""
        topo: Topology | None = inputs.inventory
        if topo is None or not topo.switches:
            out.error("read", "no discovered topology yet (the discovery source has not completed)")
            return None
        shard = self.settings.shard
        return topo, sorted(g for g, sw in topo.switches.items() if sw.address and in_shard(g, *shard))

    def walk_switches(self, io: HostIO, inputs: Inputs, topo: Topology, mine: list[str],
                      walks: Sequence[tuple[str, str]], unrecorded_absent: bool = False
                      ) -> tuple[dict[str, dict[str, str]], dict[str, tuple[str, str]]]:
        """Every (name, root) of `walks` on each of `mine`, under the run's one deadline: v2c in this process for
        every switch at once (HostIO.snmp_walks), v3 by net-snmp's tools one after another. Returns each switch's
        texts by walk name and each failed switch's error (its first failed walk: the rest of it is not read).
        `unrecorded_absent`: a walk a replayed bundle does not hold is an absent table, not an error."""
        texts: dict[str, dict[str, str]] = {g: {} for g in mine}
        errors: dict[str, tuple[str, str]] = {}

        def take(g: str, name: str, res: CommandResult) -> bool:
            """Keeps one walk's answer; False once the switch failed."""
            if unrecorded_absent and res.error == "not_recorded":
                return True
            err = failure(res)
            if err is not None:
                errors[g] = err
                return False
            texts[g][name] = res.stdout
            return True

        if self.access.inprocess and mine:
            specs, owner = [], []
            for g in mine:
                for name, root in walks:
                    specs.append(self.access.spec(topo.switches[g].address, root))
                    owner.append((g, name))
            deadline = time.monotonic() + inputs.remaining(self.sc.timeout)
            results = io.snmp_walks(specs, deadline, self.settings.ethernet.concurrency, inputs.cancel)
            for (g, name), res in zip(owner, results):
                if g not in errors:
                    take(g, name, res)
        else:
            for g in mine:
                for name, root in walks:
                    if not take(g, name, self.access.walk(io, topo.switches[g].address, root,
                                                          inputs.remaining(self.sc.timeout))):
                        break
        return texts, errors

    def close(self) -> None:
        self.access.close()
        super().close()


NAMED_SWITCHES = 8      # switches one error names; past them, a count


def switch_label(name: str, address: str) -> str:
    """A switch as an error names it: `leaf01 (10.0.0.1)`, or its address alone where that is its name
    (one that never answered the discovery)."""
    return f"{name} ({address})" if name and name != address else address


def switch_errors(out: SourceOutput, failed: Sequence[tuple[str, str, str]]) -> None:
    """The failed switches of one run, (switch as named, kind, reason) each, into `out`: the switches that
    failed alike (same kind and reason: two dead switches) are one message naming every one of them (the
    first NAMED_SWITCHES and a count past them), recorded once per switch, so that fabricmon_source_errors_total
    still counts each switch and the source's finding, which shows one message, names them all."""
    groups: dict[tuple[str, str], list[str]] = {}
    for name, kind, reason in failed:
        groups.setdefault((kind, reason), []).append(name)
    for (kind, reason), names in groups.items():
        shown = ", ".join(names[:NAMED_SWITCHES])
        more = f" and {len(names) - NAMED_SWITCHES} more" if len(names) > NAMED_SWITCHES else ""
        message = f"switch {shown}: {reason}" if len(names) == 1 else f"{len(names)} switches {shown}{more}: {reason}"
        for _ in names:
            out.error(kind, message)


def parse_switches(out: SourceOutput, topo: Topology, mine: list[str], texts: dict[str, dict[str, str]],
                   errors: dict[str, tuple[str, str]], parse: Callable[[dict[str, str]], T],
                   switches: dict[str, T], missing: set[str]) -> None:
    """Each of `mine` parsed from its walks into `switches`, or listed in `missing` with its error (unanswered,
    or a parse error) said once (switch_errors): a switch costs only itself."""
    failed: list[tuple[str, str, str]] = []
    for g in mine:
        sw = topo.switches[g]
        if g in errors:
            missing.add(g)
            failed.append((switch_label(sw.name, sw.address), *errors[g]))
            continue
        try:
            switches[g] = parse(texts[g])
        except ParseError as exc:
            missing.add(g)
            failed.append((switch_label(sw.name, sw.address), "parse", str(exc)))
    switch_errors(out, failed)


__all__ = ["LOOSE_SECRETS", "NAMED_SWITCHES", "WALK_PROGRAM", "SnmpAccess", "SnmpSource", "failure", "parse_switches", "switch_errors",
           "switch_label", "warn_loose"]
