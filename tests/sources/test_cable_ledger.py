"""The cable ledger through the node model: the modules `ethtool -m` reads (the real recorded QSFP28 and SFP of
tests/fixtures/ethtool_module) observed per port; a module with a trouble (a dim lane) moved to another port
carries its history there (cable_history WARNING naming the port and the day); a new module in a port is counted
(an insertion, a swap) and resets that port's learned receive-power baseline; the ledger survives a restart
in the state directory and stays bounded."""

from __future__ import annotations

import json

from fabricmon.config import from_dict
from fabricmon.exporter.render import render
from fabricmon.model.cable_ledger import MAX_EVENTS, MAX_PLACES, CableLedger
from fabricmon.model.snapshot import BuildStats, Snapshot
from fabricmon.stores.cable_ledger import LedgerStore
from fabricmon.stores.learned import LearnedStore
from fabricmon.pipeline.node import NodeModel
from fabricmon.stores.optics_baseline import BaselineStore
from helpers import exposition_samples
from test_optics_source import INV, QSFP, collect, states
from test_optics_source import SFP as SFP_RECORDED

# the recorded SFP prints no Vendor SN line: give it one (our own), as most modules have
SFP = SFP_RECORDED.replace("\tVendor rev", "\tVendor SN                                 : JD0000TEST01\n\tVendor rev", 1)

DIM = QSFP.replace("Rcvr signal avg optical power(Channel 2)  : 0.9798 mW / -0.09 dBm",
                   "Rcvr signal avg optical power(Channel 2)  : 0.2951 mW / -5.30 dBm")
QSFP_SN = next(ln.split(":", 1)[1].strip() for ln in QSFP.splitlines() if ln.strip().startswith("Vendor SN"))


def node(tmp_path, t: list[float]) -> NodeModel:
    learned = LearnedStore(str(tmp_path / "state" / "learned_inventory.json"), create_dir=True)
    (tmp_path / "state").mkdir(exist_ok=True)
    model = NodeModel(from_dict({}), clock=lambda: t[0], learned=learned,
                      optics_baseline=BaselineStore(str(tmp_path / "state" / "optics_baseline.json")))
    model.inventory = lambda _states: INV
    return model


def read(model: NodeModel, answers: dict[str, str]):
    cmds = {("ethtool", "-m", nd): (0, text, "") if text else (1, "", "netlink error: Input/output error\n")
            for nd, text in answers.items()}
    data = collect(cmds).data
    return model.build(states(data))


def test_a_module_moved_carries_its_history_and_a_new_module_resets_the_baseline(tmp_path) -> None:
    t = [1_800_000_000.0]
    model = node(tmp_path, t)
    # mlx5_0 (ens1f0np0) holds the QSFP28 with a dim lane; mlx5_3 (ens3f0np0) an SFP
    sections, findings = read(model, {"ens1f0np0": DIM, "ens3f0np0": SFP, "ib0": "", "ens2f0np0": ""})
    by = {(f.check, f.device): f for f in findings}
    assert by[("optics_lane_imbalance", "mlx5_0")].status == 1
    assert by[("cable_history", "mlx5_0")].status == 0           # no trouble elsewhere (yet)
    baseline = model.optics_baseline.baseline
    learned = {k: b.learned_at for k, b in baseline.lanes.items() if k.startswith("node:mlx5_3:1:")}
    assert learned and set(learned.values()) == {t[0]}
    # a reseat of the SFP in mlx5_3: the module is gone for one read, then back: an insertion, and its lane's
    # baseline is learned again from then (a reseated connector may read differently)
    t[0] += 60
    read(model, {"ens1f0np0": DIM, "ens3f0np0": "", "ib0": "", "ens2f0np0": ""})
    t[0] += 60
    read(model, {"ens1f0np0": DIM, "ens3f0np0": SFP, "ib0": "", "ens2f0np0": ""})
    assert {b.learned_at for k, b in baseline.lanes.items() if k.startswith("node:mlx5_3:1:")} == {t[0]}
    assert (model.cables.ledger.ports["node:mlx5_3:1"].insertions, model.cables.ledger.ports["node:mlx5_3:1"].swaps) == (1, 0)
    # troubleshooting: the QSFP28 goes to mlx5_3, the SFP to mlx5_0 (a day later)
    t[0] += 86400
    sections, findings = read(model, {"ens1f0np0": SFP, "ens3f0np0": DIM, "ib0": "", "ens2f0np0": ""})
    by = {(f.check, f.device): f for f in findings}
    moved = by[("cable_history", "mlx5_3")]
    assert moved.status == 1 and f"serial {QSFP_SN}" in moved.message, moved.message
    assert "WARNING optics_lane_imbalance on mlx5_0 port 1 on 2027-01-15" in moved.message, moved.message
    assert "2 insertion(s), 1 swap(s) here" in moved.message
    # and the SFP carries its own (the real JDSU SFP's bias reads 21.3 mA against its 10 mA alarm: CRITICAL)
    back = by[("cable_history", "mlx5_0")]
    assert back.status == 1 and "CRITICAL optics_thresholds on mlx5_3 port 1" in back.message, back.message
    # each port's new module: counted, and its learned light forgotten (relearned from this build on)
    led = model.cables.ledger
    assert (led.ports["node:mlx5_0:1"].insertions, led.ports["node:mlx5_0:1"].swaps) == (1, 1)
    snap = Snapshot(time=t[0], findings=findings, sources={}, builds=BuildStats(), **sections)
    s = exposition_samples(render(snap).decode())
    assert s[("fabricmon_cable_swaps_total", (("device", "mlx5_3"), ("port", "1")))] == 1
    assert s[("fabricmon_cable_troubles", (("device", "mlx5_3"), ("port", "1")))] >= 1
    # the ledger survives a restart (the state directory)
    model.cables.flush(force=True)
    doc = json.loads((tmp_path / "state" / "cable_ledger.json").read_text())
    assert doc["serials"][QSFP_SN]["troubles"][0]["port"] == "mlx5_0 port 1"
    again = node(tmp_path, t)
    assert again.cables.ledger.elsewhere(QSFP_SN, "node:mlx5_3:1")[0].check == "optics_lane_imbalance"


def test_a_reseat_is_an_insertion_not_a_swap() -> None:
    led = CableLedger()
    assert led.observe("p", "SN1", "V", "PN", 1.0) is None               # first sight: no change
    assert led.observe("p", "SN1", "V", "PN", 2.0) is None
    c = led.observe("p", "", "", "", 3.0)
    assert c is not None and c.kind == "removed"
    c = led.observe("p", "SN1", "V", "PN", 4.0)
    assert c is not None and c.kind == "reinserted" and (led.ports["p"].insertions, led.ports["p"].swaps) == (1, 0)
    c = led.observe("p", "SN2", "V", "PN", 5.0)
    assert c is not None and c.kind == "swapped" and c.before == "SN1" and led.ports["p"].swaps == 1


def test_bounded_and_round_trips() -> None:
    led = CableLedger()
    for i in range(40):
        led.observe(f"p{i}", "SN", "V", "PN", float(i))
        led.trouble("SN", f"p{i}", "phy_ber", 1, "x" * 1000, float(i))
    s = led.serials["SN"]
    assert len(s.places) == MAX_PLACES and len(s.troubles) == MAX_EVENTS and len(s.troubles[0].text) == 300
    assert not led.trouble("SN", "p39", "phy_ber", 1, "again", 100.0)          # the same within a day
    back = CableLedger.from_dict(json.loads(json.dumps(led.to_dict())))
    assert back.to_dict() == led.to_dict()
    store = LedgerStore(None)
    assert store.ledger.ports == {}
