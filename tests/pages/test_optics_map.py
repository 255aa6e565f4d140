"""The fabric map marks a dimming cable: an optics finding on a switch port (checks.optics, the
collector's optics hook) colours the link it belongs to and is in its tooltip, like any port finding."""

from __future__ import annotations

import xml.etree.ElementTree as ET

from fabric_snap import fabric_snapshot, switch_guid
from fabricmon.checks import OK, WARNING, Finding
from fabricmon.pages import fabric_map
from fabricmon.pages.fabric_layout import layout
from fabricmon.sim.fabric import fat_tree_netfile

LEAF1, SPINE1 = switch_guid(2), switch_guid(0)


def test_a_dimming_uplink_is_marked_on_the_map() -> None:
    text = fat_tree_netfile(spines=2, leaves=2, hosts_per_leaf=2, uplinks_per_spine=1)
    snap = fabric_snapshot(text, {})
    dim = Finding("optics_dimming", LEAF1, 3, WARNING,
                  "switch leaf01 3: lane 2 receives -5.50 dBm, 3.5 dB below its baseline -2.00 dBm")
    findings = [*snap.findings, dim, Finding("optics_dimming", LEAF1, 4, OK, "switch leaf01 4: within 3 dB")]
    root = ET.fromstring(fabric_map.svg(layout(snap.fabric, findings), snap.fabric))
    links = {e.get("data-link"): e for e in root.iter() if e.get("data-link") is not None}
    mine = [e for k, e in links.items() if k.startswith(f"{LEAF1}:3-") or k.endswith(f"-{LEAF1}:3")]
    assert len(mine) == 1, sorted(links)
    assert mine[0].get("data-state") == "warning"
    tip = "".join(mine[0].itertext())
    assert "WARNING optics_dimming" in tip and "3.5 dB below its baseline" in tip
    others = [e.get("data-state") for k, e in links.items() if e is not mine[0]]
    assert set(others) == {"ok"}
