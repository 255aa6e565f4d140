"""Real captures, loaded into ibsim as captured, read by the real collector (ibnetdiscover,
the sweep, dump_fts under umad2sim; `fabricmon fabric once`'s pipeline, default config but the
subnet manager source, which ibsim's `opensm --once` leaves without a master).

NVIDIA/topograph's `tests/output/ibnetdiscover/example.out` (tests/fixtures/ibnetdiscover/real,
PROVENANCE.md there): a real NDR fabric of 40 NVIDIA Quantum-2 switches, 31 leaves and 9 spines,
each with its SHARP Aggregation Node (devid 0xcf09, sysimgguid its switch's), 542 host CAs of
which 74 keep a default node description (69 `MT4129 ConnectX7   Mellanox Technologies`,
`ubuntu ...`, `localhost ...`), and 12 leaves with fewer than the 18 uplinks of the others (the
capture's own missing cables). ibsim 0.10 does not know NDR and trains every link at SDR: the
speeds are uniform here, so the speed judgement has nothing to say on it.

hwloc's netloc test data (two older clusters, `ibnetdiscover -p` ports reports turned into the
topology format): `avakas`, QDR hosts on the line cards of a QLogic director (two tiers, one DDR
host); `plafrim2` subnet 1, one switch whose hosts keep the firmware's node description.

The truth the assertions hold the collector to comes from the capture itself, never from the
rule under test: the tier its switch names say (`IBLEAF`, `IBSPINE`; the rule never reads names),
the cables each leaf block lists. One ibsim start per capture."""

from __future__ import annotations

import contextlib
import lzma
import re
import time
from pathlib import Path

import pytest

from fabricmon.config import from_dict
from fabricmon.host import LiveIO
from fabricmon.model.fabric import AGGREGATION_NODE_DESCRIPTION, default_description
from fabricmon.pipeline.fabric import fabric_pipeline
from fabricmon.sim.fabric import SimFabric, tools_available
from fabric_snap import ports_report_topology
from helpers import FIXTURES, exposition_samples, fabric_once, fabricmon_on_fabric, sample_value, unavailable

pytestmark = pytest.mark.sim

REAL = FIXTURES / "ibnetdiscover" / "real"
NDR = REAL / "topograph-ndr-40sw.ibnetdiscover.xz"
AVAKAS = REAL / "hwloc-avakas-qdr.ports.xz"
PLAFRIM2 = REAL / "hwloc-plafrim2-subnet1.ports.xz"
MAPPED = "c470bd0300a49432"          # a CA with the firmware's description, named by the site's map


def capture_truth(text: str) -> dict[str, object]:
    """What the capture says: switch guid -> (name, tier from its name), each leaf's uplink count,
    the CAs by description."""
    switches: dict[str, tuple[str, int]] = {}
    uplinks: dict[str, int] = {}
    cas: dict[str, str] = {}
    cur = None
    for line in text.splitlines():
        m = re.match(r'^(Switch|Ca)\s+\d+\s+"[SH]-([0-9a-f]+)"\s+#\s+"(.*?)"', line)
        if m:
            cur = m[2] if m[1] == "Switch" else None
            if cur:
                switches[cur] = (m[3], 1 if "IBLEAF" in m[3] else 2 if "IBSPINE" in m[3] else 0)
                uplinks[cur] = 0
            else:
                cas[m[2]] = m[3]
        elif cur and line.startswith("[") and '"S-' in line:
            uplinks[cur] += 1
    return {"switches": switches, "uplinks": uplinks, "cas": cas}


