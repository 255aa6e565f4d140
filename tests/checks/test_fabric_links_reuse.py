"""checks.fabric_links.Links reuses its last verdicts while what it judges did not change (issue 40: a
SuperPOD-size fabric's links are judged every sweep, and between sweeps only the counters move): the same
ports, links, ends, abilities and past give the same verdicts without judging them again; a link that goes
down, a first sighting's past and a changed ability are judged again. Every build's verdicts equal a fresh
judge's."""

from __future__ import annotations

from fabric_snap import _state, ibnetdiscover_text

from fabricmon.model import ibspec
from fabricmon.checks.fabric_links import Links, judge
from fabricmon.config import from_dict
from fabricmon.model.compact import PortCounters
from fabricmon.model.fabric import DiscoveryData, SweepData
from fabricmon.parsers.ibnetdiscover import parse_ibnetdiscover
from fabricmon.pipeline.fabric import FabricModel
from fabricmon.sim.fabric import fat_tree_netfile

NAMES = [c.name for c in ibspec.COUNTERS]


def test_links_judged_again_only_when_what_it_reads_changed() -> None:
    disc = parse_ibnetdiscover(ibnetdiscover_text(fat_tree_netfile(spines=2, leaves=3, hosts_per_leaf=2)))
    clock = [1.9e9]
    cfg = from_dict({}, check_paths=False)
    model = FabricModel(cfg, clock=lambda: clock[0])
    links = next(c for c in model.checks.registered() if isinstance(c, Links))
    states = {"discovery": _state(DiscoveryData, disc, clock[0])}
    leaf = next(g for g, sw in disc.switches.items() if sw.links and 1 in sw.links)

    def build(i: int, down: bool = False) -> tuple[object, list]:
        sw = SweepData(bits={n: 64 for n in NAMES})
        for g, node in disc.switches.items():
            for port in range(1, node.nports + 1):
                sw.ports[(g, port)] = PortCounters.pack({n: 100 * i + port if "bytes" in n else 0 for n in NAMES})
                sw.link_up[(g, port)] = port in node.links and not (down and (g, port) == (leaf, 1))
            sw.switches.add(g)
        clock[0] += 15.0
        states["sweep"] = _state(SweepData, sw, clock[0])
        sections, findings = model.build(states)
        sec = sections["fabric"]
        fresh, _ = judge(sec.ports, sec.switches, sec.levels, cfg.checks, links.state.last.abilities if
                         links.state.last else {}, links.state.last.past if links.state.last else {})
        assert {k: p.degraded for k, p in sec.ports.items() if p.link is not None} == fresh.degraded
        return links.state.last.verdicts, [f for f in findings if f.check == "degraded_link"]

    v1, _ = build(1)            # first sighting: the past is new ...
    v2, _ = build(2)            # ... so the next build judges again, against the past it left
    v3, f3 = build(3)           # nothing changed but the counters: the same verdicts, not judged again
    assert v3 is v2 and v2 is not v1 and not f3
    v4, f4 = build(4, down=True)                # a link went down: judged again
    assert v4 is not v3 and v4.degraded[(leaf, 1)]["down"] and (leaf, 1) in {(f.device, f.port) for f in f4}
    v5, f5 = build(5, down=True)
    v6, f6 = build(6, down=True)
    assert v6 is v5 and f6 == f5 and (leaf, 1) in {(f.device, f.port) for f in f6}     # still down: the same
