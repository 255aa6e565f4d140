"""The node status page (fabricmon.pages.node) rendered from snapshots of the recorded bundles
(tests/fixtures/bundles), some edited into a down port, a degraded port and a failing tool, and
served by the real daemon over HTTP."""

from __future__ import annotations

import dataclasses
import json
import shutil
import time
import urllib.error
import urllib.request
from pathlib import Path

import pytest
import yaml

from fabricmon.checks import CRITICAL, OK, WARNING, Finding, worst
from fabricmon.config import from_dict, load
from fabricmon.host import ReplayIO
from fabricmon.model.ports import PortView
from fabricmon.model.snapshot import BuildStats, Snapshot, SourceState
from fabricmon.pages import Pages
from fabricmon.pages import node
from fabricmon.pipeline.scheduler import Pipeline
from fabricmon.report import verdict
from fabricmon.serve.daemon import Daemon
from browser import Dom
from helpers import BUNDLES, wait_until

STATE = {OK: "ok", WARNING: "warning", CRITICAL: "critical"}


def collect(bundle: Path, cfg=None) -> Snapshot:
    pipe = Pipeline(cfg or load(bundle / "config.yml", check_paths=False), ReplayIO(bundle))
    try:
        return pipe.collect()
    finally:
        pipe.close()


@pytest.fixture(scope="module")
def broken_bundle(tmp_path_factory) -> Path:
    """dgx-h100 with mlx5_2 port 1 down (DOWN/Polling), mlx5_5 trained at 1X (degraded, a
    WARNING by config) and ibstat failing (exit 255, nothing printed)."""
    b = tmp_path_factory.mktemp("bundles") / "dgx-h100-broken"
    shutil.copytree(BUNDLES / "dgx-h100", b)
    ports = b / "files" / "sysfs" / "class" / "infiniband"
    (ports / "mlx5_2" / "ports" / "1" / "state").write_text("1: DOWN\n")
    (ports / "mlx5_2" / "ports" / "1" / "phys_state").write_text("2: Polling\n")
    (ports / "mlx5_5" / "ports" / "1" / "rate").write_text("100 Gb/sec (1X NDR)\n")
    manifest = json.loads((b / "bundle.json").read_text())
    for c in manifest["commands"]:
        if c["argv"][:3] == ["iblinkinfo", "-C", "mlx5_5"]:
            c["stdout"] = c["stdout"].replace("( 4X ", "( 1X ")
        if c["argv"] == ["ibstat"]:
            c.update(stdout="", stderr="ibpanic: [1234] main: stat of IB device 'mlx5_0' failed\n", returncode=255)
    (b / "bundle.json").write_text(json.dumps(manifest))
    raw = yaml.safe_load((b / "config.yml").read_text())
    raw["checks"] = {"degraded_severity": "warning"}
    (b / "config.yml").write_text(yaml.safe_dump(raw))
    return b


@pytest.fixture(scope="module")
def broken(broken_bundle) -> Snapshot:
    return collect(broken_bundle)


def render(snap: Snapshot, part: str = "page", **query: str) -> str:
    out = node.PARTS[part](snap, query)
    assert out is not None
    return out


@pytest.mark.parametrize("name", sorted(p.name for p in BUNDLES.iterdir() if (p / "bundle.json").is_file()))
def test_every_port_has_an_element_whose_state_agrees_with_check(name):
    snap = collect(BUNDLES / name)
    doc = Dom(render(snap))
    ports = doc.with_attr("data-port")
    assert set(ports) == {f"{d}/{p}" for d, p in snap.ib.ports}
    findings = verdict(snap)["findings"]
    for (dev, num) in snap.ib.ports:
        want = STATE[max((f["status"] for f in findings if f["device"] == dev and f["port"] == num), default=OK)]
        el = ports[f"{dev}/{num}"]
        assert el["data-state"] == want, (dev, num)
        assert el["data-detail"] == f"/?part=port&port={dev}%2F{num}"
        assert f"{dev} port {num}" in el["data-tip"]
    assert doc.with_attr("data-findings")        # the findings table (or its empty line) is there


