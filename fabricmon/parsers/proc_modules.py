"""Kernel module, kernel release and NVIDIA driver facts for the GPUDirect RDMA check.

DMA-BUF GPUDirect RDMA needs Linux 5.12+, the *open* NVIDIA GPU kernel module,
and CUDA 11.7+. CUDA 11.7 shipped with driver branch R515, which is also the
first branch of the open kernel module, so "CUDA 11.7+" is checked here as
"driver major >= 515". rdma-core 34+ (user space) is not visible here.
"""
from __future__ import annotations

import re

from fabricmon.parsers.errors import ParseError
from fabricmon.model.node_records import (  # the records this parser returns (re-exported)
    ModuleInfo as ModuleInfo,
)


_STATES = frozenset({"Live", "Loading", "Unloading"})
_VERSION = re.compile(r"(?<![\w.])(\d+\.\d+(?:\.\d+)?)(?![\w.])")


def _is_uint(text: str) -> bool:
    return text.isascii() and text.isdigit()


def _parse_module_line(line: str) -> ModuleInfo | None:
    fields = line.split()
    if len(fields) < 5 or fields[4] not in _STATES:
        return None
    name, size, refcount, deps, state = fields[:5]
    if not _is_uint(size) or not (_is_uint(refcount) or refcount == "-"):
        return None
    used_by = tuple(d for d in deps.split(",") if d and d != "-")
    return ModuleInfo(name, int(size), None if refcount == "-" else int(refcount), used_by, state)


def parse_proc_modules(text: str) -> dict[str, ModuleInfo]:
    """Parse /proc/modules; malformed lines are skipped, all-malformed raises ParseError."""
    modules: dict[str, ModuleInfo] = {}
    for line in text.splitlines():
        info = _parse_module_line(line)
        if info is not None:
            modules[info.name] = info
    if not modules and text.strip():
        raise ParseError("no parsable line in /proc/modules content")
    return modules


def parse_kernel_release(text: str) -> tuple[int, int]:
    """``5.15.0-105-generic`` -> (5, 15)."""
    m = re.match(r"\s*(\d+)\.(\d+)", text)
    if not m:
        raise ParseError(f"bad kernel release {text!r}")
    return int(m[1]), int(m[2])


def parse_nvidia_driver_version(text: str) -> str | None:
    """Driver version from /proc/driver/nvidia/version or /sys/module/nvidia/version.

    Returns None for empty content (nothing to report); raises ParseError when
    there is content but no version in it.
    """
    stripped = text.strip()
    if not stripped:
        return None
    if re.fullmatch(r"\d+\.\d+(?:\.\d+)?", stripped):
        return stripped
    for line in stripped.splitlines():
        if line.startswith("NVRM version:"):
            m = _VERSION.search(line.split("Module", 1)[-1])
            if m:
                return m[1]
    raise ParseError(f"no NVIDIA driver version in {text[:80]!r}")


def is_open_kernel_module(text: str) -> bool:
    """True when /proc/driver/nvidia/version names the open GPU kernel module."""
    return "Open Kernel Module" in text
