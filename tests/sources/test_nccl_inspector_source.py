"""The nccl_inspector source on a real directory, read through the live host interface: files written
the way NCCL's Inspector writes them (fopen "w" -- truncate in place -- then one write and flush per
communicator), rewritten while read, half-written, garbage, too large, expired."""

from __future__ import annotations

import json
import os
import threading
import time
from pathlib import Path

import pytest

from helpers import FIXTURES, NCCL_UUID as UUID, NCCL_UUID2 as UUID2, nccl_dump, run_inputs
from helpers import nccl_prom_lines as prom_lines

from fabricmon.config import from_dict
from fabricmon.schema import ConfigError
from fabricmon.host.bundle import ReplayIO
from fabricmon.host.io import LiveIO
from fabricmon.sources.nccl_inspector import NcclInspectorSource

def source(tmp_path: Path, **opts: object) -> NcclInspectorSource:
    cfg = from_dict({"sources": {"nccl_inspector": {"enabled": True, "dir": str(tmp_path), **opts}}},
                    check_paths=False)
    return NcclInspectorSource(cfg.sources["nccl_inspector"])


def test_reads_each_gpus_file(tmp_path: Path) -> None:
    nccl_dump(tmp_path / f"nccl_inspector_metrics_{UUID}.prom", {"DP Group 0": 41.5, "TP Group 1": 38.25})
    nccl_dump(tmp_path / f"nccl_inspector_metrics_{UUID2}.prom", {"DP Group 0": 40.0})
    (tmp_path / "unrelated.txt").write_text("not ours\n")
    out = source(tmp_path).collect(LiveIO(), run_inputs())
    assert out.errors == []
    files = {f.uuid: f for f in out.data.files.values()}
    assert set(files) == {UUID, UUID2}
    assert sorted((m.comm, m.busbw_gbs) for m in files[UUID].measures) == [("DP Group 0", 41.5), ("TP Group 1", 38.25)]
    m = files[UUID2].measures[0]
    assert (m.job, m.node, m.n_nodes, m.nranks, m.network) == ("4242", "node001", 4, 32, True)


