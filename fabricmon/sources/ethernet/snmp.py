"""How the Ethernet sources reach a switch: net-snmp's command-line tools, one process per walk.

Why the tools (measured, bench/ethernet_sweep.py and docs/ethernet.md): a net-snmp process costs
about 6 ms of CPU to start and next to nothing per value, and a whole table walked in one
process (ifTable, ifXTable, a PFC table) is three processes per switch and sweep; the Python
clients cost 55-60 us per value (pysnmp; ezsnmp, the maintained net-snmp binding, which re-runs
the tool's argument parsing per call), four times snmp_exporter's 15-19 us. A tool is also
killed with its process group at the deadline, and its output is what `fabric capture` records
and a replay plays back.

Secrets never go in argv (any user reads it with `ps`): the community or the v3 user, protocols
and pass phrases are written once to `snmp.conf` in a private directory (0700, the file 0600)
named by SNMPCONFPATH in the tools' environment, which HostIO does not record. The argv names
only the address, the OID and the timing options.
"""

from __future__ import annotations

import os
import re
import shutil
import tempfile
import threading

import structlog

from fabricmon.config import SnmpConfig
from fabricmon.host.io import HostIO
from fabricmon.host.runner import CommandResult

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

    def env(self) -> dict[str, str]:
        with self._lock:
            loose = [f for f in self.snmp.loose_files if f not in _warned]
            if loose:
                _warned.update(loose)
                log.warning("SNMP secret file is readable by group or others: chmod 600 it", files=loose)
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
