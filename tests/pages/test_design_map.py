"""The fabric map marks each design discrepancy (docs/design.md) where the existing findings are
marked: the switch box takes the finding's state and the switch's details list it at its port (a
cabled one); a replaced switch (an OK finding) colours nothing."""

from __future__ import annotations

from fabric_snap import _state, ibnetdiscover_text
from model.test_design import changed, fat_tree, live

from fabricmon.checks import OK, WARNING
from fabricmon.config import from_dict
from fabricmon.model import design as dm
from fabricmon.model.design import DesignData
from fabricmon.model.fabric import DiscoveryData
from fabricmon.model.snapshot import BuildStats, Snapshot
from fabricmon.pages import fabric_map
from fabricmon.pages.fabric_layout import layout
from fabricmon.parsers.design import parse_design
from fabricmon.parsers.ibnetdiscover import parse_ibnetdiscover
from fabricmon.pipeline.fabric import FabricModel


def test_each_discrepancy_is_marked_on_the_map() -> None:
    design = parse_design(dm.design_csv(live(fat_tree())))
    text = ibnetdiscover_text(changed(fat_tree(), spine_guid=False))
    states = {"discovery": _state(DiscoveryData, parse_ibnetdiscover(text), 1.0),
              "design": _state(DesignData, DesignData("/etc/fabricmon/design.csv", design), 1.0)}
    model = FabricModel(from_dict({}, check_paths=False), clock=lambda: 1_800_000_000.0)
    sections, findings = model.build(states)
    sec = sections["fabric"]
    mine = [f for f in findings if f.check == "design"]
    assert len(mine) == 3 and all(f.status == WARNING for f in mine)
    assert sec.check_status[("design", mine[0].device)] == WARNING
    names = {g: sw.name for g, sw in sec.switches.items()}
    lay = layout(sec, findings)
    by = {names[f.device]: f for f in mine}
    assert set(by) == {"leaf01", "leaf03", "spine01"}
    for name, f in by.items():
        box = lay.switches[f.device]
        assert box.state == WARNING and f in box.findings
    # the moved host's cable, at leaf03[7]: the switch's details name it at its port
    leaf03 = by["leaf03"].device
    snap = Snapshot(time=1_800_000_000.0, findings=findings, sources=states, builds=BuildStats(), fabric=sec)
    details = fabric_map.switch(snap, {"guid": leaf03})
    assert details is not None and 'data-port="7" data-state="warning"' in details
    assert "cable miswired to the wrong switch" in details
    assert [f.status for f in findings if f.check == "design" and f.status == OK] == []


def test_shards_report_each_discrepancy_once() -> None:
    """With the collector sharded, each shard reports the discrepancies marked on its own switches (the
    fabric-wide ones on shard 0): together exactly the unsharded findings."""
    design = parse_design(dm.design_csv(live(fat_tree())))
    text = ibnetdiscover_text(changed(fat_tree(), spine_guid=False).replace("node08 mlx5_0", "node09 mlx5_0"))
    states = {"discovery": _state(DiscoveryData, parse_ibnetdiscover(text.replace("0000000000100007",
                                                                                  "00000000000beef8")), 1.0),
              "design": _state(DesignData, DesignData("/etc/fabricmon/design.csv", design), 1.0)}

    def design_findings(shard: tuple[int, int]) -> list:
        model = FabricModel(from_dict({}, check_paths=False), clock=lambda: 1_800_000_000.0, shard=shard)
        return [f for f in model.build(states)[1] if f.check == "design"]
    whole = design_findings((0, 1))
    assert len(whole) == 5          # swapped, miswired, missing cable; node08 missing, node09 not in the design
    parts = design_findings((0, 3)) + design_findings((1, 3)) + design_findings((2, 3))
    assert sorted(f.message for f in parts) == sorted(f.message for f in whole)
