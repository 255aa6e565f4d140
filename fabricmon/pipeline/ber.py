"""The node's physical-layer BER view: the records of mlxlink, `ethtool -S` (the mlx5 phy counters) and
`ethtool -I --show-fec` joined to the RDMA ports they describe, and their counters sampled into the
counter history (under `ber:<source>:<counter>`), for checks.phy_ber (docs/ber.md).

Per port the counters come from one source, the first that has them: mlxlink (the adapter's own raw
errors per lane, effective and symbol errors), then ethtool -S (the driver's view of the same registers),
then ethtool --show-fec (codeword counts, a lower bound); the FEC mode from mlxlink, else ethtool
--show-fec; the medium from mlxlink's module info, else ethtool -m's transmitter technology.
"""

from __future__ import annotations

from collections.abc import Mapping

from fabricmon.checks.phy_ber import history_key
from fabricmon.model.ber import BerPort, FecData, FecStats, MlxlinkData, PhyCounters, asic_of, settle_rs, speed_key
from fabricmon.model.history import CounterIntake
from fabricmon.model.node_records import EthtoolData
from fabricmon.model.optics import ModuleDiag, OpticsData, netdev_ports
from fabricmon.model.ports import Inventory
from fabricmon.model.snapshot import SourceState, source_data, source_state

SOURCE_RECORDS = (("mlxlink", MlxlinkData), ("ethtool", EthtoolData), ("fec", FecData))


def ber_ports(states: Mapping[str, SourceState], inv: Inventory) -> list[BerPort]:
    """Every RDMA port one of the three sources read physical counters of, joined (sorted by port)."""
    mlx = source_data(states, MlxlinkData)
    eth = source_data(states, EthtoolData)
    fec = source_data(states, FecData)
    optics = source_data(states, OpticsData)
    by_netdev = {nd: (dev, port) for dev, port, nd in netdev_ports(inv.devices, inv.ports)}
    eth_of: dict[tuple[str, int], tuple[str, PhyCounters]] = {}
    for nd, st in (eth.netdevs.items() if eth is not None else ()):
        key = by_netdev.get(nd)
        if key is not None and st.phy is not None and key not in eth_of:
            eth_of[key] = (nd, st.phy)
    fec_of: dict[tuple[str, int], FecStats] = {}
    for nd, stats in (fec.netdevs.items() if fec is not None else ()):
        key = by_netdev.get(nd)
        if key is not None and key not in fec_of:
            fec_of[key] = stats
    mods: dict[tuple[str, int], ModuleDiag] = {}
    for m in (optics.modules.values() if optics is not None else ()):
        if m.module is not None:
            mods.setdefault((m.device, m.port), m.module)
    out: list[BerPort] = []
    for key, p in sorted(inv.ports.items()):
        ml = mlx.ports.get(key) if mlx is not None else None
        fs = fec_of.get(key)
        nd = ""
        if ml is not None and ml.counters.counters:
            source, counters = "mlxlink", ml.counters
        elif key in eth_of:
            source, (nd, counters) = "ethtool", eth_of[key]
        elif fs is not None and fs.counters.counters:
            source, counters, nd = "fec", fs.counters, fs.netdev
        else:
            continue
        d = inv.devices.get(p.device)
        lane = p.rate_gbps / p.width if p.rate_gbps and p.width else None
        fec_name = ml.fec if ml is not None and ml.fec != "unknown" else settle_rs(fs.active, lane) if fs else "unknown"
        medium = "unknown"
        module = ml.module if ml is not None else None
        if module is not None:
            medium = module.medium
        if medium == "unknown" and key in mods:
            medium = mods[key].medium
        nd = nd or next((n for n, k in by_netdev.items() if k == key), "")
        bp = BerPort(p.device, p.port, f"{p.device} port {p.port}" + (f" ({nd})" if nd else ""), source, counters,
                     protocol="Ethernet" if p.link_layer == "Ethernet" else "IB",
                     speed=speed_key(p.link_layer, p.generation, p.rate_gbps, p.width),
                     rate_gbps=p.rate_gbps or None, fec=fec_name, medium=medium,
                     asic=asic_of(d.hca_type if d is not None else ""),
                     up=p.up if p.state_id is not None else None,
                     peer=f"{p.peer} port {p.peer_port}" if p.peer and p.peer_port is not None else "", module=module)
        if ml is not None:
            bp.since_clear = {k: v for k, v in (("raw", ml.raw_ber), ("effective", ml.effective_ber),
                                                ("symbol", ml.symbol_ber)) if v is not None}
        out.append(bp)
    return out


def record(ports: list[BerPort], states: Mapping[str, SourceState], intake: CounterIntake, now: float) -> None:
    """Sample each port's counters into the history at its source's data time (the same data again is skipped)."""
    times = {}
    for name, rec in SOURCE_RECORDS:
        st = source_state(states, rec)
        times[name] = st.data_time if st is not None and st.data is not None else now
    for p in ports:
        values = {history_key(p, n)[2]: v for n, v in p.counters.counters.items()}
        intake.take_port(p.key, times[p.source], values, {}, stream=f"ber:{p.source}")


__all__ = ["ber_ports", "record"]