def test_the_header_names_the_host_the_daemon_reports_on():
    """Issue 41.6: the header named this machine (socket.gethostname()) while the demo runs as node01: it
    names the daemon's host identity, a replay the recorded host, slurm.node_name when set."""
    import socket
    snap = collect(BUNDLES / "dgx-h100")
    assert snap.host == "dgx-h100-01"
    sub = render(snap).split('<span class="sub">', 1)[1].split(" · ", 1)[0]
    assert sub == "dgx-h100-01" != socket.gethostname()
    cfg = from_dict({**yaml.safe_load((BUNDLES / "dgx-h100" / "config.yml").read_text()),
                     "slurm": {"node_name": "node01"}}, check_paths=False)
    assert collect(BUNDLES / "dgx-h100", cfg).host == "node01"
    from fabricmon.sim.demo import DEMO_HOST, demo_config
    assert from_dict(demo_config("/nonexistent", 0), check_paths=False).slurm.node_name == DEMO_HOST.split()[0]


def test_ports_are_in_a_stable_natural_order():
    snap = collect(BUNDLES / "dgx-h100")
    order = [a["data-port"] for _, a in Dom(render(snap, "live")).elements if "data-port" in a]
    assert order == [f"mlx5_{i}/1" for i in range(8)]


def test_down_and_degraded_ports_are_critical_and_warning(broken):
    doc = Dom(render(broken))
    ports = doc.with_attr("data-port")
    assert ports["mlx5_2/1"]["data-state"] == "critical"
    assert ports["mlx5_5/1"]["data-state"] == "warning"
    assert {ports[f"mlx5_{i}/1"]["data-state"] for i in (0, 1, 3, 4, 6, 7)} == {"ok"}
    tip = ports["mlx5_2/1"]["data-tip"]
    assert "state: DOWN/Polling" in tip and "CRITICAL degraded_link: mlx5_2 port 1 is DOWN/Polling" in tip
    assert "link: link down, 0 Gb/s (expected 400 Gb/s)" in tip         # not the stale 4X NDR
    tip = ports["mlx5_5/1"]["data-tip"]
    assert "link: 1X NDR, 100 Gb/s (expected 400 Gb/s)" in tip
    assert "WARNING degraded_link: mlx5_5 port 1 runs at 1X NDR" in tip
    text = "".join(doc.text)
    assert "1X NDR · 100 Gb/s expected 400 Gb/s" in text
    assert "8 port(s): 6 ok, 1 warning, 1 critical" in text
    # the header's dot and the live part's meta say the worst
    assert 'id="overall"' in render(broken) and '<span class="dot critical" id="overall">' in render(broken)


def test_findings_table_has_the_reasons_and_the_failing_source(broken):
    doc = Dom(render(broken, "live"))
    rows = [a for t, a in doc.elements if t == "tr" and "data-finding" in a]
    checks = [(r["data-finding"], r["data-state"]) for r in rows]
    assert checks[0] == ("degraded_link", "critical")
    assert ("degraded_link", "warning") in checks and ("source", "warning") in checks
    text = "".join(doc.text)
    assert "mlx5_2 port 1 is DOWN/Polling (InfiniBand): check the cable" in text
    assert "source ibstat: ibstat: exit 255: ibpanic" in text and "fix it or disable sources.ibstat" in text
    # every WARNING/CRITICAL that check prints is a row here
    bad = [f for f in verdict(broken)["findings"] if f["status"] != OK]
    assert len(rows) == len(bad)


def test_sources_are_listed_with_their_state_and_last_success(broken):
    doc = Dom(render(broken, "live"))
    rows = doc.with_attr("data-source")
    active = {n for n, s in broken.sources.items() if s.enabled and s.active}
    assert set(rows) == active and "sysfs" in rows and "perfquery" in rows
    assert rows["ibstat"]["data-state"] == "warning"
    assert "failing now: ibstat: exit 255: ibpanic" in rows["ibstat"]["data-tip"]
    assert "errors since start: exit_code 1" in rows["ibstat"]["data-tip"]
    assert "last success: never\n" in rows["ibstat"]["data-tip"]
    assert rows["sysfs"]["data-state"] == "ok"
    assert "every 15 s" in rows["sysfs"]["data-tip"]
    html = render(broken, "live")
    assert "0 s ago" in html                      # sysfs succeeded at the snapshot's time


def test_sources_that_are_off_are_one_muted_line():
    snap = collect(BUNDLES / "dgx-h100")
    sources = dict(snap.sources)
    sources["mlnx_qos"] = dataclasses.replace(sources["mlnx_qos"].copy(), active=False)
    sources["ethtool"] = dataclasses.replace(sources["ethtool"].copy(), enabled=False)
    snap = dataclasses.replace(snap, sources=sources)
    doc = Dom(render(snap, "live"))
    assert "mlnx_qos" not in doc.with_attr("data-source") and "ethtool" not in doc.with_attr("data-source")
    assert "Off: ethtool (disabled), mlnx_qos (not installed)" in "".join(doc.text)


