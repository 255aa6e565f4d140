"""GPU-NIC affinity, NIC sharing, NCCL_IB_HCA and GPUDirect RDMA readiness on constructed nodes."""

from __future__ import annotations

from fabricmon.checks import CRITICAL, OK, WARNING
from fabricmon.checks import affinity, gpudirect
from fabricmon.model.gpu import GpuData, GpudirectFacts, GpuInfo
from fabricmon.parsers.errors import ParseError
from fabricmon.parsers.nccl_env import parse_nccl_ib_hca
from fabricmon.parsers.pci_topology import pci_chain_or_none
from fabricmon.parsers.proc_modules import parse_proc_modules

from helpers import by_check


def sw(hb: str, dsp: int, ep: str) -> str:
    """An endpoint below host bridge pci0000:<hb>, root port, one switch, downstream port dsp."""
    return f"/sys/devices/pci0000:{hb}/0000:{hb}:01.0/0000:a0:00.0/0000:a1:{dsp:02x}.0/{ep}"


def gpu(i: int, path: str | None, numa: int | None) -> GpuInfo:
    """A GPU as the gpu source records it (the PCI chain parsed from its path)."""
    return GpuInfo(i, f"GPU-{i}", path.rsplit("/", 1)[1] if path else "", path, numa, pci_chain_or_none(path))


def nic(name: str, path: str, numa: int | None, usable: bool = True) -> affinity.NicInfo:
    return affinity.NicInfo(name, path, numa, usable, pci_chain_or_none(path))


def data(*gpus: GpuInfo, env=None, env_file=None) -> GpuData:
    """GpuData as the gpu source records it (NCCL_IB_HCA parsed when set)."""
    d = GpuData(gpus=list(gpus), nvml_available=True, nccl_env_file=env_file, nccl_env=env)
    if env and "NCCL_IB_HCA" in env:
        try:
            d.nccl_ib_hca = parse_nccl_ib_hca(env["NCCL_IB_HCA"])
        except ParseError as exc:
            d.nccl_ib_hca_error = str(exc)
    return d


def test_pix_pair_is_ok():
    r = affinity.evaluate(data(gpu(0, sw("15", 0, "0000:a2:00.0"), 0)),
                          {"mlx5_0": nic("mlx5_0", sw("15", 1, "0000:a3:00.0"), 0)})
    f = by_check(r.findings, "gpu_nic_affinity")["GPU0"]
    assert f.status == OK and "mlx5_0 (PIX)" in f.message and r.affinity_ok(0) is True


def test_nearest_nic_beyond_pxb_warns():
    g = gpu(0, sw("15", 0, "0000:a2:00.0"), 0)
    phb = "/sys/devices/pci0000:15/0000:15:02.0/0000:30:00.0"          # another root port, same bridge
    node = "/sys/devices/pci0000:37/0000:37:01.0/0000:38:00.0"
    sys_ = "/sys/devices/pci0000:97/0000:97:01.0/0000:98:00.0"
    for path, numa, cls in ((phb, 0, "PHB"), (node, 0, "NODE"), (sys_, 1, "SYS")):
        r = affinity.evaluate(data(g), {"mlx5_0": nic("mlx5_0", path, numa)})
        f = by_check(r.findings, "gpu_nic_affinity")["GPU0"]
        assert f.status == WARNING and f"nearest RDMA NIC mlx5_0 is {cls}" in f.message, cls
        assert r.affinity_ok(0) is False


def test_unknown_numa_is_never_a_mismatch_nor_ok():
    """A path that is unknown (a NUMA node of -1 across host bridges, a PCI path that could not be read) is not
    judged: no finding (no status), never a mismatch and never an OK."""
    g = gpu(0, sw("15", 0, "0000:a2:00.0"), None)
    r = affinity.evaluate(data(g), {"mlx5_0": nic("mlx5_0", "/sys/devices/pci0000:97/0000:97:01.0/0000:98:00.0", 1)})
    assert "GPU0" not in by_check(r.findings, "gpu_nic_affinity")
    assert r.affinity_ok(0) is None and r.paths[(0, "mlx5_0")] == "UNKNOWN"
    g = GpuInfo(0, "GPU-0", "0000:a2:00.0", None, 0)
    r = affinity.evaluate(data(g), {"mlx5_0": nic("mlx5_0", sw("15", 1, "0000:a3:00.0"), 0)})
    assert "GPU0" not in by_check(r.findings, "gpu_nic_affinity")


