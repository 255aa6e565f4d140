"""Optical transceiver readings, the same records on a node (a NIC's module, read with
`ethtool -m`) and on a switch (ENTITY-SENSOR-MIB over SNMP), so that one check judges both.

Units are fixed by the field name: power in mW (dBm derived), bias in mA, temperature in degrees
Celsius, voltage in volts. Thresholds of power are kept in dBm. None is "not reported", never 0.

Pure: records only; the learned receive-power baseline (`RxBaseline`) is kept in a file by
stores.optics_baseline.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import asdict, dataclass, field
from typing import overload

from fabricmon.model.ports import DeviceView, PortView, pair_netdevs

# The quantities a module or switch reports, with their unit as the metric names spell it.
QUANTITIES = ("rx_power", "tx_power", "tx_bias", "temperature", "voltage")

# SFF-8472/8636/CMIS power registers count 0.1 uW: a reading of 0 is "below 0.1 uW", i.e. below
# -40 dBm. dBm is exported floored there, never as -Inf.
DBM_FLOOR = -40.0


@overload
def mw_to_dbm(mw: float) -> float: ...
@overload
def mw_to_dbm(mw: None) -> None: ...
def mw_to_dbm(mw: float | None) -> float | None:
    """mW -> dBm, floored at DBM_FLOOR; None stays None."""
    if mw is None:
        return None
    if mw <= 0.0001:
        return DBM_FLOOR
    return max(DBM_FLOOR, 10.0 * math.log10(mw))


@overload
def dbm_to_mw(dbm: float) -> float: ...
@overload
def dbm_to_mw(dbm: None) -> None: ...
def dbm_to_mw(dbm: float | None) -> float | None:
    """dBm -> mW (-inf dBm: 0 mW); None stays None."""
    if dbm is None:
        return None
    if math.isinf(dbm) and dbm < 0:
        return 0.0
    return math.pow(10.0, dbm / 10.0)


@dataclass(frozen=True, slots=True)
class Limits:
    """A quantity's alarm and warning thresholds, as the module (or switch) reports them.
    Power in dBm, bias in mA, temperature in C, voltage in V."""
    high_alarm: float | None = None
    low_alarm: float | None = None
    high_warning: float | None = None
    low_warning: float | None = None
    source: str = "module"          # "module", "switch" or "default" (documented defaults per class)

    @property
    def empty(self) -> bool:
        return all(v is None for v in (self.high_alarm, self.low_alarm, self.high_warning, self.low_warning))


@dataclass(slots=True)
class LaneDiag:
    lane: int                        # 1-based; 0 for a reading of the whole port (switch sensors)
    rx_power_mw: float | None = None
    tx_power_mw: float | None = None
    tx_bias_ma: float | None = None

    @property
    def rx_power_dbm(self) -> float | None:
        return mw_to_dbm(self.rx_power_mw)

    @property
    def tx_power_dbm(self) -> float | None:
        return mw_to_dbm(self.tx_power_mw)

    @property
    def transmitter_off(self) -> bool:
        """The lane's own laser is off (an unused lane of a 4-lane module run as one lane, a
        breakout): its receiver is not compared with its siblings."""
        return (self.tx_bias_ma is not None and self.tx_bias_ma <= 0.0) or \
            (self.tx_power_mw is not None and self.tx_power_mw <= 0.0)


@dataclass(slots=True)
class ModuleDiag:
    """One transceiver's digital diagnostics (DOM/DDM)."""
    module_class: str = "unknown"   # "SFP" (SFF-8472), "QSFP" (SFF-8636), "CMIS", "switch", "unknown"
    identifier: str = ""
    vendor: str = ""
    part_number: str = ""
    serial: str = ""
    medium: str = "unknown"         # model.ber.MEDIA, from the transmitter technology (the BER budget's medium)
    temperature_c: float | None = None
    voltage_v: float | None = None
    lanes: dict[int, LaneDiag] = field(default_factory=dict)
    limits: dict[str, Limits] = field(default_factory=dict)     # quantity -> thresholds
    # per-lane thresholds (switches give them per sensor): (quantity, lane) -> Limits
    lane_limits: dict[tuple[str, int], Limits] = field(default_factory=dict)
    raised: tuple[str, ...] = ()    # alarm/warning flags the module raises ("Laser rx power low alarm (Channel 2)")

    @property
    def has_readings(self) -> bool:
        return self.temperature_c is not None or any(
            v is not None for ln in self.lanes.values() for v in (ln.rx_power_mw, ln.tx_power_mw, ln.tx_bias_ma))

    def limits_for(self, quantity: str, lane: int) -> Limits | None:
        return self.lane_limits.get((quantity, lane)) or self.limits.get(quantity)


