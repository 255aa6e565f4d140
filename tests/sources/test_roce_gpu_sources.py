"""The RoCE and GPU sources: what they ask the HostIO, and how each failure is (not) counted."""

from __future__ import annotations

import errno
import json
import os
import time
from pathlib import Path

import pytest

from fabricmon.pipeline.scheduler import Pipeline
from fabricmon.config import from_dict
from fabricmon.host import LiveIO, RecordingIO, ReplayIO
from fabricmon.host.runner import CommandResult
from fabricmon.sources.ethtool import EthtoolSource
from fabricmon.sources.gpu import GpuSource
from fabricmon.sources.gpudirect import GpudirectSource
from fabricmon.sources.mlnx_qos import MlnxQosSource
from fabricmon.sources.netdev import NetdevSource
from fabricmon.host.nvml import NvmlError, NvmlUnavailable
from fabricmon.model.roce import RoceTarget
from helpers import FIXTURES, FakeIO, roce_inputs, run_inputs

from helpers import BUNDLES, fake_nvml

T = [RoceTarget("mlx5_0", 1, "eth2")]


def cfg(**sources):
    return from_dict({"sources": sources})


# --- mlnx_qos -----------------------------------------------------------------------------

def test_mlnx_qos_parses_and_builds_argv():
    text = (FIXTURES / "mlnx_qos" / "pfc_prio3_dscp_trust.txt").read_text()
    io = FakeIO({("mlnx_qos", "-i", "eth2"): (0, text, "")})
    out = MlnxQosSource(cfg().sources["mlnx_qos"]).collect(io, roce_inputs(T))
    assert not out.errors and out.data.netdevs["eth2"].qos.pfc_priorities() == (3,)
    assert io.ran == [("mlnx_qos", "-i", "eth2")]


def test_mlnx_qos_ets_unsupported_is_not_an_error():
    text = (FIXTURES / "mlnx_qos" / "ets_unsupported.txt").read_text()
    io = FakeIO({("mlnx_qos", "-i", "eth2"): (1, text, "")})
    out = MlnxQosSource(cfg().sources["mlnx_qos"]).collect(io, roce_inputs(T))
    assert not out.errors
    assert out.data.netdevs["eth2"].dcb_supported is False


def test_mlnx_qos_missing_tool_auto_vs_required():
    out = MlnxQosSource(cfg().sources["mlnx_qos"]).collect(FakeIO(), roce_inputs(T + [RoceTarget("mlx5_1", 1, "eth3")]))
    assert not out.errors and out.data.tool_missing and out.up
    out = MlnxQosSource(cfg(mlnx_qos={"enabled": True}).sources["mlnx_qos"]).collect(FakeIO(), roce_inputs(T))
    assert [k for k, _ in out.errors] == ["not_found"]


def test_mlnx_qos_failures_cost_only_their_netdev():
    text = (FIXTURES / "mlnx_qos" / "pfc_prio3_dscp_trust.txt").read_text()
    io = FakeIO({("mlnx_qos", "-i", "eth2"): (0, text, ""),
                 ("mlnx_qos", "-i", "eth3"): (2, "", "Netlink error"),
                 ("mlnx_qos", "-i", "eth4"): (0, (FIXTURES / "mlnx_qos" / "garbage.txt").read_text(), ""),
                 ("mlnx_qos", "-i", "eth5"): CommandResult(("mlnx_qos",), None, "", "", 10.0, "timeout")})
    targets = [RoceTarget(f"mlx5_{i}", 1, f"eth{i + 2}") for i in range(4)] + [RoceTarget("x", 1, "-rf")]
    out = MlnxQosSource(cfg().sources["mlnx_qos"]).collect(io, roce_inputs(targets))
    assert sorted(k for k, _ in out.errors) == ["exit_code", "parse", "parse", "timeout"]
    assert any("refusing unsafe command argument '-rf'" in m for _, m in out.errors)
    assert set(out.data.netdevs) == {"eth2"}


