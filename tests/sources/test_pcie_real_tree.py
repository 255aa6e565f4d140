"""The NIC's own PCIe link on a real sysfs tree: the recorded H100 node's /sys/class/infiniband (8 ConnectX-7
NDR HCAs and a RoCE bond, ../shared/captures) with the PCI functions its HCAs and GPUs sit on, whose links are
those another real H100 host's `lspci -vvv` reports (../shared/captures/lspci: 8 ConnectX-7 MT2910 at
32 GT/s x16 under Gen5 switch ports, 8 H100 GPUs). The capture holds no PCI files, so the test writes them in
the kernel's format into its copy of the tree, with the link values of the lspci capture, then lowers one HCA
and halves another, and runs the real `fabricmon check` on it."""

from __future__ import annotations

import os
import re
import subprocess
from pathlib import Path

import pytest

from fabricmon.model.pcie import PcieLink, capable, lane_gbps
from fabricmon.parsers.errors import ParseError
from fabricmon.parsers.pcie import parse_aer, parse_speed, parse_width
import sys

import yaml

from helpers import CAPTURES, REPO, h100_copy, skip_without_captures

LSPCI = CAPTURES / "lspci" / "leptonai-gpud__lspci-vvv"
H100_IB = [f"mlx5_{i}" for i in (0, 1, 4, 5, 6, 7, 8, 9)]
COR = ("RxErr", "BadTLP", "BadDLLP", "Rollover", "Timeout", "NonFatalErr", "CorrIntErr", "HeaderOF")
UNCOR = ("Undefined", "DLP", "SDES", "TLP", "FCP", "CmpltTO", "CmpltAbrt", "UnxCmplt", "RxOF", "MalfTLP", "ECRC",
         "UnsupReq", "ACSViol", "UncorrIntErr", "BlockedTLP", "AtomicOpBlocked", "TLPBlockedErr", "PoisonTLPBlocked")


def fabricmon(*args: str, env: dict) -> subprocess.CompletedProcess:
    exe = REPO / ".venv" / "bin" / "fabricmon"
    argv = [str(exe)] if exe.exists() else [sys.executable, "-m", "fabricmon"]
    return subprocess.run([*argv, *args], capture_output=True, text=True, timeout=120, env=env)


def no_tools_env(tmp_path: Path) -> dict[str, str]:
    empty = tmp_path / "empty-bin"
    empty.mkdir(exist_ok=True)
    return {**os.environ, "PATH": str(empty)}


def write_config(tmp_path: Path, sysfs: Path) -> str:
    """The default config, except where this host's files are (the sysfs tree, a state dir, no tool dirs)."""
    empty = tmp_path / "empty-sbin"
    empty.mkdir(exist_ok=True)
    f = tmp_path / "fabricmon.yml"
    f.write_text(yaml.safe_dump({"paths": {"sysfs": str(sysfs), "state_dir": str(tmp_path / "state"),
                                           "tool_dirs": [str(empty)]}}))
    return str(f)


def lspci_functions() -> tuple[dict[str, dict], dict[str, str]]:
    """The capture's functions: address -> {what, cap: (GT/s, width), sta: (GT/s, width)}; and the bridge whose
    secondary bus is each bus (bus -> bridge address)."""
    funcs: dict[str, dict] = {}
    bridge_of: dict[str, str] = {}
    cur = None
    for line in LSPCI.read_text(errors="replace").splitlines():
        m = re.match(r"^([0-9a-f]{2}:[0-9a-f]{2}\.[0-7]) (.*)$", line)
        if m:
            cur = funcs.setdefault(m.group(1), {"what": m.group(2)})
            continue
        if cur is None:
            continue
        if (b := re.search(r"Bus: primary=([0-9a-f]{2}), secondary=([0-9a-f]{2})", line)) is not None:
            bridge_of[b.group(2)] = [a for a, f in funcs.items() if f is cur][0]
        for key, tag in (("cap", "LnkCap:"), ("sta", "LnkSta:")):
            if tag in line and (s := re.search(r"Speed ([\d.]+)GT/s.*?Width x(\d+)", line)) is not None:
                cur.setdefault(key, (float(s.group(1)), int(s.group(2))))
    return funcs, bridge_of


