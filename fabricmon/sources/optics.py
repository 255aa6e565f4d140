"""optics source: the transceiver diagnostics of every RDMA port's netdev (RoCE and IPoIB alike),
`ethtool -m <netdev>` (SFF-8472 SFP, SFF-8636 QSFP, CMIS as ethtool decodes them; text output).

A module EEPROM is read over the module's I2C bus, slow next to sysfs, and light changes over days,
so the default interval is 60 s. The kernel lets only CAP_NET_ADMIN read a module EEPROM, which the
shipped unit does not grant: as deployed each read fails EPERM, said with the fix (sources.privilege).
A NIC or module without diagnostics is "no data" (recorded with
the reason, neither an error nor OK): no module in the cage, a copper cable without DOM, a driver
that cannot read module EEPROMs (ethtool exits with "Operation not supported", "Input/output
error", "No such device"...). With `enabled: auto` (the default) a missing ethtool is not an error.

mlxlink (NVIDIA's vendor tool) is read by sources.mlxlink for the physical-layer counters and the
module's identity (docs/ber.md); its module readings are not joined into the optics checks yet.
"""

from __future__ import annotations

from fabricmon.host.io import HostIO
from fabricmon.model.optics import NodeModule, OpticsData, netdev_ports
from fabricmon.parsers.ethtool_module import parse_module
from fabricmon.parsers.errors import ParseError
from fabricmon.pipeline.source import INVENTORY, Inputs, Source, SourceOutput, register, run_per_name
from fabricmon.sources.privilege import EEPROM_FIX, denied

# ethtool's words for "this netdev has no readable module": no data, not a failure.
NO_MODULE = ("operation not supported", "not supported", "input/output error", "no such device",
             "invalid argument", "cannot get module eeprom", "no data available", "device or resource busy")


@register("optics", enabled="auto", interval=60.0, timeout=10.0, command=("ethtool",), needs=(INVENTORY,),
          concurrency=4, records=OpticsData)
class OpticsSource(Source):
    def collect(self, io: HostIO, inputs: Inputs) -> SourceOutput:
        out = SourceOutput()
        data = OpticsData()
        inv = inputs.inventory
        targets = {nd: (dev, port) for dev, port, nd in netdev_ports(inv.devices, inv.ports)}
        run = run_per_name(io, self, inputs, out, sorted(targets), lambda nd: ["-m", nd])
        data.tool_missing = run.tool_missing
        for nd, res in run.results:
            dev, port = targets[nd]
            rec = NodeModule(dev, port, nd)
            said = (res.stderr + "\n" + res.stdout).strip()
            if denied(res):                     # EPERM: the module EEPROM is CAP_NET_ADMIN's to read
                out.error("exit_code", f"{res.describe()}: {EEPROM_FIX}")
                continue
            if res.error is None and res.returncode != 0 and any(w in said.lower() for w in NO_MODULE):
                rec.note = said.splitlines()[-1][:200] if said else f"ethtool exited {res.returncode}"
                data.modules[nd] = rec
                continue
            if res.error is None and res.returncode == 0:
                try:
                    rec.module = parse_module(res.stdout)
                except ParseError as exc:      # a module type ethtool prints as a hex dump only
                    rec.note = f"module not decoded by ethtool: {exc}"
                if rec.module is not None and not rec.module.has_readings:
                    rec.note = "the module reports no diagnostics"
                data.modules[nd] = rec
                continue
            out.parsed(res, lambda _: None)     # records the failure (timeout, exit code) as an error
        run.publish(out, data, bool(data.modules))
        return out
