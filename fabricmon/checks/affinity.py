"""GPU-NIC affinity: the PCI path class (PIX/PXB/PHB/NODE/SYS, as `nvidia-smi topo -m`) of every
GPU-NIC pair, each GPU's nearest RDMA NIC(s), and the pairing NCCL would make.

NCCL uses GPUDirect RDMA only at PXB or closer (NCCL_NET_GDR_LEVEL defaults to PXB), so a GPU
whose nearest NIC is PHB, NODE or SYS moves its network traffic through host memory: 20-40% less
bandwidth. A NUMA node of -1 is "unknown": such a pair is UNKNOWN, never called a mismatch.

Pairing (what NCCL roughly does): in GPU index order each GPU takes, among its nearest NICs, the
one with the fewest GPUs so far. NICs whose every port is down are not candidates.

Checks, one Finding per GPU each judged (a GPU whose path is unknown, or that has no usable NIC, gets
none: not judged is never OK):
- gpu_nic_affinity: the nearest NIC is beyond PXB;
- gpu_nic_sharing: the GPU shares its NIC with another GPU while a NIC in the same PCIe switch or
  NUMA node carries no GPU;
- nccl_ib_hca (only with gpu.nccl_env_file): NCCL_IB_HCA leaves the GPU only NICs on another NUMA
  node (path SYS), or matches no NIC at all.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING

from fabricmon.checks import OK, WARNING, Finding
from fabricmon.model.gpu import AffinityResult, GpuData, GpuInfo
from fabricmon.model.pci import PATH_CLASSES, classify_path, gpudirect_capable, rank
from fabricmon.model.ports import DeviceView, PortView
from fabricmon.checks.shape import Outcome, outcome_of, report

if TYPE_CHECKING:
    from fabricmon.checks.node_inputs import NodeInputs

AFFINITY = "gpu_nic_affinity"
SHARING = "gpu_nic_sharing"
NCCL_HCA = "nccl_ib_hca"
CHECKS = (AFFINITY, SHARING, NCCL_HCA)


@dataclass(slots=True)
class NicInfo:
    device: str
    pci_path: str | None
    numa_node: int | None
    usable: bool = True                 # at least one port up (or state unknown)
    pci_chain: tuple[str, ...] | None = None    # pci_path parsed (None: unknown)
    ports: tuple[int, ...] = (1,)


def gpu_name(g: GpuInfo) -> str:
    return f"GPU{g.index}"


def _numa(n: int | None) -> str:
    return f"NUMA node {n}" if n is not None and n >= 0 else "an unknown NUMA node"


def _pair(gpus: list[GpuInfo], nics: list[str], paths: dict[tuple[int, str], str]
          ) -> tuple[dict[int, tuple[str, tuple[str, ...]]], dict[int, str]]:
    load = {n: 0 for n in nics}
    nearest: dict[int, tuple[str, tuple[str, ...]]] = {}
    assigned: dict[int, str] = {}
    if not nics:
        return nearest, assigned
    for g in sorted(gpus, key=lambda g: g.index):
        best = min(rank(paths[(g.index, n)]) for n in nics)
        near = tuple(sorted(n for n in nics if rank(paths[(g.index, n)]) == best))
        nearest[g.index] = (PATH_CLASSES[best], near)
        pick = min(near, key=lambda n: (load[n], n))
        load[pick] += 1
        assigned[g.index] = pick
    return nearest, assigned


def evaluate(gpu_data: GpuData | None, nics: dict[str, NicInfo]) -> AffinityResult:
    res = AffinityResult()
    if gpu_data is None or not gpu_data.gpus:
        return res
    res.gpus = list(gpu_data.gpus)
    gchains = {g.index: g.pci_chain for g in res.gpus}
    nchains = {n: nic.pci_chain for n, nic in nics.items()}
    for g in res.gpus:
        for n, nic in nics.items():
            gc, nc = gchains[g.index], nchains[n]
            res.paths[(g.index, n)] = (classify_path(gc, nc, g.numa_node, nic.numa_node)
                                       if gc and nc else "UNKNOWN")
    cands = sorted(n for n, nic in nics.items() if nic.usable)
    res.nearest, res.assigned = _pair(res.gpus, cands, res.paths)
    for g in res.gpus:
        if (f := _affinity(g, res, nics, gchains[g.index])) is not None:
            res.findings.append(f)
    for g in res.gpus:
        if (f := _sharing(g, res, nics, nchains)) is not None:
            res.findings.append(f)
    if gpu_data.nccl_env_file:
        res.findings += _nccl(gpu_data, res, nics, cands)
    return res


def _affinity(g: GpuInfo, res: AffinityResult, nics: dict[str, NicInfo],
              chain: tuple[str, ...] | None) -> Finding | None:
    """None: not judged (no usable RDMA NIC to be near to; a path that is unknown: its PCI path could
    not be read, or a NUMA node is -1 across host bridges, never called a mismatch, nor OK)."""
    name = gpu_name(g)
    if g.index not in res.nearest:
        return None
    cls, near = res.nearest[g.index]
    if cls == "UNKNOWN":
        return None
    if gpudirect_capable(cls):
        return Finding(AFFINITY, name, None, OK, f"{name}: nearest RDMA NIC {', '.join(near)} ({cls})")
    down = sorted(n for n, nic in nics.items() if not nic.usable and res.paths.get((g.index, n)) in ("PIX", "PXB"))
    hint = (f"; {', '.join(down)} under the same PCIe switch is down: fix its link" if down else
            "; put a NIC under the GPU's PCIe switch (check which slot each HCA sits in), or accept "
            "the loss (NCCL_NET_GDR_LEVEL)")
    return Finding(AFFINITY, name, None, WARNING,
                   f"{name} (bus {g.bus_id}, {_numa(g.numa_node)}): nearest RDMA NIC"
                   f"{'s' if len(near) > 1 else ''} {', '.join(near)} {'are' if len(near) > 1 else 'is'} "
                   f"{cls}: NCCL uses GPUDirect RDMA only at PXB or closer, so this GPU's network traffic "
                   f"goes through host memory (20-40% less bandwidth){hint}")


def _sharing(g: GpuInfo, res: AffinityResult, nics: dict[str, NicInfo],
             nchains: dict[str, tuple[str, ...] | None]) -> Finding | None:
    """None: not judged (no usable RDMA NIC to share, or the GPU's path to the NICs is unknown)."""
    name = gpu_name(g)
    nic = res.assigned.get(g.index)
    if nic is None or res.nearest[g.index][0] == "UNKNOWN":
        return None         # no NIC to share, or a pairing made on paths that could not be read
    others = sorted(o for o, n in res.assigned.items() if n == nic and o != g.index)
    if not others:
        return Finding(SHARING, name, None, OK, f"{name}: has {nic} to itself")
    used = set(res.assigned.values())
    idle = []
    for m in sorted(set(nics) - used):
        near_gpu = res.paths.get((g.index, m)) in ("PIX", "PXB")
        nc, mc = nchains.get(nic), nchains.get(m)
        near_nic = bool(nc and mc and classify_path(nc, mc, None, None) in ("PIX", "PXB"))
        m_numa = nics[m].numa_node
        same_numa = g.numa_node is not None and g.numa_node >= 0 and m_numa == g.numa_node
        if near_gpu or near_nic or same_numa:
            where = "in the same PCIe switch" if (near_gpu or near_nic) else f"on NUMA node {m_numa}"
            idle.append(f"{m} ({where}{'' if nics[m].usable else ', ports down'})")
    share = ", ".join(f"GPU{o}" for o in others)
    if not idle:
        return Finding(SHARING, name, None, OK,
                       f"{name}: shares {nic} with {share}; no idle NIC nearby (by design)")
    return Finding(SHARING, name, None, WARNING,
                   f"{name} shares {nic} ({res.paths[(g.index, nic)]}) with {share} while "
                   f"{', '.join(idle)} carries no GPU: each GPU gets part of {nic}'s bandwidth; fix the idle "
                   f"NIC's link or move it next to these GPUs so each GPU has its own NIC")


def _nccl(gpu_data: GpuData, res: AffinityResult, nics: dict[str, NicInfo], cands: list[str]) -> list[Finding]:
    path = gpu_data.nccl_env_file
    out = []
    if gpu_data.nccl_env is None:
        return []           # the file could not be read: not judged (the gpu source says why)
    value = gpu_data.nccl_env.get("NCCL_IB_HCA")
    if value is None:
        return [Finding(NCCL_HCA, gpu_name(g), None, OK,
                        f"{gpu_name(g)}: NCCL_IB_HCA not set in {path}: NCCL picks the nearest NIC itself")
                for g in res.gpus]
    spec = gpu_data.nccl_ib_hca
    if spec is None:
        return [Finding(NCCL_HCA, gpu_name(g), None, WARNING,
                        f"{gpu_name(g)}: NCCL_IB_HCA={value!r} in {path} is invalid "
                        f"({gpu_data.nccl_ib_hca_error or 'does not parse'}): fix it")
                for g in res.gpus]
    allowed = [n for n in cands if any(spec.matches(n, p) for p in nics[n].ports)]
    if not allowed:
        return [Finding(NCCL_HCA, gpu_name(g), None, WARNING,
                        f"{gpu_name(g)}: NCCL_IB_HCA={value} in {path} matches no usable RDMA device "
                        f"(have {', '.join(cands) or 'none'}): NCCL falls back to sockets; fix the list")
                for g in res.gpus]
    nearest, assigned = _pair(res.gpus, allowed, res.paths)
    for g in res.gpus:
        name = gpu_name(g)
        if g.index not in nearest or nearest[g.index][0] == "UNKNOWN":
            continue            # its path to the allowed NICs is unknown: not judged
        cls, near = nearest[g.index]
        nic = assigned[g.index]
        if cls != "SYS":
            out.append(Finding(NCCL_HCA, name, None, OK,
                               f"{name}: NCCL_IB_HCA={value} gives it {nic} ({cls})"))
            continue
        better = res.nearest.get(g.index, ("", ()))[1]
        out.append(Finding(NCCL_HCA, name, None, WARNING,
                           f"{name} ({_numa(g.numa_node)}): NCCL_IB_HCA={value} in {path} pairs it with {nic} on "
                           f"{_numa(nics[nic].numa_node)} (SYS): its traffic crosses the CPU interconnect; "
                           f"allow its nearest NIC{'s' if len(better) > 1 else ''} {', '.join(better)} in "
                           f"NCCL_IB_HCA"))
    return out


def nics(devices: Mapping[str, DeviceView], ports: Mapping[tuple[str, int], PortView]) -> dict[str, NicInfo]:
    """Each RDMA device as a NIC the GPUs may use (usable: one of its ports up, or none of known state)."""
    out = {}
    for name, d in sorted(devices.items()):
        mine = [p for (dev, _), p in ports.items() if dev == name]
        known = [p for p in mine if p.state_id is not None]
        usable = not known or any(p.up for p in known)
        out[name] = NicInfo(device=name, pci_path=d.pci_path, pci_chain=d.pci_chain, numa_node=d.numa_node,
                            usable=usable, ports=tuple(sorted(p.port for p in mine)) or (1,))
    return out


class Affinity:
    """gpu_nic_affinity, gpu_nic_sharing, nccl_ib_hca (checks.shape): the GPUs against the RDMA devices;
    the result is its derived sub-section (the GPU section's affinity, which the NCCL join reads). It runs on
    a fresh GPU list (GpuData) and a port inventory."""
    reports = tuple(report(c, "GpuData", "ports") for c in CHECKS)
    settings = None
    state = None

    def run(self, inputs: NodeInputs) -> Outcome:
        aff = evaluate(inputs.gpus, nics(inputs.inv.devices, inputs.inv.ports))
        return outcome_of(list(aff.findings), aff)