def test_gpu_section_shows_gpudirect_and_affinity():
    snap = collect(BUNDLES / "no-peermem")
    doc = Dom(render(snap, "live"))
    text = "".join(doc.text)
    assert "GPUs and GPUDirect RDMA" in text and "nvidia-peermem not loaded" in text
    assert [a["data-state"] for t, a in doc.elements if t == "p" and a.get("class") == "gpudirect"] == ["critical"]
    assert len(doc.with_attr("data-gpu")) == 8
    mis = Dom(render(collect(BUNDLES / "dgx-h100-miswired"), "live"))
    gpus = mis.with_attr("data-gpu")
    assert gpus["GPU3"]["data-state"] == "warning" and gpus["GPU6"]["data-state"] == "ok"
    assert "mlx5_0, mlx5_1, mlx5_2 (NODE)" in "".join(mis.text)


def test_roce_ports_show_their_netdev_and_settings():
    snap = collect(BUNDLES / "roce-pfc-off-storm")
    doc = Dom(render(snap, "live"))
    ports = doc.with_attr("data-port")
    assert ports["mlx5_0/1"]["data-state"] == "critical"        # PFC off on the lossless priority
    assert ports["mlx5_1/1"]["data-state"] == "warning"
    assert "RoCE: ens1f0np0 · MTU 1500 · PFC off · trust pcp" in ports["mlx5_0/1"]["data-tip"]
    detail = render(snap, "port", port="mlx5_0/1")
    assert "roce_pfc" in detail and "ens1f0np0" in detail and "RoCE MTU" in detail


def test_port_detail_part_lists_every_check_and_the_counters(broken):
    detail = render(broken, "port", port="mlx5_2/1")
    assert "Checks of mlx5_2/1" in detail and "symbol_errors" in detail and "degraded_link" in detail
    assert "Counters (sysfs)" in detail and "link_downed" in detail
    for bad in ("nope/1", "mlx5_2/9", "mlx5_2", "", "mlx5_2/x"):
        assert node.port_detail(broken, {"port": bad}) is None
    assert node.port_detail(broken, {}) is None


def test_hostile_strings_are_escaped():
    snap = collect(BUNDLES / "dgx-h100")
    evil = '<script>alert(1)</script>"\'&'
    dev = f"mlx5_{evil}"
    snap.ib.ports = {**snap.ib.ports, (dev, 1): PortView(device=dev, port=1, state_id=1, phys_state_id=2)}
    snap = dataclasses.replace(
        snap, findings=snap.findings + [Finding("degraded_link", dev, 1, CRITICAL, f"{dev} port 1 is {evil}")],
        sources={**snap.sources, evil: SourceState(evil, True, 15.0, 5.0, ran=True, active_errors={evil})})
    for html in (render(snap), render(snap, "live"), render(snap, "port", port=f"{dev}/1")):
        assert "<script>alert" not in html
        assert "&lt;script&gt;alert(1)&lt;/script&gt;" in html
    doc = Dom(render(snap))
    assert doc.with_attr("data-port")[f"{dev}/1"]["data-state"] == "critical"    # the attribute held
    assert evil in doc.with_attr("data-source")
    assert [t for t, _ in doc.elements if t == "script"] == ["script"]            # only page.js


def test_before_the_inventory_is_known_it_says_so():
    snap = Snapshot(time=time.time(), findings=[], sources={"sysfs": SourceState("sysfs", True, 15.0, 5.0)},
                    builds=BuildStats(), inventory_known=False)
    html = render(snap)
    assert 'data-inventory="waiting"' in html and "Waiting for the port inventory" in html
    assert "No InfiniBand or RoCE port" not in html and "data-port=" not in html
    assert "inventory pending" in html and "port inventory not known yet" in html
    assert Dom(render(snap, "live")).with_attr("data-source")["sysfs"]["data-state"] == "ok"
    assert 'data-inventory="empty"' in render(dataclasses.replace(snap, inventory_known=True))


def test_live_fragment_starts_with_the_meta_div(broken):
    live = render(broken, "live")
    assert live.startswith('<div id="meta" hidden data-when="')
    tag, attrs = Dom(live).elements[0]
    assert (tag, attrs["id"], attrs["data-state"]) == ("div", "meta", "critical")
    ok = render(collect(BUNDLES / "dgx-h100"), "live")
    assert Dom(ok).elements[0][1]["data-state"] == "ok"
    page = render(broken)
    assert page.startswith("<!doctype html>") and f'<main id="live">{live}</main>' in page


