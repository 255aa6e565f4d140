"""The live counter wins (issue 18, item 5): where mlx4 has a data or packet counter both in
`counters/` and in `counters_ext/`, fabricmon exports the live one, never a stale 0 and never a
32-bit value stuck at 2^32-1. Checked on node_exporter's own fixture tree (the real ttar excerpt
in ../shared/captures) against the values node_exporter exports for it, and against the real
node_exporter binary side by side where it is installed."""

from __future__ import annotations

import shutil
import subprocess
import urllib.request
from pathlib import Path

import pytest
from prometheus_client.parser import text_string_to_metric_families

from fabricmon.config import from_dict
from fabricmon.exporter import render
from fabricmon.host import LiveIO
from fabricmon.pipeline.scheduler import Pipeline
from helpers import CAPTURES, extract_ttar, free_port, skip_without_captures, unavailable, wait_until

TTAR = CAPTURES / "sysfs" / "prometheus-node_exporter__sys.ttar.class_infiniband.excerpt.ttar"
NODE_EXPORTER = "/usr/bin/prometheus-node-exporter"

# our counter -> node_exporter's series for counters/ and for counters_ext/ ("legacy"), if any
NODE_EXPORTER_NAMES = {
    "symbol_errors": ("symbol_error_total", None),
    "link_error_recovery": ("link_error_recovery_total", None),
    "link_downed": ("link_downed_total", None),
    "receive_errors": ("port_errors_received_total", None),
    "receive_remote_physical_errors": ("port_receive_remote_physical_errors_total", None),
    "receive_switch_relay_errors": ("port_receive_switch_relay_errors_total", None),
    "transmit_discards": ("port_discards_transmitted_total", None),
    "receive_discards": ("port_discards_received_total", None),
    "transmit_constraint_errors": ("port_constraint_errors_transmitted_total", None),
    "receive_constraint_errors": ("port_constraint_errors_received_total", None),
    "local_link_integrity_errors": ("local_link_integrity_errors_total", None),
    "excessive_buffer_overrun_errors": ("excessive_buffer_overrun_errors_total", None),
    "vl15_dropped": ("vl15_dropped_total", None),
    "transmit_wait": ("port_transmit_wait_total", None),
    "transmit_bytes": ("port_data_transmitted_bytes_total", "legacy_data_transmitted_bytes_total"),
    "receive_bytes": ("port_data_received_bytes_total", "legacy_data_received_bytes_total"),
    "transmit_packets": ("port_packets_transmitted_total", "legacy_packets_transmitted_total"),
    "receive_packets": ("port_packets_received_total", "legacy_packets_received_total"),
    "transmit_unicast_packets": ("unicast_packets_transmitted_total", "legacy_unicast_packets_transmitted_total"),
    "receive_unicast_packets": ("unicast_packets_received_total", "legacy_unicast_packets_received_total"),
    "transmit_multicast_packets": ("multicast_packets_transmitted_total", "legacy_multicast_packets_transmitted_total"),
    "receive_multicast_packets": ("multicast_packets_received_total", "legacy_multicast_packets_received_total"),
}


def counters_of(text: str, prefix: str) -> dict[tuple[str, str, str], float]:
    out = {}
    for fam in text_string_to_metric_families(text):
        for s in fam.samples:
            if s.name.startswith(prefix) and s.name.endswith("_total") and "port" in s.labels:
                out[(s.name[len(prefix):], s.labels["device"], s.labels["port"])] = s.value
    return out


def fabricmon_counters(sysfs: Path) -> dict[tuple[str, str, str], float]:
    cfg = from_dict({"paths": {"sysfs": str(sysfs), "state_dir": str(sysfs.parent / "state"), "tool_dirs": []},
                     "sources": {n: {"enabled": False} for n in ("ibstat", "perfquery", "iblinkinfo")}})
    pipe = Pipeline(cfg, LiveIO(cfg.sysfs, cfg.procfs, tool_dirs=[]))
    try:
        text = render(pipe.collect()).decode()
    finally:
        pipe.close()
    return {(name.removesuffix("_total"), dev, port): v
            for (name, dev, port), v in counters_of(text, "fabricmon_ib_port_").items()}


