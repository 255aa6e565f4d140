"""FabricModel on records alone: a hung SM (activity count unchanged over polls), the age limit
of remembered down ports (fabric.down_port_max_age), check status per switch OK included, and
topology changes logged with both ends."""

from __future__ import annotations

from fabricmon.config import from_dict
from fabricmon.model.fabric import DiscoveryData, Link, SmData, SmInfo, SwitchNode
from fabricmon.model.snapshot import SourceState
from fabricmon.pipeline.fabric import FabricModel

LEAF, SPINE, CA = "00000000000000a1", "00000000000000b1", "00000000000000c1"


def discovery(cabled: bool = True) -> DiscoveryData:
    d = DiscoveryData(cas={CA: "host01"})
    leaf = SwitchNode(LEAF, "leaf01", 4, 2, {1: Link(1, CA, 1, "Ca", "host01", 4, "HDR", 5)})
    spine = SwitchNode(SPINE, "spine01", 4, 1)
    if cabled:
        leaf.links[2] = Link(2, SPINE, 1, "Switch", "spine01", 4, "HDR", 1)
        spine.links[1] = Link(1, LEAF, 2, "Switch", "leaf01", 4, "HDR", 2)
    d.switches = {LEAF: leaf, SPINE: spine}
    return d


def state(records: type, data: object, t: float) -> SourceState:
    return SourceState(name=records.__name__, enabled=True, interval=1, timeout=1, records=records, up=True,
                       ran=True, data=data, data_time=t)


def swept(t: float, *switches: str, **kw: object) -> SourceState:
    """A sweep at `t` that read these switches (their counters; `kw`: the rest of its SweepData)."""
    from fabricmon.model.fabric import SweepData
    return state(SweepData, SweepData(switches=set(switches), **kw), t)


def test_hung_sm_warns_after_the_configured_polls_and_check_status_is_per_switch() -> None:
    cfg = from_dict({"fabric": {"sm_stalled_polls": 2}}, check_paths=False)
    model = FabricModel(cfg)
    disc = state(DiscoveryData, discovery(), 1.0)
    sm = SmInfo(1, "0000000000100001", 50, 0, "MASTER")
    statuses = []
    for t in (1.0, 2.0, 2.0, 3.0):          # the same poll built twice counts once
        sec, findings = model.build({"discovery": disc, "sm": state(SmData, SmData([sm], True), t)})
        statuses.append(next(f.status for f in findings if f.check == "sm"))
    assert statuses == [0, 0, 0, 1]
    sec = sec["fabric"]
    assert sec.check_status[("sm", "")] == 1 and sec.sm_activity == 50
    # no sweep yet: no switch was read, so no switch check has a status on it (absent, never OK)
    assert not {c for c, g in sec.check_status if g}
    # a sweep that read both switches' port state: every switch check that judges port state, by its own name,
    # OK included; no counter read: the counter checks have no status; ECMP has no rates yet (one sweep); the
    # only leaf has no peers to hold its uplinks to (its uplink group is its own): no uplinks status
    sec, _ = model.build({"discovery": disc, "sm": state(SmData, SmData([sm], True), 3.0),
                          "sweep": swept(3.0, link_up={(LEAF, 1): True, (LEAF, 2): True, (SPINE, 1): True})})
    assert {c for c, g in sec["fabric"].check_status if g == LEAF} == {"degraded_link", "unresponsive"}
    assert sec["fabric"].uplinks[LEAF][1] is None
    moved = SmInfo(1, "0000000000100001", 51, 0, "MASTER")
    _, findings = model.build({"discovery": disc, "sm": state(SmData, SmData([moved], True), 4.0)})
    assert next(f.status for f in findings if f.check == "sm") == 0
    _, findings = model.build({"discovery": disc, "sm": state(SmData, SmData([], False), 5.0)})
    assert next(f.status for f in findings if f.check == "sm") == 2


