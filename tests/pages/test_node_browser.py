"""The node status page in headless Chromium, served by the real node daemon on a simulated
fabric (ibsim, the real infiniband-diags tools under umad2sim): the page refreshes itself in
place when a cable is pulled, the down port turns critical, and `#select=port:...` opens with
that port's details. Saves node-page.png as a test artefact."""

from __future__ import annotations

import threading
import time
import urllib.error
import urllib.request
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest

from browser import Dom, dump_dom, screenshot
from fabricmon.config import from_dict
from fabricmon.host import LiveIO
from fabricmon.serve.daemon import Daemon
from fabricmon.sim.fabric import fat_tree_netfile
from helpers import wait_until

HOST = "node01 mlx5_0"
PORT = "ibsim0/1"            # the simulated host's CA, as the tools name it
INTERVAL = 1.0


def port_state(html: str) -> str | None:
    el = Dom(html).by("data-port", PORT)
    return el["data-state"] if el else None


@pytest.fixture
def daemon(sim_fabric, tmp_path):
    fab = sim_fabric(fat_tree_netfile(spines=1, leaves=1, hosts_per_leaf=2))
    (tmp_path / "sys").mkdir()
    cfg = from_dict({
        "server": {"address": "127.0.0.1", "port": 0},
        "paths": {"sysfs": str(tmp_path / "sys"), "state_dir": str(tmp_path / "state")},
        "sources": {name: {"interval": INTERVAL} for name in ("sysfs", "ibstat", "perfquery", "iblinkinfo")},
        "expected_links": [{"device": "*", "width": "4X", "speed": "HDR"}],
    })
    d = Daemon(cfg, LiveIO(cfg.sysfs, cfg.procfs, env=fab.env(HOST)), journal=False)
    d.start()
    try:
        wait(lambda: d.snapshot is not None and d.snapshot.inventory_known
             and all(s.runs for s in d.snapshot.sources.values() if s.enabled and s.active), 20)
        yield fab, d
    finally:
        d.stop()


def wait(pred, timeout: float) -> None:
    wait_until(pred, timeout)


class HoldingProxy:
    """Forwards to the daemon; the first `/?part=live` request (page.js's first refresh) waits
    until `on_refresh()` returned, so something can change on the fabric between the page's
    first paint and its refresh however fast Chromium's virtual time runs (virtual time stands
    still while a fetch is pending). Keeps every body it served."""

    def __init__(self, upstream: str, on_refresh):
        self.served: list[tuple[str, bytes]] = []
        self._once = threading.Lock()
        self._held = False
        proxy = self

        class Handler(BaseHTTPRequestHandler):
            def do_GET(self):  # noqa: N802
                if "part=live" in self.path:
                    with proxy._once:
                        if not proxy._held:
                            proxy._held = True
                            on_refresh()
                try:
                    with urllib.request.urlopen(upstream + self.path, timeout=10) as r:
                        code, headers, body = r.status, r.headers, r.read()
                except urllib.error.HTTPError as e:
                    code, headers, body = e.code, e.headers, e.read()
                proxy.served.append((self.path, body))
                self.send_response(code)
                for k in ("Content-Type", "Content-Security-Policy", "X-Fabricmon-Snapshot", "Cache-Control"):
                    if headers.get(k):
                        self.send_header(k, headers[k])
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def log_message(self, *args):
                pass

        self.httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.thread = threading.Thread(target=self.httpd.serve_forever, daemon=True)

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.httpd.server_address[1]}"

    def __enter__(self):
        self.thread.start()
        return self

    def __exit__(self, *exc):
        self.httpd.shutdown()
        self.httpd.server_close()


def test_node_page_turns_the_pulled_port_critical_in_place(browser, daemon):
    fab, d = daemon
    base = f"http://127.0.0.1:{d.port}"
    first = urllib.request.urlopen(base + "/", timeout=5).read().decode()
    assert port_state(first) == "ok"                       # the healthy port, before the fault

    def pull_cable() -> None:
        fab.unlink(HOST, 1)
        wait(lambda: not d.snapshot.ib.ports[("ibsim0", 1)].up, 10)

    t0 = time.monotonic()
    with HoldingProxy(base, pull_cable) as proxy:
        # 7 s of virtual time: the first paint, then page.js's refresh at 5 s
        dom = dump_dom(proxy.url + "/", budget_ms=7000, size=(1400, 900))
    paths = [p for p, _ in proxy.served]
    assert paths[0] == "/" and port_state(proxy.served[0][1].decode()) == "ok"   # painted healthy
    assert "/?part=live" in paths, f"page.js never refreshed: {paths}"
    assert port_state(dom) == "critical", "the refreshed page does not show the pulled cable"
    doc = Dom(dom)
    el = doc.by("data-port", PORT)
    assert "link: link down, 0 Gb/s (expected 200 Gb/s)" in el["data-tip"]
    assert "state: DOWN/Polling" in el["data-tip"] and "CRITICAL degraded_link: ibsim0 port 1 is DOWN" in el["data-tip"]
    assert doc.by("id", "overall")["class"] == "dot critical"      # the header followed the refresh
    assert doc.by("data-finding", "degraded_link")["data-state"] == "critical"
    assert {"ibstat", "perfquery", "iblinkinfo"} <= {a["data-source"] for _, a in doc.elements if "data-source" in a}
    assert time.monotonic() - t0 < 30

    # a link to the port opens with its details shown (the tip, then the port's detail part)
    sel = Dom(dump_dom(f"{base}/#select=port:{PORT}", budget_ms=2000, size=(1400, 900)))
    panel = sel.by("id", "details")
    assert panel is not None and "hidden" not in panel, "the details panel stayed hidden"
    assert "selected" in sel.by("data-port", PORT)["class"]
    text = "".join(sel.text)
    assert "ibsim0 port 1 (InfiniBand)" in text and "Checks of ibsim0/1" in text
    assert "Counters (perfquery)" in text

    path = screenshot(f"{base}/#select=port:{PORT}", "node-page.png", budget_ms=2000, size=(1400, 900))
    assert path.stat().st_size > 10_000
