"""vitals (Ethernet): every discovered switch's fans, power supplies and temperatures over SNMP, from
ENTITY-SENSOR-MIB, ENTITY-STATE-MIB and the vendors' tables as parsers.vitals declares them (Cisco's
FRU and ENVMON tables, Juniper's jnxOperatingTable, Dell OS9's and OS10's chassis tables). docs/vitals.md.

A fan stops or a power supply fails without warning, so the default interval is 120 s: one walk per
declared column (most of them answer "no such object" at once on another vendor's switch), v2c in this
process for every switch at once, v3 by net-snmp's tools, under the run's one deadline. A switch that
does not answer costs only itself (counted, listed as missing); a switch that answers none of the tables
has no vitals, which is neither an error nor an OK.
"""

from __future__ import annotations

from fabricmon.host.io import HostIO
from fabricmon.model.fabric import Topology
from fabricmon.model.vitals import SwitchVitalsData
from fabricmon.parsers.vitals import VITALS_WALKS, parse_vitals
from fabricmon.pipeline.source import INVENTORY, Inputs, SourceOutput, register
from fabricmon.sources.ethernet.settings import SNMP_SOURCE
from fabricmon.sources.ethernet.snmp import SnmpSource, parse_switches


@register("vitals", enabled=True, interval=120.0, timeout=60.0, command=(), needs=(INVENTORY,),
          collector="ethernet", records=SwitchVitalsData, options=SNMP_SOURCE)
class SnmpVitalsSource(SnmpSource):
    def read_switches(self, io: HostIO, inputs: Inputs, out: SourceOutput, topo: Topology, mine: list[str]) -> None:
        # a bundle recorded before this source existed holds none of its walks: its tables are absent there (a
        # replay only; a live switch answers every walk, if only with "no such object")
        texts, errors = self.walk_switches(io, inputs, topo, mine, VITALS_WALKS, unrecorded_absent=True)
        data = SwitchVitalsData()
        parse_switches(out, topo, mine, texts, errors, parse_vitals, data.switches, data.missing)
        out.data = data


__all__ = ["SnmpVitalsSource"]