def test_a_down_port_stays_until_the_age_limit_and_changes_name_both_ends(caplog) -> None:
    import structlog
    cfg = from_dict({"fabric": {"down_port_max_age": 100}}, check_paths=False)
    model = FabricModel(cfg)
    model.build({"discovery": state(DiscoveryData, discovery(), 0.0), "sweep": swept(0.0, LEAF, SPINE)})
    with structlog.testing.capture_logs() as logs:      # the complete discovery no longer sees the cable: down
        sec, findings = model.build({"discovery": state(DiscoveryData, discovery(cabled=False), 50.0),
                                     "sweep": swept(50.0, LEAF, SPINE)})
    sec = sec["fabric"]
    p = sec.ports[(LEAF, 2)]
    assert not p.up and p.link is not None and p.degraded["down"] and sec.topology_changes == 2
    assert sec.check_status[("degraded_link", LEAF)] == 2
    assert any('link "leaf01"[2] (0x00000000000000a1) <-> "spine01"[1] (0x00000000000000b1) 4xHDR vanished'
               in str(e.get("change")) for e in logs)
    sec, _ = model.build({"discovery": state(DiscoveryData, discovery(cabled=False), 99.0)})
    assert sec["fabric"].ports[(LEAF, 2)].link is not None          # still within the age limit
    sec, _ = model.build({"discovery": state(DiscoveryData, discovery(cabled=False), 101.0)})
    assert sec["fabric"].ports[(LEAF, 2)].role == "unconnected"      # forgotten after it


# --- an Ethernet switch is the same records: ports by ifIndex with names, speeds in Mb/s ------

ELEAF = "leaf-chassis"
SPINES = {1002: ("spine1-chassis", "spine01"), 1003: ("spine2-chassis", "spine02"), 1004: ("spine3-chassis", "spine03")}


def ethernet_discovery() -> DiscoveryData:
    """leaf01 with one host and three uplinks (ifIndex 1002-1004, Ethernet4-12); spine03 runs at 100G."""
    names = {1001: "Ethernet0", 1002: "Ethernet4", 1003: "Ethernet8", 1004: "Ethernet12"}
    leaf = SwitchNode(ELEAF, "leaf01", 4, None, kind="ethernet", port_names=names)
    leaf.links[1001] = Link(1001, "host01", 0, "Host", "host01", None, None, rate_mbps=400000,
                            remote_port_name="eth0")
    switches = {ELEAF: leaf}
    for port, (guid, name) in SPINES.items():
        mbps = 100000 if name == "spine03" else 400000
        leaf.links[port] = Link(port, guid, 7, "Switch", name, None, None, rate_mbps=mbps,
                                remote_port_name="Ethernet0")
        sp = SwitchNode(guid, name, 1, None, kind="ethernet", port_names={7: "Ethernet0"})
        sp.links[7] = Link(7, ELEAF, port, "Switch", "leaf01", None, None, rate_mbps=mbps,
                           remote_port_name=names[port])
        switches[guid] = sp
    # LLDP: its links are no evidence of their state (sources/ethernet/discovery.py says so too)
    return DiscoveryData(switches=switches, cas={"host01": "host01"}, links_are_up=False)


