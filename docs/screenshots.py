"""Make every screenshot under docs/img/ (node-page.png, fabric-map.png, fabric-map-director.png), each
with docs/img/<name>.txt: what the page showed (its title, summary, the states of its switches, links
and ports, and its findings table), which tests/pages/test_screenshots.py renders again and compares,
so that a screenshot that no longer shows the current page (a renamed check, a changed reason) fails
until it is regenerated here.

- node-page: the recorded DGX H100 bundle (tests/fixtures/bundles/dgx-h100), copied and edited:
  mlx5_2 port 1 pulled (DOWN/Polling) and mlx5_5 trained at 1X instead of 4X (a WARNING by config),
  replayed by the real daemon (`fabricmon run --replay` in-process).
- fabric-map: the demo's fabric (`fabricmon demo`: 2 spines, 4 leaves, 32 hosts) as its collector
  draws it once leaf02's traffic is polarised onto spine01, built by the real FabricModel from
  records (tests/fabric_snap.py) on a fixed clock.
- fabric-map-director: the real 400-switch HDR director fabric (../shared/captures, beside the
  checkout), collapsed into groups, built the same way.

Headless Chromium (Debian package `chromium`) takes each page at 1400x900.

    python docs/screenshots.py [NAME ...] [--out DIR]
"""

from __future__ import annotations

import argparse
import contextlib
import dataclasses
import json
import re
import shutil
import subprocess
import sys
import tempfile
import time
import urllib.request
from collections import Counter
from collections.abc import Callable, Iterator
from html.parser import HTMLParser
from pathlib import Path

import yaml

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))
sys.path.insert(0, str(REPO / "tests"))          # fabric_snap: fabric snapshots from records

from fabricmon.config import from_dict  # noqa: E402
from fabricmon.host import ReplayIO  # noqa: E402
from fabricmon.serve.daemon import Daemon  # noqa: E402

SIZE = (1400, 900)
IMG = REPO / "docs" / "img"
DIRECTOR = REPO.parent / "shared" / "captures" / "ibnetdiscover" / "director-hdr-400sw.ibsim.net"
COLLECTOR_HOST = "fabmon01"       # the host the fabric maps' collector reports as (not this machine's name)


def broken_dgx(dst: Path) -> Path:
    """A copy of the dgx-h100 bundle with mlx5_2 port 1 down and mlx5_5 at 1X NDR."""
    shutil.copytree(REPO / "tests" / "fixtures" / "bundles" / "dgx-h100", dst)
    ib = dst / "files" / "sysfs" / "class" / "infiniband"
    (ib / "mlx5_2" / "ports" / "1" / "state").write_text("1: DOWN\n")
    (ib / "mlx5_2" / "ports" / "1" / "phys_state").write_text("2: Polling\n")
    (ib / "mlx5_5" / "ports" / "1" / "rate").write_text("100 Gb/sec (1X NDR)\n")
    manifest = json.loads((dst / "bundle.json").read_text())
    for c in manifest["commands"]:
        if c["argv"][:3] == ["iblinkinfo", "-C", "mlx5_5"]:
            c["stdout"] = c["stdout"].replace("( 4X ", "( 1X ")
    (dst / "bundle.json").write_text(json.dumps(manifest))
    raw = yaml.safe_load((dst / "config.yml").read_text())
    raw["checks"] = {"degraded_severity": "warning"}
    (dst / "config.yml").write_text(yaml.safe_dump(raw))
    return dst


