"""docs/metrics.md, generated from the catalogue: every family with its type, labels and help, so the
reference cannot fall behind the code. tests/exporter/test_metrics_doc.py compares the committed file
with `markdown()`; `make golden` (or `make metrics-doc`) rewrites it.

    python -m fabricmon.exporter.reference > docs/metrics.md
"""

from __future__ import annotations

import textwrap

from fabricmon.exporter import counter_sets
from fabricmon.exporter.catalogue import CATALOGUE, Metric

# Sections in order: a title, the name prefixes it takes, and what an operator needs to read its rows.
# A family whose prefix no section claims lands in "Other metrics", so a new one is never left out.
SECTIONS: tuple[tuple[str, tuple[str, ...], str], ...] = (
    ("InfiniBand ports and HCAs", ("fabricmon_ib_",),
     "The node daemon (`fabricmon run`), one series per port of every RDMA device. A down port never "
     "vanishes: it reports `fabricmon_ib_port_up 0`, its state ids, rate 0 and `degraded{reason=\"down\"} 1`. "
     "Identity lives in the `_info` series: join them with `group_left`. The port counters are the IBTA "
     "PortCounters and PortCountersExtended, read from sysfs or perfquery; the 8- and 16-bit error "
     "counters saturate, and `fabricmon_ib_port_saturated` says when one sits at its maximum."),
    ("Checks", ("fabricmon_check_", "fabricmon_health_"),
     "Every check on every object, OK included, so an alert can select on `check` "
     "([checks.md](checks.md) lists them)."),
    ("RoCE and netdevs", ("fabricmon_roce_", "fabricmon_netdev_"),
     "Only on ports whose link layer is Ethernet (RoCE); families without samples are not rendered, so "
     "an InfiniBand-only node exports none of these ([roce-gpudirect.md](roce-gpudirect.md))."),
    ("The kernel log", ("fabricmon_kernel_log_",),
     "The node daemon's `kernel_log` source: the NIC events of the kernel log, counted exactly per device, "
     "port, event and class ([kernel-log.md](kernel-log.md)). Only where a kernel log is read."),
    ("NCCL's measurements", ("fabricmon_nccl_",),
     "The node daemon's `nccl_inspector` source (off by default): NCCL's Inspector files joined to GPU, NIC, "
     "port and cabled switch port ([nccl.md](nccl.md)). Only where the source runs."),
    ("GPUDirect RDMA and GPUs", ("fabricmon_gpudirect_", "fabricmon_gpu_"),
     "Only on nodes with NVIDIA GPUs or their driver; `gpu` is the NVML index, as in DCGM's `gpu` label."),
    ("Fabric collector", ("fabricmon_fabric_", "fabricmon_ecmp_"),
     "`fabricmon fabric run`, per switch (`switch_guid`, and `switch`, its node description) and per "
     "switch port. Each switch belongs to one shard, so queries combine shards by ignoring `instance` "
     "([fabric-collector.md](fabric-collector.md))."),
    ("Slurm jobs", ("fabricmon_slurm_",),
     "On a node with a slurmd (the `slurm` source), and on a fabric collector where `squeue` answers "
     "(the `slurm_jobs` source): the running jobs, joinable with the findings they can be hurt by "
     "([jobs.md](jobs.md))."),
    ("fabricmon itself", ("fabricmon_source_", "fabricmon_snapshot_", "fabricmon_build_", "fabricmon_http_"),
     "Both daemons: every source's state (`source` is the source's name, e.g. `sysfs`, `perfquery`, "
     "`discovery`, `sweep`) and the snapshots they build. `fabricmon_source_errors_total` has every "
     "`kind` (`not_found`, `timeout`, `exit_code`, `parse`, `read`) pre-declared at 0."),
)

HEADER = """# Metrics

<!-- Generated from fabricmon/exporter/catalogue.py by `make metrics-doc`; do not edit by hand. -->

Every metric family fabricmon exports, as the catalogue declares it. Counters are exported raw, in
base units, as `_total`: take rates in PromQL. fabricmon never resets them; a counter that decreased
is a reset and contributes 0 to the checks. A sample that could not be read is absent, never 0, and a
family without samples is not rendered. The alerts and recording rules that read these are in
`fabricmon/deploy/prometheus/fabricmon.rules.yml` (what to do for each: [runbooks.md](runbooks.md)).
"""


def _cell(text: str) -> str:
    return text.replace("|", "\\|").replace("\n", " ")


def _row(m: Metric) -> str:
    name = f"`{m.exposed_name}`"
    if m.type == "histogram":
        name += " (`_bucket`, `_sum`, `_count`)"
    labels = ", ".join(m.labels) if m.labels else ""
    sets = ", ".join((m.counter_set, *m.also))
    return f"| {name} | {m.type} | {labels} | {sets} | {_cell(m.help)} |"


def section_of(m: Metric) -> str:
    for title, prefixes, _ in SECTIONS:
        if m.name.startswith(prefixes):
            return title
    return "Other metrics"


SETS_INTRO = """## Counter sets

Every family belongs to one counter set (the `set` column below), and a few to the `state` set as well
(a port's state and what the port-down alerts join it with: a fast scrape job asks for `state` alone,
[latency.md](latency.md)). A scrape returns the sets the
collector's `server.collect` names (default: `default`), or those it asks for itself with
node_exporter's parameter: `/metrics?collect[]=packets` (repeat it for several; `all` is every set;
an unknown name is a 400). The `default` set carries every family the shipped rules and dashboards
read (a test proves it: tests/exporter/test_counter_sets.py); the others are opt-in, for a site that
wants them, e.g. in a scrape job of their own at a slower pace
(`fabricmon/deploy/prometheus/prometheus.yml`). Moved out of the default set in issue 40, with the
reason: the switch ports' packet, unicast and multicast counters (no rule or panel reads them; UFM
keeps them out of its default set too), the per-port rate gauges (Prometheus derives them from the
data counters: the recording rules `switch_port:fabricmon_fabric_port_*_bytes:rate5m`), and the error
counters no rule sums (switch relay, constraint errors, VL15 drops, Ethernet receive discards). The
node daemon's own ports export every counter in the default set.
"""


def sets_table() -> list[str]:
    rows = ["| set | what it adds | families |", "|---|---|---|"]
    for name, doc in counter_sets.SETS.items():
        n = sum(1 for m in CATALOGUE if m.counter_set == name or name in m.also)
        rows.append(f"| `{name}` | {_cell(doc)} | {n} |")
    return rows


def markdown(catalogue: tuple[Metric, ...] = CATALOGUE) -> str:
    out = [HEADER, SETS_INTRO, *sets_table(), ""]
    titles = [(t, intro) for t, _, intro in SECTIONS] + [("Other metrics", "")]
    for title, intro in titles:
        rows = [_row(m) for m in catalogue if section_of(m) == title]
        if not rows:
            continue
        out += [f"## {title}", ""]
        if intro:
            out += [textwrap.fill(intro, 100, break_on_hyphens=False, break_long_words=False), ""]
        out += ["| metric | type | labels | set | meaning |", "|---|---|---|---|---|", *rows, ""]
    return "\n".join(out).rstrip() + "\n"


if __name__ == "__main__":
    print(markdown(), end="")