def test_ethernet_ports_are_named_speeds_compare_in_mbps_and_the_sweep_state_is_fresh() -> None:
    from fabricmon.exporter.render import render
    from fabricmon.model.fabric import SweepData
    from fabricmon.model.snapshot import BuildStats, Snapshot
    model = FabricModel(from_dict({}, check_paths=False))
    disc = state(DiscoveryData, ethernet_discovery(), 1.0)
    up = {(ELEAF, p): True for p in SPINES}
    sweep = SweepData(ports={(ELEAF, p): {"transmit_bytes": 1000} for p in SPINES}, link_up=up,
                      scale={"transmit_bytes": 1}, switches={ELEAF})
    model.build({"discovery": disc, "sweep": state(SweepData, sweep, 1.0)})
    sweep2 = SweepData(ports={(ELEAF, p): {"transmit_bytes": 11000 if p == 1002 else 1000} for p in SPINES},
                       link_up={**up, (ELEAF, 1003): False}, scale={"transmit_bytes": 1}, switches={ELEAF})
    sec, findings = model.build({"discovery": disc, "sweep": state(SweepData, sweep2, 11.0)})
    sec = sec["fabric"]
    slow, down, busy = sec.ports[(ELEAF, 1004)], sec.ports[(ELEAF, 1003)], sec.ports[(ELEAF, 1002)]
    assert sec.levels[ELEAF] == 1 and sec.levels["spine1-chassis"] == 2 and sec.kind == "ethernet"
    assert slow.degraded["speed"] and slow.expected == "400G" and slow.rate_bps == 100000 * 1e6 / 8
    assert not down.up and down.degraded["down"]            # from this sweep, no rediscovery
    assert busy.tx_rate == 1000.0                           # octets are bytes (scale 1), not 4-octet words
    msgs = [f.message for f in findings if f.check == "degraded_link"]
    assert any('leaf01 port Ethernet12 (up to "spine03"[Ethernet0]): runs at 100G, below the 400G' in m for m in msgs)
    # the first sweep read it up: its history is that sweep's, not the discovery's
    assert any('leaf01 port Ethernet8 (up to "spine02"[Ethernet0]): link is down (was up at an earlier sweep)'
               in m for m in msgs), msgs
    text = render(Snapshot(time=11.0, findings=findings, sources={}, builds=BuildStats(), fabric=sec)).decode()
    assert 'fabricmon_fabric_port_degraded{port="Ethernet8",reason="down",switch_guid="leaf-chassis"} 1.0' in text
    assert 'fabricmon_fabric_port_transmit_bytes_total{port="Ethernet4",switch_guid="leaf-chassis"} 11000.0' in text
    assert 'remote_port="Ethernet0"' in text


def test_an_lldp_discovery_is_no_evidence_of_a_ports_state() -> None:
    """Issue 26: an LLDP neighbour's absence never means down. A port a sweep read up stays up when its
    neighbour leaves a complete discovery (InfiniBand's discovery, links_are_up, would take it down)."""
    from fabricmon.model.fabric import SweepData
    model = FabricModel(from_dict({}, check_paths=False))
    sweep = SweepData(link_up={(ELEAF, p): True for p in SPINES}, scale={"transmit_bytes": 1})
    model.build({"discovery": state(DiscoveryData, ethernet_discovery(), 1.0), "sweep": state(SweepData, sweep, 2.0)})
    gone = ethernet_discovery()
    del gone.switches[ELEAF].links[1003]                  # spine02 no longer listed by LLDP (TTL ran out)
    sec, findings = model.build({"discovery": state(DiscoveryData, gone, 3.0), "sweep": state(SweepData, sweep, 2.0)})
    p = sec["fabric"].ports[(ELEAF, 1003)]
    assert p.up and not p.degraded.get("down"), p
    assert not [f for f in findings if f.check == "degraded_link" and f.port == 1003]
    ib = FabricModel(from_dict({}, check_paths=False))   # InfiniBand: a link ibnetdiscover walks is up
    sec, _ = ib.build({"discovery": state(DiscoveryData, discovery(), 1.0)})
    assert sec["fabric"].ports[(LEAF, 2)].up


