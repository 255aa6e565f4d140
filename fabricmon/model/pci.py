"""GPU-NIC PCI path classes (PIX/PXB/PHB/NODE/SYS, as `nvidia-smi topo -m`) from PCI chains.

A chain is what fabricmon.parsers.pci_topology.pci_chain parses out of a sysfs realpath: the
host bridge, then every PCIe component down to the function. Different host bridges: NODE on the
same NUMA node, else SYS (UNKNOWN when a NUMA node is unknown); the same host bridge without a
common PCIe switch: PHB; one switch: PIX; more: PXB.
"""

from __future__ import annotations

PATH_CLASSES: tuple[str, ...] = ("PIX", "PXB", "PHB", "NODE", "SYS", "UNKNOWN")


def _switches(chain: tuple[str, ...]) -> tuple[str, ...]:
    """Switch upstream ports above the endpoint, top-down (NCCL's two-level walk)."""
    return tuple(reversed([chain[i] for i in range(len(chain) - 3, 0, -2)]))


def _known(numa: int | None) -> bool:
    return numa is not None and numa >= 0


def classify_path(
    gpu_chain: tuple[str, ...],
    nic_chain: tuple[str, ...],
    gpu_numa: int | None,
    nic_numa: int | None,
) -> str:
    """Path class PIX/PXB/PHB/NODE/SYS, or UNKNOWN (see the module docstring)."""
    if len(gpu_chain) < 2 or len(nic_chain) < 2:
        raise ValueError("a chain needs a host bridge and at least one function")
    if gpu_chain[0] != nic_chain[0]:
        if not (_known(gpu_numa) and _known(nic_numa)):
            return "UNKNOWN"
        return "NODE" if gpu_numa == nic_numa else "SYS"
    gsw, nsw = _switches(gpu_chain), _switches(nic_chain)
    common = 0
    while common < min(len(gsw), len(nsw)) and gsw[common] == nsw[common]:
        common += 1
    if common == 0:
        return "PHB"
    crossed = 1 + (len(gsw) - common) + (len(nsw) - common)
    return "PIX" if crossed == 1 else "PXB"


def rank(path: str) -> int:
    """0 for PIX (best) ... 4 for SYS; UNKNOWN ranks last (5)."""
    try:
        return PATH_CLASSES.index(path)
    except ValueError:
        raise ValueError(f"unknown path class {path!r}") from None


def gpudirect_capable(path: str) -> bool:
    """True when NCCL would use GPUDirect RDMA by default (PXB or closer)."""
    return rank(path) <= rank("PXB")