def test_mlnx_qos_configurable_command():
    text = (FIXTURES / "mlnx_qos" / "pfc_off_pcp_trust.txt").read_text()
    io = FakeIO({("sudo", "-n", "/opt/mellanox/mlnx_qos", "-i", "eth2"): (0, text, "")})
    out = MlnxQosSource(cfg(mlnx_qos={"command": ["sudo", "-n", "/opt/mellanox/mlnx_qos"]}).sources["mlnx_qos"]).collect(io, roce_inputs(T))
    assert out.data.netdevs["eth2"].qos.trust == "pcp"


# --- ethtool -------------------------------------------------------------------------------

def test_ethtool_curates():
    text = (FIXTURES / "ethtool" / "mlx5_pfc_prio3.txt").read_text()
    out = EthtoolSource(cfg().sources["ethtool"]).collect(FakeIO({("ethtool", "-S", "eth2"): (0, text, "")}), roce_inputs(T))
    st = out.data.netdevs["eth2"]
    assert st.count > 50 and st.stats.pause[(3, "rx")] == 1533 and st.stats.pause_duration_us[(3, "tx")] == 12904
    assert "rx_vport_rdma_unicast_bytes" not in st.stats.errors


def test_ethtool_no_stats_and_errors():
    io = FakeIO({("ethtool", "-S", "lo"): (94, "", "no stats available\n"),
                 ("ethtool", "-S", "nope0"): (96, "", "Cannot get stats strings information: No such device\n")})
    out = EthtoolSource(cfg().sources["ethtool"]).collect(io, roce_inputs([RoceTarget("a", 1, "lo"), RoceTarget("b", 1, "nope0")]))
    assert out.data.netdevs["lo"].stats is None
    assert [k for k, _ in out.errors] == ["exit_code"] and "No such device" in out.errors[0][1]
    out = EthtoolSource(cfg().sources["ethtool"]).collect(FakeIO(), roce_inputs(T))
    assert out.data.tool_missing and not out.errors


# --- netdev --------------------------------------------------------------------------------

def test_netdev_reads_class_net():
    io = FakeIO(files={("sysfs", "class/net/eth2/mtu"): "9000\n", ("sysfs", "class/net/eth2/speed"): errno.EINVAL,
                       ("sysfs", "class/net/eth2/operstate"): "down\n",
                       ("sysfs", "class/net/eth3/mtu"): errno.EACCES, ("sysfs", "class/net/eth3/speed"): "-1\n",
                       ("sysfs", "class/net/eth3/operstate"): "up"})
    out = NetdevSource(cfg().sources["netdev"]).collect(io, roce_inputs(T + [RoceTarget("mlx5_1", 1, "eth3"), RoceTarget("x", 1, "../x")]))
    nd = out.data.netdevs
    assert (nd["eth2"].mtu, nd["eth2"].speed_mbps, nd["eth2"].operstate) == (9000, None, "down")
    assert (nd["eth3"].mtu, nd["eth3"].speed_mbps, nd["eth3"].operstate) == (None, None, "up")
    assert sorted(k for k, _ in out.errors) == ["parse", "read"]      # EACCES, and the refused name


# --- gpudirect -----------------------------------------------------------------------------

def test_gpudirect_absent_files_are_facts_not_errors():
    out = GpudirectSource(cfg().sources["gpudirect"]).collect(FakeIO(), run_inputs())
    assert not out.errors and out.data.modules is None and not out.data.peermem and not out.data.nvidia_loaded


def test_gpudirect_reads_every_path():
    io = FakeIO(files={
        ("procfs", "modules"): "nv_peer_mem 16384 0 - Live 0x0\nnvidia 100 3 - Live 0x0 (OE)\n",
        ("sysfs", "kernel/mm/memory_peers/nv_mem/version"): "1.3-0\n",
        ("procfs", "sys/kernel/osrelease"): "6.8.0-45-generic\n",
        ("sysfs", "module/nvidia/version"): "560.35.03\n",
        ("sysfs", "module/nvidia/taint"): "OE\n",
        ("sysfs", "module/nvidia_peermem/initstate"): errno.EACCES,
    })
    out = GpudirectSource(cfg().sources["gpudirect"]).collect(io, run_inputs())
    f = out.data
    assert f.nv_peer_mem and f.nv_mem_version == "1.3-0" and not f.peermem
    assert f.kernel == (6, 8) and f.driver_version == "560.35.03" and f.open_module is True
    assert [k for k, _ in out.errors] == ["read"]


