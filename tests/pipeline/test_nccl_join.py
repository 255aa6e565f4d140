"""NCCL's measures joined by the node model: file UUID -> the GPU NVML sees (with its "GPU-") -> the
NIC paired to it by affinity -> that NIC's port -> the switch port it is cabled to (iblinkinfo), and
rendered as fabricmon_nccl_* series that promtool accepts."""

from __future__ import annotations

import subprocess
from pathlib import Path

from prometheus_client.parser import text_string_to_metric_families

from fabricmon.config import from_dict
from fabricmon.exporter.render import render
from fabricmon.host.io import LiveIO
from fabricmon.model.gpu import GpuData, GpuInfo
from fabricmon.model.nccl import NcclData
from fabricmon.model.ports import DeviceView, Inventory, PortView
from fabricmon.model.snapshot import BuildStats, Snapshot, SourceState
from fabricmon.parsers.pci_topology import pci_chain_or_none
from fabricmon.pipeline.node import NodeModel
from fabricmon.sources.nccl_inspector import NcclInspectorSource
from helpers import NCCL_UUID as UUID, NCCL_UUID2 as UUID2, nccl_dump, nccl_prom_lines as prom_lines, promtool, run_inputs

ROOT = "/sys/devices/pci0000:00/0000:00:01.0"
GPU0 = f"{ROOT}/0000:01:00.0/0000:02:00.0/0000:03:00.0"          # behind PCIe switch 01: with mlx5_0
NIC0 = f"{ROOT}/0000:01:00.0/0000:02:01.0/0000:04:00.0"
GPU1 = f"{ROOT}/0000:05:00.0/0000:06:00.0/0000:07:00.0"          # behind switch 05: with mlx5_1
NIC1 = f"{ROOT}/0000:05:00.0/0000:06:01.0/0000:08:00.0"


def source(tmp_path: Path) -> NcclInspectorSource:
    cfg = from_dict({"sources": {"nccl_inspector": {"enabled": True, "dir": str(tmp_path)}}}, check_paths=False)
    return NcclInspectorSource(cfg.sources["nccl_inspector"])


def node(nccl: NcclData, model: NodeModel | None = None) -> Snapshot:
    inv = Inventory()
    # the port inventory as the merge of sysfs and iblinkinfo gives it (peer: the cabled switch port)
    for dev, path, guid, leaf, sw_port in (("mlx5_0", NIC0, "0x0000000000000a01", "leaf03 (Quantum)", 17),
                                           ("mlx5_1", NIC1, "0x0000000000000a02", "leaf04 (Quantum)", 18)):
        inv.devices[dev] = DeviceView(device=dev, node_guid=guid, numa_node=0, pci_path=path,
                                      pci_chain=pci_chain_or_none(path))
        inv.ports[(dev, 1)] = PortView(device=dev, port=1, state_id=4, phys_state_id=5, width=4, generation="NDR",
                                       rate_gbps=400.0, peer=leaf, peer_port=sw_port)
    gpus = GpuData(gpus=[GpuInfo(0, "GPU-" + UUID, "0000:03:00.0", GPU0, 0, pci_chain_or_none(GPU0)),
                         GpuInfo(1, "GPU-" + UUID2.upper(), "0000:07:00.0", GPU1, 0, pci_chain_or_none(GPU1))],
                   nvml_available=True)

    def st(name: str, records: type, data: object) -> SourceState:
        return SourceState(name, True, 30.0, 10.0, records=records, up=True, ran=True, data=data, data_time=1.0)

    states = {"gpu": st("gpu", GpuData, gpus),
              "nccl_inspector": st("nccl_inspector", NcclData, nccl)}
    model = model or NodeModel(from_dict({}))
    model.inventory = lambda _states: inv
    sections, findings = model.build(states)
    return Snapshot(time=1.0, findings=findings, sources=states, builds=BuildStats(), **sections)


def test_a_measure_is_named_to_its_gpu_nic_and_switch_port(tmp_path: Path) -> None:
    nccl_dump(tmp_path / f"nccl_inspector_metrics_{UUID}.prom", {"DP Group 0": 40.0})
    f2 = tmp_path / f"nccl_inspector_metrics_{UUID2}.prom"
    f2.write_text(prom_lines("DP Group 0", 25.0) + prom_lines("NVL only", 300.0, n_nodes=1)
                  )
    (tmp_path / "nccl_inspector_metrics_99999999-0000-0000-0000-000000000000.prom").write_text(
        prom_lines("DP Group 0", 33.0))                      # a GPU this node's NVML does not see
    data = source(tmp_path).collect(LiveIO(), run_inputs()).data
    snap = node(data)
    assert snap.nccl is not None
    paths = {(p.gpu_index, p.measure.comm): p for p in snap.nccl.paths}
    p0 = paths[(0, "DP Group 0")]
    assert (p0.device, p0.port, p0.node_guid, p0.switch, p0.switch_port) == ("mlx5_0", 1, "0x0000000000000a01",
                                                                          "leaf03 (Quantum)", 17)
    assert p0.line_rate_gbs == 50.0 and p0.line_rate_ratio == 0.8
    p1 = paths[(1, "DP Group 0")]                            # UUID matched whatever NVML's case
    assert (p1.device, p1.switch, p1.switch_port, p1.line_rate_ratio) == ("mlx5_1", "leaf04 (Quantum)", 18, 0.5)
    assert (1, "NVL only") not in paths                     # n_nodes 1: never leaves by a NIC
    assert snap.nccl.unjoined == 1 and paths[(None, "DP Group 0")].device == ""

    text = render(snap).decode()
    lint = subprocess.run([promtool(), "check", "metrics"], input=text, capture_output=True, text=True)
    assert lint.returncode == 0, lint.stdout + lint.stderr
    fams = {f.name: f for f in text_string_to_metric_families(text)}
    ratio = {s.labels["device"]: s for s in fams["fabricmon_nccl_line_rate_ratio"].samples}
    assert ratio["mlx5_0"].value == 0.8 and ratio["mlx5_0"].labels == {
        "job_id": "4242", "comm": "DP Group 0", "operation": "AllReduce", "message_size": "4-5GB",
        "algo_proto": "RING_SIMPLE", "n_nodes": "4", "gpu": "0", "uuid": "GPU-" + UUID, "device": "mlx5_0",
        "port": "1", "node_guid": "0x0000000000000a01", "switch": "leaf03 (Quantum)", "switch_port": "17"}
    assert "" not in ratio                                   # the unjoined measure has no line rate
    bw = [s for s in fams["fabricmon_nccl_bus_bandwidth_gbs"].samples if s.labels["uuid"].startswith("GPU-9999")]
    assert len(bw) == 1 and bw[0].value == 33.0 and bw[0].labels["device"] == ""
    ex = [s for s in fams["fabricmon_nccl_exec_time_seconds"].samples if s.labels["device"] == "mlx5_0"]
    assert ex[0].value == 9498.47e-6
    files = {s.labels["result"]: s.value for s in fams["fabricmon_nccl_inspector_files"].samples}
    assert files == {"read": 3.0, "not_taken": 0.0}


def test_no_source_no_series() -> None:
    snap = node(NcclData())
    assert snap.nccl is not None and snap.nccl.paths == []
    assert "fabricmon_nccl_bus_bandwidth_gbs{" not in render(snap).decode()
