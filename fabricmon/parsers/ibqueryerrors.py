"""Parse `ibqueryerrors` output: per-port counters of every switch it reports.

`--counters` prints every port's data counters (PortCountersExtended where the port has it):
    Data Counters for 0x200003 "leaf02"
       GUID 0x200003 port 1: [PortXmitData == 864 (3.375KB)] [PortRcvData == 864 (3.375KB)] ...
Without it, only ports whose error counters (and PortXmitWait) are non-zero are printed, after
the switch's aggregate (`port ALL`, from one AllPortSelect query):
    Errors for 0x200002 "leaf01"
       GUID 0x200002 port ALL: [SymbolErrorCounter == 5] [PortXmitWait == 77]
       GUID 0x200002 port 3: [SymbolErrorCounter == 5]
Error counters are sums, so a switch without an "Errors for" block has every port's error
counters at zero. `Query SA failed` (it needs an SM's SA unless given `--skip-sl`) comes with
exit status 0, so it is detected here, never trusted to the exit code. A description (quotes and
all, never escaped) runs to the last `"` of its line; counters come only from `GUID ... port N:`
lines, which start with the fixed text a description cannot put at the start of a line.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

from fabricmon.model.ibspec import COUNTER_BY_PERFQUERY
from fabricmon.parsers.captured import first_line, lines
from fabricmon.parsers.errors import ParseError
from fabricmon.parsers.ibnetdiscover import guid_hex

_NODE = re.compile(r'^(?P<what>Errors|Data Counters) for (?P<guid>0x[0-9A-Fa-f]+)\s+"(?P<desc>.*)"\s*$')
_PORT = re.compile(r'^GUID (?P<guid>0x[0-9A-Fa-f]+) port (?P<port>\d+|ALL):\s*(?P<fields>.*)$')
_FIELD = re.compile(r'\[(?P<name>[A-Za-z0-9_]+) == (?P<value>\d+)')
_SUMMARY = re.compile(r'^## Summary: (?P<nodes>\d+) nodes checked')
SA_FAILED = "Query SA failed"


@dataclass(slots=True)
class IbqueryerrorsReport:
    ports: dict[tuple[str, int], dict[str, int]] = field(default_factory=dict)   # canonical names
    nodes: dict[str, str] = field(default_factory=dict)        # guid -> description, every node printed
    aggregates: dict[str, dict[str, int]] = field(default_factory=dict)   # guid -> port ALL counters
    nodes_checked: int | None = None                            # from the summary (error mode)


def parse_ibqueryerrors(stdout: str, stderr: str = "") -> IbqueryerrorsReport:
    """Raises ParseError on `Query SA failed`, or when the output has neither a node block nor
    a summary (nothing was queried)."""
    if SA_FAILED in stdout or SA_FAILED in stderr:
        raise ParseError("ibqueryerrors: Query SA failed (no subnet manager answered; the exit status "
                         "was ignored on purpose)")
    rep = IbqueryerrorsReport()
    for raw in lines(stdout):           # not splitlines(): a description may hold \x85 or \u2028
        line = raw.strip()
        if not line:
            continue
        m = _PORT.match(line)
        if m:
            guid = guid_hex(m["guid"])
            vals = {}
            for f in _FIELD.finditer(m["fields"]):
                spec = COUNTER_BY_PERFQUERY.get(f["name"])
                if spec is not None:
                    vals[spec.name] = int(f["value"])
            if m["port"] == "ALL":
                rep.aggregates.setdefault(guid, {}).update(vals)
            else:
                rep.ports.setdefault((guid, int(m["port"])), {}).update(vals)
            continue
        m = _NODE.match(line)
        if m:
            rep.nodes[guid_hex(m["guid"])] = m["desc"]
            continue
        m = _SUMMARY.match(line)
        if m:
            rep.nodes_checked = int(m["nodes"])
    if not rep.nodes and rep.nodes_checked is None:
        first = first_line(stdout + "\n" + stderr)
        raise ParseError(f"ibqueryerrors: no node reported ({first[:160]})")
    return rep


__all__ = ["IbqueryerrorsReport", "SA_FAILED", "parse_ibqueryerrors"]
