"""Which jobs a fabric finding hurts (pipeline.jobs.JobMap) on a 3-level director core, and the
map's job footprint and switch details, built from records by the real FabricModel."""

from __future__ import annotations

from fabric_snap import ibnetdiscover_text

from fabricmon.checks import CRITICAL, Finding
from fabricmon.config import from_dict
from fabricmon.model.fabric import FabricPort, build_topology
from fabricmon.model.snapshot import BuildStats, Snapshot, SourceState
from fabricmon.pages import Pages, fabric_map
from fabricmon.parsers.ibnetdiscover import parse_ibnetdiscover
from fabricmon.parsers.slurm import ClusterJobsData, SlurmJob
from fabricmon.pipeline.fabric import FabricModel
from fabricmon.pipeline.jobs import FabricJobs, JobMap
from fabricmon.sim.fabric import director_netfile

# leaf01 and leaf03 sit below core/L01 and L02; leaf02 and leaf04 below L03 and L04; S01, S02 above all
JOBS = ClusterJobsData(jobs=[
    SlurmJob("10", "ann", "RUNNING", ("host01", "host05"), "pod-local"),     # leaf01 + leaf03: below L01/L02
    SlurmJob("11", "bob", "RUNNING", ("host02", "host03"), "cross-core"),    # leaf01 + leaf02: over the spines
    SlurmJob("12", "cy", "RUNNING", ("host02",), "one-host"),                # leaf01 only
    SlurmJob("13", "di", "RUNNING", ("host07", "gpu-elsewhere"), "half-here"),
])


def topo_and_map():
    topo = build_topology(parse_ibnetdiscover(ibnetdiscover_text(
        director_netfile(leaves=4, hosts_per_leaf=2, lines=4, spines=2))), 1.0)
    return topo, JobMap.build(topo, JOBS), {sw.name: g for g, sw in topo.switches.items()}


def test_each_kind_of_finding_names_only_the_jobs_it_can_hurt() -> None:
    topo, m, g = topo_and_map()
    ports = topo.ports

    def port_to(sw: str, remote: str) -> int:
        return next(p for (gg, p), info in ports.items() if gg == g[sw] and info.link is not None
                    and info.link.remote_name.startswith(remote))
    assert m.jobs_for(g["leaf01"], port_to("leaf01", "host02"), ports) == {"11", "12"}      # the host's jobs
    assert m.jobs_for(g["leaf01"], port_to("leaf01", "core/L01"), ports) == {"10", "11"}    # an uplink
    assert m.jobs_for(g["leaf01"], None, ports) == {"10", "11"}        # a whole-leaf (ECMP, uplinks) finding
    assert m.jobs_for(g["core/L01"], None, ports) == {"10", "11"}
    assert m.jobs_for(g["core/L03"], None, ports) == {"11"}
    assert m.jobs_for(g["core/L01"], port_to("core/L01", "leaf03"), ports) == {"10"}        # down to leaf03
    assert m.jobs_for(g["core/S01"], None, ports) == {"11"}            # pod-local traffic never reaches a spine
    assert m.jobs_for("ffff", None, ports) == set()
    assert m.unmapped == 1                                              # gpu-elsewhere is not on this fabric


def fabric_with_jobs(cfg):
    """The map's fabric (topo_and_map) as a built section with every port as discovered, and the
    slurm_jobs state holding JOBS: (topology, name -> GUID, states, section)."""
    topo, _, g = topo_and_map()
    states = {"slurm_jobs": SourceState("slurm_jobs", True, 1, 1, records=ClusterJobsData, up=True, ran=True,
                                        data=JOBS, data_time=2.0)}
    sec = FabricModel(cfg, clock=lambda: 5.0).build({}, (True, True))[0]["fabric"]
    sec.switches, sec.levels = dict(topo.switches), dict(topo.levels)
    for key, info in topo.ports.items():
        sec.ports[key] = FabricPort(key[0], key[1], info.role, info.link, up=info.up)
    return topo, g, states, sec


