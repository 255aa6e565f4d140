"""optics (Ethernet): every discovered switch's transceiver sensors over SNMP, joined to its
interfaces (parsers.entity_sensor: ENTITY-SENSOR-MIB, CISCO-ENTITY-SENSOR-MIB and Arista's threshold
table; entAliasMappingIdentifier or the sensor's name against ifName/ifDescr/ifAlias).

Light changes over days, so the default interval is 300 s: twelve column walks per switch (most of
them short), v2c in this process for every switch at once (HostIO.snmp_walks), v3 by net-snmp's
tools, under the run's one deadline. A switch that does not answer costs only itself (counted and
listed as missing); a switch without transceiver sensors has no optics, which is not an error.
"""

from __future__ import annotations

from fabricmon.host.io import HostIO
from fabricmon.model.fabric import Topology
from fabricmon.model.optics import SwitchOpticsData
from fabricmon.parsers.entity_sensor import SENSOR_WALKS, join
from fabricmon.pipeline.source import INVENTORY, Inputs, SourceOutput, register
from fabricmon.sources.ethernet.settings import SNMP_SOURCE
from fabricmon.sources.ethernet.snmp import SnmpSource, parse_switches


@register("optics", enabled=True, interval=300.0, timeout=60.0, command=(), needs=(INVENTORY,),
          collector="ethernet", records=SwitchOpticsData, options=SNMP_SOURCE)
class SnmpOpticsSource(SnmpSource):
    def read_switches(self, io: HostIO, inputs: Inputs, out: SourceOutput, topo: Topology, mine: list[str]) -> None:
        texts, errors = self.walk_switches(io, inputs, topo, mine, SENSOR_WALKS)
        data = SwitchOpticsData()
        parse_switches(out, topo, mine, texts, errors, join, data.switches, data.missing)
        out.data = data


__all__ = ["SnmpOpticsSource"]