def test_gpudirect_proprietary_taint():
    io = FakeIO(files={("sysfs", "module/nvidia/version"): "535.1.1\n", ("sysfs", "module/nvidia/taint"): "POE\n"})
    assert GpudirectSource(cfg().sources["gpudirect"]).collect(io, run_inputs()).data.open_module is False


# --- gpu (NVML) ----------------------------------------------------------------------------

GPUS = [{"index": 0, "uuid": "GPU-aaaa", "bus_id": "00000000:1B:00.0", "driver_version": "550.1"}]


def test_gpu_source_joins_nvml_and_sysfs():
    real = "/sys/devices/pci0000:18/0000:18:01.0/0000:1b:00.0"
    io = FakeIO(nvml=GPUS, realpaths={"bus/pci/devices/0000:1b:00.0": real},
                files={("sysfs", "bus/pci/devices/0000:1b:00.0/numa_node"): "-1\n"})
    out = GpuSource(cfg().sources["gpu"]).collect(io, run_inputs())
    g = out.data.gpus[0]
    assert (g.index, g.uuid, g.bus_id, g.numa_node) == (0, "GPU-aaaa", "0000:1b:00.0", None)
    assert g.pci_path.endswith("0000:1b:00.0") and out.data.driver_version == "550.1" and not out.errors


def test_gpu_source_without_nvml():
    out = GpuSource(cfg().sources["gpu"]).collect(FakeIO(nvml=NvmlUnavailable("NVML Shared Library Not Found")), run_inputs())
    assert not out.errors and out.data.gpus == [] and out.up
    out = GpuSource(cfg(gpu={"enabled": True}).sources["gpu"]).collect(FakeIO(nvml=NvmlUnavailable("NVML Shared Library Not Found")), run_inputs())
    assert out.errors == [("not_found", "NVML: NVML Shared Library Not Found")]
    out = GpuSource(cfg().sources["gpu"]).collect(FakeIO(nvml=NvmlError("GPU is lost")), run_inputs())
    assert [k for k, _ in out.errors] == ["read"] and not out.up


def test_gpu_source_bad_bus_id_and_missing_sysfs():
    io = FakeIO(nvml=[{"index": 0, "uuid": "u", "bus_id": "garbage"}, {"index": 1, "uuid": "v", "bus_id": "0:3b:0.0"}])
    out = GpuSource(cfg().sources["gpu"]).collect(io, run_inputs())
    assert [g.bus_id for g in out.data.gpus] == ["0000:3b:00.0"]
    assert sorted(k for k, _ in out.errors) == ["parse", "read"]


def test_gpu_source_times_out_a_hung_nvml():
    class Hung(FakeIO):
        def nvml_gpus(self):
            time.sleep(3)                   # a hung NVML: what is tested
            return []
    src = GpuSource(cfg(gpu={"timeout": 0.2}).sources["gpu"])
    t0 = time.monotonic()
    out = src.collect(Hung(), run_inputs())
    assert time.monotonic() - t0 < 2 and [k for k, _ in out.errors] == ["timeout"]
    out = src.collect(Hung(), run_inputs())          # the hung call is not started again
    assert "still hanging" in out.errors[0][1]