def test_an_ethernet_port_no_sweep_has_read_claims_no_state() -> None:
    """No data, no status: an LLDP discovery says nothing of a port's state, so until a sweep answers for
    its switch (a loaded switch may miss the first sweeps) a port has no port_up and no down series, up or
    down; once a sweep reads it (or, for a switch-to-switch link, its far end), it has."""
    from fabricmon.exporter.render import render
    from fabricmon.model.fabric import SweepData
    from fabricmon.model.snapshot import BuildStats, Snapshot
    model = FabricModel(from_dict({}, check_paths=False))
    disc = state(DiscoveryData, ethernet_discovery(), 1.0)
    sweep = SweepData(link_up={("spine1-chassis", 7): True}, scale={"transmit_bytes": 1}, switches={"spine1-chassis"})
    sec, _ = model.build({"discovery": disc, "sweep": state(SweepData, sweep, 2.0)})
    sec = sec["fabric"]
    text = render(Snapshot(time=2.0, findings=[], sources={}, builds=BuildStats(), fabric=sec),
                  frozenset({"default", "state"})).decode()
    ports = {ln.split("{", 1)[1].split("}")[0] for ln in text.splitlines() if ln.startswith("fabricmon_fabric_port_up{")}
    assert ports == {'port="Ethernet0",switch_guid="spine1-chassis"', 'port="Ethernet4",switch_guid="leaf-chassis"'}
    assert not sec.ports[(ELEAF, 1001)].state_read and not sec.ports[(ELEAF, 1003)].state_read
    assert 'fabricmon_fabric_port_degraded{port="Ethernet8",reason="down",switch_guid="leaf-chassis"}' not in text
    assert 'fabricmon_fabric_port_degraded{port="Ethernet4",reason="down",switch_guid="leaf-chassis"} 0.0' in text
    # leaf01 answers: every one of its ports has its state
    full = SweepData(link_up={(ELEAF, p): True for p in (1001, *SPINES)}, scale={"transmit_bytes": 1}, switches={ELEAF})
    sec, _ = model.build({"discovery": disc, "sweep": state(SweepData, full, 3.0)})
    assert all(p.state_read for k, p in sec["fabric"].ports.items() if k[0] == ELEAF)


def test_a_32_bit_counter_that_wraps_is_a_wrap_and_a_drop_is_a_reset() -> None:
    """The Ethernet sweep's 32-bit ifTable counters go through the model's one counter intake
    (tests/model/test_counter_intake.py has each rule)."""
    from fabricmon.model.fabric import SweepData
    model = FabricModel(from_dict({}, check_paths=False))
    key = (ELEAF, 1002)
    top = 1 << 32
    seq = [top - 100, top - 10, 40, 90, 5]      # wraps once (+50), then a reboot (reset)
    for t, v in enumerate(seq, 1):
        model.counters.record(SweepData(ports={key: {"receive_errors": v}}, bits={"receive_errors": 32},
                                wrapping={"receive_errors"}), float(t), {key})
    h = model.history
    assert h.last_step((*key, "receive_errors")) == (0, 1.0)                   # the reboot contributes 0
    assert h.increase((*key, "receive_errors"), 100.0, 5.0) == (90 + 50 + 50, 4.0)
    assert h.resets[(*key, "receive_errors")] == 1


def test_checks_run_by_their_inputs_not_by_the_fabric_kind() -> None:
    """The PFC check runs once a sweep yielded pause frames, whatever the kind: an InfiniBand-modelled
    switch whose sweep carries pause frames is judged for storms; an Ethernet sweep without them is not."""
    from fabricmon.model.fabric import SweepData
    config = from_dict({}, check_paths=False)         # fabric.pfc_storm: 1000/s for 2 sweeps
    ib = FabricModel(config)
    disc = state(DiscoveryData, discovery(), 0.0)
    for t, frames in ((1.0, 0), (2.0, 10000), (3.0, 20000), (4.0, 30000)):
        sweep = SweepData(ports={(LEAF, 1): {}}, pause={(LEAF, 1): {(3, "tx"): frames}})
        sec, findings = ib.build({"discovery": disc, "sweep": state(SweepData, sweep, t)})
    assert sec["fabric"].check_status[("pfc_storm", LEAF)] == 1
    assert [f.device for f in findings if f.check == "pfc_storm"] == [LEAF]
    eth = FabricModel(config)
    edisc = state(DiscoveryData, ethernet_discovery(), 0.0)
    sweep = SweepData(ports={(ELEAF, p): {"transmit_bytes": 1} for p in SPINES}, scale={"transmit_bytes": 1})
    sec, _ = eth.build({"discovery": edisc, "sweep": state(SweepData, sweep, 1.0)})
    assert sec["fabric"].kind == "ethernet" and not [c for c, _ in sec["fabric"].check_status if c == "pfc_storm"]


