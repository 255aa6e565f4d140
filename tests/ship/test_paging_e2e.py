"""End to end paging on loopback: a simulated fabric (ibsim + opensm) with the real infiniband-diags tools,
two `fabricmon run` daemons, the real Prometheus with the shipped rules (their `for:` shortened), the real
Alertmanager, and a webhook receiver in the test.

- node02's cable trains at 1X where 4X HDR is expected: FabricmonPortDegraded pages;
- node01's cable is pulled (`Unlink`): FabricmonPortDown pages with the port's state in its description;
- the cable is put back (`ReLink`): the page resolves;
- the fabric collector replaying a fat tree recorded beside a real Slurm: a 1X uplink pages with the job it hurts.
"""

from __future__ import annotations

import re
import shutil
import time

import pytest

from fabricmon.sim.fabric import fat_tree_netfile
from ship_helpers import (FABRICMON, ROOT, Pager, free_port, http_get, make_apt_packages, require_tool,
                          start_prometheus, start_alertmanager, start_sim_node, wait_until, load_generator)

build_rules = load_generator("prometheus/build_rules.py")

pytestmark = pytest.mark.sim

HEALTHY, DEGRADED = "node01 mlx5_0", "node02 mlx5_0"
INTERVAL = 1.0


@pytest.fixture
def webhook():
    w = Pager()
    yield w
    w.close()


def grouping_alertmanager(processes, tmp_path, webhook_port: int) -> int:
    """Alertmanager grouping by alert and port, its waits cut."""
    return start_alertmanager(processes, tmp_path, {
        "route": {"receiver": "test", "group_by": ["alertname", "instance", "device", "port"],
                  "group_wait": "1s", "group_interval": "1s", "repeat_interval": "1h"},
        "receivers": [{"name": "test", "webhook_configs": [
            {"url": f"http://127.0.0.1:{webhook_port}/", "send_resolved": True}]}],
    })


def test_port_down_pages_and_resolves(sim_fabric, processes, webhook, tmp_path):
    for tool in ("prometheus", "prometheus-alertmanager"):
        require_tool(tool, tool)
    fabric = sim_fabric(fat_tree_netfile(spines=1, leaves=1, hosts_per_leaf=2, degraded={f"{DEGRADED}[1]": "1x"}))
    healthy = start_sim_node(processes, fabric, HEALTHY, tmp_path, INTERVAL)
    degraded = start_sim_node(processes, fabric, DEGRADED, tmp_path, INTERVAL)
    am = grouping_alertmanager(processes, tmp_path, webhook.port)

    # the shipped rules with every `for:` shortened to 2s
    rules = tmp_path / "fabricmon.rules.yml"
    rules.write_text(re.sub(r"^(\s+for:) \S+$", r"\1 2s", build_rules.build(), flags=re.M))
    start_prometheus(processes, tmp_path, [{"job_name": "fabricmon", "static_configs": [
        {"targets": [f"127.0.0.1:{healthy}", f"127.0.0.1:{degraded}"]}]}],
        rule_files=[rules], alertmanager_port=am)

    # 1. the 1X link pages, named by instance, device and port, with the rates in the description
    page = wait_until(lambda: webhook.find("firing", alertname="FabricmonPortDegraded"), 45,
                      "FabricmonPortDegraded at the webhook")
    # ... and the leaf port it is cabled to, which the daemon learned from iblinkinfo (issue 27), and the
    # finding's class (issue 39: a CRITICAL link is what the drain wrappers act on: fatal)
    assert page["labels"] == {"alertname": "FabricmonPortDegraded", "severity": "critical", "check": "degraded_link",
                              "instance": f"127.0.0.1:{degraded}", "job": "fabricmon", "device": "ibsim0",
                              "port": "1", "switch": "leaf01", "switch_port": "2", "class": "fatal"}
    assert page["annotations"]["description"] == (
        f"127.0.0.1:{degraded} ibsim0 port 1 runs at 50 Gb/s over 1 lane(s); expected 200 Gb/s "
        "(or what both ends could do).")
    # the runbook link opens: the daemon that raised the alert serves the runbooks, with the alert's anchor
    assert page["annotations"]["runbook_url"] == f"http://127.0.0.1:{degraded}/runbooks#fabricmonportdegraded"
    assert b'id="fabricmonportdegraded"' in http_get(page["annotations"]["runbook_url"].split("#")[0])
    assert webhook.find("firing", alertname="FabricmonPortDown") is None

    # 2. pull node01's cable: FabricmonPortDown pages
    fabric.unlink(HEALTHY, 1)
    down = wait_until(lambda: webhook.find("firing", alertname="FabricmonPortDown"), 45,
                      "FabricmonPortDown at the webhook")
    # the link is down, so iblinkinfo names no peer now: the switch port is the one learned while it was up
    assert down["labels"] == {"alertname": "FabricmonPortDown", "severity": "critical", "check": "degraded_link",
                              "instance": f"127.0.0.1:{healthy}", "job": "fabricmon", "device": "ibsim0", "port": "1",
                              "switch": "leaf01", "switch_port": "1", "class": "fatal"}
    assert down["annotations"]["summary"] == "RDMA port is down."
    assert re.fullmatch(rf"127\.0\.0\.1:{healthy} ibsim0 port 1 is down: PortState 1 \(1 DOWN, 2 INIT, 3 ARMED\), "
                        r"PhysState \d \(2 Polling, 3 Disabled\)\.", down["annotations"]["description"]), down
    assert down["annotations"]["runbook_url"] == f"http://127.0.0.1:{healthy}/runbooks#fabricmonportdown"

    # 3. put it back: the page resolves
    fabric.relink(HEALTHY, 1)
    resolved = wait_until(lambda: webhook.find("resolved", alertname="FabricmonPortDown"), 45,
                          "FabricmonPortDown resolved at the webhook")
    assert resolved["labels"]["instance"] == f"127.0.0.1:{healthy}"


