"""A pulled host cable pages within 20 s (issue 51), end to end with what ships, nothing shortened: `fabricmon run`
at its default intervals (its port state poll every second) on a synthetic node's sysfs tree, the real Prometheus
with the reference config's two node jobs as shipped (fabricmon every 15 s, fabricmon-state every 3 s with
collect[]=state) and the shipped rules as they are (FabricmonPortDown's for: 10s in the fabricmon.state.alerts
group, evaluated every 2 s), the real Alertmanager with the shipped example (its critical route's group_wait 2 s),
its receivers pointed at a webhook in the test. The cable is pulled by the port's state files turning DOWN/Polling,
as the kernel writes them; the page must reach the webhook within 20 s of that, and name the port.
docs/latency.md has the measured numbers and what each setting buys."""

from __future__ import annotations

import json
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest
import yaml

from fabricmon.deploy import ALERTMANAGER, RULES
from fabricmon.sim import sysfs_tree
from ship_helpers import FABRICMON, ROOT, http_get, require_tool, start_alertmanager, start_prometheus, wait_until

PROMETHEUS_YML = ROOT / "fabricmon" / "deploy" / "prometheus" / "prometheus.yml"


class Webhook:
    def __init__(self) -> None:
        self.got: list[tuple[float, dict]] = []
        hook = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self):
                body = self.rfile.read(int(self.headers.get("Content-Length", 0)))
                hook.got.append((time.monotonic(), json.loads(body)))
                self.send_response(200)
                self.end_headers()

            def log_message(self, *a):
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.port = self.server.server_address[1]
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def page(self, alertname: str) -> tuple[float, dict] | None:
        for t, n in self.got:
            for a in n["alerts"]:
                if a["status"] == "firing" and a["labels"]["alertname"] == alertname:
                    return t, {**a, "receiver": n["receiver"]}
        return None


@pytest.fixture
def webhook():
    w = Webhook()
    yield w
    w.server.shutdown()
    w.server.server_close()


def test_a_pulled_host_cable_pages_within_20_s_with_the_shipped_settings(processes, webhook, tmp_path) -> None:
    for tool in ("prometheus", "prometheus-alertmanager"):
        require_tool(tool, tool)
    sysfs = sysfs_tree.build(tmp_path / "sys", 2)
    (tmp_path / "state").mkdir()
    empty = tmp_path / "empty"
    empty.mkdir()
    cfg = tmp_path / "fabricmon.yml"
    cfg.write_text(yaml.safe_dump({"paths": {"sysfs": str(sysfs), "state_dir": str(tmp_path / "state"),
                                             "tool_dirs": [str(empty)]}}))
    from helpers import free_port
    port = free_port()
    node = processes.start("fabricmon", [*FABRICMON, "run", "--config", str(cfg), "--listen", f"127.0.0.1:{port}",
                                         "--log-level", "warning"], env={"PATH": str(empty)}, cwd=ROOT)
    wait_until(lambda: b'fabricmon_ib_port_up{device="mlx5_1",port="1"} 1.0' in http_get(
        f"http://127.0.0.1:{port}/metrics"), 30, "the node daemon up")
    assert node.poll() is None

    # the shipped Alertmanager example, its receivers the webhook (its waits as shipped)
    am_cfg = yaml.safe_load(ALERTMANAGER.read_text())
    am_cfg["receivers"] = [{"name": r["name"], "webhook_configs": [
        {"url": f"http://127.0.0.1:{webhook.port}/", "send_resolved": True}]} for r in am_cfg["receivers"]]
    am = start_alertmanager(processes, tmp_path, am_cfg)
    # the reference scrape config's node jobs as shipped, on this daemon
    jobs = [j for j in yaml.safe_load(PROMETHEUS_YML.read_text())["scrape_configs"]
            if j["job_name"] in ("fabricmon", "fabricmon-state")]
    assert {j["job_name"]: j["scrape_interval"] for j in jobs} == {"fabricmon": "15s", "fabricmon-state": "3s"}
    for j in jobs:
        j["static_configs"] = [{"targets": [f"127.0.0.1:{port}"]}]
    prom = start_prometheus(processes, tmp_path, jobs, rule_files=[RULES], alertmanager_port=am, interval="10s")

    def scraped() -> bool:
        doc = json.loads(http_get(f"{prom.url}/api/v1/query?query=" + "fabricmon_ib_port_up%7Bjob%3D%22fabricmon-state%22%7D"))
        return len(doc["data"]["result"]) == 2
    wait_until(scraped, 30, "the state job scraped")

    t0 = time.monotonic()
    port1 = sysfs / "class/infiniband/mlx5_1/ports/1"
    (port1 / "phys_state").write_text("2: Polling")            # the cable pulled: the kernel's view
    (port1 / "state").write_text("1: DOWN")
    got = wait_until(lambda: webhook.page("FabricmonPortDown"), 40, "FabricmonPortDown at the webhook")
    took = got[0] - t0
    page = got[1]
    print(f"pulled cable -> page: {took:.1f} s (job {page['labels']['job']})")
    assert page["labels"]["device"] == "mlx5_1" and page["labels"]["port"] == "1"
    assert page["labels"]["severity"] == "critical" and page["receiver"] == "fabricmon-pager"
    assert took < 20, f"paged {took:.1f} s after the pull"