def aer_text(names: tuple[str, ...], total: str, counts: dict[str, int] | None = None) -> str:
    counts = counts or {}
    return "".join(f"{n} {counts.get(n, 0)}\n" for n in names) + f"TOTAL_{total} {sum(counts.values())}\n"


def pci_function(root: Path, rel: str, cap: tuple[float, int], sta: tuple[float, int], vendor: str, klass: str) -> None:
    d = root / rel
    d.mkdir(parents=True, exist_ok=True)
    (d / "max_link_speed").write_text(f"{cap[0]:.1f} GT/s PCIe\n")
    (d / "max_link_width").write_text(f"{cap[1]}\n")
    (d / "current_link_speed").write_text(f"{sta[0]:.1f} GT/s PCIe\n")
    (d / "current_link_width").write_text(f"{sta[1]}\n")
    (d / "vendor").write_text(vendor + "\n")
    (d / "class").write_text(klass + "\n")
    (d / "aer_dev_correctable").write_text(aer_text(COR, "ERR_COR"))
    (d / "aer_dev_nonfatal").write_text(aer_text(UNCOR, "ERR_NONFATAL"))
    (d / "aer_dev_fatal").write_text(aer_text(UNCOR, "ERR_FATAL"))


@pytest.fixture
def node(tmp_path: Path) -> Path:
    """The recorded H100 tree, its HCAs (and the capture's GPUs) on PCI functions with the lspci capture's links."""
    skip_without_captures(LSPCI)
    sysfs = h100_copy(tmp_path)
    funcs, bridge_of = lspci_functions()
    cx7 = [a for a, f in funcs.items() if "ConnectX-7" in f["what"] and "cap" in f]
    gpus = [a for a, f in funcs.items() if "NVIDIA Corporation Device 2330" in f["what"] and "cap" in f]
    assert len(cx7) == 8 and len(gpus) == 8
    (sysfs / "bus" / "pci" / "devices").mkdir(parents=True)
    for kind, addrs in (("nic", cx7), ("gpu", gpus)):
        for i, addr in enumerate(addrs):
            up = bridge_of[addr[:2]]
            rel = f"devices/pci0000:{up[:2]}/0000:{up}/0000:{addr}"
            f, b = funcs[addr], funcs[up]
            pci_function(sysfs, rel.rsplit("/", 1)[0], b["cap"], b["sta"], "0x1000", "0x060400")
            pci_function(sysfs, rel, f["cap"], f["sta"], "0x15b3" if kind == "nic" else "0x10de",
                         "0x020000" if kind == "nic" else "0x030200")
            link = sysfs / "bus" / "pci" / "devices" / f"0000:{addr}"
            link.symlink_to(os.path.relpath(sysfs / rel, link.parent))
            if kind == "nic":
                dev = sysfs / "class" / "infiniband" / H100_IB[i] / "device"
                dev.symlink_to(os.path.relpath(sysfs / rel, dev.parent))
    return sysfs


def func_dir(sysfs: Path, dev: str) -> Path:
    return (sysfs / "class" / "infiniband" / dev / "device").resolve()


def run_check(tmp_path: Path, sysfs: Path, state: str) -> subprocess.CompletedProcess:
    cfg = write_config(tmp_path, sysfs)
    return fabricmon("check", "-v", "--state", state, "--config", cfg, env=no_tools_env(tmp_path))


