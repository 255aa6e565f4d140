"""The design in ibsim (docs/design.md): a fat tree with SHARP Aggregation Nodes, read by the real
collector (ibnetdiscover and the sweep under umad2sim), saved as its design by `fabricmon fabric
design save` in both forms; the same fabric compared with it raises nothing. Then a second ibsim
runs the fabric as found after repairs (the design saved from the first, compared with a live sim
of a changed netfile: ibsim cannot recable a running fabric, and a replaced switch is a new node
with another GUID): node01's and node02's cables swapped at leaf01, node03 moved from leaf02[1] to
leaf03[7], the uplink leaf04[3] - spine01[7] removed, spine02 replaced (same name, another GUID),
and, on the running fabric, leaf02[3] - spine01[3] retrained at 1X (ibportstate's width, as a
technician or a bad cable would); each change exactly one `design` finding naming both ends as
designed and as found, with either design."""

from __future__ import annotations

import pytest

from helpers import exposition_samples, fabric_once, fabricmon_on_fabric, sample_value
from model.test_design import NEW_SPINE, changed, fat_tree

from fabricmon.checks import OK, WARNING
from fabricmon.config import from_dict
from fabricmon.host import LiveIO
from fabricmon.model.design import KINDS
from fabricmon.pipeline.fabric import fabric_pipeline

pytestmark = pytest.mark.sim


def by_name(sec, name: str) -> str:
    (g,) = [g for g, sw in sec.switches.items() if sw.name == name]
    return g


def test_a_fabric_saved_as_its_design_then_changed(sim_fabric, tmp_path) -> None:
    fab = sim_fabric(fat_tree())
    designs = {"ibnetdiscover": tmp_path / "design.net", "csv": tmp_path / "design.csv"}
    for fmt, path in designs.items():
        r = fabricmon_on_fabric(fab, tmp_path, f"save-{fmt}", {}, "fabric", "design", "save", str(path))
        assert f"wrote the design of 6 switches, 8 host CAs and 24 cables to {path} ({fmt})" in r.stderr
    assert designs["csv"].read_text().startswith("start_device,start_port,end_device,end_port,speed,width,"
                                                 "start_guid,end_guid\nleaf01,1,node01 mlx5_0,1,HDR,4X,0x")
    for fmt, path in designs.items():       # the fabric as saved: nothing to say
        once = fabric_once(fab, tmp_path, f"same-{fmt}", {"sources": {"design": {"path": str(path)}}})
        samples = exposition_samples(once.stdout)
        assert sample_value(samples, "fabricmon_fabric_design_loaded") == 1
        assert sample_value(samples, "fabricmon_fabric_design_cables") == 24
        assert [sample_value(samples, "fabricmon_fabric_design_discrepancies", kind=k) for k in KINDS] == [0] * len(KINDS)
        assert " design:" not in once.stderr, once.stderr

    found = sim_fabric(changed(fat_tree()))
    for fmt, path in designs.items():
        cfg = from_dict({"paths": {"state_dir": str(tmp_path)},
                         "fabric": {"cache_dir": str(tmp_path / f"cache-{fmt}"), "sweep_method": "tools",
                                    "sources": {"design": {"path": str(path)}}}})
        (tmp_path / f"cache-{fmt}").mkdir()
        pipe = fabric_pipeline(cfg, LiveIO(env=found.env(found.hosts[0])))
        try:
            first = pipe.collect()
            sec = first.fabric
            assert by_name(sec, "spine02") == NEW_SPINE
            leaf02 = sec.switches[by_name(sec, "leaf02")].lid
            assert [f.message for f in first.findings if f.check == "design"
                    and "runs at" in f.message] == []
            found.run_tool(found.hosts[0], "ibportstate", str(leaf02), "3", "width", "1", check=True)
            second = pipe.collect()
        finally:
            pipe.close()
        design = [f for f in second.findings if f.check == "design"]
        msgs = sorted(f.message.removesuffix(f" (design {path})") for f in design)
        assert len(design) == 5, msgs
        assert msgs[0] == ('cable "spine01"[3] <-> "leaf02"[3] runs at 1X HDR, designed 4X HDR (width 1X of 4X)')
        assert msgs[1] == ('cable missing: designed "spine01"[7] <-> "leaf04"[3], found none ("spine01"[7] has no '
                           'cable; "leaf04"[3] has no cable)')
        assert msgs[2] == ('cable miswired to the wrong switch: designed "node03 mlx5_0"[1] <-> "leaf02"[1], found '
                           '"node03 mlx5_0"[1] <-> "leaf03"[7]: move it from "leaf03"[7] to "leaf02"[1]')
        assert msgs[3] == ('cables swapped: designed "leaf01"[1] <-> "node01 mlx5_0"[1] and "leaf01"[2] <-> '
                           '"node02 mlx5_0"[1], found "leaf01"[1] <-> "node02 mlx5_0"[1] and "leaf01"[2] <-> '
                           '"node01 mlx5_0"[1]: swap the cables at "leaf01"[1] and "leaf01"[2] back')
        assert msgs[4].startswith("switch spine02 was replaced: designed with GUID 0x") and \
            msgs[4].endswith(f"found with 0x{NEW_SPINE} (a normal repair: the design now follows the new GUID)")
        status = {f.message.split(":")[0].split(" ")[0]: f.status for f in design}
        assert status == {"cable": WARNING, "cables": WARNING, "switch": OK}
        sec = second.fabric
        # each marked on the live switch and port the map shows it at
        marks = {(sec.switches[f.device].name if f.device else "", f.port) for f in design}
        assert marks == {("spine01", 3), ("leaf03", 7), ("spine01", 7), ("leaf01", 1), ("spine02", None)}
        assert sec.design_discrepancies == {"swapped": 1, "miswired": 1, "missing_cable": 1, "extra_cable": 0,
                                            "missing_node": 0, "extra_node": 0, "replaced": 1, "below_design": 1}
        found.run_tool(found.hosts[0], "ibportstate", str(leaf02), "3", "width", "2", check=True)   # back to 4X
