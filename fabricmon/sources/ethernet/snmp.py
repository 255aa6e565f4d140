"""How the Ethernet sources reach a switch: SNMPv2c in this process (host.snmp, through
HostIO.snmp_walks), SNMPv3 through net-snmp's command-line tools, one process per walk.

Why (measured, bench/ethernet_sweep.py and docs/ethernet.md): a net-snmp process costs about 6 ms
of CPU to start, three per switch and sweep, which made a sweep 1.8-3.2x prometheus-snmp-exporter's
CPU; the in-process GETBULK client (standard library, one thread for every switch) costs a few
microseconds per value and starts nothing. Its answer is the tool's text, so the parser, `fabric
capture` and a replay treat both paths alike. SNMPv3 authPriv needs AES/DES, which the standard
library lacks, so v3 stays on the tools.

Secrets never go in argv (any user reads it with `ps`) or in a recorded command: v2c's community
goes only into the request datagrams; for v3 the user, protocols and pass phrases are written once
to `snmp.conf` in a private directory (0700, the file 0600) named by SNMPCONFPATH in the tools'
environment, which HostIO does not record. The argv names only the address, the OID and the
timing options.
"""

from __future__ import annotations

import os
import re
import shutil
import tempfile
import threading
import time

import structlog

from fabricmon.sources.ethernet.settings import SnmpConfig
from fabricmon.host.io import HostIO
from fabricmon.host.runner import CommandResult
from fabricmon.host.snmp import WalkSpec

log = structlog.get_logger("fabricmon.snmp")
WALK_PROGRAM = "snmpbulkwalk"
_warned: set[str] = set()
# net-snmp spells the SHA-2 protocols with a dash
_AUTH = {"MD5": "MD5", "SHA": "SHA", "SHA224": "SHA-224", "SHA256": "SHA-256", "SHA384": "SHA-384",
         "SHA512": "SHA-512"}
_AUTH_FAILURE = re.compile(r"authentication failure|unknown user name|decryption error|incorrect password|"
                           r"unsupported security level|usmStats", re.I)


def _quoted(value: str) -> str:
    return '"' + value.replace("\\", "\\\\").replace('"', '\\"') + '"'


class SnmpAccess:
    """One collector's SNMP settings as a private net-snmp config directory, made on first use
    and removed by close()."""

    def __init__(self, snmp: SnmpConfig):
        self.snmp = snmp
        self._dir: str | None = None
        self._lock = threading.Lock()

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
        """v2c walks in this process (host.snmp); v3 runs net-snmp's tools."""
        return self.snmp.version == "2c"

    def _warn_loose(self) -> None:
        loose = [f for f in self.snmp.loose_files if f not in _warned]
        if loose:
            _warned.update(loose)
            log.warning("SNMP secret file is readable by group or others: chmod 600 it", files=loose)

    def spec(self, address: str, root: str, columns: tuple[str, ...] = ()) -> WalkSpec:
        """An in-process (v2c) walk of `root`, or of only those columns of it."""
        with self._lock:
            self._warn_loose()
        s = self.snmp
        return WalkSpec(address, root, columns, community=s.community, timeout=s.timeout, retries=s.retries,
                        max_repetitions=s.max_repetitions)

    def env(self) -> dict[str, str]:
        with self._lock:
            self._warn_loose()
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
        """One walk of a whole subtree: in process (v2c) or by the tool (v3)."""
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
    switch that does not answer is `timeout`; a wrong credential says so."""
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
    return None


__all__ = ["WALK_PROGRAM", "SnmpAccess", "failure"]