@contextlib.contextmanager
def node_page() -> Iterator[str]:
    """The node status page of the edited DGX H100 bundle, served by the real daemon replaying it."""
    with tempfile.TemporaryDirectory(prefix="fabricmon-shot-") as tmp:
        bundle = broken_dgx(Path(tmp) / "dgx-h100-broken")
        raw = yaml.safe_load((bundle / "config.yml").read_text())
        cfg = from_dict({**raw, "server": {"address": "127.0.0.1", "port": 0}}, check_paths=False)
        d = Daemon(cfg, ReplayIO(bundle), journal=False)
        d.start()
        try:
            end = time.monotonic() + 60

            def settled() -> bool:      # every source in use has answered, and remediation is past "not asked yet"
                snap = d.snapshot
                return (snap is not None and snap.inventory_known
                        and all(s.ran for s in snap.sources.values() if s.enabled and s.active)
                        and (snap.remediation is None or snap.remediation.held))
            while not settled():
                if time.monotonic() > end:
                    raise SystemExit("the daemon built no settled snapshot within 60 s")
                time.sleep(0.05)
            yield f"http://127.0.0.1:{d.port}/"
        finally:
            d.stop()


@contextlib.contextmanager
def served(snap: object) -> Iterator[str]:
    """A fabric snapshot served at / by the real HTTP server, as the collector publishes it."""
    from fabricmon.pages import Pages
    from fabricmon.serve.server import Exposition, MetricsServer
    expo = Exposition()
    srv = MetricsServer("127.0.0.1", 0, expo)
    srv.start()
    try:
        expo.pages = Pages(snap)        # type: ignore[arg-type]
        yield f"http://127.0.0.1:{srv.port}/"
    finally:
        srv.stop()


def demo_fabric_snapshot() -> object:
    """The demo's fabric after its fault: every leaf's uplinks at half their rate, leaf02's traffic all on its
    two uplinks to spine01 (fabricmon.sim.demo's plan), named as the demo names it."""
    from fabric_snap import fabric_snapshot
    from fabricmon.sim import demo
    from fabricmon.sim.fabric import demo_netfile_path
    traffic = {**demo.BALANCED, demo.POLARISED_LEAF: {9: 0.8, 10: 0.8, 11: 0.0, 12: 0.0}}
    snap = fabric_snapshot(demo_netfile_path().read_text(), traffic)
    snap.fabric.name = demo.IB_FABRIC
    return dataclasses.replace(snap, host=COLLECTOR_HOST)


def director_snapshot(built: object = None) -> object:
    """The real 400-switch director fabric (two sweeps, no traffic); `built`: that snapshot made already
    (fabric_snapshot(DIRECTOR text, sweeps=2): the page tests' session fixture)."""
    from fabric_snap import fabric_snapshot
    if built is None:
        if not DIRECTOR.is_file():
            raise SystemExit(f"{DIRECTOR}: the director capture (../shared/captures) is not beside the checkout")
        built = fabric_snapshot(DIRECTOR.read_text(), sweeps=2)
    return dataclasses.replace(built, host=COLLECTOR_HOST)        # type: ignore[type-var]


# name -> the page it shows, served while the context is open (its URL)
SHOTS: dict[str, Callable[[], contextlib.AbstractContextManager[str]]] = {
    "node-page": node_page,
    "fabric-map": lambda: served(demo_fabric_snapshot()),
    "fabric-map-director": lambda: served(director_snapshot()),
}
MANY = 40           # more elements of one kind than this: counted by state, not listed
FIRST = 10          # more findings than MANY: the first FIRST listed, the rest counted


