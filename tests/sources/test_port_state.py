"""The port state poll (sources/port_state.py): state and phys_state of every port of the inventory, and
nothing else; a poll that read what the last one did returns the same record (the pipeline rebuilds nothing);
a change is a new record, whose state wins over the sysfs source's in the merge (model/ports.py); a port
without the files is not read and no error, another read error is counted. In the daemon, a flipped state
file is in the exposition within 1.5 s: tests/cli/test_port_state_daemon.py."""

from __future__ import annotations

import errno
import time

from helpers import FakeIO

from fabricmon.config import from_dict
from fabricmon.model.node_records import PortStateData, SysfsData, SysfsDevice, SysfsPort
from fabricmon.model.ports import Inventory, PortView, merge
from fabricmon.pipeline.source import Inputs
from fabricmon.pipeline.scheduler import Pipeline
from fabricmon.sources.port_state import PortStateSource

BASE = "class/infiniband"


def files(states: dict[str, tuple[str, str]]) -> dict:
    out = {}
    for dev, (state, phys) in states.items():
        out[("sysfs", f"{BASE}/{dev}/ports/1/state")] = state
        out[("sysfs", f"{BASE}/{dev}/ports/1/phys_state")] = phys
    return out


class ManyIO(FakeIO):
    def __init__(self, files):
        super().__init__(files=files)
        self.reads: list[tuple[str, ...]] = []

    def which(self, program):
        return None

    def kill_tools(self):
        pass

    def hostname(self):
        return "node01"

    def read_many(self, root, rels):
        self.reads.append(tuple(rels))
        out = []
        for rel in rels:
            try:
                out.append(self.read(root, rel))
            except OSError as exc:
                out.append(exc)
        return out


def poll(src, io, inv):
    return src.collect(io, Inputs(deadline=time.monotonic() + 1, inventory=inv))


def inventory(*devs: str) -> Inventory:
    return Inventory({}, {(d, 1): PortView(device=d, port=1) for d in devs})


def test_it_reads_only_state_and_phys_state_and_a_poll_with_nothing_new_returns_the_last_record() -> None:
    cfg = from_dict({}, check_paths=False)
    src = PortStateSource(cfg.sources["port_state"])
    io = ManyIO(files({"mlx5_0": ("4: ACTIVE", "5: LinkUp"), "mlx5_1": ("4: ACTIVE", "5: LinkUp")}))
    inv = inventory("mlx5_0", "mlx5_1")
    first = poll(src, io, inv)
    assert first.data.ports == {("mlx5_0", 1): (4, 5), ("mlx5_1", 1): (4, 5)} and not first.errors
    assert io.reads == [tuple(f"{BASE}/mlx5_{i}/ports/1/{f}" for i in (0, 1) for f in ("state", "phys_state"))]
    assert poll(src, io, inv).data is first.data                 # the same texts: the same record
    io.files[("sysfs", f"{BASE}/mlx5_1/ports/1/state")] = "1: DOWN"
    io.files[("sysfs", f"{BASE}/mlx5_1/ports/1/phys_state")] = "2: Polling"
    got = poll(src, io, inv)
    assert got.data is not first.data and got.data.ports[("mlx5_1", 1)] == (1, 2)


def test_a_port_without_state_files_is_not_read_and_another_error_is_counted() -> None:
    cfg = from_dict({}, check_paths=False)
    src = PortStateSource(cfg.sources["port_state"])
    io = ManyIO({**files({"mlx5_0": ("4: ACTIVE", "5: LinkUp")}),
                 ("sysfs", f"{BASE}/mlx5_2/ports/1/state"): errno.EACCES,
                 ("sysfs", f"{BASE}/mlx5_2/ports/1/phys_state"): "5: LinkUp"})
    got = poll(src, io, inventory("mlx5_0", "ibp0", "mlx5_2"))       # ibp0: ibstat's, no sysfs files
    assert got.data.ports == {("mlx5_0", 1): (4, 5), ("mlx5_2", 1): (None, 5)}
    assert [k for k, _ in got.errors] == ["read"] and "mlx5_2/ports/1/state" in got.errors[0][1]


def test_its_state_wins_over_the_sysfs_sources_and_the_daemon_rebuilds_only_on_a_change() -> None:
    sysfs = SysfsData({"mlx5_0": SysfsDevice("mlx5_0", ports={1: SysfsPort(1, 4, 5, 400.0, 4, "NDR", "InfiniBand")})})
    inv = merge([sysfs, PortStateData({("mlx5_0", 1): (1, 2)})])
    p = inv.ports[("mlx5_0", 1)]
    assert (p.state_id, p.phys_state_id, p.up, p.rate_gbps) == (1, 2, False, 0.0)
    # the pipeline: a quiet source's run that returned its last record asks for no rebuild, a change does
    cfg = from_dict({}, check_paths=False)
    io = ManyIO(files({"mlx5_0": ("4: ACTIVE", "5: LinkUp")}))
    pipe = Pipeline(cfg, io)
    assert pipe.specs["port_state"].quiet and pipe.tick == 15.0          # its 1 s does not set the publisher's tick
    pipe._inventory, pipe._inventory_since = inventory("mlx5_0"), 0.0
    for s in pipe.states.values():
        s.ran = True
    assert pipe.run_source("port_state", time.monotonic() + 1, continuous=True) is True      # first: new
    assert pipe.run_source("port_state", time.monotonic() + 1, continuous=True) is False     # unchanged
    io.files[("sysfs", f"{BASE}/mlx5_0/ports/1/state")] = "1: DOWN"
    assert pipe.run_source("port_state", time.monotonic() + 1, continuous=True) is True      # changed
    pipe.close()
