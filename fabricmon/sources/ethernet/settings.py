"""fabric.ethernet: the Ethernet (RoCE) collector's config section, declared beside the sources that
read it (fabricmon.schema). The fabric section (fabricmon/config/fabric.py) composes it, importing
this module only for an Ethernet fabric, so its keys are typed once, here.

Secrets are read from their files when the config loads and never shown (repr=False): v2c's
community and v3's keys only into the request datagrams (host.snmp, host.usm); v3's pass phrases
to net-snmp in a private config file only on the fallback; never in argv, a log line or an error
message.
"""

from __future__ import annotations

import errno
import os
import pwd
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Mapping

from fabricmon.registry import shared_settings
from fabricmon.schema import ConfigError, Context, Schema, choice, integer, listing, number, section, string
from fabricmon.sources.settings import FabricScope

SNMP_AUTH_PROTOCOLS = ("MD5", "SHA", "SHA224", "SHA256", "SHA384", "SHA512")
SNMP_PRIV_PROTOCOLS = ("DES", "AES", "AES192", "AES256", "AES192C", "AES256C")   # C: Cisco's key extension
SNMP_SECRETS = ("community", "auth_password", "priv_password")
# management ports carry LLDP neighbours too (docs/ethernet.md, the port model) but no RoCE traffic: SONiC/Cumulus eth0,
# Dell OS10 mgmt1/1/1, Arista Management1, Dell OS9 ManagementEthernet 1/1, Junos em0
DEFAULT_EXCLUDE_PORTS: tuple[str, ...] = ("eth0", "mgmt.*", "Management.*", "em0")


@dataclass(frozen=True, slots=True)
class SnmpConfig:
    """How the Ethernet collector reads its switches (fabric.ethernet.snmp)."""
    version: str = "2c"                  # "2c" or "3"
    community: str = field(default="", repr=False)
    user: str = ""
    auth_protocol: str = "SHA"
    auth_password: str = field(default="", repr=False)
    priv_protocol: str = "AES"
    priv_password: str = field(default="", repr=False)
    context: str = ""
    timeout: float = 2.0                 # seconds per request (net-snmp -t)
    retries: int = 1                     # net-snmp -r
    max_repetitions: int = 25            # GETBULK: values per answer (net-snmp -Cr)
    max_rows: int = 50000                # rows of one table column a walk reads at most (a broken agent's end)
    # secret files found group- or world-readable (warned about once at start)
    loose_files: tuple[str, ...] = ()


@dataclass(frozen=True, slots=True)
class EthernetConfig:
    """fabric.ethernet: the switches of an Ethernet (RoCE) fabric, read over SNMP."""
    switches: tuple[str, ...] = ()       # host[:port]
    snmp: SnmpConfig = field(default_factory=SnmpConfig)
    concurrency: int = 16                # switches read at once
    # interfaces that are never fabric ports: regexes matched whole against the ifName (else ifDescr)
    exclude_ports: tuple[str, ...] = DEFAULT_EXCLUDE_PORTS


# --- fabric.ethernet.snmp ------------------------------------------------------------------

def _secret(m: Mapping[str, Any], key: str, name: str, ctx: Context, loose: list[str]) -> str:
    """A secret inline (`name`) or from `name_file` (first line). The value never appears in an
    error; a file readable by group or others is noted in `loose` (a warning at start)."""
    inline, path = m.get(name), m.get(f"{name}_file")
    if inline is not None and path is not None:
        raise ConfigError(f"{key}.{name}", f"give {name} or {name}_file, not both")
    if inline is not None:
        if not isinstance(inline, str) or not inline:
            raise ConfigError(f"{key}.{name}", "expected a non-empty string")
        return inline
    if path is None:
        return ""
    if not isinstance(path, str) or not path:
        raise ConfigError(f"{key}.{name}_file", f"expected a non-empty string, got {path!r}")
    if not ctx.check_paths:
        return ""
    try:
        st = os.stat(path)
        with open(path, encoding="utf-8") as fh:
            text = fh.readline().strip()
    except OSError as exc:
        why = f"cannot read {path}: {exc.strerror or exc}"
        if exc.errno in (errno.EACCES, errno.EPERM):     # a root-owned 0600 file, read by the collector's user
            who = _user()
            why = (f"cannot read {path} as user {who}: {exc.strerror or exc}: make it that user's "
                   f"(chown {who} {path}; chmod 600 {path})")
        raise ConfigError(f"{key}.{name}_file", why) from None
    except UnicodeDecodeError:
        raise ConfigError(f"{key}.{name}_file", f"{path} is not UTF-8 text") from None
    if not text:
        raise ConfigError(f"{key}.{name}_file", f"{path} is empty")
    if st.st_mode & 0o077:
        loose.append(f"{path} (mode {st.st_mode & 0o777:o})")
    return text


