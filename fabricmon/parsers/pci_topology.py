"""GPU-NIC PCI path class from sysfs realpaths (the classes of ``nvidia-smi topo -m``).

A chain is the host bridge followed by every PCI function on the way down to
the device, taken from the device's sysfs realpath::

    /sys/devices/pci0000:15/0000:15:01.0/0000:16:00.0/0000:17:01.0/0000:19:00.0
    -> ("pci0000:15", "0000:15:01.0", "0000:16:00.0", "0000:17:01.0", "0000:19:00.0")
         host bridge   root port       switch up      switch down     endpoint

Switch levels are found the way NCCL finds them (``ncclTopoGetXmlFromSys``): from
the endpoint walk up two functions at a time; every function reached that is not
the host bridge is one PCIe switch (its upstream port; the downstream port below
it belongs to the same switch). The root port pairs with the first switch level
or the endpoint and is never a switch. So the switch list of a chain ``c`` is
``c[len(c)-3], c[len(c)-5], ...`` down to index 1, read top-down.

Rule implemented by :func:`classify_path`:

* different host bridges: ``NODE`` if both NUMA nodes are known and equal,
  ``SYS`` if both are known and differ, ``UNKNOWN`` if either is unknown
  (``None`` or ``-1``); we never claim SYS without knowing.
* same host bridge, no switch in common (split at the host bridge or right
  below a root port): ``PHB``.
* otherwise count the switches the GPU<->NIC path crosses: the deepest common
  switch plus every switch below it on either side. One switch: ``PIX``;
  more: ``PXB``.

Examples (HB host bridge, RP root port, U/D switch upstream/downstream port)::

    HB-RP-U-D1-GPU  /  HB-RP-U-D2-NIC          switches [U] / [U]       -> PIX
    HB-RP-U-D1-GPU  /  HB-RP-U-D1-NIC          same downstream port     -> PIX
    HB-RP-U1-D1-GPU /  HB-RP-U1-D2-U2-D3-NIC   [U1] / [U1,U2]: U1+U2    -> PXB
    HB-RP1-U-D-GPU  /  HB-RP2-NIC              no common switch         -> PHB
    HB1-...-GPU     /  HB2-...-NIC             same NUMA NODE, else SYS

Not modelled: NCCL's flattening of Broadcom PEX Gen4/Gen5 two-level switches
into one (it needs PCI vendor/device ids), and NVLink (invisible in PCI sysfs).
"""
from __future__ import annotations

import re

from fabricmon.parsers.errors import ParseError


_HOST_BRIDGE = re.compile(r"^pci[0-9a-f]{4,8}:[0-9a-f]{2}$")
_BDF = re.compile(r"^[0-9a-f]{4,8}:[0-9a-f]{2}:[0-9a-f]{2}\.[0-7]$")
_BUS_ID = re.compile(
    r"^(?:(?P<dom>[0-9a-f]{1,8}):)?(?P<bus>[0-9a-f]{1,2}):(?P<dev>[0-9a-f]{1,2})\.(?P<fn>[0-7])$"
)


def pci_chain(realpath: str) -> tuple[str, ...]:
    """Host bridge plus each PCI function address, top-down, from a sysfs realpath.

    The last ``pciDDDD:BB`` component is the host bridge (as for NCCL, so a VMD
    domain nested under a function starts the chain); the chain ends at the
    first component after it that is not a PCI address (e.g. ``/net/ib0``).
    """
    parts = [p for p in realpath.strip().lower().split("/") if p]
    starts = [i for i, p in enumerate(parts) if _HOST_BRIDGE.match(p)]
    if not starts:
        raise ParseError(f"no pciDDDD:BB host bridge component in {realpath!r}")
    chain = [parts[starts[-1]]]
    for part in parts[starts[-1] + 1 :]:
        if not _BDF.match(part):
            break
        chain.append(part)
    if len(chain) < 2:
        raise ParseError(f"no PCI function below the host bridge in {realpath!r}")
    return tuple(chain)


def pci_chain_or_none(realpath: str | None) -> tuple[str, ...] | None:
    """pci_chain, or None when there is no path or it is not a PCI device's (a virtual device):
    the path class is then unknown, which is not an error."""
    if not realpath:
        return None
    try:
        return pci_chain(realpath)
    except ParseError:
        return None


def normalize_bus_id(bus_id: str) -> str:
    """NVML ``00000000:1B:00.0`` (or lspci ``1b:00.0``) -> sysfs ``0000:1b:00.0``."""
    m = _BUS_ID.match(bus_id.strip().lower())
    if not m:
        raise ParseError(f"not a PCI bus id: {bus_id!r}")
    dom = int(m["dom"] or "0", 16)
    return f"{dom:04x}:{int(m['bus'], 16):02x}:{int(m['dev'], 16):02x}.{m['fn']}"


def parse_numa_node(text: str) -> int | None:
    """sysfs ``numa_node``: a node number, or None for ``-1`` (unknown)."""
    value = text.strip()
    if not re.fullmatch(r"-1|[0-9]+", value):
        raise ParseError(f"bad numa_node {text!r}")
    return None if value == "-1" else int(value)
