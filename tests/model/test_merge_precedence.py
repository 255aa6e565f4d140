"""A port's counters come from the most trusted record type that has them (model.ports.COUNTER_RECORDS),
whatever the sources that made the records are called."""

from __future__ import annotations

from fabricmon.model.node_records import PerfqueryData, PortCounterSet, SysfsData, SysfsDevice, SysfsPort
from fabricmon.model.ports import COUNTER_RECORDS, merge


def sysfs(counters: dict[str, int]) -> SysfsData:
    return SysfsData({"mlx5_0": SysfsDevice("mlx5_0", ports={1: SysfsPort(1, counters=counters,
                                                                            counter_bits={k: 64 for k in counters})})})


def perfquery(value: int) -> PerfqueryData:
    return PerfqueryData({("mlx5_0", 1): PortCounterSet({"symbol_errors": value}, {"symbol_errors": 16})})


def test_sysfs_records_outrank_perfquery_records_in_either_order() -> None:
    assert COUNTER_RECORDS == (SysfsData, PerfqueryData)
    for records in ([sysfs({"symbol_errors": 3}), perfquery(9)], [perfquery(9), sysfs({"symbol_errors": 3})]):
        p = merge(records).ports[("mlx5_0", 1)]
        assert p.counters == {"symbol_errors": 3} and p.counter_record is SysfsData
        assert p.counter_source is None        # named by the pipeline, which knows the sources


def test_perfquery_records_fill_a_port_whose_sysfs_record_has_no_counters() -> None:
    p = merge([sysfs({}), perfquery(9)]).ports[("mlx5_0", 1)]
    assert p.counters == {"symbol_errors": 9} and p.counter_bits == {"symbol_errors": 16}
    assert p.counter_record is PerfqueryData
    inv = merge([sysfs({}), perfquery(9)])
    assert inv.ib_ports(without_sysfs_counters=True) == [("mlx5_0", 1)]
    assert merge([sysfs({"symbol_errors": 3})]).ib_ports(without_sysfs_counters=True) == []


def test_the_pipeline_names_the_source_of_a_ports_counters(tmp_path) -> None:
    from fabricmon.config import from_dict
    from fabricmon.host import LiveIO
    from fabricmon.pipeline.scheduler import Pipeline
    from fabricmon.config import registered
    from fabricmon.sim import sysfs_tree
    sysfs_tree.build(tmp_path, 1)
    cfg = from_dict({"paths": {"sysfs": str(tmp_path)},
                     "sources": {n: {"enabled": False} for n in registered("node") if n != "sysfs"}})
    col = Pipeline(cfg, LiveIO(str(tmp_path)))
    try:
        p = col.collect().ib.ports[("mlx5_0", 1)]
    finally:
        col.close()
    assert p.counter_record is SysfsData and p.counter_source == "sysfs" and p.counters
