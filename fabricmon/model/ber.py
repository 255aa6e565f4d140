"""Bit error ratios under forward error correction: the records of the three sources that report a
port's physical-layer errors (mlxlink -c, the mlx5 physical counters of `ethtool -S`, `ethtool -I
--show-fec`), the FEC modes and media they name, and the joined per-port view the `phy_ber` check
judges (docs/ber.md).

Three ratios per port, each of the errors counted in a window over the bits the link received in it:
- raw (pre-FEC): the bits the FEC corrected (or the raw errors before correction): 1e-8..1e-5 is
  normal on a PAM4 link; its trend is what tells a dying cable or module;
- effective (post-FEC): the errors the FEC did not correct, which cost frames;
- symbol: the PCS's (or the PMA's, on InfiniBand) symbol errors after FEC.

Pure: records only. Counters are raw cumulative values; the windowed ratios are the check's.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

# --- FEC modes -----------------------------------------------------------------------------------

# A FEC mode as fabricmon names it (the budget table's column), from the many spellings of mlxlink
# (mstflint mlxlink/modules/mlxlink_maps.cpp, _fecModeActive) and ethtool ("RS", "BaseR", "LLRS", "Off").
FEC_MODES = {
    "none": "no FEC",
    "firecode": "Firecode (BASE-R) FEC",
    "rs528": "RS(528,514) FEC",
    "rs544": "RS(544,514) (KP4) FEC",
    "rs544_plr": "RS(544,514) (KP4) FEC with PLR",
    "ll_rs": "low-latency RS(271,257)/(272,257+1) FEC",
    "ll_plr": "low-latency RS FEC with PLR",
    "rs": "RS FEC (528 or 544 not said)",
    "unknown": "an unknown FEC mode",
}


def fec_mode(text: str) -> str:
    """fabricmon's name of a FEC mode as mlxlink or ethtool spell it ("unknown" for one it cannot place)."""
    t = text.strip().lower().replace("_", " ").replace("-", " ")
    t = re.sub(r"\s+", " ", t)
    if not t:
        return "unknown"
    if t in ("no fec", "none", "off", "no"):
        return "none"
    if "firecode" in t or t in ("baser", "base r", "fc"):
        return "firecode"
    plr = "plr" in t
    if "ll" in t.split() or "271" in t or "272" in t or t.startswith("llrs") or "ll 50g" in t or "ll rs" in t:
        return "ll_plr" if plr else "ll_rs"
    if "544" in t or "546" in t:
        return "rs544_plr" if plr else "rs544"
    if "528" in t:
        return "rs528"
    if t in ("rs", "rs fec"):
        return "rs"
    return "unknown"


def settle_rs(mode: str, lane_gbps: float | None) -> str:
    """ethtool says only "RS": RS(544,514) on a PAM4 lane (50 Gb/s or more), RS(528,514) on an NRZ lane."""
    if mode != "rs" or not lane_gbps:
        return mode
    return "rs544" if lane_gbps >= 50 else "rs528"


# --- media -----------------------------------------------------------------------------------------

MEDIA = ("copper", "active_copper", "optical", "unknown")


def medium_of(*texts: str) -> str:
    """The medium a module's description names (mlxlink "Cable Technology"/"Cable Type", ethtool -m
    "Transmitter technology"/"Connector"): passive copper (a DAC), active copper (ACC/AEC), optical
    (transceivers and active optical cables); "unknown" when nothing says."""
    t = " ".join(texts).lower()
    if not t.strip() or t.strip() in ("n/a", "na"):
        return "unknown"
    if "active copper" in t or "acc" in t.split() or "aec" in t.split() or "copper cable, active" in t \
            or "copper cable active" in t or "linear active" in t:
        return "active_copper"
    if "copper" in t or "passive" in t or "dac" in t.split():
        return "copper"
    if any(w in t for w in ("optical", "vcsel", "nm ", "fibre", "fiber", "laser", "dfb", "fp ", "eml", "aoc")):
        return "optical"
    return "unknown"


# --- the sources' records --------------------------------------------------------------------------

@dataclass(slots=True)
class PhyCounters:
    """A port's physical-layer error counters as one source reported them (cumulative, raw). Names:
    raw_errors (before FEC, all lanes), corrected_bits, effective_errors (after FEC), symbol_errors,
    received_bits, fec_corrected_blocks, fec_uncorrectable_blocks; per lane raw_errors_lane<n> and the
    FEC histogram's bins fec_bin_<low>_<high> (codewords with that many corrected symbols)."""
    counters: dict[str, int] = field(default_factory=dict)

    def get(self, name: str) -> int | None:
        return self.counters.get(name)

    def lanes(self) -> dict[int, int]:
        return {int(k[len("raw_errors_lane"):]): v for k, v in self.counters.items() if k.startswith("raw_errors_lane")}

    def bins(self) -> dict[tuple[int, int], int]:
        out = {}
        for k, v in self.counters.items():
            if k.startswith("fec_bin_"):
                lo, hi = k[len("fec_bin_"):].split("_")
                out[(int(lo), int(hi))] = v
        return dict(sorted(out.items()))


@dataclass(slots=True)
class ModuleId:
    """A module's (or cable's) identity as a tool printed it: the cable ledger's key is the serial."""
    vendor: str = ""
    part_number: str = ""
    serial: str = ""
    kind: str = ""             # "QSFP28", "OSFP", ... (mlxlink Identifier)
    medium: str = "unknown"    # MEDIA
    length_m: float | None = None


