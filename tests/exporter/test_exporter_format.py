"""`fabricmon once` on our own sysfs tree: the exposition parsed back with prometheus_client."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pytest
import yaml
from prometheus_client.parser import text_string_to_metric_families

from fabricmon.model import ibspec
from fabricmon.checks.degraded_link import REASONS
from fabricmon.pipeline.scheduler import Pipeline
from fabricmon.config import from_dict
from fabricmon.checks.settings import COUNTER_CHECKS
from fabricmon.config import registered
from fabricmon.exporter import render
from fabricmon.host import LiveIO
from helpers import FIXTURES, fabricmon_command

FIXTURE = FIXTURES / "sysfs" / "two_hca"
IB = "class/infiniband"
PORTS = {("mlx5_0", "1"), ("mlx5_0", "2"), ("mlx5_1", "1")}
ALL_CHECKS = {*COUNTER_CHECKS, "degraded_link", "counter_saturation"}
UNREADABLE = f"{IB}/mlx5_0/ports/1/counters/port_rcv_errors"


def fabricmon(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([*fabricmon_command(), *args], capture_output=True, text=True, timeout=120)


def sysfs_only_config(path: Path, sysfs: Path, **extra) -> Path:
    """paths.sysfs at our tree; every command and non-sysfs source off (no host tools needed)."""
    doc = {"paths": {"sysfs": str(sysfs), "state_dir": str(path.parent / "state")},
           "sources": {name: {"enabled": False} for name in registered("node") if name not in ("sysfs", "hw_counters")},
           **extra}
    path.write_text(yaml.safe_dump(doc))
    return path


class Metrics:
    def __init__(self, text: str):
        self.text = text
        self.families = {f.name: f for f in text_string_to_metric_families(text)}
        self.samples: dict[tuple[str, tuple], float] = {}
        for fam in self.families.values():
            for s in fam.samples:
                key = (s.name, tuple(sorted(s.labels.items())))
                assert key not in self.samples, f"duplicate sample {key}"
                self.samples[key] = s.value

    def get(self, name: str, **labels: str) -> float | None:
        return self.samples.get((name, tuple(sorted(labels.items()))))

    def series(self, name: str) -> dict[tuple, float]:
        return {lbl: v for (n, lbl), v in self.samples.items() if n == name}

    def port(self, name: str, dev: str, port: str, **labels: str) -> float | None:
        return self.get(name, device=dev, port=port, **labels)


@pytest.fixture(scope="module")
def tree(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("exp") / "sys"
    shutil.copytree(FIXTURE, root, symlinks=True)
    # one unreadable counter: a directory where a file should be (EISDIR; chmod does not stop root)
    (root / UNREADABLE).unlink()
    (root / UNREADABLE).mkdir()
    return root


@pytest.fixture(scope="module")
def metrics(tree: Path) -> Metrics:
    cfg = sysfs_only_config(tree.parent / "cfg.yml", tree,
                            expected_links=[{"device": "mlx5_*", "width": "4X", "speed": "NDR"}])
    res = fabricmon("once", "--config", str(cfg))
    assert res.returncode == 0, res.stderr
    return Metrics(res.stdout)


def test_every_port_is_present_with_info(metrics: Metrics) -> None:
    info = metrics.series("fabricmon_ib_port_info")
    assert {(dict(k)["device"], dict(k)["port"]) for k in info} == PORTS
    assert all(v == 1 for v in info.values())
    layers = {(dict(k)["device"], dict(k)["port"]): dict(k)["link_layer"] for k in info}
    assert layers == {("mlx5_0", "1"): "InfiniBand", ("mlx5_0", "2"): "InfiniBand",
                      ("mlx5_1", "1"): "Ethernet"}
    netdevs = {dict(k)["device"]: dict(k)["netdev"] for k in info}
    assert netdevs == {"mlx5_0": "ibp17s0", "mlx5_1": "ens3f0np0"}


def test_down_port_is_present_as_down(metrics: Metrics) -> None:
    m = metrics
    assert m.port("fabricmon_ib_port_up", "mlx5_0", "2") == 0
    assert m.port("fabricmon_ib_port_state_id", "mlx5_0", "2") == 1
    assert m.port("fabricmon_ib_port_physical_state_id", "mlx5_0", "2") == 2
    assert m.port("fabricmon_ib_port_rate_bytes_per_second", "mlx5_0", "2") == 0   # not the stale 10G
    assert m.port("fabricmon_ib_port_link_width_lanes", "mlx5_0", "2") == 0
    assert m.port("fabricmon_ib_port_degraded", "mlx5_0", "2", reason="down") == 1
    assert m.port("fabricmon_ib_port_degraded", "mlx5_0", "2", reason="width") == 0
    assert m.port("fabricmon_check_status", "mlx5_0", "2", check="degraded_link", **{"class": "fatal"}) == 2
    assert m.get("fabricmon_health_status") == 2


def test_up_ports(metrics: Metrics) -> None:
    m = metrics
    assert m.port("fabricmon_ib_port_up", "mlx5_0", "1") == 1
    assert m.port("fabricmon_ib_port_state_id", "mlx5_0", "1") == 4
    assert m.port("fabricmon_ib_port_physical_state_id", "mlx5_0", "1") == 5
    assert m.port("fabricmon_ib_port_rate_bytes_per_second", "mlx5_0", "1") == 5e+10
    assert m.port("fabricmon_ib_port_link_width_lanes", "mlx5_0", "1") == 4
    assert m.port("fabricmon_ib_port_expected_rate_bytes_per_second", "mlx5_0", "1") == 5e+10
    for r in REASONS:
        assert m.port("fabricmon_ib_port_degraded", "mlx5_0", "1", reason=r) == 0
    # RoCE: judged by nobody's IB expectation, but its rate is there
    assert m.port("fabricmon_ib_port_up", "mlx5_1", "1") == 1
    assert m.port("fabricmon_ib_port_rate_bytes_per_second", "mlx5_1", "1") == 1.25e+10
    assert m.port("fabricmon_ib_port_link_width_lanes", "mlx5_1", "1") == 2
    assert m.port("fabricmon_ib_port_expected_rate_bytes_per_second", "mlx5_1", "1") is None
    assert m.port("fabricmon_check_status", "mlx5_1", "1", check="degraded_link", **{"class": "watch"}) == 0


def test_byte_counters_are_words_times_four(metrics: Metrics, tree: Path) -> None:
    m = metrics
    for dev, port in PORTS:
        base = tree / IB / dev / "ports" / port / "counters"
        for fname, metric in (("port_xmit_data", "fabricmon_ib_port_transmit_bytes_total"),
                              ("port_rcv_data", "fabricmon_ib_port_receive_bytes_total")):
            words = int((base / fname).read_text())
            assert m.port(metric, dev, port) == words * 4, (dev, port, fname)
        pk = int((base / "port_xmit_packets").read_text())
        assert m.port("fabricmon_ib_port_transmit_packets_total", dev, port) == pk   # not scaled
    assert m.port("fabricmon_ib_port_transmit_bytes_total", "mlx5_0", "1") == 123456789012 * 4


def test_counter_values_and_types(metrics: Metrics) -> None:
    m = metrics
    assert m.port("fabricmon_ib_port_symbol_errors_total", "mlx5_0", "1") == 3
    assert m.port("fabricmon_ib_port_transmit_discards_total", "mlx5_0", "1") == 7
    assert m.port("fabricmon_ib_port_transmit_wait_total", "mlx5_0", "1") == 8675309
    for c in ibspec.COUNTERS:          # mlx5_0 port 1 has every counter file sysfs offers
        fam = m.families[f"fabricmon_ib_port_{c.name}"]
        assert fam.type == "counter" and fam.documentation
    assert m.port("fabricmon_ib_port_receive_unicast_packets_total", "mlx5_0", "1") == 4242424242
    assert m.port("fabricmon_ib_port_transmit_multicast_packets_total", "mlx5_0", "1") == 77
    assert m.port("fabricmon_ib_port_receive_discards_total", "mlx5_0", "1") == 5
    for name in ("fabricmon_ib_port_up", "fabricmon_ib_port_rate_bytes_per_second", "fabricmon_check_status"):
        assert m.families[name].type == "gauge"


def test_na_counter_costs_only_that_value(metrics: Metrics) -> None:
    m = metrics
    assert m.port("fabricmon_ib_port_vl15_dropped_total", "mlx5_0", "2") is None    # N/A (no PMA)
    assert m.port("fabricmon_ib_port_vl15_dropped_total", "mlx5_0", "1") == 0
    assert m.port("fabricmon_ib_port_symbol_errors_total", "mlx5_0", "2") == 0
    assert m.port("fabricmon_ib_port_saturated", "mlx5_0", "2", counter="vl15_dropped") is None


def test_unreadable_counter_costs_only_that_value(metrics: Metrics) -> None:
    m = metrics
    assert m.port("fabricmon_ib_port_receive_errors_total", "mlx5_0", "1") is None
    assert m.port("fabricmon_ib_port_receive_errors_total", "mlx5_0", "2") == 0
    assert m.port("fabricmon_ib_port_symbol_errors_total", "mlx5_0", "1") == 3
    assert m.port("fabricmon_ib_port_link_downed_total", "mlx5_0", "1") == 0
    assert m.get("fabricmon_source_errors_total", source="sysfs", kind="read") == 1
    assert m.get("fabricmon_source_errors_total", source="sysfs", kind="parse") == 0
    assert m.get("fabricmon_source_up", source="sysfs") == 1
    # the device and its other port are all there
    assert m.port("fabricmon_ib_port_up", "mlx5_0", "1") == 1


def test_every_error_kind_is_pre_declared(metrics: Metrics) -> None:
    kinds = {dict(k)["kind"] for k in metrics.series("fabricmon_source_errors_total")
             if dict(k)["source"] == "sysfs"}
    assert kinds >= {"not_found", "timeout", "exit_code", "parse", "read"}
    assert metrics.get("fabricmon_source_enabled", source="ibstat") == 0
    assert metrics.get("fabricmon_source_up", source="ibstat") is None


def test_check_status_for_every_check_it_could_judge_on_every_port(metrics: Metrics) -> None:
    """One poll: degraded_link and counter_saturation on every port; a counter check where the port read its
    counters and they never counted (0 since they were cleared); none where one counted before this first
    sample (when is unknown until a second one) or none was read: no status, never an OK it did not earn."""
    got = {(dict(k)["check"], dict(k)["device"], dict(k)["port"])
           for k in metrics.series("fabricmon_check_status")}
    want = {(c, d, p) for c in ("degraded_link", "counter_saturation") for d, p in PORTS}
    for c, (names, *_) in COUNTER_CHECKS.items():
        for d, p in PORTS:
            values = [metrics.port(f"fabricmon_ib_port_{n}_total", d, p) for n in names]
            read = [v for v in values if v is not None]
            if read and not any(read):
                want.add((c, d, p))
            elif read:
                assert (c, d, p) not in got, (c, d, p)
    assert want <= got
    assert ("symbol_errors", "mlx5_0", "1") not in got           # 3 symbol errors at the first sample
    assert all(v in (0, 1, 2) for v in metrics.series("fabricmon_check_status").values())


def test_hw_counters_skip_settings(metrics: Metrics) -> None:
    hw = {(dict(k)["device"], dict(k)["counter"]): v for k, v in
          metrics.series("fabricmon_ib_port_hw_counters_total").items()}
    assert ("mlx5_0", "lifespan") not in hw and ("mlx5_1", "lifespan") not in hw
    assert hw[("mlx5_1", "np_cnp_sent")] == 1200
    assert hw[("mlx5_1", "rp_cnp_handled")] == 1190
    assert hw[("mlx5_0", "local_ack_timeout_err")] == 4


def test_device_families(metrics: Metrics) -> None:
    info = {dict(k)["device"]: dict(k) for k in metrics.series("fabricmon_ib_device_info")}
    assert info["mlx5_0"]["node_guid"] == "0x946dae0300a1b2c4"
    assert info["mlx5_0"]["firmware_version"] == "28.40.1202"          # file without newline
    assert info["mlx5_0"]["board_id"] == "MT_0000000970"
    assert info["mlx5_1"]["hca_type"] == "MT4125"
    assert metrics.get("fabricmon_ib_device_numa_node", device="mlx5_0") == 1
    assert metrics.get("fabricmon_ib_device_numa_node", device="mlx5_1") is None   # -1: unknown


def test_self_monitoring(metrics: Metrics) -> None:
    m = metrics
    assert m.get("fabricmon_snapshot_build_duration_seconds_count") == 1
    assert m.get("fabricmon_snapshot_build_duration_seconds_bucket", le="+Inf") == 1
    assert m.get("fabricmon_snapshot_timestamp_seconds") > 1.6e9
    assert m.get("fabricmon_source_last_success_timestamp_seconds", source="sysfs") == 0  # it had an error
    assert m.families["fabricmon_build_info"].samples[0].labels["version"]


def test_no_remote_labels_on_counters(metrics: Metrics) -> None:
    for (name, labels), _ in metrics.samples.items():
        if name.endswith("_total") and name.startswith("fabricmon_ib_port_"):
            assert {k for k, _ in labels} <= {"device", "port", "counter"}, name


def test_render_in_process_matches_the_cli(tree: Path, metrics: Metrics) -> None:
    cfg = from_dict({"paths": {"sysfs": str(tree)},
                     "sources": {n: {"enabled": False} for n in registered("node") if n not in ("sysfs", "hw_counters")},
                     "expected_links": [{"device": "mlx5_*", "width": "4X", "speed": "NDR"}]})
    col = Pipeline(cfg, LiveIO(str(tree)))
    try:
        m = Metrics(render(col.collect()).decode())
    finally:
        col.close()
    volatile = ("timestamp", "duration", "poll_duration")
    a = {k: v for k, v in m.samples.items() if not any(x in k[0] for x in volatile)}
    b = {k: v for k, v in metrics.samples.items() if not any(x in k[0] for x in volatile)}
    assert a == b