def _user() -> str:
    """This process's user name (the unit's `fabricmon`), or its uid where it has no name."""
    try:
        return pwd.getpwuid(os.geteuid()).pw_name
    except KeyError:
        return str(os.geteuid())


def _printable(v: str, key: str, ctx: Context) -> str:
    if any(c.isspace() or not c.isprintable() for c in v):
        raise ConfigError(key, "must not contain spaces or control characters")
    return v


def _snmp_check(values: dict[str, Any], m: Mapping[str, Any], key: str, ctx: Context) -> None:
    loose: list[str] = []
    secrets = {n: _secret(m, key, n, ctx, loose) for n in SNMP_SECRETS}
    if values["version"] == "2c":
        if not secrets["community"] and "community_file" not in m:
            raise ConfigError(f"{key}.community_file", "SNMP v2c needs a community (community_file, or community)")
        for n in ("user", "auth_password", "auth_password_file", "priv_password", "priv_password_file"):
            if n in m:
                raise ConfigError(f"{key}.{n}", "only for SNMP version 3")
    else:
        if not values["user"]:
            raise ConfigError(f"{key}.user", "SNMP v3 needs a user (security name)")
        for n in ("auth_password", "priv_password"):
            if not secrets[n] and f"{n}_file" not in m:
                raise ConfigError(f"{key}.{n}_file", "SNMP v3 authPriv needs it (or " + n + ")")
            if ctx.check_paths and len(secrets[n]) < 8:
                raise ConfigError(f"{key}.{n}_file" if f"{n}_file" in m else f"{key}.{n}",
                                  "an SNMPv3 pass phrase has at least 8 characters")
        if "community" in m or "community_file" in m:
            raise ConfigError(f"{key}.community", "only for SNMP version 2c")
    values.update(secrets, loose_files=tuple(loose))


_D_SNMP = SnmpConfig()
SNMP: Schema[SnmpConfig] = Schema(
    fields=(
        choice("version", _D_SNMP.version, "`\"2c\"` or `\"3\"` (authPriv), both read in process; v3 falls back to "
               "net-snmp's tools where the `cryptography` package is missing",
               ("2c", "3"), reason='expected "2c" or "3"', fold=str),
        string("user", _D_SNMP.user, "v3: the security name", check=_printable),
        choice("auth_protocol", _D_SNMP.auth_protocol, "v3 authentication protocol", SNMP_AUTH_PROTOCOLS,
               fold=lambda v: str(v).upper()),
        choice("priv_protocol", _D_SNMP.priv_protocol, "v3 privacy protocol (`AES192C`, `AES256C`: the keys extended "
               "as Cisco does)", SNMP_PRIV_PROTOCOLS,
               fold=lambda v: str(v).upper()),
        string("context", _D_SNMP.context, "v3 context name (optional)", check=_printable),
        number("timeout", _D_SNMP.timeout, "seconds per request (a GETBULK, or net-snmp `-t`)", lo=0.1),
        integer("retries", _D_SNMP.retries, "retries per request (net-snmp `-r`)", lo=0, hi=10),
        integer("max_repetitions", _D_SNMP.max_repetitions, "GETBULK: values per answer (net-snmp `-Cr`)",
                lo=1, hi=1000),
        integer("max_rows", _D_SNMP.max_rows, "rows of one table column a walk reads at most (a broken agent "
                "that never ends its table ends here, and the switch's sweep fails)", lo=1, hi=100_000),
    ),
    extra=tuple(n for s in SNMP_SECRETS for n in (s, f"{s}_file")),
    extra_doc=(
        ("community_file", "path", "unset", "v2c: a file whose first line is the community (mode 0600; a group- or "
                                            "world-readable one is warned about at start)"),
        ("community", "string", "unset", "v2c: the community inline (prefer `community_file`)"),
        ("auth_password_file", "path", "unset", "v3: the authentication pass phrase (>= 8 characters), first line"),
        ("auth_password", "string", "unset", "v3: the authentication pass phrase inline"),
        ("priv_password_file", "path", "unset", "v3: the privacy pass phrase (>= 8 characters), first line"),
        ("priv_password", "string", "unset", "v3: the privacy pass phrase inline"),
    ),
    check=_snmp_check,
    build=lambda values, key, ctx: SnmpConfig(**values),
)


