"""Helpers shared by the tests (one place; import as `from helpers import ...`)."""

from __future__ import annotations

import math

from fabricmon.model.ports import DeviceView, Inventory, PortView
from fabricmon.model.roce import RoceTarget
from fabricmon.pipeline.source import Inputs


def run_inputs(inventory: Inventory | None = None, deadline: float = math.inf) -> Inputs:
    """What the pipeline hands a source: here no deadline unless one is given."""
    return Inputs(deadline=deadline, inventory=inventory if inventory is not None else Inventory())


def roce_inputs(targets: list[RoceTarget]) -> Inputs:
    """Inputs whose inventory makes the RoCE sources look at exactly these netdevs."""
    inv = Inventory()
    for t in targets:
        d = inv.devices.setdefault(t.device, DeviceView(device=t.device))
        if t.netdev:
            d.netdev = ",".join(sorted({*filter(None, d.netdev.split(",")), t.netdev}))
        inv.ports[(t.device, t.port)] = PortView(device=t.device, port=t.port, link_layer="Ethernet")
    return Inputs(deadline=math.inf, inventory=inv)


def all_sources_ran(samples: dict) -> bool:
    """Every enabled source has completed a run, in scraped samples keyed by
    (name, tuple(sorted(labels.items())))."""
    enabled = {dict(lbl)["source"] for (n, lbl), v in samples.items() if n == "fabricmon_source_enabled" and v == 1}
    runs = {dict(lbl)["source"]: v for (n, lbl), v in samples.items() if n == "fabricmon_source_runs_total"}
    return bool(enabled) and all(runs.get(s, 0) >= 1 for s in enabled)


def scrape_samples(port: int, timeout: float = 5.0) -> dict:
    """GET /metrics on 127.0.0.1:port, parsed into {(name, sorted label items): value}."""
    import http.client

    from prometheus_client.parser import text_string_to_metric_families
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=timeout)
    try:
        conn.request("GET", "/metrics")
        body = conn.getresponse().read().decode()
    finally:
        conn.close()
    return {(s.name, tuple(sorted(s.labels.items()))): s.value
            for fam in text_string_to_metric_families(body) for s in fam.samples}


def sample_value(samples: dict, name: str, **labels: object) -> float | None:
    return samples.get((name, tuple(sorted((k, str(v)) for k, v in labels.items()))))
