"""One render per published snapshot (issue 40): the exposition is rendered by the first scrape that
asks for it, once per snapshot and counter-set selection, its gzip copy built once and shared by every
scraper; a snapshot nobody scrapes (a slow source completing between scrapes) costs no render; a scrape
picks counter sets with `collect[]` (node_exporter's parameter), an unknown set is a 400."""

from __future__ import annotations

import gzip
import http.client
import sys
import threading
import time
from pathlib import Path

import pytest

from fabricmon.exporter import counter_sets
from fabricmon.config import ServeConfig
from fabricmon.exporter.render import Renderer
from fabricmon.serve.server import Exposition, MetricsServer

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "pages"))
from fabric_snap import fabric_snapshot  # noqa: E402

from fabricmon.sim.fabric import director_netfile  # noqa: E402


@pytest.fixture(scope="module")
def snap():
    return fabric_snapshot(director_netfile(), sweeps=2)


class Counting:
    """A render function that counts its calls per counter-set selection."""

    def __init__(self, snap, delay: float = 0.0) -> None:
        self.snap, self.delay = snap, delay
        self.calls: list[frozenset[str]] = []
        self.renderer = Renderer()
        self.lock = threading.Lock()

    def __call__(self, sets: frozenset[str]) -> bytes:
        with self.lock:
            self.calls.append(sets)
        time.sleep(self.delay)             # a render that takes this long: what the test is about
        return self.renderer.render(self.snap, sets)


@pytest.fixture
def server():
    made = []

    def start(expo: Exposition) -> MetricsServer:
        s = MetricsServer("127.0.0.1", 0, expo, serve=ServeConfig())
        s.start()
        made.append(s)
        return s
    yield start
    for s in made:
        s.stop()


def get(port: int, path: str = "/metrics", gz: bool = False) -> tuple[int, bytes, str | None]:
    c = http.client.HTTPConnection("127.0.0.1", port, timeout=30)
    try:
        c.request("GET", path, headers={"Accept-Encoding": "gzip"} if gz else {})
        r = c.getresponse()
        return r.status, r.read(), r.getheader("Content-Encoding")
    finally:
        c.close()


def test_a_snapshot_is_rendered_once_for_every_scraper(snap, server) -> None:
    expo = Exposition()
    make = Counting(snap, delay=0.3)        # a slow render: the scrapers arriving meanwhile wait for it
    expo.publish(make, snap.time)
    s = server(expo)
    results: list[tuple[int, bytes, str | None]] = []

    def scrape(gz: bool) -> None:
        results.append(get(s.port, gz=gz))
    threads = [threading.Thread(target=scrape, args=(i % 2 == 0,)) for i in range(6)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert make.calls == [counter_sets.DEFAULT_SETS]
    plain = {body for code, body, enc in results if enc is None}
    zipped = {body for code, body, enc in results if enc == "gzip"}
    assert all(code == 200 for code, _, _ in results)
    assert len(plain) == 1 and len(zipped) == 1       # the one gzip copy, shared
    assert gzip.decompress(zipped.pop()) == plain.pop()
    # a snapshot published and replaced before any scrape is never rendered
    skipped = Counting(snap)
    expo.publish(skipped, snap.time + 1)
    later = Counting(snap)
    expo.publish(later, snap.time + 2)
    assert get(s.port)[0] == 200
    assert skipped.calls == [] and later.calls == [counter_sets.DEFAULT_SETS]


def test_a_scrape_picks_its_counter_sets(snap, server) -> None:
    expo = Exposition()
    make = Counting(snap)
    expo.publish(make, snap.time)
    s = server(expo)
    code, default, _ = get(s.port)
    assert code == 200 and b"fabricmon_fabric_port_transmit_bytes_total{" in default
    assert b"fabricmon_fabric_port_transmit_rate_bytes_per_second" not in default
    code, rates, _ = get(s.port, "/metrics?collect[]=rates")
    assert code == 200
    families = {ln.split()[2] for ln in rates.decode().splitlines() if ln.startswith("# TYPE")}
    assert families == {"fabricmon_fabric_port_transmit_rate_bytes_per_second",
                        "fabricmon_fabric_port_receive_rate_bytes_per_second"}
    code, both, _ = get(s.port, "/metrics?collect%5B%5D=default&collect%5B%5D=rates")    # as Prometheus encodes it
    assert code == 200 and both.startswith(default[:100]) and len(both) == len(default) + len(rates)
    code, state, _ = get(s.port, "/metrics?collect[]=state")
    assert code == 200 and b"fabricmon_fabric_port_up{" in state
    code, every, _ = get(s.port, "/metrics?collect[]=all")
    # this fabric's sweep (ibqueryerrors) reads no packets; the state set shares a few families with the default
    # one (the switch and link info its alerts join with), each rendered once
    def fams(text: bytes) -> dict[str, list[str]]:
        out: dict[str, list[str]] = {}
        name = ""
        for ln in text.decode().splitlines():
            if ln.startswith("# HELP "):
                name = ln.split()[2]
            out.setdefault(name, []).append(ln)
        return out
    assert code == 200 and fams(every) == {**fams(both), **fams(state)}
    assert {"fabricmon_fabric_link_info", "fabricmon_fabric_switch_info"} <= set(fams(state)) & set(fams(default))
    get(s.port, "/metrics?collect[]=rates")             # cached: no second render
    assert make.calls.count(frozenset({"rates"})) == 1
    code, body, _ = get(s.port, "/metrics?collect[]=packet")
    assert code == 400 and b"unknown counter set 'packet'" in body


def test_the_configured_sets_are_what_a_plain_scrape_gets(snap, server) -> None:
    expo = Exposition(counter_sets.parse(["default", "rates"]))
    expo.publish(Counting(snap), snap.time)
    s = server(expo)
    code, body, _ = get(s.port)
    assert code == 200 and b"fabricmon_fabric_port_transmit_rate_bytes_per_second{" in body


def test_a_render_that_fails_is_a_500_and_the_server_goes_on(snap, server) -> None:
    expo = Exposition()

    def broken(sets: frozenset[str]) -> bytes:
        raise RuntimeError("a bug")
    expo.publish(broken, snap.time)
    s = server(expo)
    code, body, _ = get(s.port)
    assert code == 500 and b"RuntimeError" in body
    expo.publish(Counting(snap), snap.time + 1)
    assert get(s.port)[0] == 200


def test_the_daemon_tunes_glibc_malloc_unless_the_operator_did(monkeypatch) -> None:
    import platform

    from fabricmon.serve import daemon
    if platform.libc_ver()[0] != "glibc":
        assert daemon.tune_malloc() is False
        return
    assert daemon.tune_malloc() is True
    monkeypatch.setenv("MALLOC_ARENA_MAX", "4")
    monkeypatch.setenv("MALLOC_MMAP_THRESHOLD_", "131072")
    assert daemon.tune_malloc() is False
