"""Complete node bundles (tests/fixtures/bundles) through the real pipeline: `fabricmon check
--replay`, `fabricmon once --replay` and the Collector, including rate checks over two samples
and `fabricmon check --state` on a live tree built from a bundle."""

from __future__ import annotations

import subprocess
import sys

import pytest
import structlog
from prometheus_client.parser import text_string_to_metric_families

from fabricmon import cli
from fabricmon.checks import CRITICAL, OK, WARNING
from fabricmon.pipeline.scheduler import Pipeline
from fabricmon.config import load
from fabricmon.host import ReplayIO

from helpers import BUNDLES, ROOT, by_check, fake_nvml, make_bundles, materialize, bundle_nvml, two_samples


@pytest.fixture(autouse=True)
def _reset_structlog():
    """cli.main() points structlog at the captured stderr; later tests must not log into it."""
    yield
    structlog.reset_defaults()


def run_cli(capsys, *argv: str) -> tuple[int, str]:
    rc = cli.main(list(argv))
    return rc, capsys.readouterr().out


def samples(text: str, name: str) -> dict[tuple, float]:
    """{tuple(sorted label items): value} for one metric sample name."""
    out = {}
    for fam in text_string_to_metric_families(text):
        for s in fam.samples:
            if s.name == name:
                out[tuple(sorted(s.labels.items()))] = s.value
    return out


def lab(**kw: str) -> tuple:
    return tuple(sorted(kw.items()))


def snapshot(name: str):
    b = BUNDLES / name
    col = Pipeline(load(b / "config.yml", check_paths=False), ReplayIO(b))
    try:
        return col.collect()
    finally:
        col.close()


def test_committed_bundles_match_the_generator():
    assert make_bundles().main(["--check"]) == 0, "run: python tests/fixtures/make_bundles.py"


@pytest.mark.parametrize("name, status", [
    ("dgx-h100", 0), ("dgx-h100-miswired", 1), ("roce-pfc-prio3", 0), ("roce-pfc-off-storm", 2),
    ("no-peermem", 2),
])
def test_check_replay_exit_codes(capsys, name, status):
    rc, out = run_cli(capsys, "check", "--replay", str(BUNDLES / name))
    assert rc == status, out
    assert "source " not in out          # every source of a complete bundle works


def test_healthy_dgx_is_all_ok_and_every_source_up(capsys):
    rc, out = run_cli(capsys, "check", "--replay", str(BUNDLES / "dgx-h100"), "-v")
    assert rc == 0
    assert "OK gpudirect_rdma: GPUDirect RDMA available via peermem" in out
    for i in range(8):
        assert f"OK gpu_nic_affinity: GPU{i}: nearest RDMA NIC mlx5_{i} (PIX)" in out
        assert f"OK gpu_nic_sharing: GPU{i}: has mlx5_{i} to itself" in out
        assert f"OK nccl_ib_hca: GPU{i}:" in out
    rc, text = run_cli(capsys, "once", "--replay", str(BUNDLES / "dgx-h100"))
    up = samples(text, "fabricmon_source_up")
    for src in ("sysfs", "ibstat", "iblinkinfo", "gpudirect", "gpu", "netdev", "ethtool", "mlnx_qos"):
        assert up[lab(source=src)] == 1, src


