"""No cyclic garbage collection while a large batch of objects is made (issue 40: CPU per sweep).

A fabric sweep, build or render allocates hundreds of thousands of container objects (answers, counter
records, ports, lines), almost all freed by reference counting or kept as the new model. With the
collector enabled, every 700 allocations start a young collection, every tenth of those an older one,
and in a collector holding the whole fabric's model each full collection they lead to walks all of it:
measured on the SuperPOD-size fabric (26,000 switch ports), 1.7 full collections a sweep, 0.27 CPU-s,
plus 0.12 in the young ones. Paused, the batch's objects meet one young collection when it ends
instead of hundreds, and the older generations are rarely reached. Nesting is allowed (the outermost
pause decides); threads share the one switch, so a pause in one thread pauses all of them for its
duration, which is what the fabric collector wants while a build or a read runs.
"""

from __future__ import annotations

import gc
import threading
from collections.abc import Iterator
from contextlib import contextmanager

_lock = threading.Lock()
_depth = 0          # pauses in progress (any thread)
_resume = False     # whether the collector was enabled when the first of them began


@contextmanager
def paused() -> Iterator[None]:
    """Cyclic garbage collection off for the block (reference counting still frees what it can); back
    on when the last pause in progress ends, if it was on when the first began."""
    global _depth, _resume
    with _lock:
        if _depth == 0:
            _resume = gc.isenabled()
            gc.disable()
        _depth += 1
    try:
        yield
    finally:
        with _lock:
            _depth -= 1
            if _depth == 0 and _resume:
                gc.enable()


__all__ = ["paused"]
