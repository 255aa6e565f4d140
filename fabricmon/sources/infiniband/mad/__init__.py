"""MADs in process: rdma-core's libibumad through ctypes (umad), pure encoders and decoders (codec),
many requests in flight matched by transaction ID (engine), and what a sweep reads from each switch
(reader). docs/mad-engine.md has the design and the measurements.

`open_reader()` opens the first umad port once per process and keeps it; it raises UmadUnavailable
where none can be opened (no libibumad, no CA, no permission, or a simulator that is not preloaded),
and the sweep then uses the infiniband-diags tools."""

from __future__ import annotations

import threading

from fabricmon.sources.infiniband.mad.engine import MadEngine, Request, RunStats
from fabricmon.sources.infiniband.mad.reader import FabricReader, SwitchResult, SwitchTarget
from fabricmon.sources.infiniband.mad.umad import UmadPort, UmadUnavailable

_lock = threading.Lock()
_reader: FabricReader | None = None


def open_reader(window: int = 32, per_target: int = 4, timeout_ms: int = 200, retries: int = 2,
                ca: str = "", port: int = 0) -> FabricReader:
    """The process's one reader (one umad port), its engine's settings updated to these."""
    global _reader
    with _lock:
        if _reader is None:
            _reader = FabricReader(MadEngine(UmadPort.open(ca, port)))
        eng = _reader.engine
        eng.window, eng.per_target, eng.timeout_ms, eng.retries = window, per_target, timeout_ms, retries
        return _reader


def close_reader() -> None:
    """Close the process's umad port (after a device error); the next open_reader opens it again."""
    global _reader
    with _lock:
        if _reader is not None:
            _reader.engine.port.close()
            _reader = None


__all__ = ["FabricReader", "MadEngine", "Request", "RunStats", "SwitchResult", "SwitchTarget", "UmadPort",
           "UmadUnavailable", "close_reader", "open_reader"]
