"""What the shipped unit (fabricmon/deploy/systemd/fabricmon.service) gives the node daemon's sources, and
the one-line fix a source appends to its error where a read is denied, written once.

As deployed the daemon runs as user `fabricmon`, in group `rdma`, with CAP_SYSLOG only, under
ProtectSystem=strict and DevicePolicy=closed (docs/security.md, "What each source needs"):

- sysfs, hw_counters, netdev, gpudirect: world-readable files, no privilege;
- kernel_log: /dev/kmsg needs CAP_SYSLOG under kernel.dmesg_restrict=1 (sources/kernel_log.py says why
  and the fix where it is denied);
- ibstat (sysfs only); perfquery and iblinkinfo open the umad device (group rdma): `umad_reason` says
  why one did not open (the fabric collector's tools too: sources/infiniband/failure.py);
- ethtool -S (statistics): no privilege; ethtool -m (module EEPROM, the optics source): CAP_NET_ADMIN,
  which the unit does not grant (`EEPROM_FIX`);
- mlnx_qos: rtnetlink DCB reads (the kernel checks CAP_NET_ADMIN for DCB writes only) and sysfs;
- fec (`ethtool -I --show-fec`): a netlink get, open to any user; pcie: world-readable PCI sysfs files;
- mlxlink: the adapter's registers, which MFT's tools read as root only (`MLXLINK_FIX`);
- gpu (NVML): the NVIDIA device nodes (`NVML_FIX`).

Each test of these words: tests/deployed/ (as the service user, for real) and the sources' own tests.
"""

from __future__ import annotations

from fabricmon.host.runner import CommandResult
from fabricmon.host.umad import UMAD_GLOB, umad_devices
from fabricmon.pipeline.source import command_error


def _said(res: CommandResult) -> str:
    return f"{res.stderr}\n{res.stdout}"


# libibumad's words (rdma-core 44, libibmad/rpc.c, libibumad/umad.c) when the umad port does not open: the
# device is missing or not read-write for this user, the same words either way (the open's errno is not printed)
UMAD_NOT_OPENED = ("UMAD port", "MAD port", "Failed to open")


def umad_reason(umad_glob: str | None = None) -> str:
    """Why a umad port did not open, from the device nodes themselves (host.umad.umad_devices: the tools
    cannot say), and the fix; `umad_glob` (default UMAD_GLOB) where they are."""
    umad_glob = umad_glob or UMAD_GLOB
    devices, usable = umad_devices(umad_glob)
    if not devices:
        return (f"no umad device ({umad_glob} does not exist): no InfiniBand HCA on this host, or the ib_umad "
                "module is not loaded (modprobe ib_umad)")
    if not usable:
        return (f"permission denied on {devices[0]}: run as root or as a member of the group that owns it "
                "(fabricmon's udev rule gives it to group rdma, mode 0660; the shipped units run in it: "
                "SupplementaryGroups=rdma)")
    return f"cannot open the local umad port ({', '.join(usable[:4])} exist): is the local HCA port up? (ibstat)"


def umad_failed(res: CommandResult) -> bool:
    """A MAD tool (perfquery, iblinkinfo, smpquery) ran and did not open its umad port."""
    return res.error is None and res.returncode != 0 and any(w in _said(res) for w in UMAD_NOT_OPENED)


# ethtool's words for EPERM (netlink: "netlink error: Operation not permitted"; ioctl: "Cannot get module
# EEPROM information: Operation not permitted"): the kernel lets only CAP_NET_ADMIN read a module EEPROM
EEPROM_FIX = ("reading a module EEPROM needs CAP_NET_ADMIN, which the shipped unit does not grant: add it with a "
              "drop-in (systemctl edit fabricmon: CapabilityBoundingSet=CAP_NET_ADMIN, "
              "AmbientCapabilities=CAP_NET_ADMIN)")

NVML_FIX = ("this user may not open the NVIDIA device nodes: /dev/nvidiactl and /dev/nvidia[0-9]* must be "
            "read-write for it (the driver's NVreg_DeviceFileMode, 0666 by default, or NVreg_DeviceFileGID: the "
            "daemon in that group with SupplementaryGroups=; the shipped unit allows the nodes: "
            "DeviceAllow=char-nvidia-frontend rw)")


def umad_error(res: CommandResult) -> tuple[str, str] | None:
    """The error of a MAD tool that did not open its umad port, (kind, message): its own words, then why
    and the fix (`umad_reason`, from the device nodes); None for any other outcome."""
    err = command_error(res)
    if err is None or not umad_failed(res):
        return None
    return err[0], f"{err[1]}: {umad_reason()}"


def denied(res: CommandResult) -> bool:
    """The tool ran and the kernel refused it (EPERM or EACCES, in the tool's words)."""
    said = _said(res).lower()
    return res.error is None and res.returncode != 0 and ("operation not permitted" in said
                                                         or "permission denied" in said)


# mlxlink (MFT, mstflint) reads the adapter's registers through its PCI configuration space or the mst driver:
# root only, which the shipped unit's user is not
MLXLINK_FIX = ("mlxlink reads the adapter's registers and runs as root only, which the shipped unit's user is not: "
               "leave sources.mlxlink off (enabled: false) on nodes without it, or run a root drop-in for it "
               "(docs/security.md)")

__all__ = ["EEPROM_FIX", "MLXLINK_FIX", "NVML_FIX", "UMAD_GLOB", "denied", "umad_error", "umad_failed", "umad_reason"]