@pytest.fixture
def fixture_tree(tmp_path: Path) -> Path:
    skip_without_captures(TTAR)
    return extract_ttar(TTAR, tmp_path) / "sys"


def test_mlx4_fixture_the_64_bit_counters_value_beats_a_zero_in_counters_ext(fixture_tree: Path) -> None:
    ours = fabricmon_counters(fixture_tree)
    # port 1: counters/port_rcv_packets reads 6,825,908,347, counters_ext/port_rcv_packets_64 reads 0
    assert ours[("receive_packets", "mlx4_0", "1")] == 6_825_908_347
    assert ours[("transmit_packets", "mlx4_0", "1")] == 6_235_865
    assert ours[("receive_bytes", "mlx4_0", "1")] == 4_631_917 * 4
    # port 2 has no counters/port_rcv_packets: counters_ext/ is all there is
    assert ours[("receive_packets", "mlx4_0", "2")] == 0
    # port 2's counters/port_rcv_data reads 0, counters_ext/port_rcv_data_64 4,631,917: the live one
    assert ours[("receive_bytes", "mlx4_0", "2")] == 4_631_917 * 4
    # a counter without a twin is left alone, saturated or not
    assert ours[("transmit_wait", "mlx4_0", "1")] == 2 ** 32 - 1


def test_a_counters_value_stuck_at_2_32_minus_1_yields_to_counters_ext(fixture_tree: Path) -> None:
    port = fixture_tree / "class/infiniband/mlx4_0/ports/1"
    (port / "counters/port_xmit_packets").write_text(f"{2 ** 32 - 1}\n")
    (port / "counters_ext/port_xmit_packets_64").write_text("9876543210\n")
    (port / "counters/port_xmit_data").write_text(f"{2 ** 32 - 1}\n")
    (port / "counters_ext/port_xmit_data_64").write_text("5000000000\n")
    ours = fabricmon_counters(fixture_tree)
    assert ours[("transmit_packets", "mlx4_0", "1")] == 9_876_543_210
    assert ours[("transmit_bytes", "mlx4_0", "1")] == 5_000_000_000 * 4


def test_every_counter_matches_node_exporter_on_its_own_fixture(fixture_tree: Path, tmp_path: Path) -> None:
    """The real node_exporter on the same tree: every counter it exports for a port, fabricmon
    exports with the same value (of its counters/ and counters_ext/ twins, the live one), and
    fabricmon exports no counter it does not."""
    if not shutil.which(NODE_EXPORTER):
        unavailable(f"{NODE_EXPORTER} is not installed (apt-get install prometheus-node-exporter)")
    port = free_port()
    log = open(tmp_path / "node_exporter.log", "wb")
    proc = subprocess.Popen([NODE_EXPORTER, f"--path.sysfs={fixture_tree}", "--collector.disable-defaults",
                             "--collector.infiniband", f"--web.listen-address=127.0.0.1:{port}"],
                            stdout=log, stderr=subprocess.STDOUT)
    try:
        def exposition() -> str:
            assert proc.poll() is None, (tmp_path / "node_exporter.log").read_text()
            with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=2) as r:
                return r.read().decode()
        text = wait_until(exposition, 10, "node_exporter answering", interval=0.1, ignore=(OSError,))
        assert text, "node_exporter did not answer"
    finally:
        proc.terminate()
        proc.wait(10)
        log.close()
    theirs = counters_of(text, "node_infiniband_")
    expected = {}
    for ours_name, (main, legacy) in NODE_EXPORTER_NAMES.items():
        for (name, dev, p), v in theirs.items():
            if name in (main, legacy):
                key = (ours_name, dev, p)
                expected[key] = max(expected.get(key, v), v)
    assert expected, "node_exporter exported no InfiniBand counter"
    assert fabricmon_counters(fixture_tree) == expected