def test_overall_state_counts_failing_sources_like_check():
    snap = collect(BUNDLES / "dgx-h100")
    assert worst(snap.findings) == OK
    snap = dataclasses.replace(snap, sources={**snap.sources, "perfquery": dataclasses.replace(
        snap.sources["perfquery"].copy(), active_errors={"timeout"})})
    assert Dom(render(snap, "live")).elements[0][1]["data-state"] == "warning"
    assert verdict(snap)["status"] == WARNING


# --- over HTTP, from the real daemon -------------------------------------------------------------

def get(url: str) -> tuple[int, dict[str, str], bytes]:
    try:
        with urllib.request.urlopen(url, timeout=10) as r:
            return r.status, dict(r.headers), r.read()
    except urllib.error.HTTPError as e:
        return e.code, dict(e.headers), e.read()


@pytest.fixture(scope="module")
def daemon(broken_bundle):
    cfg = from_dict({**yaml.safe_load((broken_bundle / "config.yml").read_text()),
                     "server": {"address": "127.0.0.1", "port": 0}}, check_paths=False)
    d = Daemon(cfg, ReplayIO(broken_bundle), journal=False)
    d.start()
    try:
        wait_until(lambda: d.snapshot is not None and d.snapshot.inventory_known, 20, "a snapshot")
        yield f"http://127.0.0.1:{d.port}"
    finally:
        d.stop()


def test_daemon_serves_the_node_page(daemon):
    code, headers, body = get(daemon + "/")
    assert code == 200 and headers["Content-Type"].startswith("text/html")
    assert "script-src 'self'" in headers["Content-Security-Policy"]
    assert headers["X-Content-Type-Options"] == "nosniff"
    html = body.decode()
    assert 'data-page="node"' in html and 'data-port="mlx5_2/1" data-state="critical"' in html
    assert 'style="' not in html              # the CSP allows no inline style: classes only


def test_daemon_serves_the_live_part_and_the_port_detail(daemon):
    code, headers, body = get(daemon + "/?part=live")
    assert code == 200 and body.decode().startswith('<div id="meta" hidden')
    assert float(headers["X-Fabricmon-Snapshot"]) > 0
    code, _, body = get(daemon + "/?part=port&port=mlx5_2%2F1")
    assert code == 200 and b"Checks of mlx5_2/1" in body
    assert get(daemon + "/?part=port&port=nope%2F1")[0] == 404


def test_daemon_serves_the_static_files_and_refuses_unknown_parts(daemon):
    code, headers, body = get(daemon + "/static/page.js")
    assert code == 200 and headers["Content-Type"].startswith("text/javascript") and b"part=live" in body
    code, headers, body = get(daemon + "/static/page.css")
    assert code == 200 and b"node status page" in body
    assert get(daemon + "/?part=nosuch")[0] == 404
    assert get(daemon + "/static/nosuch.js")[0] == 404


def test_pages_cache_the_rendered_parts(broken):
    pages = Pages(broken)
    a = pages.get("live", {})
    assert a is not None and pages.get("live", {}) is a
    assert pages.get("port", {"port": "mlx5_2/1"}) is not None
    assert pages.get("switch", {}) is None


def test_daemon_serves_the_runbooks_every_alert_links_to(daemon):
    """Every alert's default runbook_url is http://<instance>/runbooks#<alert>: the daemon serves the runbooks
    shipped in the wheel, one anchor per alert of the shipped rules (issue 27: links that open)."""
    from fabricmon.deploy import RULES
    code, headers, body = get(daemon + "/runbooks")
    assert code == 200 and headers["Content-Type"].startswith("text/html")
    assert "script-src 'self'" in headers["Content-Security-Policy"]
    html = body.decode()
    alerts = {r["alert"] for g in yaml.safe_load(RULES.read_text())["groups"] for r in g["rules"] if "alert" in r}
    assert len(alerts) >= 40
    for name in alerts:
        assert f'<h3 id="{name.lower()}">{name}<a class="anchor" href="#{name.lower()}">#</a></h3>' in html, name
    assert "<script" not in html and 'style="' not in html
    assert "<pre><code>fabricmon check -v" in html        # the runbooks' commands, escaped, in code blocks


def test_runbooks_markdown_is_escaped():
    from fabricmon.pages.runbooks import render
    html = render('### Fabricmon<X>\nA `<b>` and [x](javascript:alert(1)) and [y](#fabricmonx) **z**\n')
    assert '<h3 id="fabricmonx">Fabricmon&lt;X&gt;' in html and "<code>&lt;b&gt;</code>" in html
    assert "javascript:" not in html and '<a href="#fabricmonx">y</a>' in html and "<strong>z</strong>" in html
