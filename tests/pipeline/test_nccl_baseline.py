"""A job's own NCCL baseline (issue 38 item 2): learned by the node model over the job's first dumps,
kept in the state directory across a daemon restart, and the nccl_slow_collective finding naming
job, node, GPU, NIC, HCA port and cabled switch port when the job falls below it (or a large
collective below its line-rate fraction); exported as fabricmon_nccl_baseline_ratio / _slow."""

from __future__ import annotations

import json
from pathlib import Path

from prometheus_client.parser import text_string_to_metric_families

from fabricmon.checks.nccl import CHECK
from fabricmon.config import from_dict
from fabricmon.exporter.render import render
from fabricmon.model.finding import OK, WARNING, WATCH
from fabricmon.model.nccl import NcclData, NcclFile
from fabricmon.parsers.nccl_inspector import parse_prom
from fabricmon.stores.learned import LearnedStore, inventory_path
from fabricmon.stores.nccl_baseline import FILE_NAME
from fabricmon.pipeline.node import NodeModel
from helpers import NCCL_UUID as UUID, nccl_prom_lines
from test_nccl_join import node

T0 = 1_790_000_000.0
CFG = {"checks": {"nccl_slow_collective": {"learn_seconds": 120, "min_samples": 3}}}


def dump(t: float, bw: float, size: str = "4-5GB", job: str = "4242") -> NcclData:
    """The Inspector file of GPU UUID as NCCL wrote it at time t (its mtime)."""
    text = nccl_prom_lines("DP Group 0", bw, job).replace("4-5GB", size)
    path = f"/dump/nccl_inspector_metrics_{UUID}.prom"
    return NcclData(directory="/dump", files={path: NcclFile(path, UUID, t, len(text), parse_prom(text).measures)})


def model(state: Path, clock: list[float]) -> NodeModel:
    return NodeModel(from_dict(CFG, check_paths=False), clock=lambda: clock[0],
                     learned=LearnedStore(inventory_path(str(state))))


def slow_findings(snap) -> list:
    return [f for f in snap.findings if f.check == CHECK]


def series(snap, name: str) -> dict[str, float]:
    fams = {f.name: f for f in text_string_to_metric_families(render(snap).decode())}
    return {s.labels["device"]: s.value for s in fams[name].samples} if name in fams else {}


def test_learned_over_the_first_dumps_kept_across_a_restart_and_slow_named_to_the_cable(tmp_path: Path) -> None:
    clock = [T0]
    m = model(tmp_path, clock)
    for i, bw in enumerate((41.0, 40.0, 39.0, 44.0, 40.0)):        # 30 s dumps over 2 minutes: median 40
        clock[0] = T0 + 30 * i + 1
        snap = node(dump(T0 + 30 * i, bw), m)
        snap = node(dump(T0 + 30 * i, bw), m)                        # a poll between dumps is no new sample
    assert snap.nccl is not None
    [p] = snap.nccl.paths
    assert snap.nccl.baseline_gbs == {p.baseline_key: 40.0}
    [f] = slow_findings(snap)
    assert (f.status, f.device, f.port, f.klass) == (OK, "mlx5_0", 1, WATCH)
    assert series(snap, "fabricmon_nccl_baseline_ratio") == {"mlx5_0": 1.0}
    assert series(snap, "fabricmon_nccl_slow") == {"mlx5_0": 0.0}
    saved = json.loads((tmp_path / FILE_NAME).read_text())          # written as soon as it was learned
    assert saved["baselines"][0]["gbs"] == 40.0

    clock[0] = T0 + 400
    again = model(tmp_path, clock)                                    # the daemon restarted mid-job
    snap = node(dump(T0 + 390, 30.0), again)                          # 75% of 40, 60% of 50 GB/s
    [f] = slow_findings(snap)
    assert f.status == WARNING and (f.device, f.port) == ("mlx5_0", 1)
    for part in ("job 4242", "AllReduce 4-5GB", '"DP Group 0"', "node001", "GPU 0", "GPU-" + UUID, "mlx5_0 port 1",
                 '"leaf03 (Quantum)" port 17', "30.0 GB/s", "75% of its baseline 40.0 GB/s",
                 "60% of the line rate 50.0 GB/s"):
        assert part in f.message, (part, f.message)
    assert series(snap, "fabricmon_nccl_baseline_ratio") == {"mlx5_0": 0.75}
    assert series(snap, "fabricmon_nccl_baseline_gbs") == {"mlx5_0": 40.0}
    assert series(snap, "fabricmon_nccl_slow") == {"mlx5_0": 1.0}


def test_line_rate_judges_large_collectives_only_and_a_new_job_learns_anew(tmp_path: Path) -> None:
    clock = [T0 + 1]
    m = model(tmp_path, clock)
    snap = node(dump(T0, 30.0, size="64-65MB"), m)                   # small: 60% of line rate is no finding
    assert [f.status for f in slow_findings(snap)] == [OK]
    assert series(snap, "fabricmon_nccl_baseline_ratio") == {}       # still learning
    snap = node(dump(T0 + 30, 30.0), m)                               # large, from its first dump: slow
    [f] = slow_findings(snap)
    assert f.status == WARNING and "60% of the line rate" in f.message and "baseline" not in f.message


def test_a_baseline_is_forgotten_after_its_job_ends(tmp_path: Path) -> None:
    clock = [T0]
    m = model(tmp_path, clock)
    for i in range(5):
        clock[0] = T0 + 30 * i + 1
        node(dump(T0 + 30 * i, 45.0), m)
    assert len(m.nccl_baseline.state.learned()) == 1
    clock[0] = T0 + 120 + 86400 + 1
    node(dump(clock[0] - 1, 45.0, job="5555"), m)
    assert [k[0] for k in m.nccl_baseline.state.entries] == ["5555"]


def test_an_unreadable_baseline_file_starts_anew(tmp_path: Path) -> None:
    (tmp_path / FILE_NAME).write_text("{not json")
    clock = [T0 + 1]
    snap = node(dump(T0, 45.0), model(tmp_path, clock))
    assert [f.status for f in slow_findings(snap)] == [OK]