def test_gpu_source_reads_the_nccl_env_file(tmp_path):
    env = tmp_path / "nccl.conf"
    env.write_text("export NCCL_IB_HCA='=mlx5_0,mlx5_1'\n")
    c = from_dict({"gpu": {"nccl_env_file": str(env)}})
    out = GpuSource(c.sources["gpu"]).collect(LiveIO(str(tmp_path), str(tmp_path)), run_inputs())
    assert out.data.nccl_env == {"NCCL_IB_HCA": "=mlx5_0,mlx5_1"}
    c = from_dict({"gpu": {"nccl_env_file": str(tmp_path / "absent.conf")}})
    out = GpuSource(c.sources["gpu"]).collect(LiveIO(str(tmp_path), str(tmp_path)), run_inputs())
    assert out.data.nccl_env is None and [k for k, _ in out.errors] == ["read"]


# --- NVML at the pynvml boundary -----------------------------------------------------------

def gpu_host(tmp_path) -> LiveIO:
    """A LiveIO whose sysfs shows the nvidia driver loaded."""
    (tmp_path / "module" / "nvidia").mkdir(parents=True, exist_ok=True)
    return LiveIO(str(tmp_path), str(tmp_path))


def test_liveio_skips_nvml_without_the_nvidia_driver(tmp_path, monkeypatch):
    calls = fake_nvml(monkeypatch, [{"uuid": "GPU-1", "bus_id": "00000000:1B:00.0"}])
    with pytest.raises(NvmlUnavailable, match="NVIDIA driver not loaded"):
        LiveIO(str(tmp_path), str(tmp_path)).nvml_gpus()
    assert calls == []
    assert len(gpu_host(tmp_path).nvml_gpus()) == 1


def test_liveio_nvml_through_faked_pynvml(tmp_path, monkeypatch):
    calls = fake_nvml(monkeypatch, [{"uuid": "GPU-1", "bus_id": "00000000:1B:00.0"},
                                    {"uuid": "GPU-2", "bus_id": "00000000:9D:00.0"}], driver="550.54.15",
                      as_bytes=True)
    gpus = gpu_host(tmp_path).nvml_gpus()
    assert gpus == [{"index": 0, "uuid": "GPU-1", "bus_id": "00000000:1B:00.0", "driver_version": "550.54.15"},
                    {"index": 1, "uuid": "GPU-2", "bus_id": "00000000:9D:00.0", "driver_version": "550.54.15"}]
    assert calls == ["init", "shutdown"]


def test_liveio_nvml_errors(tmp_path, monkeypatch):
    import pynvml

    def lib_missing():
        raise pynvml.NVMLError(pynvml.NVML_ERROR_LIBRARY_NOT_FOUND)

    def unknown():
        raise pynvml.NVMLError(pynvml.NVML_ERROR_UNKNOWN)
    monkeypatch.setattr(pynvml, "nvmlInit", lib_missing)
    with pytest.raises(NvmlUnavailable):
        gpu_host(tmp_path).nvml_gpus()
    monkeypatch.setattr(pynvml, "nvmlInit", unknown)
    with pytest.raises(NvmlError):
        gpu_host(tmp_path).nvml_gpus()
    shut = []
    fake_nvml(monkeypatch, [{"uuid": "GPU-1", "bus_id": "00000000:1B:00.0"}])
    monkeypatch.setattr(pynvml, "nvmlShutdown", lambda: shut.append(1))
    monkeypatch.setattr(pynvml, "nvmlDeviceGetUUID", lambda h: unknown())
    with pytest.raises(NvmlError):
        gpu_host(tmp_path).nvml_gpus()
    assert shut == [1]                    # shut down even when a query fails


def test_recording_and_replay_of_nvml(tmp_path, monkeypatch):
    fake_nvml(monkeypatch, [{"uuid": "GPU-1", "bus_id": "00000000:1B:00.0"}])
    rec = RecordingIO(gpu_host(tmp_path), tmp_path / "b")
    assert rec.nvml_gpus()[0]["uuid"] == "GPU-1"
    rec.save()
    assert json.loads((tmp_path / "b" / "bundle.json").read_text())["nvml"][0]["bus_id"] == "00000000:1B:00.0"
    assert ReplayIO(tmp_path / "b").nvml_gpus()[0]["uuid"] == "GPU-1"

    import pynvml
    monkeypatch.setattr(pynvml, "nvmlInit", lambda: (_ for _ in ()).throw(
        pynvml.NVMLError(pynvml.NVML_ERROR_DRIVER_NOT_LOADED)))
    rec = RecordingIO(gpu_host(tmp_path), tmp_path / "c")
    with pytest.raises(NvmlUnavailable):
        rec.nvml_gpus()
    rec.save()
    with pytest.raises(NvmlUnavailable):
        ReplayIO(tmp_path / "c").nvml_gpus()
    (tmp_path / "d").mkdir()
    (tmp_path / "d" / "bundle.json").write_text(json.dumps({"bundle_version": 1}))
    assert ReplayIO(tmp_path / "d").nvml_gpus() == []        # absent key: no GPUs


