"""Make the screenshot of the node status page (docs/img/node-page.png).

The recorded DGX H100 bundle (tests/fixtures/bundles/dgx-h100), copied and edited: mlx5_2 port 1
pulled (DOWN/Polling) and mlx5_5 trained at 1X instead of 4X (a WARNING by config). The real
daemon replays it (`fabricmon run --replay` in-process), and headless Chromium (Debian package
`chromium`) takes the page at 1400x900.

    python docs/screenshots.py [--out docs/img/node-page.png]
"""

from __future__ import annotations

import argparse
import json
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import yaml

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from fabricmon.config import from_dict  # noqa: E402
from fabricmon.host import ReplayIO  # noqa: E402
from fabricmon.serve.daemon import Daemon  # noqa: E402

SIZE = (1400, 900)


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


def shoot(url: str, out: Path) -> None:
    exe = shutil.which("chromium") or shutil.which("chromium-browser") or shutil.which("google-chrome")
    if not exe:
        raise SystemExit("headless Chromium is needed (apt-get install chromium)")
    with tempfile.TemporaryDirectory(prefix="fabricmon-chromium-") as profile:
        subprocess.run([exe, "--headless", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage",
                        "--no-first-run", "--hide-scrollbars", f"--user-data-dir={profile}",
                        f"--window-size={SIZE[0]},{SIZE[1]}", "--virtual-time-budget=3000",
                        f"--screenshot={out}", url],
                       check=True, timeout=90, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", type=Path, default=REPO / "docs" / "img" / "node-page.png")
    args = ap.parse_args(argv)
    with tempfile.TemporaryDirectory(prefix="fabricmon-shot-") as tmp:
        bundle = broken_dgx(Path(tmp) / "dgx-h100-broken")
        raw = yaml.safe_load((bundle / "config.yml").read_text())
        cfg = from_dict({**raw, "server": {"address": "127.0.0.1", "port": 0}}, check_paths=False)
        d = Daemon(cfg, ReplayIO(bundle), journal=False)
        d.start()
        try:
            end = time.monotonic() + 30
            while d.snapshot is None or not d.snapshot.inventory_known:
                if time.monotonic() > end:
                    raise SystemExit("the daemon built no snapshot within 30 s")
                time.sleep(0.05)
            args.out.parent.mkdir(parents=True, exist_ok=True)
            shoot(f"http://127.0.0.1:{d.port}/", args.out)
        finally:
            d.stop()
    print(f"wrote {args.out} ({args.out.stat().st_size // 1024} KiB)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