@contextlib.contextmanager
def collected(text: str, work: Path, sources: dict | None = None):
    """(snapshot after two sweeps, the topology, the fabric): ibsim started on `text` as captured,
    the collector's pipeline run twice on it (the subnet manager source off), the fabric stopped
    (by PID) on exit."""
    ok, why = tools_available()
    if not ok:
        unavailable(f"the fabric simulator cannot run ({why})")
    (work / "state" / "fabric").mkdir(parents=True)
    fab = SimFabric(text, work / "sim")
    try:
        fab.start(timeout=120)
        fab.run_sm(timeout=120)
        cfg = from_dict({"paths": {"state_dir": str(work / "state")},
                         "fabric": {"cache_dir": str(work / "state" / "fabric"),
                                    "sources": {"sm": {"enabled": False}, **(sources or {})}}})
        pipe = fabric_pipeline(cfg, LiveIO(cfg.sysfs, cfg.procfs, env=fab.env(fab.hosts[0])))
        try:
            pipe.collect()
            time.sleep(1.0)         # what is tested: a second sweep, later (the intake drops a sample no later)
            snap = pipe.collect()
            topo = pipe.model.inventory(snap.sources)
        finally:
            pipe.close()
        yield snap, topo, fab
    finally:
        fab.stop()


@pytest.fixture(scope="module")
def ndr(tmp_path_factory):
    """(snapshot, topology, the capture's truth, the fabric, the work dir): one ibsim start for the
    module's NDR tests."""
    text = lzma.decompress(NDR.read_bytes()).decode()
    work = tmp_path_factory.mktemp("ndr")
    (work / "ib-node-name-map").write_text(f'# site map\n0x{MAPPED} "stor01 mlx5_0"\n\n')
    with collected(text, work, {"discovery": {"node_name_map": str(work / "ib-node-name-map")}}) as (snap, topo, fab):
        yield snap, topo, capture_truth(text), fab, work


def test_every_switch_at_its_tier_and_the_aggregation_nodes_inside_their_switches(ndr) -> None:
    snap, topo, truth, _, _ = ndr
    sec = snap.fabric
    tiers = {g: tier for g, (_, tier) in truth["switches"].items()}
    assert sorted(tiers.values()).count(1) == 31 and sorted(tiers.values()).count(2) == 9
    assert sec.levels == tiers
    # every switch carries one Aggregation Node: part of it, never a host, its port `internal`
    ans = {g for g, d in truth["cas"].items() if d == AGGREGATION_NODE_DESCRIPTION}
    assert len(ans) == 40 and set(topo.parts) == ans and set(topo.parts.values()) == set(sec.switches)
    assert all(len(ports) == 1 for ports in sec.aggregation_nodes.values()) and len(sec.aggregation_nodes) == 40
    for (g, _), p in sec.ports.items():
        if p.link is not None and p.link.remote_guid in ans:
            assert p.role == "internal"
        elif p.link is not None and p.link.remote_type == "Switch":
            assert p.role == ("up" if tiers[g] == 1 else "down")
        elif p.link is not None:
            assert p.role == "host" and tiers[g] == 1
    assert not ans & set(topo.hosts)
    assert "Mellanox" not in topo.hosts.values() and not any(h.startswith("MT41") for h in topo.hosts.values())


def test_hosts_are_named_never_merged_and_reported_once(ndr) -> None:
    snap, topo, truth, _, _ = ndr
    hosts = {g: d for g, d in truth["cas"].items() if d != AGGREGATION_NODE_DESCRIPTION}
    assert set(topo.hosts) == set(hosts) and len(hosts) == 542
    unnamed = sorted(g for g, d in hosts.items() if default_description(d))
    assert len(unnamed) == 74 and sum(1 for g in unnamed if hosts[g].startswith("MT4129 ConnectX7")) == 69
    assert topo.hosts[MAPPED] == "stor01"                   # the site's node name map
    rest = [g for g in unnamed if g != MAPPED]
    assert topo.unnamed == rest and all(topo.hosts[g] == f"0x{g}" for g in rest)
    assert topo.hosts["e09d7303007a4bd8"] == "a08-p1-dgx-04-c01"      # rdma-ndd's "<host> <device>"
    (f,) = [f for f in snap.findings if f.check == "node_description"]
    assert f.status == 1 and f.device == "" and f.message.startswith("73 of 542 hosts have no node description (0x")
    assert "run rdma-ndd" in f.message and "node name map" in f.message and "and 68 more" in f.message