def test_host_file_record_and_replay(tmp_path):
    env = tmp_path / "etc" / "nccl.conf"
    env.parent.mkdir()
    env.write_text("NCCL_IB_HCA=mlx5\n")
    rec = RecordingIO(LiveIO(str(tmp_path), str(tmp_path)), tmp_path / "b")
    assert rec.read_host_file(str(env)) == "NCCL_IB_HCA=mlx5\n"
    with pytest.raises(OSError):
        rec.read_host_file(str(tmp_path / "missing"))
    rec.save()
    rep = ReplayIO(tmp_path / "b")
    assert rep.read_host_file(str(env)) == "NCCL_IB_HCA=mlx5\n"
    with pytest.raises(OSError) as ei:
        rep.read_host_file(str(tmp_path / "missing"))
    assert ei.value.errno == errno.ENOENT


# --- the collector on hosts without RoCE or GPUs -------------------------------------------

def test_new_sources_are_quiet_on_a_plain_ib_node(tmp_path, monkeypatch):
    """No RoCE netdev, no NVIDIA driver: no command is run, no error is counted, no finding fires."""
    import pynvml

    def missing():
        raise pynvml.NVMLError(pynvml.NVML_ERROR_LIBRARY_NOT_FOUND)
    monkeypatch.setattr(pynvml, "nvmlInit", missing)
    (tmp_path / "sys").mkdir()
    (tmp_path / "proc").mkdir()
    # the kernel log is this machine's real one (other tests' lines in it): not what this test is about
    c = from_dict({"paths": {"sysfs": str(tmp_path / "sys"), "procfs": str(tmp_path / "proc")},
                   "sources": {n: {"enabled": False} for n in ("ibstat", "perfquery", "iblinkinfo", "kernel_log")}})
    col = Pipeline(c, LiveIO(c.sysfs, c.procfs))
    snap = col.collect()
    col.close()
    for name in ("mlnx_qos", "ethtool", "netdev", "gpudirect", "gpu"):
        s = snap.sources[name]
        # up, or (a tool that is not installed, enabled: auto) quietly off
        assert (s.up or not s.active) and not s.active_errors and sum(s.errors_total.values()) == 0, name
    # nothing to check: no port, so no inventory OK (the node is UNKNOWN and says so); GPUDirect RDMA is judged
    # on its facts (no GPU: not applicable)
    assert [f.check for f in snap.findings] == ["gpudirect_rdma"]
    assert snap.findings[0].status == 0 and "not applicable" in snap.findings[0].message
    assert "nothing to check" in snap.unknown


def test_disabled_sources_do_not_run():
    c = from_dict({"sources": {n: {"enabled": False} for n in
                               ("ibstat", "perfquery", "iblinkinfo", "mlnx_qos", "ethtool", "gpu")}})
    col = Pipeline(c, ReplayIO(BUNDLES / "roce-pfc-prio3"))
    snap = col.collect()
    col.close()
    # mlnx_qos and ethtool disabled: the checks that read them have no status at all (never an OK "not checked")
    assert not [f for f in snap.findings if f.check in ("roce_pfc", "roce_pfc_lossy", "roce_trust")]
    assert not [f for f in snap.findings if f.check.startswith("roce_pause")]
    assert not [f for f in snap.findings if f.check == "gpu_nic_affinity"]
