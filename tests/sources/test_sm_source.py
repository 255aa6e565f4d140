"""sources.infiniband.sm through the HostIO, on sminfo's and saquery's outputs recorded against ibsim
(tests/fixtures/fabric/tools): one query left unanswered on a busy port is asked again before "no master"
becomes data; an SM that stays silent is no master, said as data, not as an error."""

from __future__ import annotations

import math

from fabricmon.config import from_dict
from fabricmon.pipeline.source import Inputs
from fabricmon.sources.infiniband.sm import SmSource
from helpers import FakeIO, recorded_tool



class ScriptedIO(FakeIO):
    """FakeIO whose argv may answer a list of outputs, one per run in turn (the last one then kept)."""

    def run(self, argv, timeout):
        c = self.commands.get(tuple(argv))
        if isinstance(c, list):
            self.ran.append(tuple(argv))
            rc, out, err = c.pop(0) if len(c) > 1 else c[0]
            return FakeIO({tuple(argv): (rc, out, err)}).run(argv, timeout)
        return super().run(argv, timeout)


def collect(sminfo: list) -> tuple:
    cfg = from_dict({})
    t = str(cfg.fabric.mad.timeout_ms)
    io = ScriptedIO({("sminfo", "-t", t): sminfo, ("saquery", "-s", "-t", t): recorded_tool("saquery-s")})
    src = SmSource(cfg.fabric.sources["sm"])
    return src.collect(io, Inputs(deadline=math.inf)), io


def test_a_lost_query_is_asked_again_before_no_master_is_data() -> None:
    out, io = collect([recorded_tool("sminfo-no-sm"), recorded_tool("sminfo-master")])
    assert out.errors == [] and out.data.answered and [s.state for s in out.data.sms] == ["MASTER"]
    assert [a[0] for a in io.ran].count("sminfo") == 2


def test_an_sm_silent_twice_is_no_master_as_data() -> None:
    out, io = collect([recorded_tool("sminfo-no-sm")])
    assert out.errors == [] and out.data is not None and not out.data.answered and out.data.sms == []
    assert [a[0] for a in io.ran] == ["sminfo", "sminfo"]          # no saquery: nothing answered to ask after


def test_an_answering_sm_is_asked_once() -> None:
    out, io = collect([recorded_tool("sminfo-master")])
    assert out.data.answered and [a[0] for a in io.ran] == ["sminfo", "saquery"]
