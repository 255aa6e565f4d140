"""GPUDirect RDMA readiness: which path between GPU memory and the RDMA NICs exists.

Methods: `peermem` (nvidia-peermem loaded), `nv_peer_mem` (the legacy Mellanox module) and
`dmabuf` (kernel 5.12+, the open NVIDIA kernel module, driver 515+ / CUDA 11.7+; rdma-core 34+
in user space is not visible from here). A node with GPUs and RDMA devices but no path is
critical: GPUDirect RDMA is silently off and collectives run 30-60% slower. A module loaded
on a node without RDMA devices is fine.
"""

from __future__ import annotations
from typing import TYPE_CHECKING

from fabricmon.checks import CRITICAL, OK, Finding
from fabricmon.model.gpu import GpuData, GpudirectFacts, GpudirectStatus, dmabuf_supported
from fabricmon.checks.shape import Outcome, outcome_of, report
from fabricmon.model.snapshot import source_data

if TYPE_CHECKING:
    from fabricmon.checks.node_inputs import NodeInputs

CHECK = "gpudirect_rdma"
METHODS = ("peermem", "nv_peer_mem", "dmabuf")
NO_PATH = ("nvidia-peermem not loaded and DMA-BUF unavailable: GPUDirect RDMA is off; "
           "`modprobe nvidia-peermem` and add it to /etc/modules-load.d")


def evaluate(facts: GpudirectFacts, gpus: GpuData | None, rdma_devices: int) -> GpudirectStatus:
    driver = facts.driver_version or (gpus.driver_version if gpus else None)
    if facts.nvidia_loaded or (gpus and gpus.gpus):
        dmabuf, reason = dmabuf_supported(facts.kernel, facts.open_module, driver)
    else:
        dmabuf, reason = False, "DMA-BUF unavailable: no NVIDIA driver loaded"
    methods = {"peermem": facts.peermem, "nv_peer_mem": facts.nv_peer_mem, "dmabuf": dmabuf}
    st = GpudirectStatus(methods=methods, dmabuf_reason=reason)
    ngpu = len(gpus.gpus) if gpus and gpus.gpus else 0
    has_gpus = st.has_gpus = ngpu > 0 or facts.nvidia_loaded
    available = [m for m in METHODS if methods[m]]
    if not has_gpus:
        st.finding = Finding(CHECK, "", None, OK, "no NVIDIA GPU or driver: GPUDirect RDMA not applicable")
    elif rdma_devices == 0:
        st.finding = Finding(CHECK, "", None, OK,
                             "no RDMA device: GPUDirect RDMA not applicable"
                             + (f" ({', '.join(available)} loaded but unused, which is fine)" if available else ""))
    elif available:
        st.finding = Finding(CHECK, "", None, OK,
                             f"GPUDirect RDMA available via {', '.join(available)}"
                             + ("" if dmabuf else f" ({reason})"))
    else:
        gpus_txt = f"{ngpu} GPU(s)" if ngpu else "the NVIDIA driver is loaded"
        st.finding = Finding(CHECK, "", None, CRITICAL,
                             f"{NO_PATH} ({gpus_txt}, {rdma_devices} RDMA device(s); {reason})")
    return st


class Gpudirect:
    """gpudirect_rdma (checks.shape): runs on the gpudirect source's fresh facts (without them: no status,
    never an OK "not checked"); the status is its derived sub-section (the GPU section's gpudirect)."""
    reports = (report(CHECK, "GpudirectFacts"),)
    settings = None
    state = None

    def run(self, inputs: NodeInputs) -> Outcome:
        facts = source_data(inputs.states, GpudirectFacts)
        if facts is None:           # the runner runs it only on fresh facts
            return Outcome((), ())
        gd = evaluate(facts, inputs.gpus, len(inputs.inv.devices))
        return outcome_of([gd.finding] if gd.finding is not None else [], gd)