def test_every_real_uplink_asymmetry_reported_and_nothing_else(ndr) -> None:
    snap, _, truth, _, _ = ndr
    leaves = {g: n for g, n in truth["uplinks"].items() if truth["switches"][g][1] == 1}
    assert max(leaves.values()) == 18
    short = {g for g, n in leaves.items() if n < 18}
    assert len(short) == 12                                  # the capture's own missing cables
    uplinks = {f.device: f for f in snap.findings if f.check == "uplinks" and f.status}
    assert set(uplinks) == short
    for g, f in uplinks.items():
        assert f" has {leaves[g]} active uplinks where the switches of level 1 that share its upper switches have 18" in f.message
    assert {g: snap.fabric.uplinks[g] for g in short} == {g: (leaves[g], 18) for g in short}
    # ECMP groups exist (every leaf has uplinks; spines are the top: their down ports)
    assert {gr.direction for gr in snap.fabric.groups} == {"up", "down"} and len(snap.fabric.groups) == 40
    # nothing else: the capture is healthy (speeds uniform in ibsim, so no degraded_link either)
    others = [f.line() for f in snap.findings if f.status and f.check not in ("uplinks", "node_description")]
    assert others == []
    status = snap.fabric.check_status
    assert {c for (c, g), s in status.items() if s} == {"uplinks", "node_description"}
    # every table read, balanced: routing judges every switch with uplinks to route over (not the top level)
    top = max(snap.fabric.levels.values())
    assert {g for (c, g) in status if c == "routing"} == {g for g, lv in snap.fabric.levels.items() if lv < top}
    assert all(s == 0 for (c, _), s in status.items() if c == "routing")


def test_a_garbage_or_unreadable_name_map_is_an_error_of_the_discovery_alone(ndr, tmp_path) -> None:
    _, _, _, fab, work = ndr
    bad = tmp_path / "map"
    bad.write_text('0xe09d730300858d88 "node-a"\nnot-a-guid "node-b"\n')
    unreadable = tmp_path / "dir-not-file"
    unreadable.mkdir()
    for path, kind in ((bad, "parse"), (unreadable, "read"), (tmp_path / "absent", None)):
        cfg = from_dict({"paths": {"state_dir": str(work / "state")},
                         "fabric": {"cache_dir": str(tmp_path), "sources": {"discovery": {"node_name_map": str(path)}}}})
        pipe = fabric_pipeline(cfg, LiveIO(cfg.sysfs, cfg.procfs, env=fab.env(fab.hosts[0])))
        try:
            snap = pipe.collect(["discovery"])
        finally:
            pipe.close()
        st = snap.sources["discovery"]
        assert st.up and st.data is not None and st.data.complete and len(st.data.switches) == 40
        assert st.data.node_names == {} and st.data.cache_file is not None
        assert {k for k, n in st.errors_total.items() if n} == ({kind} if kind else set()), (path, st.errors_total)


def test_the_live_fabric_saved_as_its_design_matches_it(ndr, tmp_path) -> None:
    """`fabric design save` on the real capture in ibsim (real names, SHARP Aggregation Nodes in every
    switch, 74 hosts with default descriptions, unconnected ports), both forms, then `fabric once`
    against each: every cable designed, nothing to report (docs/design.md). The capture itself is no
    design for ibsim's fabric: ibsim trains its NDR links at SDR (tests/model/test_design.py takes it
    through the parser)."""
    _, _, _, fab, _ = ndr
    off = {"sm": {"enabled": False}}
    for path in (tmp_path / "ndr.net", tmp_path / "ndr.csv"):
        fabricmon_on_fabric(fab, tmp_path, f"save-{path.suffix[1:]}", {"sources": off}, "fabric", "design", "save",
                            str(path))
        once = fabric_once(fab, tmp_path, f"compare-{path.suffix[1:]}", {"sources": {**off, "design": {"path": str(path)}}})
        samples = exposition_samples(once.stdout)
        assert sample_value(samples, "fabricmon_fabric_design_cables") == 1074
        assert sum(v for k, v in samples.items() if k[0] == "fabricmon_fabric_design_discrepancies") == 0
        assert " design:" not in once.stderr