def test_every_fabric_check_declares_its_inputs_and_is_run_by_them() -> None:
    """Each checks/fabric_*.py declares CHECK (or CHECKS) and NEEDS (capabilities the pipeline knows), and the model
    lists it in fabricmon_fabric_check_status exactly when its inputs are there."""
    import importlib
    from pathlib import Path

    import fabricmon.checks as checks_pkg
    from fabricmon.model.fabric import LftData
    from fabricmon.checks.fabric_inputs import CAPABILITIES, FRESH_RECORDS
    mods = [importlib.import_module(f"fabricmon.checks.{p.stem}")
            for p in sorted(Path(checks_pkg.__file__).parent.glob("fabric_*.py")) if p.stem != "fabric_inputs"]
    model = FabricModel(from_dict({}, check_paths=False))
    registered = [*model.checks.registered(), *model.checks.jobs.checks]
    assert {m.__name__ for m in mods} <= {type(c).__module__ for c in registered}
    for m in mods:
        names = [n for n in (getattr(m, "CHECK", None), *getattr(m, "CHECKS", ())) if n is not None]   # or a family
        assert names and all(isinstance(n, str) for n in names) and m.NEEDS and set(m.NEEDS) <= {*CAPABILITIES, *FRESH_RECORDS}, \
            m.__name__
    disc = state(DiscoveryData, discovery(), 0.0)
    sec, _ = model.build({"discovery": disc, "sweep": swept(0.0, LEAF, SPINE)})
    listed = {c for c, g in sec["fabric"].check_status if g == LEAF}
    assert "routing" not in listed and "pfc_storm" not in listed and "sm" not in {c for c, _ in sec["fabric"].check_status}
    tables = {LEAF: bytes([255, 1, 2]), SPINE: bytes([255, 1, 1])}
    sec, _ = model.build({"discovery": disc, "routing": state(LftData, LftData(tables=tables), 1.0),
                          "sweep": swept(1.0, LEAF, SPINE),
                          "sm": state(SmData, SmData([SmInfo(1, "0000000000100001", 5, 0, "MASTER")], True), 1.0)})
    assert ("routing", LEAF) in sec["fabric"].check_status and ("sm", "") in sec["fabric"].check_status


def test_a_counter_check_has_a_status_only_once_a_sweep_read_its_counters() -> None:
    """A sweep that reads only some counters (Ethernet's ifTable: receive_errors and transmit_discards,
    wrapping at 32 bits) gives a status to those checks alone: none to symbol_errors, link_flap,
    link_integrity, link_error_recovery, and none to counter_saturation (a counter that wraps never
    saturates); an InfiniBand sweep's counters give every counter check a status, OK included."""
    from fabricmon.model.fabric import SweepData
    config = from_dict({}, check_paths=False)
    disc = state(DiscoveryData, discovery(), 0.0)
    eth = FabricModel(config, clock=lambda: 2.0)       # the data times' clock (the counters' windows end now)
    counter = {"symbol_errors", "link_flap", "link_error_recovery", "link_integrity", "receive_errors",
               "transmit_discards", "counter_saturation"}
    for t in (1.0, 2.0):
        sweep = SweepData(ports={(LEAF, 1): {"receive_errors": (1 << 32) - 1, "transmit_discards": 0,
                                             "receive_bytes": 9}},
                          bits={"receive_errors": 32, "transmit_discards": 32, "receive_bytes": 32},
                          wrapping={"receive_errors", "transmit_discards", "receive_bytes"}, switches={LEAF})
        sec, findings = eth.build({"discovery": disc, "sweep": state(SweepData, sweep, t)})
        judged = {c for c, g in sec["fabric"].check_status if g == LEAF} & counter
        # the first sweep: receive_errors counted before it (when is unknown), so the switch's counters are not
        # judged until the second
        assert judged == (set() if t == 1.0 else {"receive_errors", "transmit_discards"}), t
    assert not [f for f in findings if f.check == "counter_saturation"]      # 2^32-1 of a wrapping counter
    ib = FabricModel(config)
    sweep = SweepData(ports={(LEAF, 1): {c: 0 for c in ("symbol_errors", "link_downed", "link_error_recovery",
                                                        "local_link_integrity_errors", "receive_errors",
                                                        "transmit_discards")}},
                      bits={"symbol_errors": 16, "link_downed": 8}, switches={LEAF})
    sec, _ = ib.build({"discovery": disc, "sweep": state(SweepData, sweep, 1.0)})
    assert {c for c, g in sec["fabric"].check_status if g == LEAF} >= counter
    assert all(sec["fabric"].check_status[(c, LEAF)] == 0 for c in counter)


