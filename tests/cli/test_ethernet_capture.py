"""`fabricmon fabric capture` and `once --replay` of an Ethernet fabric: the committed bundle
(tests/fixtures/fabric/ethernet, made by make_ethernet_bundle.py on snmpsim) replays into a
promtool-clean exposition with every metric documented; a live capture against snmpsim keeps no
secret anywhere in the bundle."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

from helpers import REPO, duplicate_series, promtool, unavailable, wait_until

from fabricmon.sim.ethernet import SnmpSimFabric, leaf_spine, tools_available

BUNDLE = REPO / "tests" / "fixtures" / "fabric" / "ethernet"


def fabric(*args: str, timeout: float = 90) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "fabricmon", "fabric", *args], capture_output=True, text=True,
                          timeout=timeout, cwd=REPO)


def test_the_ethernet_bundle_replays_promtool_clean_and_documented() -> None:
    r = fabric("once", "--replay", str(BUNDLE), "--sweeps", "2", "--interval", "0.1")
    assert r.returncode == 0, r.stderr
    body = r.stdout
    assert 'fabricmon_fabric_switch_info{level="2",switch="spine01",switch_guid="0c:42:a1:00:01:00"} 1.0' in body
    assert ('fabricmon_fabric_link_info{port="Ethernet8",remote_guid="0c:42:a1:00:01:00",remote_name="spine01",'
            'remote_port="Ethernet0",role="up",switch_guid="0c:42:a1:00:02:00"} 1.0') in body
    assert ('fabricmon_fabric_link_info{port="Ethernet12",remote_guid="0c:42:a1:00:01:01",remote_name="spine02",'
            'remote_port="Ethernet0",role="up",switch_guid="0c:42:a1:00:02:00"} 1.0') in body
    assert re.search(r'fabricmon_fabric_port_pause_frames_total\{direction="tx",port="Ethernet0",priority="3",'
                     r'switch_guid="0c:42:a1:00:02:01"\} [1-9]', body)
    assert 'fabricmon_fabric_check_status{check="unresponsive",switch="leaf02",switch_guid="0c:42:a1:00:02:01"} 0.0' in body
    assert 'fabricmon_source_up{source="sweep"} 1.0' in body
    assert duplicate_series(body) == []
    p = subprocess.run([promtool(), "check", "metrics"], input=body, capture_output=True, text=True)
    assert p.returncode == 0, p.stdout + p.stderr
    doc = (REPO / "docs" / "metrics.md").read_text()
    names = set(re.findall(r"^# TYPE (\S+) ", body, re.M))
    missing = [n for n in names if f"| `{n}` |" not in doc and f"| `{n}_total` |" not in doc
               and f"| `{n}` (`_bucket`" not in doc]
    assert names and not missing, f"metrics missing from docs/metrics.md: {missing}"


def test_a_live_capture_keeps_no_secret(tmp_path: Path) -> None:
    ok, why = tools_available()
    if not ok:
        unavailable(why)
    secret = "s3cret-Community-77"
    with SnmpSimFabric(leaf_spine(spines=1, leaves=1, hosts_per_leaf=1), community=secret) as fab:
        cfg = tmp_path / "fabricmon.yml"
        cfg.write_text(f"paths: {{state_dir: {tmp_path / 'state'}}}\n"
                       f"fabric:\n  kind: ethernet\n  ethernet:\n    switches: {fab.addresses()}\n"
                       f"    snmp: {{community: {secret}, timeout: 1, retries: 0}}\n")
        out = tmp_path / "bundle"
        r = fabric("capture", "--config", str(cfg), str(out))
        assert r.returncode == 0, r.stderr
        assert secret not in r.stdout + r.stderr
    for f in out.rglob("*"):
        if f.is_file():
            assert secret not in f.read_text(errors="replace"), f
    assert "<redacted>" in (out / "config.yml").read_text()
    r = fabric("once", "--replay", str(out))
    assert r.returncode == 0, r.stderr
    assert 'fabricmon_fabric_switch_info{level="1",switch="leaf01"' in r.stdout


def test_the_fabric_map_draws_the_ethernet_fabric() -> None:
    """The map and a switch's port table, unchanged pages, on the replayed Ethernet bundle: switches by
    chassis ID, ports by ifName, links by class (400G)."""
    import http.client

    from fabricmon.config import load
    from fabricmon.host.bundle import ReplayIO
    from fabricmon.pipeline.fabric import fabric_pipeline
    from fabricmon.serve.daemon import Daemon
    from dataclasses import replace
    cfg = load(str(BUNDLE / "config.yml"), check_paths=False)
    cfg = replace(cfg, address="127.0.0.1")
    io = ReplayIO(str(BUNDLE))
    d = Daemon(cfg, io, port=0, pipeline=fabric_pipeline(cfg, io))
    d.start()
    try:
        def get(path: str, ok: bool = True) -> str:
            conn = http.client.HTTPConnection("127.0.0.1", d.port, timeout=10)
            conn.request("GET", path)
            r = conn.getresponse()
            body = r.read().decode()
            assert r.status == 200 or not ok, (path, r.status, body[:200])
            return body
        # 503 until the first snapshot is built
        page = wait_until(lambda: get("/", ok=False), 20, "the fabric map drawn",
                          until=lambda page: 'data-guid="0c:42:a1:00:02:00"' in page, interval=0.2)
        assert all(f'data-guid="0c:42:a1:00:0{g}"' in page for g in ("1:00", "1:01", "2:00", "2:01"))
        table = get("/?part=switch&guid=0c:42:a1:00:02:00")
        assert '<td class="num">Ethernet8</td><td>up</td><td>up</td><td>400G / 400G</td><td>spine01 [Ethernet0]</td>' \
            in table
    finally:
        d.stop()