# a host slower by design (a DDR HCA on a QDR line card, an SDR head node on a QDR switch) is not a
# broken cable (docs/fabric-collector.md "What a link is judged against"): through the tools (no end's
# abilities known under ibsim's SA) it is noted slower than its class, never a finding; through the MAD
# engine (both ends' PortInfo read) it runs at the best both ends enable


def slower_by_design(snap, fab, work: Path, remote: str) -> None:
    """No degraded_link on either sweep path, and the tools' note on the one host link it is about."""
    assert [f.line() for f in snap.findings if f.check == "degraded_link"] == []
    notes = [p for p in snap.fabric.ports.values() if p.note]
    assert len(notes) == 1 and notes[0].link.remote_name == remote and "slower than its link class" in notes[0].note
    mad = fabric_once(fab, work, "mad", {"sweep_method": "mad", "cache_dir": str(work / "mad-cache"),
                                         "sources": {"sm": {"enabled": False}}})
    assert 'fabricmon_fabric_sweep_method{method="mad"} 1.0' in mad.stdout and "degraded_link" not in mad.stderr
    assert not re.findall(r'^fabricmon_fabric_port_degraded\{[^}]*reason="(?:width|speed)"[^}]*\} 1\.0$', mad.stdout, re.M)


def test_an_older_qdr_cluster_on_a_director(tmp_path) -> None:
    """hwloc's netloc data `avakas` (a QDR cluster on a QLogic 12800-180 director: 16 line cards
    carrying the hosts, 9 spine chips; 281 hosts, one with a DDR HCA), its `ibnetdiscover -p` ports
    report turned into the topology format ibsim loads (tests/fabric_snap.ports_report_topology)."""
    report = lzma.decompress(AVAKAS.read_bytes()).decode()
    with collected(ports_report_topology(report), tmp_path) as (snap, topo, fab):
        sec = snap.fabric
        names = {g: sw.name for g, sw in sec.switches.items()}
        tier = {g: 1 if re.search(r" L\d+$", n) else 2 if re.search(r" S\d+[AB]$", n) else 0 for g, n in names.items()}
        assert sorted(tier.values()).count(1) == 16 and sorted(tier.values()).count(2) == 9
        assert sec.levels == tier
        assert len(topo.hosts) == 281 and not topo.unnamed and not topo.parts
        hosts = set(topo.hosts.values())
        assert len(hosts) == 281 and {"node008", "bigmem01", "avakas-frontend1"} <= hosts
        assert [f.line() for f in snap.findings if f.status] == []
        slower_by_design(snap, fab, tmp_path, "node008 HCA-1")            # the DDR host


def test_a_cluster_whose_hosts_keep_the_firmwares_description(tmp_path) -> None:
    """hwloc's netloc data `plafrim2`, subnet fe80::1: one IS5030 switch, 23 hosts of which 21 keep
    `MT25408 ConnectX Mellanox Technologies` (no rdma-ndd): 21 hosts, never one, in one finding."""
    report = lzma.decompress(PLAFRIM2.read_bytes()).decode()
    with collected(ports_report_topology(report), tmp_path) as (snap, topo, fab):
        assert list(snap.fabric.levels.values()) == [1]
        assert len(topo.hosts) == 23 and len(topo.unnamed) == 21 and len(set(topo.hosts.values())) == 23
        assert {topo.hosts[g] for g in topo.hosts if g not in topo.unnamed} == {"bright", "sirocco06"}
        assert all(topo.cas[g] == "MT25408 ConnectX Mellanox Technologies" and topo.hosts[g] == f"0x{g}"
                   for g in topo.unnamed)
        (f,) = [f for f in snap.findings if f.check == "node_description"]
        assert f.message.startswith("21 of 23 hosts have no node description")
        assert [f.line() for f in snap.findings if f.status and f.check != "node_description"] == []
        slower_by_design(snap, fab, tmp_path, "bright mlx4_0")            # an SDR head node