def test_a_port_once_flagged_keeps_its_status_ok_included_while_the_check_runs() -> None:
    """fabricmon_check_status on the fabric: a port's check that was not OK keeps a status every build
    (OK once recovered), so the series does not vanish; ports never flagged have none per port."""
    from fabricmon.model.fabric import SweepData
    from helpers import Clock
    clock = Clock(0.0)
    model = FabricModel(from_dict({}, check_paths=False), clock=clock)
    disc = state(DiscoveryData, discovery(), 0.0)
    per_port = []
    for t, value in ((1.0, 0), (2.0, 50_000), (3.0, 50_000), (4000.0, 50_000)):
        clock.t = t
        sweep = SweepData(ports={(LEAF, 1): {"symbol_errors": value}, (LEAF, 2): {"symbol_errors": 0}},
                          bits={"symbol_errors": 32})
        _, findings = model.build({"discovery": disc, "sweep": state(SweepData, sweep, t)})
        per_port.append(sorted((f.port, f.status) for f in findings if f.check == "symbol_errors"))
    # quiet, then 50,000 symbol errors (CRITICAL), still in the window, then the window has passed (OK)
    assert per_port == [[], [(1, 2)], [(1, 2)], [(1, 0)]]


def test_a_build_whose_sweep_and_topology_did_not_change_reuses_the_port_section() -> None:
    """Only a slow source completed (the SM poll, the job list): the build shares the last full build's
    ports and port findings and redoes the subnet manager and the check status; a new sweep builds anew.
    The earlier snapshot's section is never changed by a later build (a scrape may be rendering it)."""
    from fabricmon.model.fabric import SweepData
    model = FabricModel(from_dict({"fabric": {"sm_stalled_polls": 1}}, check_paths=False))
    disc = state(DiscoveryData, discovery(), 1.0)
    sw = SweepData(ports={(LEAF, 1): {"symbol_errors": 0}, (LEAF, 2): {"symbol_errors": 0}}, switches={LEAF, SPINE})
    sweep = state(SweepData, sw, 2.0)
    sm = SmInfo(1, "0000000000100001", 50, 0, "MASTER")
    first, f1 = model.build({"discovery": disc, "sweep": sweep, "sm": state(SmData, SmData([sm], True), 2.0)})
    again, f2 = model.build({"discovery": disc, "sweep": sweep, "sm": state(SmData, SmData([sm], True), 3.0)})
    a, b = first["fabric"], again["fabric"]
    assert a is not b and a.ports is b.ports and a.switches is b.switches       # the port section, shared
    assert [f for f in f1 if f.check != "sm"] == [f for f in f2 if f.check != "sm"]
    # the SM poll is this build's: its activity count stalled over two polls (sm_stalled_polls 1)
    assert next(f.status for f in f1 if f.check == "sm") == 0
    assert next(f.status for f in f2 if f.check == "sm") == 1
    assert a.check_status[("sm", "")] == 0 and b.check_status[("sm", "")] == 1
    newer = SweepData(ports=dict(sw.ports), switches=set(sw.switches))
    fresh, _ = model.build({"discovery": disc, "sweep": state(SweepData, newer, 4.0),
                            "sm": state(SmData, SmData([sm], True), 3.0)})
    assert fresh["fabric"].ports is not a.ports