def test_tools_for_paging_are_packaged():
    """The paging test needs these binaries; CI installs them (.ci/run runs `make test`, which installs
    the Makefile's test toolchain), so this must not skip there."""
    for tool, pkg in (("prometheus", "prometheus"), ("prometheus-alertmanager", "prometheus-alertmanager"),
                      ("promtool", "prometheus"), ("systemd-analyze", "systemd")):
        assert shutil.which(tool) or require_tool(tool, pkg)
    assert "make test" in (ROOT / ".ci" / "run").read_text()
    assert {"prometheus", "prometheus-alertmanager", "systemd"} <= make_apt_packages("test")


def test_fabric_alert_names_its_jobs(processes, webhook, tmp_path):
    """The fat-tree bundle recorded beside a real Slurm (tests/fixtures/fabric/make_bundle.py): leaf03's uplink
    to spine02 runs at 1X; job llm-pretrain spans leaf03 and leaf04, job one-leaf stays on leaf03. Replayed by
    `fabricmon fabric run`, scraped by the real Prometheus with the shipped rules: the page for the 1X uplink
    names the multi-leaf job, not the one-leaf job."""
    for tool in ("prometheus", "prometheus-alertmanager"):
        require_tool(tool, tool)
    port = free_port()
    p = processes.start("fabricmon-fabric", [*FABRICMON, "fabric", "run", "--replay",
                                             str(ROOT / "tests" / "fixtures" / "fabric" / "fat-tree"),
                                             "--listen", f"127.0.0.1:{port}", "--log-level", "warning"], cwd=ROOT)

    def served():
        assert p.poll() is None, processes.log(p)
        return b"fabricmon_fabric_finding_job_info{" in (http_get(f"http://127.0.0.1:{port}/metrics") or b"")
    wait_until(served, 30, "the fabric collector replaying the fat tree")
    am = grouping_alertmanager(processes, tmp_path, webhook.port)
    rules = tmp_path / "fabricmon.rules.yml"
    rules.write_text(re.sub(r"^(\s+for:) \S+$", r"\1 2s", build_rules.build(), flags=re.M))
    start_prometheus(processes, tmp_path, [{"job_name": "fabricmon-fabric", "static_configs": [
        {"targets": [f"127.0.0.1:{port}"]}]}], rule_files=[rules], alertmanager_port=am)
    page = wait_until(lambda: webhook.find("firing", alertname="FabricmonFabricPortDegraded", switch="leaf03"), 45,
                      "FabricmonFabricPortDegraded for leaf03 at the webhook")
    assert page["labels"]["port"] == "5" and page["labels"]["remote_name"] == "spine02"
    assert page["annotations"]["jobs"] == "1 (root/llm-pretrain)"      # docs/jobs.md shows this alert