def test_healthy_links_then_one_hca_at_gen4_and_one_at_x8(tmp_path: Path, node: Path) -> None:
    state = str(tmp_path / "state" / "check.json")
    res = run_check(tmp_path, node, state)
    link_lines = [ln for ln in res.stdout.splitlines() if " pcie_link: " in ln]
    assert len(link_lines) == 16 and all(ln.startswith("OK ") for ln in link_lines), res.stdout
    assert any("mlx5_0 (0000:1a:00.0) runs at 32 GT/s x16 (Gen5, 504 Gb/s)" in ln for ln in link_lines), link_lines
    # one HCA trains at Gen4 (the report: one NIC at 252 Gb/s of PCIe among Gen5 peers), another at x8
    (func_dir(node, "mlx5_4") / "current_link_speed").write_text("16.0 GT/s PCIe\n")
    (func_dir(node, "mlx5_6") / "current_link_width").write_text("8\n")
    res = run_check(tmp_path, node, state)
    assert res.returncode == 2, res.stdout + res.stderr
    bad = [ln for ln in res.stdout.splitlines() if " pcie_link: " in ln and not ln.startswith("OK ")]
    assert len(bad) == 2, bad
    gen4 = next(ln for ln in bad if "mlx5_4" in ln)
    assert gen4.startswith("CRITICAL pcie_link: mlx5_4 (0000:4d:00.0) trained at 16 GT/s x16 (Gen4, 252 Gb/s), slower "
                           "than the 32 GT/s x16 (Gen5, 504 Gb/s) it and its slot"), gen4
    assert "it caps port 1 (400 Gb/s) at 252 Gb/s" in gen4
    x8 = next(ln for ln in bad if "mlx5_6" in ln)
    assert "trained at 32 GT/s x8 (Gen5, 252 Gb/s), narrower than the 32 GT/s x16" in x8 and "caps port 1" in x8


def test_aer_correctable_rising_counted_and_fatal_critical(tmp_path: Path, node: Path) -> None:
    state = str(tmp_path / "state" / "check.json")
    res = run_check(tmp_path, node, state)
    aer = [ln for ln in res.stdout.splitlines() if " pcie_aer: " in ln]
    assert len(aer) == 16 and all(ln.startswith("OK ") and "no PCIe error since boot" in ln for ln in aer), res.stdout
    d = func_dir(node, "mlx5_5")
    (d / "aer_dev_correctable").write_text(aer_text(COR, "ERR_COR", {"RxErr": 40, "BadTLP": 7}))
    f = func_dir(node, "mlx5_7")
    (f / "aer_dev_fatal").write_text(aer_text(UNCOR, "ERR_FATAL", {"MalfTLP": 1}))
    res = run_check(tmp_path, node, state)
    lines = res.stdout.splitlines()
    cor = next(ln for ln in lines if " pcie_aer: mlx5_5 " in ln)
    assert cor.startswith("WARNING pcie_aer: mlx5_5 (0000:5e:00.0): correctable PCIe errors rose by 47") and \
        "(RxErr 40, BadTLP 7)" in cor, cor
    fatal = next(ln for ln in lines if " pcie_aer: mlx5_7 " in ln)
    assert fatal.startswith("CRITICAL pcie_aer: mlx5_7") and "1 fatal PCIe error(s) this boot" in fatal and \
        "MalfTLP 1" in fatal, fatal
    # an endpoint's error counted at its link partner (the switch port above it) is counted too
    slot = func_dir(node, "mlx5_8").parent
    (slot / "aer_dev_nonfatal").write_text(aer_text(UNCOR, "ERR_NONFATAL", {"CmpltTO": 2}))
    res = run_check(tmp_path, node, state)
    nf = next(ln for ln in res.stdout.splitlines() if " pcie_aer: mlx5_8 " in ln)
    assert nf.startswith("WARNING pcie_aer: mlx5_8") and "rose by 2" in nf and "CmpltTO 2" in nf, nf


def test_values() -> None:
    assert parse_speed("32.0 GT/s PCIe\n") == 32.0 and parse_speed("8 GT/s") == 8.0 and parse_speed("Unknown") is None
    assert parse_width("16\n") == 16 and parse_width("0") is None
    for bad in ("fast", "32 Gb/s"):
        with pytest.raises(ParseError):
            parse_speed(bad)
    with pytest.raises(ParseError):
        parse_width("x16")
    a = parse_aer("RxErr 3\nBadTLP 1\ndev_cor_errs_bit[9] 2\nTOTAL_ERR_COR 6\n")
    assert a.errors == {"RxErr": 3, "BadTLP": 1, "dev_cor_errs_bit[9]": 2} and a.total == 6
    for bad in ("", "RxErr three\n"):
        with pytest.raises(ParseError):
            parse_aer(bad)
    assert round(lane_gbps(16.0) * 16) == 252 and round(lane_gbps(32.0) * 16) == 504 and lane_gbps(5.0) == 4.0
    assert capable(PcieLink(32.0, 16), PcieLink(16.0, 16)) == PcieLink(16.0, 16)