class _Page(HTMLParser):
    """What a page shows, from its HTML: title, summary lines, the data-* states, the findings rows."""

    def __init__(self) -> None:
        super().__init__()
        self.title = ""
        self.summary: list[str] = []
        self.items: dict[str, list[str]] = {"switch": [], "group": [], "bundle": [], "link": [], "port": []}
        self.findings: list[list[str]] = []
        self._in: list[str] = []            # what text goes to: "title", "summary", "cell"
        self._body = False                  # the page's <title>, not an SVG element's tooltip
        self._row = False                   # in a findings row

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        a = {k: v or "" for k, v in attrs}
        if tag == "body":
            self._body = True
        elif tag == "title" and not self._body:
            self._in.append("title")
        elif tag == "p" and "summary" in a.get("class", "").split():
            self.summary.append("")
            self._in.append("summary")
        elif tag == "tr" and "data-finding" in a:
            self.findings.append([])
            self._row = True
        elif tag == "td" and self._row and not self._in:
            self.findings[-1].append("")
            self._in.append("cell")
        flags = " ".join(f for f in ("hot", "down", "degraded", "errors") if a.get(f"data-{f}") == "1")
        for kind in self.items:
            if f"data-{kind}" in a and "data-state" in a and (kind != "port" or tag != "tr"):
                self.items[kind].append(f"{a[f'data-{kind}']}: {a['data-state']}{' ' + flags if flags else ''}")

    def handle_endtag(self, tag: str) -> None:
        if tag == "tr":
            self._row = False
        if self._in and (tag, self._in[-1]) in (("title", "title"), ("p", "summary"), ("td", "cell")):
            self._in.pop()

    def handle_data(self, data: str) -> None:
        if not self._in:
            return
        where = self._in[0]
        if where == "title":
            self.title += data
        elif where == "summary":
            self.summary[-1] += data
        else:
            self.findings[-1][-1] += data


def page_text(html: str) -> str:
    """The lines docs/img/<name>.txt records of a page (see the module's docstring)."""
    p = _Page()
    p.feed(html)
    lines = [f"title: {p.title}", *(f"summary: {s}" for s in p.summary)]
    for kind, items in p.items.items():
        if len(items) > MANY:
            states = Counter(i.split(": ", 1)[1] for i in items)
            lines.append(f"{kind} elements: {len(items)} (" + ", ".join(f"{n} {s}" for s, n in sorted(states.items())) + ")")
        else:
            lines += [f"{kind} {i}" for i in items]
    rows = [[re.sub(r"\s+", " ", c).strip() for c in row] for row in p.findings]
    lines += ["finding: " + " | ".join(row) for row in rows[:FIRST if len(rows) > MANY else None]]
    if len(rows) > MANY:        # the rest, counted: a picture shows the first few
        counts = Counter(f"{r[0]} {r[1]}" for r in rows[FIRST:])
        lines.append(f"findings after these: {len(rows) - FIRST} (" +
                     ", ".join(f"{n} {k}" for k, n in sorted(counts.items())) + ")")
    return "\n".join(lines) + "\n"


def fetch(url: str) -> str:
    with urllib.request.urlopen(url, timeout=30) as r:
        return str(r.read().decode())


def shoot(url: str, out: Path, budget_ms: int = 3000, timeout: float = 180.0) -> None:
    exe = shutil.which("chromium") or shutil.which("chromium-browser") or shutil.which("google-chrome")
    if not exe:
        raise SystemExit("headless Chromium is needed (apt-get install chromium)")
    with tempfile.TemporaryDirectory(prefix="fabricmon-chromium-") as profile:
        subprocess.run([exe, "--headless", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage",
                        "--no-first-run", "--hide-scrollbars", f"--user-data-dir={profile}",
                        f"--window-size={SIZE[0]},{SIZE[1]}", f"--virtual-time-budget={budget_ms}",
                        f"--screenshot={out}", url],
                       check=True, timeout=timeout, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("names", nargs="*", metavar="NAME", help=f"which screenshots ({', '.join(SHOTS)}; default: all)")
    ap.add_argument("--out", type=Path, default=IMG, help="the directory (default docs/img)")
    args = ap.parse_args(argv)
    unknown = [n for n in args.names if n not in SHOTS]
    if unknown:
        ap.error(f"unknown screenshot {unknown[0]!r} (one of {', '.join(SHOTS)})")
    args.out.mkdir(parents=True, exist_ok=True)
    for name in args.names or SHOTS:
        png, txt = args.out / f"{name}.png", args.out / f"{name}.txt"
        with SHOTS[name]() as url:
            before = fetch(url)
            shoot(url, png)
            text = page_text(fetch(url))
        if text != page_text(before):
            raise SystemExit(f"{name}: the page changed while it was taken; run it again")
        txt.write_text(text)
        print(f"wrote {png} ({png.stat().st_size // 1024} KiB) and {txt}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
