"""Counters that saturate, reset to zero, jump backwards, or flap several times per interval."""

from __future__ import annotations

from fault_harness import val

from fabricmon.checks import CRITICAL, OK
from fabricmon.pipeline.scheduler import Pipeline
from fabricmon.config import from_dict
from fabricmon.host import LiveIO

PORT = "class/infiniband/mlx5_0/ports/1/counters"


def collector(harness, **checks):
    raw = harness.config()
    raw["checks"] = checks
    cfg = from_dict(raw)
    return Pipeline(cfg, LiveIO(cfg.sysfs, cfg.procfs))


def status(snap, check, device="mlx5_0", port=1):
    return next(f for f in snap.findings if f.check == check and f.device == device and f.port == port)


def judged(snap, check, device="mlx5_0", port=1) -> bool:
    return any(f.check == check and f.device == device and f.port == port for f in snap.findings)


def write(harness, name, value):
    (harness.sysfs / PORT / name).write_text(str(value))


def test_reset_and_backwards_jump_give_no_negative_rate_and_no_alert(harness):
    col = collector(harness)
    write(harness, "symbol_error", 1000)
    col.collect(["sysfs"])
    for value in (0, 10, 5, 3):                  # reset to zero, then jumps backwards
        write(harness, "symbol_error", value)
        snap = col.collect(["sysfs"])
        f = status(snap, "symbol_errors")
        assert f.status == OK, f.message
    assert "10 symbol_errors" in f.message        # only the real increase 0 -> 10 counts
    col.close()


def test_saturated_counter_is_reported_never_a_rate(harness):
    col = collector(harness, saturation_severity="warning")
    write(harness, "symbol_error", 65535)         # saturated before we ever saw it
    col.collect(["sysfs"])
    write(harness, "symbol_error", 65535)
    snap = col.collect(["sysfs"])                    # "unknown, at least max": no rate, no alert
    assert snap.ib.saturation[("mlx5_0", 1)]["symbol_errors"] is True
    assert not judged(snap, "symbol_errors")           # its rate is unknown: no status, never an OK of 0
    assert status(snap, "counter_saturation").status == 1
    write(harness, "local_link_integrity_errors", 15)   # 4-bit counter steps 0 -> its maximum
    snap = col.collect(["sysfs"])
    assert snap.ib.saturation[("mlx5_0", 1)]["local_link_integrity_errors"] is True
    assert status(snap, "link_integrity").status == 2  # at least 15 happened: a real increase
    col.close()


def test_several_flaps_within_one_interval_are_counted(harness):
    col = collector(harness)
    col.collect(["sysfs"])
    write(harness, "link_downed", 3)              # three flaps between two polls
    snap = col.collect(["sysfs"])
    f = status(snap, "link_flap")
    assert f.status == CRITICAL
    assert "rose by 3" in f.message
    col.close()


def test_saturation_metric_in_a_scrape(harness):
    write(harness, "excessive_buffer_overrun_errors", 15)
    harness.start()
    s = harness.scrape()
    assert val(s, "fabricmon_ib_port_saturated", device="mlx5_0", port=1,
               counter="excessive_buffer_overrun_errors") == 1
    assert val(s, "fabricmon_ib_port_saturated", device="mlx5_0", port=1, counter="symbol_errors") == 0
    # saturated before the first sample: what it counts is unknown, link_integrity has no status (absent, not OK)
    assert val(s, "fabricmon_check_status", check="link_integrity", device="mlx5_0", port=1,
               **{"class": "watch"}) is None


def test_step_onto_saturation_counts_as_a_lower_bound(harness):
    """254 -> 255 on the 8-bit LinkDowned counter is still a flap; later samples are unknown."""
    col = collector(harness)
    write(harness, "link_downed", 254)
    col.collect(["sysfs"])
    write(harness, "link_downed", 255)
    snap = col.collect(["sysfs"])
    assert snap.ib.saturation[("mlx5_0", 1)]["link_downed"] is True
    f = status(snap, "link_flap")
    assert f.status == 1 and "rose by 1" in f.message
    snap = col.collect(["sysfs"])                    # still 255: nothing more is inferred
    assert "rose by 1" in status(snap, "link_flap").message
    col.close()