def test_down_nic_under_the_gpu_switch_is_named():
    g = gpu(0, sw("15", 0, "0000:a2:00.0"), 0)
    nics = {"mlx5_0": nic("mlx5_0", sw("15", 1, "0000:a3:00.0"), 0, usable=False),
            "mlx5_1": nic("mlx5_1", "/sys/devices/pci0000:37/0000:37:01.0/0000:38:00.0", 0)}
    f = by_check(affinity.evaluate(data(g), nics).findings, "gpu_nic_affinity")["GPU0"]
    assert f.status == WARNING and "mlx5_1 is NODE" in f.message
    assert "mlx5_0 under the same PCIe switch is down" in f.message


def test_no_nic_at_all():
    r = affinity.evaluate(data(gpu(0, sw("15", 0, "0000:a2:00.0"), 0)), {})
    assert r.findings == []             # no RDMA NIC to be near to, or to share: not judged
    assert affinity.evaluate(data(), {}).findings == []
    assert affinity.evaluate(None, {}).findings == []


def test_two_gpus_share_a_nic_while_another_idles():
    g0, g1 = gpu(0, sw("15", 0, "0000:a2:00.0"), 0), gpu(1, sw("15", 1, "0000:a3:00.0"), 0)
    nics = {"mlx5_0": nic("mlx5_0", sw("15", 2, "0000:a4:00.0"), 0),
            "mlx5_1": nic("mlx5_1", "/sys/devices/pci0000:37/0000:37:01.0/0000:38:00.0", 0)}
    r = affinity.evaluate(data(g0, g1), nics)
    share = by_check(r.findings, "gpu_nic_sharing")
    assert share["GPU0"].status == WARNING and share["GPU1"].status == WARNING
    assert "GPU0 shares mlx5_0 (PIX) with GPU1 while mlx5_1 (on NUMA node 0) carries no GPU" in share["GPU0"].message
    # the idle NIC on the other socket does not count
    nics["mlx5_1"] = nic("mlx5_1", "/sys/devices/pci0000:97/0000:97:01.0/0000:98:00.0", 1)
    share = by_check(affinity.evaluate(data(g0, g1), nics).findings, "gpu_nic_sharing")
    assert share["GPU0"].status == OK and "no idle NIC nearby" in share["GPU0"].message
    # a down NIC in the same PCIe switch does count (fix its link)
    nics["mlx5_1"] = nic("mlx5_1", sw("15", 3, "0000:a5:00.0"), 0, usable=False)
    share = by_check(affinity.evaluate(data(g0, g1), nics).findings, "gpu_nic_sharing")
    assert share["GPU1"].status == WARNING and "mlx5_1 (in the same PCIe switch, ports down)" in share["GPU1"].message


def test_equal_nics_are_spread_not_shared():
    g0, g1 = gpu(0, sw("15", 0, "0000:a2:00.0"), 0), gpu(1, sw("15", 1, "0000:a3:00.0"), 0)
    nics = {"mlx5_0": nic("mlx5_0", sw("15", 2, "0000:a4:00.0"), 0),
            "mlx5_1": nic("mlx5_1", sw("15", 3, "0000:a5:00.0"), 0)}
    r = affinity.evaluate(data(g0, g1), nics)
    assert r.assigned == {0: "mlx5_0", 1: "mlx5_1"}
    assert all(f.status == OK for f in r.findings)


def _dgx2():
    g0 = gpu(0, sw("15", 0, "0000:a2:00.0"), 0)
    g1 = gpu(1, "/sys/devices/pci0000:97/0000:97:01.0/0000:98:00.0/0000:99:00.0/0000:9a:00.0", 1)
    nics = {"mlx5_0": nic("mlx5_0", sw("15", 1, "0000:a3:00.0"), 0),
            "mlx5_1": nic("mlx5_1", "/sys/devices/pci0000:97/0000:97:01.0/0000:98:00.0/0000:99:01.0/0000:9b:00.0", 1)}
    return g0, g1, nics


def test_nccl_ib_hca_pairing_across_numa():
    g0, g1, nics = _dgx2()
    r = affinity.evaluate(data(g0, g1, env={"NCCL_IB_HCA": "=mlx5_1"}, env_file="/etc/nccl.conf"), nics)
    f = by_check(r.findings, "nccl_ib_hca")
    assert f["GPU0"].status == WARNING
    assert "NCCL_IB_HCA==mlx5_1 in /etc/nccl.conf pairs it with mlx5_1 on NUMA node 1 (SYS)" in f["GPU0"].message
    assert "allow its nearest NIC mlx5_0" in f["GPU0"].message
    assert f["GPU1"].status == OK
    r = affinity.evaluate(data(g0, g1, env={"NCCL_IB_HCA": "mlx5"}, env_file="/etc/nccl.conf"), nics)
    assert all(x.status == OK for x in by_check(r.findings, "nccl_ib_hca").values())
    r = affinity.evaluate(data(g0, g1, env={"NCCL_IB_HCA": "^mlx5_0:1"}, env_file="/etc/nccl.conf"), nics)
    assert by_check(r.findings, "nccl_ib_hca")["GPU0"].status == WARNING