@dataclass(slots=True)
class MlxlinkPort:
    """`mlxlink -d <dev> -p <port> -m -c` of one RDMA port (and `--show_fec` where asked)."""
    device: str
    port: int
    state: str = ""                   # Operational Info: State ("Active")
    speed: str = ""                   # "IB-HDR", "100G", "400G"
    width: int | None = None          # "4x" -> 4
    fec_text: str = ""                # as printed
    fec: str = "unknown"              # fec_mode()
    counters: PhyCounters = field(default_factory=PhyCounters)
    # what the firmware computed since its counters were last cleared (not windowed)
    since_clear_minutes: float | None = None
    raw_ber: float | None = None
    effective_ber: float | None = None
    symbol_ber: float | None = None
    raw_ber_lanes: dict[int, float] = field(default_factory=dict)
    link_down: int | None = None
    link_error_recovery: int | None = None
    recommendation: str = ""
    module: ModuleId | None = None
    fec_capability: dict[str, str] = field(default_factory=dict)   # --show_fec: speed -> the FECs it allows
    note: str = ""                    # why there are no counters (a link that is down, a device mlxlink refused)


@dataclass(slots=True)
class MlxlinkData:
    ports: dict[tuple[str, int], MlxlinkPort] = field(default_factory=dict)
    tool_missing: bool = False
    # the devices not asked because their counter registers must not be read (a restricted function)
    skipped: dict[str, str] = field(default_factory=dict)


@dataclass(slots=True)
class FecStats:
    """`ethtool -I --show-fec <netdev>`: the FEC configured and active, and its statistics."""
    netdev: str
    configured: tuple[str, ...] = ()   # "Auto", "RS", "BaseR", "Off", "None"
    active_text: str = ""
    active: str = "unknown"            # fec_mode() of the active encoding
    counters: PhyCounters = field(default_factory=PhyCounters)
    lanes_corrected: dict[int, int] = field(default_factory=dict)
    lanes_uncorrectable: dict[int, int] = field(default_factory=dict)
    has_statistics: bool = False       # the driver reports FEC statistics at all


@dataclass(slots=True)
class FecData:
    netdevs: dict[str, FecStats] = field(default_factory=dict)
    tool_missing: bool = False
    notes: dict[str, str] = field(default_factory=dict)    # netdev -> why it has no FEC answer (not supported)


# --- the joined view the check judges --------------------------------------------------------------

KINDS = ("raw", "effective", "symbol")
KIND_NAMES = {"raw": "pre-FEC (raw)", "effective": "post-FEC (effective)", "symbol": "symbol"}


@dataclass(slots=True)
class BerPort:
    """One port's physical layer as the check sees it: which source's counters it judges (each kept in
    the counter history under `ber:<source>:<name>`), the link it judges them against and its budget's keys."""
    device: str
    port: int
    label: str                        # "mlx5_0 port 1 (ens1f0np0)"
    source: str                       # "mlxlink", "ethtool", "fec"
    counters: PhyCounters
    protocol: str = "IB"              # "IB" or "Ethernet"
    speed: str = ""                   # the budget's speed key: "EDR", "HDR", "NDR", "XDR", "eth_pam4", "eth_nrz"
    rate_gbps: float | None = None    # the link's data rate (the bits received when no counter says)
    fec: str = "unknown"
    medium: str = "unknown"
    asic: str = ""                    # "7nm", "16nm" or "" (unknown)
    up: bool | None = None
    peer: str = ""                    # what is at the other end of the cable, when known
    module: ModuleId | None = None
    # gauges of what the firmware computed since its last clear (mlxlink only)
    since_clear: dict[str, float] = field(default_factory=dict)

    @property
    def key(self) -> tuple[str, int]:
        return (self.device, self.port)


@dataclass(slots=True)
class BerVerdict:
    """What the check measured on one port: per (kind, window) the ratio and the bits it covers, and the
    budget that applied (None: no row of the table fits)."""
    ratios: dict[tuple[str, str], float] = field(default_factory=dict)      # (kind, "short"|"long") -> ratio
    budget: object = None                                                  # model.ber_budget.Budget


@dataclass(slots=True)
class BerSection:
    """The node snapshot's BER section: every port whose physical counters a source read, and the verdicts."""
    ports: list[BerPort] = field(default_factory=list)
    verdicts: dict[tuple[str, int], BerVerdict] = field(default_factory=dict)


def asic_of(hca_type: str) -> str:
    """The budget table's ASIC generation of an NVIDIA adapter, from its PCI device id as sysfs `hca_type`
    says it (MT4129 = ConnectX-7): 7nm for ConnectX-7, ConnectX-8 and BlueField-3, 16nm for ConnectX-5,
    ConnectX-6 (Dx, Lx) and BlueField-2; "" where unknown (the most lenient row of the speed applies)."""
    m = re.search(r"(\d{4,5})", hca_type or "")
    if not m:
        return ""
    n = int(m.group(1))
    if n in (4129, 4131, 41692, 4133):
        return "7nm"
    if n in (4119, 4121, 4123, 4125, 4127, 41686, 41682):
        return "16nm"
    return ""


def speed_key(link_layer: str, generation: str | None, rate_gbps: float | None, width: int | None) -> str:
    """The budget table's speed column: the InfiniBand generation, or an Ethernet lane's modulation (PAM4
    from 50 Gb/s a lane)."""
    if link_layer != "Ethernet":
        return (generation or "").upper()
    if not rate_gbps or not width:
        return ""
    return "eth_pam4" if rate_gbps / width >= 50 else "eth_nrz"


__all__ = ["BerPort", "BerSection", "BerVerdict", "FEC_MODES", "FecData", "FecStats", "KINDS", "KIND_NAMES",
           "MEDIA", "MlxlinkData", "MlxlinkPort", "ModuleId", "PhyCounters", "asic_of", "fec_mode", "medium_of",
           "settle_rs", "speed_key"]
