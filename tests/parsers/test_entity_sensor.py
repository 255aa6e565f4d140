"""parsers.entity_sensor on LibreNMS's real switch recordings (tests/fixtures/snmprec/optics), turned
into net-snmp walk text here, and on planted names: joins by name, SONiC's EthernetN rule, the
alias mapping, and sensors that name no interface (or two) counted, never guessed."""

from __future__ import annotations

import pytest

from fabricmon.parsers.entity_sensor import SENSOR_WALKS, join, port_in_name, quantity
from helpers import FIXTURES

DIR = FIXTURES / "snmprec" / "optics"


def walks(text: str) -> dict[str, str]:
    """An snmprec file as the walks' net-snmp text (-On -Oe)."""
    lines = []
    for line in text.splitlines():
        oid, tag, val = line.split("|", 2)
        if tag == "2":
            lines.append(f".{oid} = INTEGER: {val}")
        elif tag == "4":
            lines.append(f'.{oid} = STRING: "{val}"')
        elif tag == "4x":
            lines.append(f".{oid} = Hex-STRING: " + " ".join(val[i:i + 2] for i in range(0, len(val), 2)))
        elif tag == "6":
            lines.append(f".{oid} = OID: .{val}")
    text = "\n".join(lines)
    return {name: "\n".join(ln for ln in text.splitlines() if ln.startswith(f".{root}.")) for name, root in SENSOR_WALKS}


def rec(name: str) -> str:
    return (DIR / f"{name}.snmprec").read_text()


def test_arista_watts_per_port_with_arista_thresholds() -> None:
    so = join(walks(rec("arista_eos")))
    assert not so.sonic and so.unjoined == []
    idx = next(i for i, n in so.port_names.items() if n == "Ethernet1")
    m = so.ports[idx]
    assert m.lanes[0].tx_power_mw == pytest.approx(0.6322)        # 6322 x 10^-3 W x 10^-4
    assert m.lanes[0].rx_power_mw == pytest.approx(0.0001)        # dark: 1 (the switch: below low critical 229)
    assert m.lanes[0].tx_bias_ma == pytest.approx(33.45)
    assert m.temperature_c == pytest.approx(25.8) and m.voltage_v == pytest.approx(3.31)
    lim = m.lane_limits[("rx_power", 0)]
    assert lim.source == "switch" and lim.low_alarm == pytest.approx(-16.40, abs=0.01)   # 0.0229 mW


def test_nxos_dbm_per_lane_with_cisco_thresholds() -> None:
    so = join(walks(rec("nxos_n3k-3064pq")))
    idx = next(i for i, n in so.port_names.items() if n == "Ethernet1/7")
    m = so.ports[idx]
    assert m.lanes[1].rx_power_dbm == pytest.approx(-8.268, abs=1e-6)
    lim = m.lane_limits[("rx_power", 1)]
    assert (lim.high_alarm, lim.high_warning, lim.low_alarm, lim.low_warning) == pytest.approx(
        (-1.999, -3.001, -26.989, -25.228))
    assert m.lane_limits[("tx_bias", 1)].high_alarm == pytest.approx(85.0)     # 85000 uA
    assert len(so.ports) == 8 and so.unjoined == []


def test_sonic_internal_names_join_by_its_own_ifindex_rule() -> None:
    so = join(walks(rec("dell-sonic")))
    assert so.sonic
    (idx,) = so.ports
    assert so.port_names[idx] == "Eth1/53" and idx == 53
    assert sorted(so.ports[idx].lanes) == [1, 2, 3, 4]
    ln = so.ports[idx].lanes[1]
    assert ln.rx_power_mw == pytest.approx(0.8728) and ln.tx_bias_ma == pytest.approx(5.802)
    assert ln.tx_power_mw is None           # its TX power sensors are "unavailable" (status 2): no value
    assert so.ports[idx].temperature_c == pytest.approx(28.9453)


def test_unjoinable_sensors_are_counted_never_guessed() -> None:
    text = rec("arista_eos")
    # rename one sensor to a port the switch does not have, and make two interfaces share a name
    text = text.replace("1.3.6.1.2.1.47.1.1.1.1.2.100301213|4|DOM RX Power Sensor for Ethernet1",
                        "1.3.6.1.2.1.47.1.1.1.1.2.100301213|4|DOM RX Power Sensor for Ethernet999")
    text = text.replace("1.3.6.1.2.1.31.1.1.1.1.3|4|Ethernet3", "1.3.6.1.2.1.31.1.1.1.1.3|4|Ethernet2")
    so = join(walks(text))
    assert "DOM RX Power Sensor for Ethernet999" in so.unjoined
    assert "DOM RX Power Sensor for Ethernet2" in so.unjoined          # two interfaces named Ethernet2
    assert not any(s.name == "DOM RX Power Sensor for Ethernet999" for s in so.sensors)
    # not SONiC: "Ethernet52" is never turned into an ifIndex on another switch
    assert join(walks(rec("arista_eos").replace("Arista Networks EOS", "Arista"))).sonic is False


@pytest.mark.parametrize("name,port,lane", [
    ("DOM RX Power Sensor for Ethernet1", "Ethernet1", 0),
    ("DOM RX Power Sensor for Ethernet52/1", "Ethernet52/1", 0),
    ("Ethernet1/1 Lane 1 Transceiver Receive Power Sensor", "Ethernet1/1", 1),
    ("Te1/1/1 Receive Power Sensor", "Te1/1/1", 0),
    ("CPU board temp sensor", "", 0),
])
def test_port_in_name(name: str, port: str, lane: int) -> None:
    assert port_in_name(name) == (port, lane)


def test_quantity_only_for_transceiver_sensors() -> None:
    assert quantity("DOM RX Power Sensor for Ethernet1", "watts") == "rx_power"
    assert quantity("Ethernet1/1 Lane 1 Transceiver Transmit Power Sensor", "dBm") == "tx_power"
    assert quantity("Cpu temp sensor", "celsius") is None
    assert quantity("PwrCon1 Rail16 POS12V", "volts") is None


def test_a_power_below_range_is_no_light_never_a_negative_power() -> None:
    """Arista reports a dark receiver as -1000000000 (RFC 3433's lower bound), status ok: 0 mW, not -100 W."""
    so = join(walks(rec("arista_eos")))
    idx = next(i for i, n in so.port_names.items() if n == "Ethernet2")
    ln = so.ports[idx].lanes[0]
    assert ln.rx_power_mw == 0.0 and ln.rx_power_dbm == -40.0
    assert ln.tx_power_mw == pytest.approx(0.2471)
    assert all(lane.rx_power_mw is None or lane.rx_power_mw >= 0 for m in so.ports.values() for lane in m.lanes.values())