def test_a_half_written_file_keeps_its_last_good_read(tmp_path: Path) -> None:
    f = tmp_path / f"nccl_inspector_metrics_{UUID}.prom"
    nccl_dump(f, {"DP Group 0": 41.5})
    src = source(tmp_path)
    src.collect(LiveIO(), run_inputs())
    text = prom_lines("DP Group 0", 20.0)
    src.SETTLE = 0.0
    f.write_text(text[:len(text) // 2])                         # caught mid-write
    out = src.collect(LiveIO(), run_inputs())
    assert out.errors == []                                     # a race, not a fault: read again next poll
    [entry] = out.data.files.values()
    assert entry.measures[0].busbw_gbs == 41.5 and "half-written" in (entry.error or "")
    f.write_text("")                                            # just truncated by fopen("w")
    out = src.collect(LiveIO(), run_inputs())
    assert next(iter(out.data.files.values())).measures[0].busbw_gbs == 41.5
    nccl_dump(f, {"DP Group 0": 20.0})
    out = src.collect(LiveIO(), run_inputs())
    [entry] = out.data.files.values()
    assert entry.measures[0].busbw_gbs == 20.0 and entry.error is None


def test_garbage_costs_only_its_own_file(tmp_path: Path) -> None:
    nccl_dump(tmp_path / f"nccl_inspector_metrics_{UUID}.prom", {"DP Group 0": 41.5})
    bad = tmp_path / f"nccl_inspector_metrics_{UUID2}.prom"
    bad.write_bytes(os.urandom(4096).replace(b"\n", b"x") + b"\n")
    out = source(tmp_path).collect(LiveIO(), run_inputs())
    assert [(k, m.split(":")[0]) for k, m in out.errors] == [("parse", str(bad))]
    files = {f.uuid: f for f in out.data.files.values()}
    assert files[UUID].measures and files[UUID2].measures == [] and files[UUID2].error


def test_a_huge_file_is_not_read(tmp_path: Path) -> None:
    big = tmp_path / f"nccl_inspector_metrics_{UUID}.prom"
    with open(big, "w") as fh:
        for i in range(2000):
            fh.write(prom_lines(f"comm {i}", 40.0))
    out = source(tmp_path, max_bytes=65536).collect(LiveIO(), run_inputs())
    assert len(out.errors) == 1 and "more than max_bytes 65536" in out.errors[0][1]
    assert next(iter(out.data.files.values())).measures == []


def test_files_of_ended_jobs_expire(tmp_path: Path) -> None:
    old = tmp_path / f"nccl_inspector_metrics_{UUID}.prom"
    nccl_dump(old, {"DP Group 0": 41.5})
    nccl_dump(tmp_path / f"nccl_inspector_metrics_{UUID2}.prom", {"DP Group 0": 40.0})
    src = source(tmp_path, expire=60)
    assert len(src.collect(LiveIO(), run_inputs()).data.files) == 2
    gone = time.time() - 120
    os.utime(old, (gone, gone))                                 # not rewritten for 2 minutes: the job ended
    out = src.collect(LiveIO(), run_inputs())
    assert [f.uuid for f in out.data.files.values()] == [UUID2] and out.data.expired == 1
    assert src.collect(LiveIO(), run_inputs()).data.expired == 1        # counted once
    old.unlink()
    nccl_dump(old, {"DP Group 0": 39.0})                        # the GPU's next job
    assert len(src.collect(LiveIO(), run_inputs()).data.files) == 2


def test_a_file_rewritten_while_read(tmp_path: Path) -> None:
    """A writer truncating and rewriting one file in place as fast as it can, the source reading it
    meanwhile: every read is the whole of one dump or the last good one, never a mix or a torn line."""
    f = tmp_path / f"nccl_inspector_metrics_{UUID}.prom"
    comms = {f"comm {i}": 40.0 for i in range(200)}
    nccl_dump(f, comms)
    src, io = source(tmp_path), LiveIO()
    src.SETTLE = 0.0                        # read even what was written this instant: the race itself
    assert len(src.collect(io, run_inputs()).data.files[str(f)].measures) == 200
    stop = threading.Event()

    def writer() -> None:
        n = 0
        while not stop.is_set():
            n += 1
            nccl_dump(f, {c: 30.0 + n % 7 for c in comms})

    t = threading.Thread(target=writer, daemon=True)
    t.start()
    try:
        kept = fresh = 0
        # 200 reads, and on until one of them came between two dumps: on a loaded machine every one of
        # 200 may overlap a rewrite (each then keeps the last good read), and a fresh one is what is waited for
        deadline = time.monotonic() + 30
        while kept + fresh < 200 or (not fresh and time.monotonic() < deadline):
            out = src.collect(io, run_inputs())
            assert out.errors == []
            [entry] = out.data.files.values()
            assert entry.measures                                 # never lost
            if entry.error:
                kept += 1
            else:
                fresh += 1
                bws = {m.busbw_gbs for m in entry.measures}
                assert len(entry.measures) <= 200 and len(bws) == 1      # one dump, never two mixed
    finally:
        stop.set()
        t.join()
    assert fresh > 0


def test_json_logs_are_read_from_their_end(tmp_path: Path) -> None:
    obj = json.loads((FIXTURES / "nccl_inspector" / "readme_json_example.json").read_text())
    log = tmp_path / "node001-pid1234.log"
    with open(log, "w") as fh:
        for i in range(3000):
            obj["coll_perf"]["coll_busbw_gbs"] = 100.0 if i < 2900 else 50.0
            fh.write(json.dumps(obj) + "\n")
    out = source(tmp_path, max_bytes=20000).collect(LiveIO(), run_inputs())
    assert out.errors == []
    [entry] = out.data.files.values()
    assert entry.uuid == "" and entry.measures[0].busbw_gbs < 100.0      # only the end was read
    out = source(tmp_path, json=False).collect(LiveIO(), run_inputs())
    assert out.data.files == {}


def test_a_missing_directory_is_a_source_error(tmp_path: Path) -> None:
    out = source(tmp_path / "nope").collect(LiveIO(), run_inputs())
    assert out.errors and out.errors[0][0] == "not_found" and out.data.files == {}


def test_off_by_default_and_its_keys_checked() -> None:
    assert NcclInspectorSource.spec.enabled is False
    cfg = from_dict({}, check_paths=False)
    assert cfg.sources["nccl_inspector"].enabled is False
    with pytest.raises(ConfigError, match="sources.nccl_inspector.expire"):
        from_dict({"sources": {"nccl_inspector": {"expire": 10}}}, check_paths=False)


def test_replayed_bundle_has_no_inspector_files(tmp_path: Path) -> None:
    nccl_dump(tmp_path / f"nccl_inspector_metrics_{UUID}.prom", {"DP Group 0": 41.5})

    class Replay(LiveIO):
        read_host_file_bounded = ReplayIO.read_host_file_bounded

    out = source(tmp_path).collect(Replay(), run_inputs())
    assert out.errors == [] and out.data.files == {}


def test_a_file_written_this_instant_is_read_once_settled(tmp_path: Path) -> None:
    """NCCL flushes a dump one communicator at a time: a file modified less than a second ago may
    hold its first communicators only. The poll waits for it to settle and reads the whole dump (a
    poll that would otherwise always land just after NCCL's 30 s dump would never see a whole one)."""
    f = tmp_path / f"nccl_inspector_metrics_{UUID}.prom"
    nccl_dump(f, {"DP Group 0": 41.5, "TP Group 1": 38.25})
    then = time.time() - 5
    os.utime(f, (then, then))
    src = source(tmp_path)
    assert len(src.collect(LiveIO(), run_inputs()).data.files[str(f)].measures) == 2
    started = threading.Event()

    def slow_dump() -> None:
        with open(f, "w") as fh:
            fh.write(prom_lines("DP Group 0", 20.0))
            fh.flush()
            started.set()
            time.sleep(0.4)                 # what is tested: the other communicators come a little later
            fh.write(prom_lines("TP Group 1", 19.0))

    t = threading.Thread(target=slow_dump)
    t.start()
    started.wait(5)
    t0 = time.monotonic()
    entry = src.collect(LiveIO(), run_inputs(deadline=time.monotonic() + 10)).data.files[str(f)]
    waited = time.monotonic() - t0
    t.join()
    assert sorted(m.busbw_gbs or 0 for m in entry.measures) == [19.0, 20.0] and entry.error is None
    assert 0.4 <= waited < 2.0
    # no time left to wait (the source's deadline): the last good read stays, read again next poll
    nccl_dump(f, {"DP Group 0": 10.0})
    entry = src.collect(LiveIO(), run_inputs(deadline=time.monotonic() + 0.5)).data.files[str(f)]
    assert sorted(m.busbw_gbs or 0 for m in entry.measures) == [19.0, 20.0] and "less than a second" in entry.error
