"""The NVML boundary: the only module that calls pynvml (imported lazily, on GPU hosts only).

Tests fake pynvml's functions here (nvmlInit, nvmlDeviceGetCount, nvmlDeviceGetHandleByIndex,
nvmlDeviceGetUUID, nvmlDeviceGetPciInfo, nvmlSystemGetDriverVersion, nvmlShutdown) and
everything above them is real code. LiveIO.nvml_gpus() calls query_gpus(); RecordingIO stores
its answer in the bundle (bundle.json "nvml"), and ReplayIO serves it back.
"""

from __future__ import annotations

from typing import Any


class NvmlUnavailable(RuntimeError):
    """NVML cannot be used on this host: pynvml or libnvidia-ml missing, or no driver loaded.

    With `sources.gpu.enabled: auto` (the default) this means "no GPUs here", not an error.
    """


class NvmlError(RuntimeError):
    """NVML is present but a call failed."""


# NVML return codes that mean "there is no usable NVML here" (nvml.h). NVML_ERROR_NO_PERMISSION is not
# one: the GPUs are there and this user may not open their device nodes (a daemon without access to
# /dev/nvidia*), an NvmlError, so that `enabled: auto` never reads it as "no GPUs".
_UNAVAILABLE_CODES = {
    "NVML_ERROR_LIBRARY_NOT_FOUND", "NVML_ERROR_DRIVER_NOT_LOADED", "NVML_ERROR_FUNCTION_NOT_FOUND",
    "NVML_ERROR_LIB_RM_VERSION_MISMATCH",
}
NO_PERMISSION = "Insufficient Permissions"      # pynvml's words for NVML_ERROR_NO_PERMISSION (kept in a bundle)


def _text(value: Any) -> str:
    if isinstance(value, bytes):
        return value.decode("utf-8", "replace")
    return str(value)


def _unavailable(pynvml: Any, exc: Exception) -> bool:
    value = getattr(exc, "value", None)
    for name in _UNAVAILABLE_CODES:
        code = getattr(pynvml, name, None)
        if code is not None and value == code:
            return True
    return False


def query_gpus() -> list[dict[str, Any]]:
    """[{index, uuid, bus_id, driver_version}] for every GPU NVML sees.

    Raises NvmlUnavailable when NVML cannot be initialised for lack of a library or driver,
    NvmlError when a call fails on a working NVML.
    """
    try:
        import pynvml
    except ImportError as exc:     # nvidia-ml-py not installed
        raise NvmlUnavailable(f"pynvml is not installed: {exc}") from exc
    try:
        pynvml.nvmlInit()
    except pynvml.NVMLError as exc:
        if _unavailable(pynvml, exc):
            raise NvmlUnavailable(f"NVML unavailable: {exc}") from exc
        raise NvmlError(f"nvmlInit failed: {exc}") from exc
    except OSError as exc:
        raise NvmlUnavailable(f"NVML unavailable: {exc}") from exc
    try:
        try:
            driver = _text(pynvml.nvmlSystemGetDriverVersion())
        except pynvml.NVMLError:
            driver = ""
        gpus = []
        for i in range(pynvml.nvmlDeviceGetCount()):
            handle = pynvml.nvmlDeviceGetHandleByIndex(i)
            pci = pynvml.nvmlDeviceGetPciInfo(handle)
            gpus.append({
                "index": i,
                "uuid": _text(pynvml.nvmlDeviceGetUUID(handle)),
                "bus_id": _text(pci.busId),
                "driver_version": driver,
            })
        return gpus
    except pynvml.NVMLError as exc:
        raise NvmlError(f"NVML query failed: {exc}") from exc
    finally:
        try:
            pynvml.nvmlShutdown()
        except Exception:     # noqa: BLE001 - shutdown failures must not hide the result
            pass
