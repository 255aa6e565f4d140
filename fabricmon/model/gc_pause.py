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

In a daemon (`freeze_between_pauses`, which the long-running `run` commands call: a library user or a
test process keeps gc.collect() finding everything), when the last pause ends, what the process holds is frozen (`gc.freeze`: moved to the permanent
generation, which no collection walks): the batch's survivors, the new model, would otherwise meet
the young collection that ends the pause and be walked again by each older one, on a SuperPOD-size
fabric about 0.1-0.2 CPU-s a sweep for nothing, since they hold no cycles (measured: a dozen builds
and renders of that fabric leave no cyclic garbage). Reference counting still frees a frozen object
when the last reference goes. Whatever cycles do form (an exception's traceback) are found at the
thaw: every THAW_EVERY seconds the pause that ends unfreezes everything and runs one full collection
instead, so cyclic garbage lives at most that long.
"""

from __future__ import annotations

import gc
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager

_lock = threading.Lock()
_depth = 0          # pauses in progress (any thread)
_resume = False     # whether the collector was enabled when the first of them began
THAW_EVERY = 600.0  # seconds between thaws (a full collection of everything frozen since the last one)
_thawed_at: float | None = None     # when the last thaw ran (None: before the first pause ended)
_freeze = False     # freeze what the process holds when the last pause ends (freeze_between_pauses)


def freeze_between_pauses(on: bool = True) -> None:
    """From now on, the end of the last pause freezes what the process holds (module doc): for a daemon."""
    global _freeze
    _freeze = on


@contextmanager
def paused() -> Iterator[None]:
    """Cyclic garbage collection off for the block (reference counting still frees what it can); back
    on when the last pause in progress ends, if it was on when the first began, with what the process
    holds then frozen, or every THAW_EVERY seconds thawed and collected (module doc)."""
    global _depth, _resume, _thawed_at
    with _lock:
        if _depth == 0:
            _resume = gc.isenabled()
            gc.disable()
        _depth += 1
    thaw = False
    try:
        yield
    finally:
        with _lock:
            _depth -= 1
            if _depth == 0 and _resume:
                if _freeze:
                    now = time.monotonic()
                    if _thawed_at is None:
                        _thawed_at = now
                    thaw = now - _thawed_at >= THAW_EVERY
                    if thaw:
                        _thawed_at = now
                        gc.unfreeze()
                    else:
                        gc.freeze()
                gc.enable()
        if thaw:
            gc.collect()


__all__ = ["THAW_EVERY", "freeze_between_pauses", "paused"]
