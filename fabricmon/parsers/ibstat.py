"""Parse `ibstat` output into adapters and ports.

`ibstat` may print valid adapters and then die with an `ibpanic:` line and exit 255, so the
parser returns whatever complete adapters it saw, plus the trailing error text.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from fabricmon.parsers.captured import first_line, lines
from fabricmon.parsers.errors import ParseError
from fabricmon.model.node_records import (  # the records this parser returns (re-exported)
    IbstatPort as IbstatPort, IbstatCa as IbstatCa, IbstatData as IbstatData,
)

_CA_RE = re.compile(r"^CA '(?P<name>[^']+)'\s*$")
_PORT_RE = re.compile(r"^Port (?P<num>\d+):\s*$")
_KV_RE = re.compile(r"^(?P<key>[A-Za-z][A-Za-z ]*):\s*(?P<value>.*?)\s*$")


@dataclass(slots=True)
class IbstatResult:
    cas: list[IbstatCa]
    errors: list[str]       # ibpanic/ibwarn lines seen (partial output)


def _num(value: str) -> float | None:
    try:
        return float(value)
    except ValueError:
        return None


def _int(value: str) -> int | None:
    try:
        return int(value, 0)
    except ValueError:
        return None


def _link_layer(value: str) -> str:
    # ibstat against ibsim prints "IB"; sysfs says "InfiniBand".
    return "InfiniBand" if value.strip().upper() in ("IB", "INFINIBAND") else value.strip()


def parse_ibstat(text: str) -> IbstatResult:
    """Parse full `ibstat` output. Raises ParseError when no adapter can be recognised."""
    cas: list[IbstatCa] = []
    errors: list[str] = []
    ca: IbstatCa | None = None
    port: IbstatPort | None = None
    for raw in lines(text):
        line = raw.strip()
        if not line:
            continue
        if line.startswith(("ibpanic:", "ibwarn:", "iberror:")) or ": iberror:" in line:
            errors.append(line)
            continue
        m = _CA_RE.match(line)
        if m:
            ca = IbstatCa(name=m["name"])
            cas.append(ca)
            port = None
            continue
        m = _PORT_RE.match(line)
        if m and ca is not None:
            port = IbstatPort(port=int(m["num"]))
            ca.ports.append(port)
            continue
        m = _KV_RE.match(line)
        if not m or ca is None:
            continue
        key, value = m["key"].strip().lower(), m["value"]
        if port is None:
            if key == "ca type":
                ca.ca_type = value or None
            elif key == "number of ports":
                ca.num_ports = _int(value)
            elif key == "firmware version":
                ca.firmware_version = value or None
            elif key == "hardware version":
                ca.hardware_version = value or None
            elif key == "node guid":
                ca.node_guid = value.lower()
            elif key == "system image guid":
                ca.system_image_guid = value.lower()
            continue
        if key == "state":
            port.state = value
        elif key == "physical state":
            port.physical_state = value
        elif key == "rate":
            port.rate_gbps = _num(value)
        elif key == "base lid":
            port.base_lid = _int(value)
        elif key == "sm lid":
            port.sm_lid = _int(value)
        elif key == "port guid":
            port.port_guid = value.lower()
        elif key == "link layer":
            port.link_layer = _link_layer(value)
    if not cas:
        detail = errors[-1] if errors else first_line(text)[:120]
        raise ParseError(f"no 'CA' block in ibstat output ({detail})")
    return IbstatResult(cas=cas, errors=errors)
