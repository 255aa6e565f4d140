"""Tests for fabricmon.parsers.proc_modules."""
import dataclasses

import pytest

from fabricmon.model.gpu import dmabuf_supported
from fabricmon.parsers.errors import ParseError
from fabricmon.parsers.proc_modules import (
    ModuleInfo,
    is_open_kernel_module,
    parse_kernel_release,
    parse_nvidia_driver_version,
    parse_proc_modules,
)

PROC_MODULES = """\
nvidia_peermem 16384 0 - Live 0x0000000000000000 (OE)
nvidia_uvm 1789952 4 - Live 0x0000000000000000 (OE)
nvidia 56872960 412 nvidia_peermem,nvidia_modeset,nvidia_uvm, Live 0x0000000000000000 (OE)
ib_core 425984 9 rdma_cm,ib_ipoib,nvidia_peermem,mlx5_ib, Live 0x0000000000000000
mlx5_core 2097152 1 mlx5_ib, Loading 0x0000000000000000
nofree 4096 - - Live 0x0000000000000000
"""

OPEN_VERSION = (
    "NVRM version: NVIDIA UNIX Open Kernel Module for x86_64  550.54.15  Release Build"
    "  (dvs-builder@U16-I3-B03-4-3)  Tue Mar  5 22:15:33 UTC 2024\n"
    "GCC version:  gcc version 12.3.0 (Ubuntu 12.3.0-1ubuntu1~22.04)\n"
)
PROPRIETARY_VERSION = (
    "NVRM version: NVIDIA UNIX x86_64 Kernel Module  535.129.03  Thu Oct 19 18:56:32 UTC 2023\n"
    "GCC version:  gcc version 11.4.0 (Ubuntu 11.4.0-1ubuntu1~22.04)\n"
)


def test_parse_proc_modules_fields():
    mods = parse_proc_modules(PROC_MODULES)
    assert set(mods) == {"nvidia_peermem", "nvidia_uvm", "nvidia", "ib_core", "mlx5_core", "nofree"}
    assert mods["nvidia_peermem"] == ModuleInfo("nvidia_peermem", 16384, 0, (), "Live")
    assert mods["nvidia"].used_by == ("nvidia_peermem", "nvidia_modeset", "nvidia_uvm")
    assert mods["nvidia"].refcount == 412
    assert "nvidia_peermem" in mods["ib_core"].used_by
    assert mods["mlx5_core"].state == "Loading"
    assert mods["nofree"].refcount is None


def test_module_info_is_frozen():
    info = parse_proc_modules(PROC_MODULES)["nvidia_peermem"]
    with pytest.raises(dataclasses.FrozenInstanceError):
        info.state = "Unloading"  # type: ignore[misc]


def test_parse_proc_modules_skips_malformed_lines():
    text = "garbage\nnvidia_peermem 16384 0 - Live 0x0\nbad size x - Live 0x0\nx 1 2 - Dead 0x0\n\n"
    assert list(parse_proc_modules(text)) == ["nvidia_peermem"]


def test_parse_proc_modules_without_address_column():
    assert parse_proc_modules("mlx5_ib 487424 0 - Live\n")["mlx5_ib"].size == 487424


def test_parse_proc_modules_empty_is_empty():
    assert parse_proc_modules("") == {}
    assert parse_proc_modules("\n  \n") == {}


@pytest.mark.parametrize("bad", ["not a modules file", "a b c d e f\n1 2 3\n"])
def test_parse_proc_modules_all_malformed_raises(bad):
    with pytest.raises(ParseError):
        parse_proc_modules(bad)


@pytest.mark.parametrize(
    "text, want",
    [
        ("5.15.0-105-generic\n", (5, 15)),
        ("6.8.0-1015-nvidia", (6, 8)),
        ("5.12.0", (5, 12)),
        ("4.18.0-513.el8.x86_64", (4, 18)),
    ],
)
def test_parse_kernel_release(text, want):
    assert parse_kernel_release(text) == want


@pytest.mark.parametrize("bad", ["", "linux", "6-generic"])
def test_parse_kernel_release_garbage(bad):
    with pytest.raises(ParseError):
        parse_kernel_release(bad)


def test_driver_version_open_and_proprietary():
    assert parse_nvidia_driver_version(OPEN_VERSION) == "550.54.15"
    assert parse_nvidia_driver_version(PROPRIETARY_VERSION) == "535.129.03"
    aarch64 = "NVRM version: NVIDIA UNIX Open Kernel Module for aarch64  560.35.03  Release Build\n"
    assert parse_nvidia_driver_version(aarch64) == "560.35.03"


def test_driver_version_from_sys_module():
    assert parse_nvidia_driver_version("550.54.15\n") == "550.54.15"
    assert parse_nvidia_driver_version("550.54") == "550.54"


def test_driver_version_empty_and_garbage():
    assert parse_nvidia_driver_version("") is None
    assert parse_nvidia_driver_version(" \n") is None
    with pytest.raises(ParseError):
        parse_nvidia_driver_version("GCC version:  gcc version 12.3.0\n")
    with pytest.raises(ParseError):
        parse_nvidia_driver_version("NVRM version: NVIDIA UNIX x86_64 Kernel Module\n")


def test_is_open_kernel_module():
    assert is_open_kernel_module(OPEN_VERSION)
    assert not is_open_kernel_module(PROPRIETARY_VERSION)
    assert not is_open_kernel_module("550.54.15")


def test_dmabuf_supported_all_present():
    ok, reason = dmabuf_supported((5, 15), True, "550.54.15")
    assert ok
    assert "available" in reason


def test_dmabuf_boundaries():
    assert dmabuf_supported((5, 12), True, "515.43.04")[0]
    assert not dmabuf_supported((5, 11), True, "515.43.04")[0]
    assert not dmabuf_supported((5, 12), True, "510.108.03")[0]
    assert dmabuf_supported((6, 0), True, "1000.1")[0]


@pytest.mark.parametrize(
    "args, words",
    [
        (((5, 4), True, "550.54.15"), ["kernel 5.4"]),
        (((6, 8), False, "550.54.15"), ["proprietary"]),
        (((6, 8), True, "470.223.02"), ["470.223.02", "515"]),
        ((None, None, None), ["kernel version unknown", "flavour unknown", "driver version unknown"]),
        (((4, 18), False, "535.129.03"), ["kernel 4.18", "proprietary"]),
    ],
)
def test_dmabuf_reasons_name_what_is_missing(args, words):
    ok, reason = dmabuf_supported(*args)
    assert not ok
    for word in words:
        assert word in reason