@dataclass(slots=True)
class OpticsPort:
    """One port's transceiver as the checks see it, node or switch alike."""
    owner: str                      # the node's RDMA device (mlx5_0) or the switch's name
    port: int | None                # the Finding's port (IB/RDMA port number, or ifIndex on a switch)
    label: str                      # "mlx5_0 port 1 (ens1f0np0)", "switch leaf1 Ethernet1/1"
    module: ModuleDiag
    up: bool | None = None          # the link is up (None: unknown)
    peer: str = ""                  # what is at the other end of the cable, when known
    key: str = ""                   # the baseline's key for this port ("node:mlx5_0:1", "switch:<guid>:Ethernet1")


# --- the learned receive-power baseline --------------------------------------------------------
BASELINE_VERSION = 1
MAX_BASELINE_LANES = 65536          # bounded: a big switch fleet has ~10^4 lanes; a runaway must not grow the file


@dataclass(slots=True)
class LaneBaseline:
    rx_dbm: float                   # the best receive power seen since the module was fitted
    serial: str = ""                # the module it belongs to: a new module starts a new baseline
    learned_at: float = 0.0


@dataclass(slots=True)
class RxBaseline:
    """Per (port key, lane): the receive power the lane had when healthy. It follows the light
    up (a cleaned connector, a better cable) and never down, so that a slow fall shows."""
    lanes: dict[str, LaneBaseline] = field(default_factory=dict)

    @staticmethod
    def lane_key(port_key: str, lane: int) -> str:
        return f"{port_key}#{lane}"

    def get(self, port_key: str, lane: int, serial: str) -> LaneBaseline | None:
        b = self.lanes.get(self.lane_key(port_key, lane))
        if b is None or (serial and b.serial and b.serial != serial):
            return None
        return b

    def learn(self, port_key: str, lane: int, serial: str, rx_dbm: float, now: float) -> bool:
        """Raise (or start) the lane's baseline; True when it changed."""
        k = self.lane_key(port_key, lane)
        b = self.lanes.get(k)
        if b is not None and (not serial or not b.serial or b.serial == serial) and rx_dbm <= b.rx_dbm:
            return False
        if b is None and len(self.lanes) >= MAX_BASELINE_LANES:
            return False
        self.lanes[k] = LaneBaseline(round(rx_dbm, 2), serial, now)
        return True

    def forget(self, port_prefix: str) -> int:
        """Drop every lane of the ports whose key starts with `port_prefix` (a new module: relearn). Returns how many."""
        gone = [k for k in self.lanes if k.startswith(port_prefix)]
        for k in gone:
            del self.lanes[k]
        return len(gone)

    def to_dict(self) -> dict[str, object]:
        return {"version": BASELINE_VERSION, "lanes": {k: asdict(v) for k, v in sorted(self.lanes.items())}}

    @classmethod
    def from_dict(cls, doc: object) -> RxBaseline:
        if not isinstance(doc, dict) or doc.get("version") != BASELINE_VERSION:
            raise ValueError("not an optics baseline of version 1")
        lanes = {}
        for k, v in (doc.get("lanes") or {}).items():
            lanes[str(k)] = LaneBaseline(float(v["rx_dbm"]), str(v.get("serial", "")), float(v.get("learned_at", 0.0)))
        return cls(lanes)




# --- the node's modules (sources.optics) -------------------------------------------------------
@dataclass(slots=True)
class NodeModule:
    """`ethtool -m <netdev>` of one RDMA port's netdev."""
    device: str
    port: int
    netdev: str
    module: ModuleDiag | None = None    # None: no data (no module, no DOM, a NIC that cannot read it)
    note: str = ""                      # why there is no data


@dataclass(slots=True)
class OpticsData:
    modules: dict[str, NodeModule] = field(default_factory=dict)     # netdev -> module
    tool_missing: bool = False


@dataclass(slots=True)
class OpticsSection:
    """What the node snapshot exports: every module read (with or without data)."""
    modules: list[NodeModule] = field(default_factory=list)


def netdev_ports(devices: Mapping[str, DeviceView], ports: Mapping[tuple[str, int], PortView]
                 ) -> list[tuple[str, int, str]]:
    """(device, port, netdev) of every RDMA port with a netdev, RoCE and IPoIB alike, paired as
    model.ports.pair_netdevs pairs them."""
    by_dev: dict[str, list[int]] = {}
    for dev, num in ports:
        by_dev.setdefault(dev, []).append(num)
    return [t for t in pair_netdevs(devices, by_dev) if t[2]]


# --- the switches' transceivers (sources.ethernet.optics) --------------------------------------
@dataclass(slots=True)
class SwitchOpticsData:
    """The optics source's records: per switch GUID, its joined transceivers (parsers.entity_sensor
    SwitchOptics) and how many transceiver sensors named no (or more than one) interface."""
    switches: dict[str, object] = field(default_factory=dict)      # guid -> SwitchOptics
    missing: set[str] = field(default_factory=set)                  # switches that did not answer


__all__ = ["BASELINE_VERSION", "DBM_FLOOR", "LaneBaseline", "LaneDiag", "Limits", "ModuleDiag", "NodeModule",
           "OpticsData", "OpticsPort", "OpticsSection", "SwitchOpticsData", "netdev_ports",
           "QUANTITIES", "RxBaseline", "dbm_to_mw", "mw_to_dbm"]