def test_job_switches_metric_map_footprint_and_switch_details() -> None:
    cfg = from_dict({"slurm": {"max_job_switch_series": 13}}, check_paths=False)
    topo, g, states, sec = fabric_with_jobs(cfg)
    finding = Finding("ecmp", g["core/S01"], None, CRITICAL, "polarised")
    jobs, out = FabricJobs(cfg.slurm.max_job_switch_series).apply(states, sec, topo, [finding])
    assert [j.job_id for j in out[0].jobs] == ["11"]
    assert set(jobs.switches["10"]) == {g["leaf01"], g["leaf03"], g["core/L01"], g["core/L02"]}
    assert set(jobs.switches["12"]) == {g["leaf01"]}
    assert len(jobs.switches["11"]) == 8                   # both leaves, the four line cards, both spines
    # bounded by slurm.max_job_switch_series: 4 + 8 + 1 pairs exported, job 13 counted instead
    assert "13" not in jobs.switches and jobs.dropped_series == 1

    snap = Snapshot(time=6.0, findings=out, sources={}, builds=BuildStats(), fabric=sec, jobs=jobs)
    html = fabric_map.live(snap, {"job": "10"})
    assert 'data-footprint="10"' in html and 'data-known="1"' in html
    assert html.count('data-in-job="1"') >= 4
    assert f'data-job-switch="{g["core/S01"]}"' not in html
    assert 'data-footprint="99" data-known="0"' in fabric_map.live(snap, {"job": "99"})
    detail = fabric_map.switch(snap, {"guid": g["core/S01"]})
    assert 'data-switch-jobs="1"' in detail and 'href="/?job=11"' in detail
    assert 'href="/?job=11"' in fabric_map.live(snap, {})            # the findings table links the job
    # served through the page cache: `job` is a parameter the map understands, so it keys the variant
    pages = Pages(snap)
    assert b'data-footprint="10" data-known="1"' in pages.get("live", {"job": "10", "n": "123"})
    assert b"data-footprint" not in pages.get("live", {"job": "10<x>"})         # not a job id: ignored
    assert fabric_map.params(snap, "page", {"job": " 10 ", "n": "1"}) == (("job", "10"),)


def test_the_footprint_lists_the_flagged_links_and_groups_on_the_jobs_paths() -> None:
    """Issue 38 item 4: the job view names which of its paths cross a flagged link (its hosts' cables, the
    links between its switches) or an imbalanced ECMP group, and leaves out what its traffic never crosses."""
    from fabricmon.checks import WARNING
    from fabricmon.model.fabric import EcmpGroup
    cfg = from_dict({}, check_paths=False)
    topo, g, states, sec = fabric_with_jobs(cfg)

    def port_to(sw: str, remote: str) -> int:
        return next(p for (gg, p), info in topo.ports.items() if gg == g[sw] and info.link is not None
                    and info.link.remote_name.startswith(remote))
    cable = Finding("symbol_errors", g["leaf01"], port_to("leaf01", "host01"), CRITICAL, "errors")   # job 10's host
    uplink = Finding("link_flap", g["core/L03"], port_to("core/L03", "core/S01"), WARNING, "flaps")  # job 11's path
    sec.groups = [EcmpGroup(g["leaf01"], "leaf01", "up", [1, 2], [], imbalanced=True, ratio=2.0)]
    jobs, out = FabricJobs(cfg.slurm.max_job_switch_series).apply(states, sec, topo, [cable, uplink])
    snap = Snapshot(time=6.0, findings=out, sources={}, builds=BuildStats(), fabric=sec, jobs=jobs)

    ten = fabric_map.live(snap, {"job": "10"})          # leaf01 + leaf03 below L01/L02: host01's cable, the group
    assert f'data-job-flagged-link="{g["leaf01"]}:{cable.port}"' in ten and "symbol_errors CRITICAL" in ten
    assert f'data-job-flagged-link="{g["core/L03"]}:{uplink.port}"' not in ten   # L03-S01 is not on its paths
    assert f'data-job-flagged-group="{g["leaf01"]}:up"' in ten and 'data-job-flagged="2"' in ten
    eleven = fabric_map.live(snap, {"job": "11"})       # leaf01 + leaf02 over the spines: the flapping uplink
    assert f'data-job-flagged-link="{g["core/L03"]}:{uplink.port}"' in eleven and "link_flap WARNING" in eleven
    assert f'data-job-flagged-link="{g["leaf01"]}:{cable.port}"' not in eleven   # host01 is not its host
    twelve = fabric_map.live(snap, {"job": "12"})       # one host on leaf01: no uplink, no group
    assert 'data-job-flagged="0"' in twelve and "No flagged link" in twelve
