"""nccl_slow_collective: a job's collective runs slower than it did (or than its NIC can carry), named
to its path (docs/nccl.md#findings). Pure: the joined network measures (model.nccl.NcclPath) and the
baselines the node model learned in, findings and the slow paths out.

A path (one job's communicator, operation and message-size bucket on one GPU) is slow when
- its bus bandwidth is below `baseline_fraction` of the job's own baseline (the median of its dumps
  over its first `learn_seconds`), or
- for a collective of `large_message_bytes` or more, below `line_rate_fraction` of the data rate of
  the NIC port it leaves by (the seeds' target: 80% of line rate for large all-reduce messages).

One finding per NIC port that carries network measures: `severity` while one of its paths is slow
(naming job, node, GPU, NIC, HCA port and cabled switch port of the slowest), OK otherwise. Its class
is `watch`: a slow job is a symptom; what to repair is the fabric verdict on its path, which the
alert FabricmonNcclSlowOnFlaggedPath joins in Prometheus.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Protocol

from fabricmon.model.finding import OK, WARNING, WATCH, Finding
from fabricmon.model.nccl import COLLECTIVE, BaselineKey, NcclBaselines, NcclData, NcclPath, join
from fabricmon.checks.shape import Outcome, outcome_of, report
from fabricmon.model.gpu import AffinityResult
from fabricmon.model.snapshot import source_data
from fabricmon.schema import Schema, choice, integer, number

if TYPE_CHECKING:
    from fabricmon.checks.node_inputs import NodeInputs

CHECK = "nccl_slow_collective"


@dataclass(frozen=True, slots=True)
class NcclSlowConfig:
    """`checks.nccl_slow_collective` (docs/nccl.md#findings)."""
    baseline_fraction: float = 0.8          # below this fraction of the job's own baseline: slow
    line_rate_fraction: float = 0.8         # large collectives below this fraction of the NIC's data rate: slow
    large_message_bytes: int = 1 << 30      # "large": the size bucket's lower bound at least this
    learn_seconds: float = 300.0            # a job's baseline: the median of its dumps over this long ...
    min_samples: int = 3                    # ... and at least this many dumps
    forget_after: float = 86400.0           # a baseline not dumped to for this long is dropped (the job ended)
    severity: int = WARNING


_D = NcclSlowConfig()
SCHEMA: Schema[NcclSlowConfig] = Schema(fields=(
    number("baseline_fraction", _D.baseline_fraction, "a path whose bus bandwidth is below this fraction of its "
           "job's own baseline is slow", lo=0.01, hi=1.0),
    number("line_rate_fraction", _D.line_rate_fraction, "a large collective whose bus bandwidth is below this "
           "fraction of its NIC port's data rate is slow (the seeds' target: 0.8); 0 turns the judgement off",
           lo=0.0, hi=1.0),
    integer("large_message_bytes", _D.large_message_bytes, "messages of this size or more (the size bucket's "
            "lower bound) are judged against the line rate", lo=1),
    number("learn_seconds", _D.learn_seconds, "seconds from a job's first dump over which its baseline is learned "
           "(the median of its dumps; kept in the state directory, nccl_baseline.json)", lo=0.0),
    integer("min_samples", _D.min_samples, "dumps a baseline needs at least (one per NCCL dump interval, 30 s or "
            "more)", lo=1, hi=64),
    number("forget_after", _D.forget_after, "seconds after its last dump that a job's baseline is forgotten",
           lo=60.0),
    choice("severity", _D.severity, "status of a slow path's finding", {"warning": 1, "critical": 2}),
), build=lambda v, key, ctx: NcclSlowConfig(**v))


def _gbs(v: float | None) -> str:
    return "?" if v is None else f"{v:.1f} GB/s"


def why_slow(p: NcclPath, baseline: float | None, cfg: NcclSlowConfig) -> str:
    """Why the path is slow ("" when it is not)."""
    bw = p.measure.busbw_gbs
    if bw is None:
        return ""
    why = []
    if baseline and bw < cfg.baseline_fraction * baseline:
        why.append(f"{bw / baseline:.0%} of its baseline {_gbs(baseline)}")
    if (cfg.line_rate_fraction and p.line_rate_gbs and p.measure.kind == COLLECTIVE
            and p.measure.message_bytes >= cfg.large_message_bytes and bw < cfg.line_rate_fraction * p.line_rate_gbs):
        why.append(f"{bw / p.line_rate_gbs:.0%} of the line rate {_gbs(p.line_rate_gbs)}")
    return " and ".join(why)


def where(p: NcclPath) -> str:
    """The path as a finding names it: job, node, GPU, NIC, HCA port, switch port."""
    m = p.measure
    gpu = f"GPU {p.gpu_index}" if p.gpu_index is not None else "a GPU NVML does not see"
    nic = f"{p.device} port {p.port}" if p.device else "no known NIC"
    switch = f'cabled to "{p.switch}" port {p.switch_port}' if p.switch else "cabled switch port unknown"
    return (f'job {m.job} ({m.operation} {m.message_size}, communicator "{m.comm}", {m.n_nodes} nodes) on '
            f"{m.node or '?'} {gpu} ({p.gpu_uuid}) via {nic} {switch}")


def evaluate(paths: Sequence[NcclPath], baselines: Mapping[BaselineKey, float], cfg: NcclSlowConfig
             ) -> tuple[list[Finding], dict[BaselineKey, str]]:
    """One finding per NIC port with network measures; the slow paths and why."""
    slow: dict[BaselineKey, str] = {}
    by_port: dict[tuple[str, int | None], list[NcclPath]] = {}
    for p in paths:
        by_port.setdefault((p.device, p.port) if p.device else (p.gpu_uuid, None), []).append(p)
        why = why_slow(p, baselines.get(p.baseline_key), cfg)
        if why:
            slow[p.baseline_key] = why
    findings = []
    for (device, port), mine in sorted(by_port.items(), key=lambda kv: (kv[0][0], kv[0][1] or 0)):
        bad = sorted((p for p in mine if p.baseline_key in slow),
                     key=lambda p: (p.measure.busbw_gbs or 0.0) / (baselines.get(p.baseline_key) or
                                                                   p.line_rate_gbs or 1.0))
        if not bad:
            jobs = len({p.measure.job for p in mine})
            findings.append(Finding(CHECK, device, port, OK, f"{len(mine)} NCCL network measure(s) of {jobs} job(s) "
                                    "at or above their baseline and line-rate fractions", klass=WATCH))
            continue
        w = bad[0]
        more = f"; {len(bad) - 1} more slow measure(s) on this port" if len(bad) > 1 else ""
        findings.append(Finding(CHECK, device, port, cfg.severity,
                                f"{where(w)} runs at {_gbs(w.measure.busbw_gbs)}, {slow[w.baseline_key]}{more}: "
                                "look for a fabric verdict on this path (the switch port's errors, its leaf's "
                                "uplink balance)", klass=WATCH))
    return findings, slow


class BaselineKeeper(Protocol):
    """Where each job's learned bus bandwidth is kept (stores.nccl_baseline.NcclBaselineStore)."""
    @property
    def state(self) -> NcclBaselines: ...

    def learn(self, paths: Sequence[NcclPath], now: float, cfg: NcclSlowConfig) -> None: ...


class NcclSlow:
    """nccl_slow_collective (checks.shape): NCCL's measurements joined to their GPU, NIC and port (the
    GPU section's affinity, written before), the jobs' baselines learned from the new dumps (the state),
    then the slow paths judged; the section goes into the snapshot."""
    reports = (report(CHECK, "NcclData"),)

    def __init__(self, settings: NcclSlowConfig, baseline: BaselineKeeper):
        self.settings = settings
        self.state = baseline

    def run(self, inputs: NodeInputs) -> Outcome:
        data = source_data(inputs.states, NcclData)
        if data is None:
            return Outcome((), ())
        gpu = inputs.built.get("gpu") if inputs.built is not None else None
        aff = gpu.affinity if gpu is not None and gpu.affinity is not None else AffinityResult()
        nccl = join(data, aff, inputs.inv.devices, inputs.ib.ports)
        cfg = self.settings
        self.state.learn(nccl.paths, inputs.now, cfg)
        learned = self.state.state.learned()
        nccl.baseline_gbs = {p.baseline_key: learned[p.baseline_key] for p in nccl.paths if p.baseline_key in learned}
        found, nccl.slow = evaluate(nccl.paths, nccl.baseline_gbs, cfg)
        return outcome_of(found, nccl)


__all__ = ["CHECK", "NcclSlowConfig", "SCHEMA", "evaluate", "where", "why_slow"]
