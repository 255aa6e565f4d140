"""A node port remembers what it is cabled to (issue 27): the switch and port iblinkinfo names while the
link is up, kept in the learned inventory (state_dir/inventory.json) and given back while the link is down,
with no configuration, so that a node's port alert carries the switch and port Alertmanager mutes it under."""

from __future__ import annotations

from fabricmon.model import ibspec
from fabricmon.model.ports import DeviceView, Inventory, PortView, merge
from fabricmon.parsers.iblinkinfo import LinkData, parse_iblinkinfo
from fabricmon.parsers.ibstat import IbstatData, parse_ibstat
from fabricmon.stores.learned import LearnedStore
from helpers import IBSTAT_ONE_PORT

UP = ("CA: node01 mlx5_0:\n      0x0000000000100001      1    1[  ] ==( 4X        53.125 Gbps Active/  LinkUp)==>"
      "       4    7[  ] \"leaf01\" (Could be 12X )\n")


def port(up: bool, peer: str = "", peer_port: int | None = None) -> Inventory:
    p = PortView("mlx5_0", 1, state_id=ibspec.STATE_ACTIVE if up else 1,
                 phys_state_id=ibspec.PHYS_LINKUP if up else 2, width=4, generation="HDR", peer=peer, peer_port=peer_port)
    return Inventory({"mlx5_0": DeviceView("mlx5_0", node_guid="0x0000000000100001")}, {("mlx5_0", 1): p})


def test_iblinkinfo_names_the_peer_of_an_up_link():
    links = LinkData({("mlx5_0", 1): parse_iblinkinfo(UP)[0]})
    inv = merge([IbstatData(parse_ibstat(IBSTAT_ONE_PORT).cas), links])
    assert (inv.ports[("mlx5_0", 1)].peer, inv.ports[("mlx5_0", 1)].peer_port) == ("leaf01", 7)


def test_the_peer_is_remembered_across_the_link_going_down_and_a_restart(tmp_path):
    path = str(tmp_path / "inventory.json")
    store = LearnedStore(path)
    store.learn(port(True, "leaf01", 7), 1.0)
    down = port(False)
    store.inventory.recall_peers(down)
    assert (down.ports[("mlx5_0", 1)].peer, down.ports[("mlx5_0", 1)].peer_port) == ("leaf01", 7)
    # a new daemon (a restart while the link is down) reads it from the state directory
    again = LearnedStore(path)
    again.refresh()
    down = port(False)
    again.inventory.recall_peers(down)
    assert down.ports[("mlx5_0", 1)].peer == "leaf01"
    # up again with iblinkinfo off (no peer now): the learned peer stays; recabled: the new one wins
    again.learn(port(True), 2.0)
    assert next(iter(again.inventory.ports.values())).peer == "leaf01"
    again.learn(port(True, "leaf02", 3), 3.0)
    fresh = LearnedStore(path)
    fresh.refresh()
    assert [(r.peer, r.peer_port) for r in fresh.inventory.ports.values()] == [("leaf02", 3)]


def test_a_port_never_seen_up_has_no_peer():
    store = LearnedStore(None)
    down = port(False)
    store.learn(down, 1.0)
    store.inventory.recall_peers(down)
    assert down.ports[("mlx5_0", 1)].peer == ""