# --- fabric.ethernet -----------------------------------------------------------------------

_HOST_PORT = re.compile(r"^(?:\[[0-9A-Fa-f:.]+\]|[A-Za-z0-9][A-Za-z0-9.-]*)(?::[0-9]{1,5})?$")


def _switch(v: Any, key: str, ctx: Context) -> str:
    if not isinstance(v, str) or not _HOST_PORT.match(v.strip()):
        raise ConfigError(key, f"expected host[:port] (e.g. 10.0.0.11 or spine01:161), got {v!r}")
    port = v.strip().rsplit(":", 1)[1] if ":" in v.strip().rsplit("]", 1)[-1] else "161"
    if not 1 <= int(port) <= 65535:
        raise ConfigError(key, f"UDP port {port} is not 1-65535")
    return v.strip()


def _regex(v: Any, key: str, ctx: Context) -> str:
    if not isinstance(v, str) or not v:
        raise ConfigError(key, f"expected a regular expression, got {v!r}")
    try:
        re.compile(v)
    except re.error as exc:
        raise ConfigError(key, f"bad regular expression {v!r}: {exc}") from None
    return v


def _unique(switches: tuple[str, ...], key: str) -> None:
    if len(set(switches)) != len(switches):
        dup = next(x for x in switches if switches.count(x) > 1)
        raise ConfigError(key, f"{dup} is listed twice")


def _ethernet_check(values: dict[str, Any], m: Mapping[str, Any], key: str, ctx: Context) -> None:
    if "switches" in m and "switches_file" in m:
        raise ConfigError(f"{key}.switches", "give switches or switches_file, not both")
    if "switches_file" in m:
        fkey = f"{key}.switches_file"
        path = m["switches_file"]
        if not isinstance(path, str) or not path:
            raise ConfigError(fkey, f"expected a non-empty string, got {path!r}")
        try:
            lines = [ln.split("#", 1)[0].strip() for ln in Path(path).read_text().splitlines()]
        except OSError as exc:
            if ctx.check_paths:
                raise ConfigError(fkey, f"cannot read {path}: {exc.strerror or exc}") from None
            lines = []
        values["switches"] = SCHEMA.field("switches").parse([ln for ln in lines if ln], fkey, ctx)
        _unique(values["switches"], fkey)
    else:
        _unique(values["switches"], f"{key}.switches")
    if not values["switches"] and ctx.check_paths:
        raise ConfigError(f"{key}.switches", "an Ethernet fabric needs at least one switch (switches or switches_file)")


_D = EthernetConfig()
SCHEMA: Schema[EthernetConfig] = Schema(
    fields=(
        listing("switches", _D.switches, "the switches, `host[:port]` (UDP port default 161)", _switch, "host[:port]",
                default_doc="`[]`"),
        section("snmp", SNMP, "how the switches are read over SNMP"),
        integer("concurrency", _D.concurrency, "switches read at once", lo=1, hi=256),
        listing("exclude_ports", _D.exclude_ports, "interfaces that are never fabric ports (management ports): "
                "regular expressions matched against the whole ifName (else ifDescr); see "
                "[ethernet.md](ethernet.md#the-port-model)", _regex, "regular expressions"),
    ),
    extra=("switches_file",),
    extra_doc=(("switches_file", "path", "unset", "instead of `switches`: a file with one `host[:port]` a line "
                                                 "(`#` comments)"),),
    check=_ethernet_check,
    build=lambda values, key, ctx: EthernetConfig(**values),
    pure=False,         # switches are required only where host paths are checked
)



@dataclass(frozen=True, slots=True)
class SnmpSourceSettings:
    """What every SNMP source (discovery, sweep, optics, vitals) reads: fabric.ethernet and the shard."""
    ethernet: EthernetConfig
    shard: tuple[int, int] = (0, 1)


# the SNMP sources' settings, built from fabric.ethernet and fabric.shard (provided by fabricmon.config.fabric)
SNMP_SOURCE: Schema[SnmpSourceSettings] = shared_settings(
    lambda ctx: SnmpSourceSettings(ctx.take(EthernetConfig), ctx.take(FabricScope).shard))

__all__ = ["DEFAULT_EXCLUDE_PORTS", "SCHEMA", "SNMP", "SNMP_SOURCE", "SNMP_AUTH_PROTOCOLS", "SNMP_PRIV_PROTOCOLS", "SNMP_SECRETS",
           "EthernetConfig", "SnmpConfig", "SnmpSourceSettings"]
