"""optics (Ethernet): every discovered switch's transceiver sensors over SNMP, joined to its
interfaces (parsers.entity_sensor: ENTITY-SENSOR-MIB, CISCO-ENTITY-SENSOR-MIB and Arista's threshold
table; entAliasMappingIdentifier or the sensor's name against ifName/ifDescr/ifAlias).

Light changes over days, so the default interval is 300 s: twelve column walks per switch (most of
them short), v2c in this process for every switch at once (HostIO.snmp_walks), v3 by net-snmp's
tools, under the run's one deadline. A switch that does not answer costs only itself (counted and
listed as missing); a switch without transceiver sensors has no optics, which is not an error.
"""

from __future__ import annotations

import time

from fabricmon.host.io import HostIO
from fabricmon.model.optics import SwitchOpticsData
from fabricmon.parsers.entity_sensor import SENSOR_WALKS, join
from fabricmon.parsers.errors import ParseError
from fabricmon.pipeline.source import INVENTORY, Inputs, SourceOutput, register
from fabricmon.sources.ethernet.snmp import SnmpSource, failure


@register("optics", enabled=True, interval=300.0, timeout=60.0, command=(), needs=(INVENTORY,),
          collector="ethernet", records=SwitchOpticsData)
class SnmpOpticsSource(SnmpSource):
    def collect(self, io: HostIO, inputs: Inputs) -> SourceOutput:
        out = SourceOutput()
        found = self.shard_switches(inputs, out)
        if found is None:
            return out
        topo, mine = found
        fc = self.config.fabric
        texts: dict[str, dict[str, str]] = {g: {} for g in mine}
        errors: dict[str, tuple[str, str]] = {}
        if self.access.inprocess and mine:
            specs, owner = [], []
            for g in mine:
                for name, root in SENSOR_WALKS:
                    specs.append(self.access.spec(topo.switches[g].address, root))
                    owner.append((g, name))
            deadline = time.monotonic() + inputs.remaining(self.sc.timeout)
            for (g, name), res in zip(owner, io.snmp_walks(specs, deadline, fc.ethernet.concurrency, inputs.cancel)):
                if g in errors:
                    continue
                err = failure(res)
                if err is not None:
                    errors[g] = err
                else:
                    texts[g][name] = res.stdout
        else:
            for g in mine:
                for name, root in SENSOR_WALKS:
                    res = self.access.walk(io, topo.switches[g].address, root, inputs.remaining(self.sc.timeout))
                    err = failure(res)
                    if err is not None:
                        errors[g] = err
                        break
                    texts[g][name] = res.stdout
        data = SwitchOpticsData()
        for g in mine:
            sw = topo.switches[g]
            if g in errors:
                data.missing.add(g)
                out.error(errors[g][0], f"switch {sw.name} ({sw.address}): {errors[g][1]}")
                continue
            try:
                data.switches[g] = join(texts[g])
            except ParseError as exc:
                data.missing.add(g)
                out.error("parse", f"switch {sw.name} ({sw.address}): {exc}")
        out.data = data
        return out


__all__ = ["SnmpOpticsSource"]