def test_dgx_metrics(capsys):
    rc, text = run_cli(capsys, "once", "--replay", str(BUNDLES / "dgx-h100"))
    assert rc == 0
    nvml = bundle_nvml(BUNDLES / "dgx-h100")
    paths = samples(text, "fabricmon_gpu_nic_path_info")
    assert len(paths) == 64                                   # every GPU x NIC pair
    for g in nvml:
        bus = g["bus_id"][4:].lower()
        i = g["index"]
        assert paths[lab(gpu=str(i), gpu_bus_id=bus, device=f"mlx5_{i}", path="PIX")] == 1
        other_socket = (i + 4) % 8
        assert paths[lab(gpu=str(i), gpu_bus_id=bus, device=f"mlx5_{other_socket}", path="SYS")] == 1
        same_socket = i ^ 1
        assert paths[lab(gpu=str(i), gpu_bus_id=bus, device=f"mlx5_{same_socket}", path="NODE")] == 1
    ok = samples(text, "fabricmon_gpu_nic_affinity_ok")
    assert ok == {lab(gpu=str(i)): 1 for i in range(8)}
    assert samples(text, "fabricmon_gpu_numa_node") == {lab(gpu=str(i)): i // 4 for i in range(8)}
    assert samples(text, "fabricmon_ib_device_numa_node") == {lab(device=f"mlx5_{i}"): i // 4 for i in range(8)}
    assert samples(text, "fabricmon_gpudirect_rdma_path_available") == {
        lab(method="peermem"): 1, lab(method="nv_peer_mem"): 0, lab(method="dmabuf"): 0}
    info = samples(text, "fabricmon_gpu_info")
    assert {dict(k)["uuid"] for k in info} == {g["uuid"] for g in nvml}
    assert not samples(text, "fabricmon_roce_pfc_enabled")     # an InfiniBand node has no RoCE series


def test_miswired_dgx_findings(capsys):
    rc, out = run_cli(capsys, "check", "--replay", str(BUNDLES / "dgx-h100-miswired"))
    assert rc == WARNING
    lines = out.splitlines()
    aff = [ln for ln in lines if ln.startswith("WARNING gpu_nic_affinity:")]
    assert len(aff) == 1 and "GPU3" in aff[0] and "is NODE" not in aff[0] and "are NODE" in aff[0]
    assert "NCCL uses GPUDirect RDMA only at PXB or closer" in aff[0]
    share = [ln for ln in lines if ln.startswith("WARNING gpu_nic_sharing:")]
    assert len(share) == 2
    assert "GPU4 shares mlx5_4 (PIX) with GPU5" in share[0] and "mlx5_5 (on NUMA node 1)" in share[0]
    assert "GPU5 shares mlx5_4 (PIX) with GPU4" in share[1]
    nccl = [ln for ln in lines if ln.startswith("WARNING nccl_ib_hca:")]
    assert [ln.split()[2] for ln in nccl] == ["GPU0", "GPU1", "GPU2", "GPU3"]
    assert "pairs it with mlx5_3 on NUMA node 1 (SYS)" in nccl[0]
    assert "allow its nearest NIC mlx5_0 in NCCL_IB_HCA" in nccl[0]
    rc, text = run_cli(capsys, "once", "--replay", str(BUNDLES / "dgx-h100-miswired"))
    ok = samples(text, "fabricmon_gpu_nic_affinity_ok")
    assert ok[lab(gpu="3")] == 0 and ok[lab(gpu="5")] == 1
    nearest = samples(text, "fabricmon_gpu_nearest_nic_info")
    assert nearest[lab(gpu="5", device="mlx5_4", path="PIX")] == 1
    assert nearest[lab(gpu="3", device="mlx5_0", path="NODE")] == 1
    status = samples(text, "fabricmon_check_status")
    assert status[lab(check="gpu_nic_affinity", device="GPU3", port="", **{"class": "degraded"})] == WARNING
    assert status[lab(check="gpu_nic_affinity", device="GPU0", port="", **{"class": "watch"})] == OK


def test_no_peermem_is_critical(capsys):
    rc, out = run_cli(capsys, "check", "--replay", str(BUNDLES / "no-peermem"))
    assert rc == CRITICAL
    assert ("CRITICAL gpudirect_rdma: nvidia-peermem not loaded and DMA-BUF unavailable: GPUDirect RDMA is off; "
            "`modprobe nvidia-peermem` and add it to /etc/modules-load.d") in out
    assert "proprietary NVIDIA kernel module" in out
    rc, text = run_cli(capsys, "once", "--replay", str(BUNDLES / "no-peermem"))
    assert samples(text, "fabricmon_gpudirect_rdma_path_available") == {
        lab(method="peermem"): 0, lab(method="nv_peer_mem"): 0, lab(method="dmabuf"): 0}
    assert samples(text, "fabricmon_check_status")[lab(check="gpudirect_rdma", device="", port="",
                                                                 **{"class": "fatal"})] == CRITICAL


def test_roce_healthy_metrics(capsys):
    rc, out = run_cli(capsys, "check", "--replay", str(BUNDLES / "roce-pfc-prio3"), "-v")
    assert rc == 0
    for check in ("roce_pfc", "roce_pfc_lossy", "roce_trust", "roce_mtu", "roce_pause_storm", "roce_cnp_ignored"):
        assert out.count(f"OK {check}: mlx5_") == 2, check
    # one sample: the pauses and losses counted before it have no rate yet, so those checks judge nothing (no
    # status: test_healthy_roce_stays_ok_over_two_samples judges them)
    for check in ("roce_pause_rate", "roce_pause_duration", "roce_lossless_drops"):
        assert f" {check}: " not in out, check
    assert "OK gpudirect_rdma: GPUDirect RDMA available via peermem, dmabuf" in out
    rc, text = run_cli(capsys, "once", "--replay", str(BUNDLES / "roce-pfc-prio3"))
    pfc = samples(text, "fabricmon_roce_pfc_enabled")
    assert len(pfc) == 16
    assert pfc[lab(device="mlx5_0", netdev="ens1f0np0", priority="3")] == 1
    assert pfc[lab(device="mlx5_0", netdev="ens1f0np0", priority="0")] == 0
    assert samples(text, "fabricmon_roce_trust_info") == {
        lab(device="mlx5_0", netdev="ens1f0np0", trust="dscp"): 1,
        lab(device="mlx5_1", netdev="ens2f0np0", trust="dscp"): 1}
    frames = samples(text, "fabricmon_roce_pause_frames_total")
    assert frames[lab(device="mlx5_0", netdev="ens1f0np0", priority="3", direction="rx")] == 1533
    assert frames[lab(device="mlx5_0", netdev="ens1f0np0", priority="3", direction="tx")] == 2387
    dur = samples(text, "fabricmon_roce_pause_duration_seconds_total")
    assert dur[lab(device="mlx5_0", netdev="ens1f0np0", priority="3", direction="rx")] == pytest.approx(0.008841)
    assert samples(text, "fabricmon_roce_mtu_bytes")[lab(device="mlx5_0", netdev="ens1f0np0")] == 4096
    assert samples(text, "fabricmon_netdev_mtu_bytes")[lab(device="mlx5_0", netdev="ens1f0np0")] == 9000
    assert samples(text, "fabricmon_netdev_speed_bytes_per_second")[lab(device="mlx5_1", netdev="ens2f0np0")] == 5e+10
    assert samples(text, "fabricmon_roce_cnp_sent_total")[lab(device="mlx5_0", netdev="ens1f0np0")] == 345678
    assert samples(text, "fabricmon_roce_cnp_handled_total")[lab(device="mlx5_0", netdev="ens1f0np0")] == 334455
    assert samples(text, "fabricmon_roce_cnp_ignored_total")[lab(device="mlx5_0", netdev="ens1f0np0")] == 0
    assert samples(text, "fabricmon_roce_ecn_marked_packets_total")[lab(device="mlx5_0", netdev="ens1f0np0")] == 456789
    storms = samples(text, "fabricmon_roce_pause_storm_events_total")
    assert storms[lab(device="mlx5_0", netdev="ens1f0np0", level="error")] == 0
    errs = samples(text, "fabricmon_netdev_errors_total")
    assert {dict(k)["counter"] for k in errs} == {"rx_discards_phy", "rx_out_of_buffer", "rx_crc_errors_phy",
                                                   "rx_symbol_err_phy", "link_down_events_phy",
                                                   "rx_prio0_discards", "rx_prio3_discards"}
    # raw dumps never leak out: 600+ ethtool stats, a handful of series
    assert "rx_vport_rdma_unicast_bytes" not in text


def test_roce_pfc_off_and_storm_findings(capsys):
    rc, out = run_cli(capsys, "check", "--replay", str(BUNDLES / "roce-pfc-off-storm"))
    assert rc == CRITICAL
    assert ("CRITICAL roce_pfc: mlx5_0 (ens1f0np0): PFC is disabled on lossless priority 3" in out
            and "mlnx_qos -i ens1f0np0 --pfc 0,0,0,1,0,0,0,0" in out)
    assert "WARNING roce_trust: mlx5_0 (ens1f0np0): priority trust state is pcp, expected dscp" in out
    assert "WARNING roce_mtu: mlx5_0 (ens1f0np0): netdev MTU 1500 gives a RoCE MTU of 1024" in out
    assert "WARNING roce_pfc_lossy: mlx5_1 (ens2f0np0): PFC is enabled on priority 4, which should be lossy" in out
    assert "WARNING roce_pause_storm: mlx5_1 (ens2f0np0): pause-storm events since the counters were cleared: " \
           "2 error, 14 warning" in out
    rc, text = run_cli(capsys, "once", "--replay", str(BUNDLES / "roce-pfc-off-storm"))
    assert samples(text, "fabricmon_roce_pfc_enabled")[lab(device="mlx5_0", netdev="ens1f0np0", priority="3")] == 0
    assert samples(text, "fabricmon_roce_pause_storm_events_total")[
        lab(device="mlx5_1", netdev="ens2f0np0", level="error")] == 2
    assert samples(text, "fabricmon_roce_mtu_bytes")[lab(device="mlx5_0", netdev="ens1f0np0")] == 1024
    assert not [k for k in samples(text, "fabricmon_roce_pause_frames_total") if dict(k)["device"] == "mlx5_0"]


def test_roce_rate_checks_over_two_samples(tmp_path):
    snap = two_samples("roce-pfc-off-storm", tmp_path)
    f = snap.findings
    rate = by_check(f, "roce_pause_rate")
    assert rate["mlx5_1"].status == WARNING and "2500 tx pause frames/s on priority 3" in rate["mlx5_1"].message
    assert "this NIC is pausing the switch" in rate["mlx5_1"].message
    assert "mlx5_0" not in rate         # PFC off (roce_pfc): no per-priority pause counters, nothing to judge
    dur = by_check(f, "roce_pause_duration")
    assert dur["mlx5_1"].status == CRITICAL and "paused 60% of the time" in dur["mlx5_1"].message
    storm = by_check(f, "roce_pause_storm")
    assert storm["mlx5_1"].status == CRITICAL
    assert "1 pause-storm error event(s) in the last 1m" in storm["mlx5_1"].message
    assert storm["mlx5_0"].status == OK
    drops = by_check(f, "roce_lossless_drops")
    assert drops["mlx5_0"].status == WARNING
    for part in ("rx_discards_phy +5000", "out_of_sequence +300", "local_ack_timeout_err +20"):
        assert part in drops["mlx5_0"].message
    assert "rx_prio0_discards" not in drops["mlx5_0"].message     # priority 0 is lossy
    assert drops["mlx5_1"].status == OK
    cnp = by_check(f, "roce_cnp_ignored")
    assert cnp["mlx5_0"].status == WARNING and "rp_cnp_ignored rose by 500" in cnp["mlx5_0"].message
    assert "DCQCN is off" in cnp["mlx5_0"].message
    assert cnp["mlx5_1"].status == OK


def test_healthy_roce_stays_ok_over_two_samples(tmp_path):
    snap = two_samples("roce-pfc-prio3", tmp_path)
    roce = [f for f in snap.findings if f.check.startswith("roce_")]
    assert len(roce) == 18
    assert all(f.status == OK for f in roce), [f.line() for f in roce if f.status]
    assert "at most 10 pause frames/s" in by_check(roce, "roce_pause_rate")["mlx5_0"].message


def test_check_with_state_on_a_live_tree_reports_rates(tmp_path, capsys):
    """`fabricmon check --state` run twice (cron style) on a live tree: the rate findings appear."""
    mb = make_bundles()
    t0 = mb.generate(tmp_path / "b0", 0, ["roce-pfc-off-storm"])[0]
    t1 = mb.generate(tmp_path / "b1", 1, ["roce-pfc-off-storm"])[0]
    state = tmp_path / "state.json"
    cfg = materialize(t0, tmp_path / "live")
    rc, out = run_cli(capsys, "check", "-c", str(cfg), "--state", str(state))
    assert rc == CRITICAL and "roce_cnp_ignored" not in out and "roce_lossless_drops" not in out
    cfg = materialize(t1, tmp_path / "live")
    rc, out = run_cli(capsys, "check", "-c", str(cfg), "--state", str(state))
    assert rc == CRITICAL
    assert "CRITICAL roce_pause_storm: mlx5_1 (ens2f0np0): 1 pause-storm error event(s)" in out
    assert "WARNING roce_lossless_drops: mlx5_0 (ens1f0np0): loss on lossless priority 3" in out
    assert "WARNING roce_cnp_ignored: mlx5_0 (ens1f0np0): rp_cnp_ignored rose by 500" in out
    assert "CRITICAL roce_pause_duration: mlx5_1 (ens2f0np0): tx priority 3 was paused" in out
    assert "roce_pause_rate: mlx5_1 (ens2f0np0):" in out and "pause frames/s on priority 3" in out


def test_live_tree_with_fake_nvml_matches_replay(tmp_path, capsys, monkeypatch):
    """The same DGX through LiveIO + pynvml (faked at its functions) gives the replay's GPU series;
    `fabricmon capture` records NVML into the bundle, and the capture replays identically."""
    bundle = BUNDLES / "dgx-h100-miswired"
    calls = fake_nvml(monkeypatch, bundle_nvml(bundle), as_bytes=True)
    cfg = materialize(bundle, tmp_path / "live")
    rc, live = run_cli(capsys, "check", "-c", str(cfg), "--no-state")
    rc2, replay = run_cli(capsys, "check", "--replay", str(bundle))
    assert rc == rc2 == WARNING
    norm = lambda s: s.replace(str(tmp_path / "live" / "host"), "")      # noqa: E731
    assert norm(live).splitlines() == replay.splitlines()
    assert calls and calls.count("init") == calls.count("shutdown")
    cap = tmp_path / "capture"
    assert cli.main(["capture", "-c", str(cfg), str(cap)]) == 0
    capsys.readouterr()
    assert bundle_nvml(cap) == [dict(g) for g in bundle_nvml(bundle)]
    rc3, again = run_cli(capsys, "check", "--replay", str(cap))
    assert rc3 == WARNING and again.splitlines() == live.splitlines()
    _, m1 = run_cli(capsys, "once", "--replay", str(cap))
    _, m2 = run_cli(capsys, "once", "--replay", str(bundle))
    for name in ("fabricmon_gpu_nic_path_info", "fabricmon_gpu_nic_affinity_ok", "fabricmon_gpu_numa_node",
                 "fabricmon_gpudirect_rdma_path_available"):
        assert samples(m1, name) == samples(m2, name), name


def test_once_replay_as_a_subprocess():
    res = subprocess.run([sys.executable, "-m", "fabricmon", "once", "--replay", str(BUNDLES / "roce-pfc-off-storm")],
                         capture_output=True, text=True, timeout=60, cwd=ROOT)
    assert res.returncode == 0, res.stderr
    assert 'fabricmon_roce_pfc_enabled{device="mlx5_1",netdev="ens2f0np0",priority="4"} 1.0' in res.stdout
    assert 'fabricmon_check_status{check="roce_pfc",class="fatal",device="mlx5_0",port="1"} 2.0' in res.stdout


def test_collector_snapshot_extra():
    snap = snapshot("dgx-h100")
    aff = snap.gpu.affinity
    assert aff.assigned == {i: f"mlx5_{i}" for i in range(8)}
    assert snap.roce.views == []
    assert snap.gpu.gpudirect.methods == {"peermem": True, "nv_peer_mem": False, "dmabuf": False}
