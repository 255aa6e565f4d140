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

import time

from fabricmon.host.io import HostIO
from fabricmon.model.vitals import SwitchVitalsData
from fabricmon.parsers.errors import ParseError
from fabricmon.parsers.vitals import VITALS_WALKS, parse_vitals
from fabricmon.pipeline.source import INVENTORY, Inputs, SourceOutput, register
from fabricmon.sources.ethernet.snmp import SnmpSource, failure


# a bundle recorded before this source existed holds none of its walks: its tables are absent there (a
# replay only; a live switch answers every walk, if only with "no such object")
NOT_RECORDED = "not_recorded"


@register("vitals", enabled=True, interval=120.0, timeout=60.0, command=(), needs=(INVENTORY,),
          collector="ethernet", records=SwitchVitalsData)
class SnmpVitalsSource(SnmpSource):
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
                for name, root in VITALS_WALKS:
                    specs.append(self.access.spec(topo.switches[g].address, root))
                    owner.append((g, name))
            deadline = time.monotonic() + inputs.remaining(self.sc.timeout)
            for (g, name), res in zip(owner, io.snmp_walks(specs, deadline, fc.ethernet.concurrency, inputs.cancel)):
                if g in errors or res.error == NOT_RECORDED:
                    continue
                err = failure(res)
                if err is not None:
                    errors[g] = err
                else:
                    texts[g][name] = res.stdout
        else:
            for g in mine:
                for name, root in VITALS_WALKS:
                    res = self.access.walk(io, topo.switches[g].address, root, inputs.remaining(self.sc.timeout))
                    if res.error == NOT_RECORDED:
                        continue
                    err = failure(res)
                    if err is not None:
                        errors[g] = err
                        break
                    texts[g][name] = res.stdout
        data = SwitchVitalsData()
        for g in mine:
            sw = topo.switches[g]
            if g in errors:
                data.missing.add(g)
                out.error(errors[g][0], f"switch {sw.name} ({sw.address}): {errors[g][1]}")
                continue
            try:
                data.switches[g] = parse_vitals(texts[g])
            except ParseError as exc:
                data.missing.add(g)
                out.error("parse", f"switch {sw.name} ({sw.address}): {exc}")
        out.data = data
        return out


__all__ = ["SnmpVitalsSource"]
