"""fabricmon.model.gc_pause: no cyclic collection inside a pause; what the process holds frozen when the last pause
ends, so later collections do not walk the fabric's model again; a thaw every THAW_EVERY seconds that
collects any cyclic garbage made since (nothing leaks for longer); only in a daemon (freeze_between_pauses)."""

from __future__ import annotations

import gc
import weakref

import pytest

from fabricmon.model import gc_pause


@pytest.fixture(autouse=True)
def _restore() -> object:
    enabled = gc.isenabled()
    gc_pause.freeze_between_pauses()
    yield
    gc_pause.freeze_between_pauses(False)
    gc.unfreeze()
    gc_pause._thawed_at = None
    (gc.enable if enabled else gc.disable)()


class Cycle:
    def __init__(self) -> None:
        self.me = self


def test_a_pause_stops_collection_and_freezes_what_it_made() -> None:
    gc.enable()
    with gc_pause.paused():
        assert not gc.isenabled()
        with gc_pause.paused():             # nested: the outermost decides
            assert not gc.isenabled()
        assert not gc.isenabled()
        kept = [Cycle() for _ in range(10)]
    assert gc.isenabled()
    assert gc.get_freeze_count() >= 10      # the batch's survivors are frozen: no collection walks them
    del kept


def test_cyclic_garbage_frozen_is_collected_at_the_thaw(monkeypatch: pytest.MonkeyPatch) -> None:
    gc.enable()
    gc.collect()
    with gc_pause.paused():
        ref = weakref.ref(Cycle())          # unreachable at once, but a cycle: only a collection frees it
    assert gc.get_freeze_count() > 0
    gc.collect()
    assert ref() is not None                # frozen: no collection finds it ...
    assert gc_pause._thawed_at is not None
    monkeypatch.setattr(gc_pause, "_thawed_at", gc_pause._thawed_at - gc_pause.THAW_EVERY)
    with gc_pause.paused():
        pass
    assert gc.get_freeze_count() == 0 and ref() is None     # ... until the thaw, which collected it
    assert gc.isenabled()


def test_outside_a_daemon_nothing_is_frozen() -> None:
    gc.enable()
    gc_pause.freeze_between_pauses(False)
    with gc_pause.paused():
        pass
    assert gc.isenabled() and gc.get_freeze_count() == 0


def test_a_disabled_collector_stays_disabled_and_nothing_is_frozen() -> None:
    gc.disable()
    gc.unfreeze()
    with gc_pause.paused():
        pass
    assert not gc.isenabled() and gc.get_freeze_count() == 0
