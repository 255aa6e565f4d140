"""sysfs files that raise EINVAL or EACCES, vanish between listing and reading, or read N/A."""

from __future__ import annotations

import errno
import os

from fault_harness import val

from fabricmon.host import LiveIO

PORT = "class/infiniband/mlx5_0/ports/1"


class FaultyIO(LiveIO):
    """The real LiveIO, with chosen files failing the way a kernel driver makes them fail."""

    def __init__(self, *a, faults: dict[str, int], **kw):
        super().__init__(*a, **kw)
        self.faults = faults

    def read(self, root, rel):
        for suffix, code in self.faults.items():
            if rel.endswith(suffix):
                raise OSError(code, os.strerror(code), rel)
        return super().read(root, rel)


def test_einval_and_eacces_cost_only_that_value(harness):
    io = FaultyIO(str(harness.sysfs), "/proc", faults={
        f"{PORT}/counters/symbol_error": errno.EINVAL,
        f"{PORT}/hw_counters/out_of_buffer": errno.EACCES,
    })
    harness.start(io=io)
    s = harness.wait(lambda s: (val(s, "fabricmon_source_errors_total", source="sysfs", kind="read") or 0) >= 2, 10)
    assert val(s, "fabricmon_ib_port_symbol_errors_total", device="mlx5_0", port=1) is None
    assert val(s, "fabricmon_ib_port_link_downed_total", device="mlx5_0", port=1) == 0      # the rest is there
    assert val(s, "fabricmon_ib_port_symbol_errors_total", device="mlx5_1", port=1) == 0    # other HCA intact
    assert val(s, "fabricmon_ib_port_up", device="mlx5_0", port=1) == 1
    assert val(s, "fabricmon_source_up", source="sysfs") == 1
    harness.assert_sysfs_keeps_reporting()


def test_file_vanishes_between_listing_and_reading(harness):
    counters = harness.sysfs / PORT / "counters"
    (counters / "port_rcv_errors").unlink()
    os.symlink(counters / "gone", counters / "port_rcv_errors")      # listed, but ENOENT on open
    (harness.sysfs / PORT / "hw_counters" / "out_of_sequence").unlink()
    (harness.sysfs / PORT / "hw_counters" / "out_of_sequence").mkdir()  # EISDIR on read
    harness.start()
    s = harness.wait(lambda s: (val(s, "fabricmon_source_errors_total", source="sysfs", kind="read") or 0) >= 2, 10)
    assert val(s, "fabricmon_ib_port_receive_errors_total", device="mlx5_0", port=1) is None
    assert val(s, "fabricmon_ib_port_symbol_errors_total", device="mlx5_0", port=1) == 0
    harness.assert_sysfs_keeps_reporting()


def test_na_no_pma_is_no_value_not_an_error(harness):
    (harness.sysfs / PORT / "counters" / "symbol_error").write_text("N/A (no PMA)")
    harness.start()
    s = harness.scrape()
    assert val(s, "fabricmon_ib_port_symbol_errors_total", device="mlx5_0", port=1) is None
    assert val(s, "fabricmon_source_errors_total", source="sysfs", kind="read") == 0
    assert val(s, "fabricmon_source_errors_total", source="sysfs", kind="parse") == 0
    harness.assert_sysfs_keeps_reporting()


def test_garbage_counter_is_a_parse_error(harness):
    (harness.sysfs / PORT / "counters" / "link_downed").write_text("banana")
    (harness.sysfs / PORT / "rate").write_text("fast")
    harness.start()
    s = harness.wait(lambda s: (val(s, "fabricmon_source_errors_total", source="sysfs", kind="parse") or 0) >= 2, 10)
    assert val(s, "fabricmon_ib_port_link_downed_total", device="mlx5_0", port=1) is None
    assert val(s, "fabricmon_ib_port_up", device="mlx5_0", port=1) == 1
    harness.assert_sysfs_keeps_reporting()
