"""The fabric collector's model judges the configured Slurm topology (checks.fabric_slurm_topology,
docs/slurm-topology.md): the drift fields and one WARNING, judged again on a new file read."""

from __future__ import annotations

from fabric_snap import _state, ibnetdiscover_text
from model.test_slurm_topology import fat_tree_and_conf, storage_rail

from fabricmon.config import from_dict
from fabricmon.model.fabric import DiscoveryData
from fabricmon.model.slurm_topology import SchedulerTopologyData, parse_rail
from fabricmon.parsers.ibnetdiscover import parse_ibnetdiscover
from fabricmon.parsers.slurm import parse_topology_conf
from fabricmon.pipeline.fabric import FabricModel
from fabricmon.sim.fabric import fat_tree_netfile


def test_the_fabric_model_judges_the_configured_file() -> None:
    """FabricModel with a discovery and a configured file: the drift metric's fields and one WARNING;
    a new file read is judged again (the last result is reused only for the same discovery and read)."""
    tree, conf, _ = fat_tree_and_conf()
    net = storage_rail(fat_tree_netfile(spines=2, leaves=4, hosts_per_leaf=2, uplinks_per_spine=2), 8)
    model = FabricModel(from_dict({}, check_paths=False), clock=lambda: 1_800_000_000.0)
    planted = conf.replace("Nodes=node[05-06]", "Nodes=node05").replace("Nodes=node[07-08]", "Nodes=node[06-08]")
    rail = parse_rail(["hca=mlx5_0"])
    states = {"discovery": _state(DiscoveryData, parse_ibnetdiscover(ibnetdiscover_text(net)), 1.0),
              "slurm_topology": _state(SchedulerTopologyData, SchedulerTopologyData(
                  "/etc/slurm/topology.conf", tuple(parse_topology_conf(planted)), rail), 1.0)}
    for _ in range(2):
        sec, findings = model.build(states)
        (f,) = [f for f in findings if f.check == "slurm_topology"]
        assert f.status == 1 and f.device == "" and f.message.startswith(
            "/etc/slurm/topology.conf drifted from the fabric (1 of 8 nodes): node06 is listed under leaf04")
        assert sec["fabric"].slurm_topology_drifted == 1
        assert sec["fabric"].slurm_topology_drift == {"wrong_switch": 1, "missing_node": 0, "unknown_node": 0,
                                                      "unknown_switch": 0}
    states["slurm_topology"] = _state(SchedulerTopologyData, SchedulerTopologyData(
        "/etc/slurm/topology.conf", tuple(parse_topology_conf(conf)), rail), 2.0)
    sec, findings = model.build(states)
    assert sec["fabric"].slurm_topology_drifted == 0 and not [f for f in findings if f.check == "slurm_topology"]
    # not configured (auto, no file): no drift fields, no finding
    states["slurm_topology"] = _state(SchedulerTopologyData, SchedulerTopologyData("/x", (), configured=False), 3.0)
    sec, findings = model.build(states)
    assert sec["fabric"].slurm_topology_drifted is None and sec["fabric"].slurm_topology_drift == {}
