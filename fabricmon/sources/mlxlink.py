"""mlxlink source: the physical-layer counters and bit error ratios of every RDMA port, InfiniBand and
RoCE alike, from NVIDIA's `mlxlink -d <pci address> -p <port> -m -c` (MFT or mstflint): raw errors per
lane (before FEC), effective errors (after FEC), symbol errors (InfiniBand), the active FEC mode and
the module's identity and medium (docs/ber.md).

mlxlink reads the adapter's registers (PPCNT, PDDR, PMDIC through ACCESS_REG): on a firmware-restricted
function (HGX B200/B300, GB200 "limited PFs") each such read fails and logs a line in the kernel log,
which is exactly what the sysfs source learns to avoid. So mlxlink is never run against a device whose
port counters are not read (`DeviceView.counters_restricted`: a counter read that failed
EINVAL/EIO/EACCES, or `sources.sysfs.counters_exclude_devices`), nor one `exclude_devices` names; such a
device is recorded as skipped, with why. It is not packaged by any distribution: with `enabled: auto`
(the default) a missing mlxlink is simply off; the tests replay recorded outputs, as for mlnx_qos.
"""

from __future__ import annotations

from dataclasses import dataclass

from fabricmon.host.io import HostIO
from fabricmon.model.ber import MlxlinkData, MlxlinkPort
from fabricmon.parsers.errors import ParseError
from fabricmon.parsers.mlxlink import parse_mlxlink
from fabricmon.pipeline.source import INVENTORY, Inputs, Source, SourceOutput, register, run_per_name
from fabricmon.registry import taking
from fabricmon.schema import DeviceFilter, Schema, boolean, from_class
from fabricmon.sources.privilege import MLXLINK_FIX, denied


@dataclass(frozen=True, slots=True)
class MlxlinkOptions:
    """sources.mlxlink's own keys."""
    show_fec: bool = False
    module: bool = True
    exclude: DeviceFilter = DeviceFilter()      # exclude_devices


OPTIONS: Schema[MlxlinkOptions] = Schema((
    boolean("module", True, "ask for the module's identity too (`-m`: vendor, part and serial number, cable type; the "
            "cable ledger and the budget's medium read them); reads the module EEPROM, a few hundred ms more"),
    boolean("show_fec", False, "ask for the FEC modes each speed allows (`--show_fec`), kept with the port's record"),
), build=taking(from_class(MlxlinkOptions), exclude=DeviceFilter), pure=False)

# mlxlink's words for a port it cannot read that are not a failure of fabricmon (a port that is not
# there, a device that does not give the counters)
NOT_A_PORT = ("port is not supported", "invalid port", "port number", "not supported for the current device")


def pci_address(pci_path: str | None) -> str | None:
    """The PCI address of a device's function from its sysfs realpath (/sys/devices/pci0000:00/.../0000:1a:00.0)."""
    if not pci_path:
        return None
    last = pci_path.rstrip("/").rsplit("/", 1)[-1]
    parts = last.split(":")
    return last if len(parts) == 3 and "." in parts[2] else None


@register("mlxlink", enabled="auto", interval=60.0, timeout=30.0, command=("mlxlink",), needs=(INVENTORY,),
          concurrency=2, records=MlxlinkData, options=OPTIONS)
class MlxlinkSource(Source):
    def collect(self, io: HostIO, inputs: Inputs) -> SourceOutput:
        out = SourceOutput()
        data = MlxlinkData()
        opts = self.sc.settings(MlxlinkOptions)
        inv = inputs.inventory
        targets: dict[str, tuple[str, int]] = {}
        for (dev, port) in sorted(inv.ports):
            d = inv.devices.get(dev)
            if opts.exclude.excluded(dev):
                continue
            if inv.counters_restricted(dev):
                data.skipped[dev] = (f"its counters are not read ({d.counters_restricted if d else 'restricted'}): "
                                     "mlxlink's register reads would fail and flood the kernel log")
                continue
            addr = pci_address(d.pci_path if d is not None else None)
            if addr is None:
                data.skipped[dev] = "its PCI address is unknown (no device link in sysfs)"
                continue
            targets[f"{addr}_{port}"] = (dev, port)
        flags = [*(["-m"] if opts.module else []), "-c", *(["--show_fec"] if opts.show_fec else [])]

        def args(name: str) -> list[str]:
            addr, port = name.rsplit("_", 1)
            return ["-d", addr, "-p", port, *flags]

        run = run_per_name(io, self, inputs, out, sorted(targets), args)
        data.tool_missing = run.tool_missing
        for name, res in run.results:
            dev, port = targets[name]
            said = (res.stdout + "\n" + res.stderr).lower()
            if denied(res):
                out.error("exit_code", f"{res.describe()}: {MLXLINK_FIX}")
                continue
            if res.error is None and res.returncode != 0 and any(w in said for w in NOT_A_PORT):
                data.ports[(dev, port)] = MlxlinkPort(dev, port, note=(res.stderr or res.stdout).strip()[:200])
                continue
            if res.error is None and res.returncode == 0:
                try:
                    data.ports[(dev, port)] = parse_mlxlink(res.stdout, dev, port)
                except ParseError as exc:
                    out.error("parse", f"{' '.join(res.argv)}: {exc}")
                continue
            out.parsed(res, lambda _: None)         # records the failure (timeout, exit code) as an error
        run.publish(out, data, bool(data.ports))
        return out