def test_nccl_ib_hca_unset_invalid_or_matching_nothing():
    g0, g1, nics = _dgx2()
    assert not [f for f in affinity.evaluate(data(g0, g1), nics).findings if f.check == "nccl_ib_hca"]
    r = affinity.evaluate(data(g0, g1, env={}, env_file="/etc/nccl.conf"), nics)
    assert all(f.status == OK and "not set" in f.message for f in by_check(r.findings, "nccl_ib_hca").values())
    r = affinity.evaluate(data(g0, g1, env={"NCCL_IB_HCA": "mlx5_0:x"}, env_file="/etc/nccl.conf"), nics)
    f = by_check(r.findings, "nccl_ib_hca")["GPU0"]
    assert f.status == WARNING and "is invalid" in f.message
    r = affinity.evaluate(data(g0, g1, env={"NCCL_IB_HCA": "=mlx4_0"}, env_file="/etc/nccl.conf"), nics)
    f = by_check(r.findings, "nccl_ib_hca")["GPU1"]
    assert f.status == WARNING and "matches no usable RDMA device" in f.message
    r = affinity.evaluate(data(g0, g1, env=None, env_file="/etc/nccl.conf"), nics)
    assert "nccl_ib_hca" not in {f.check for f in r.findings}      # the file could not be read: not judged


# --- GPUDirect RDMA ----------------------------------------------------------------------------

MODS = "nvidia 100 3 - Live 0x0 (POE)\nib_core 10 1 - Live 0x0\n"


def facts(**kw) -> GpudirectFacts:
    kw.setdefault("modules", parse_proc_modules(MODS))
    kw.setdefault("kernel", (5, 15))
    kw.setdefault("driver_version", "535.161.08")
    kw.setdefault("open_module", False)
    return GpudirectFacts(**kw)


GPU1 = data(gpu(0, sw("15", 0, "0000:a2:00.0"), 0))


def test_no_path_with_gpus_and_rdma_is_critical():
    st = gpudirect.evaluate(facts(), GPU1, 8)
    assert st.finding.status == CRITICAL and st.finding.check == "gpudirect_rdma"
    assert st.finding.message.startswith(gpudirect.NO_PATH)
    assert st.methods == {"peermem": False, "nv_peer_mem": False, "dmabuf": False}


def test_each_path_is_detected():
    st = gpudirect.evaluate(facts(modules=parse_proc_modules(MODS + "nvidia_peermem 16384 0 - Live 0x0\n")), GPU1, 8)
    assert st.methods["peermem"] and st.finding.status == OK and "via peermem" in st.finding.message
    st = gpudirect.evaluate(facts(peermem_sysfs=True, modules=None), GPU1, 8)
    assert st.methods["peermem"] and st.finding.status == OK
    st = gpudirect.evaluate(facts(nv_mem_version="1.3"), GPU1, 8)
    assert st.methods == {"peermem": False, "nv_peer_mem": True, "dmabuf": False}
    st = gpudirect.evaluate(facts(kernel=(6, 5), open_module=True, driver_version="550.54.15"), GPU1, 8)
    assert st.methods["dmabuf"] and st.finding.status == OK and "via dmabuf" in st.finding.message
    st = gpudirect.evaluate(facts(kernel=(5, 4), open_module=True), GPU1, 8)
    assert not st.methods["dmabuf"] and "kernel 5.4 < 5.12" in st.finding.message


def test_loading_module_does_not_count():
    st = gpudirect.evaluate(facts(modules=parse_proc_modules(MODS + "nvidia_peermem 16384 0 - Loading 0x0\n")),
                            GPU1, 8)
    assert st.finding.status == CRITICAL


def test_not_applicable_without_gpus_or_rdma():
    none = GpudirectFacts(modules=parse_proc_modules("ib_core 10 1 - Live 0x0\n"))
    st = gpudirect.evaluate(none, GpuData(), 8)
    assert st.finding.status == OK and "not applicable" in st.finding.message and not st.has_gpus
    st = gpudirect.evaluate(facts(modules=parse_proc_modules(MODS + "nvidia_peermem 16384 0 - Live 0x0\n")), GPU1, 0)
    assert st.finding.status == OK and "loaded but unused, which is fine" in st.finding.message
    # no NVML (gpu source quiet): the loaded driver says there are GPUs
    assert gpudirect.evaluate(facts(), GpuData(), 2).finding.status == CRITICAL


def test_nvml_driver_version_fills_in():
    st = gpudirect.evaluate(facts(driver_version=None, kernel=(6, 5), open_module=True),
                            GpuData(gpus=GPU1.gpus, driver_version="550.54.15"), 8)
    assert st.methods["dmabuf"]
