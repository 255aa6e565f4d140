"""The bit error ratio budget as data: thresholds per link speed, FEC mode, medium and adapter ASIC, for
the raw (pre-FEC), effective (post-FEC) and symbol ratios, each a warning and an error level
(docs/ber.md#the-budget-table).

The InfiniBand rows are NVIDIA UFM's: its PDR plugin's Field_BER_Thresholds.csv (Mellanox/ufm_sdk_3.0,
plugins/pdr_deterministic_plugin/build/config/Field_BER_Thresholds.csv at 0eea373bb97b96f913b35c0692e508fc57aa5fbf,
BSD-3-Clause; version V06 of the table), whose "Error" and "Warning" columns are our error (CRITICAL) and
warning (WARNING) levels, its media DACs, ACC and Active/Active_DiD our copper, active_copper and
optical. The Ethernet rows are fabricmon's, from the IEEE 802.3 FEC limits (docs/ber.md says which
are facts and which are judgement). A site adds or overrides rows in `checks.phy_ber.budgets`; the first
row that fits wins, the site's before these.

Pure data and a lookup; no I/O.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass

ANY = "*"


@dataclass(frozen=True, slots=True)
class Budget:
    """One row: where it applies (ANY matches everything) and its six thresholds (None: not judged)."""
    protocol: str                  # "IB", "Ethernet"
    speed: str                     # "NDR", "HDR", "EDR", "eth_pam4", "eth_nrz", ANY
    fec: str                       # model.ber.FEC_MODES key, or ANY
    medium: str                    # "copper", "active_copper", "optical", ANY
    asic: str                      # "7nm", "16nm", ANY
    raw_warning: float | None
    raw_error: float | None
    effective_warning: float | None
    effective_error: float | None
    symbol_warning: float | None
    symbol_error: float | None
    source: str = ""               # where the numbers come from (the finding and docs/ber.md say it)

    def levels(self, kind: str) -> tuple[float | None, float | None]:
        """(warning, error) of one kind: "raw", "effective", "symbol"."""
        return getattr(self, f"{kind}_warning"), getattr(self, f"{kind}_error")

    def fits(self, protocol: str, speed: str, fec: str, medium: str, asic: str) -> bool:
        return (self.protocol in (ANY, protocol) and self.speed in (ANY, speed) and self.fec in (ANY, fec)
                and self.medium in (ANY, medium) and self.asic in (ANY, asic))

    def describe(self) -> str:
        parts = [self.speed if self.speed != ANY else self.protocol, self.fec, self.medium]
        if self.asic != ANY:
            parts.append(self.asic)
        return " ".join(p for p in parts if p and p != ANY)


UFM = "UFM PDR Field_BER_Thresholds.csv V06"
_UFM_MEDIA = (("DACs", "copper"), ("ACC", "active_copper"), ("Active", "optical"))


def _ufm(asic: str, speed: str, fec: str, rows: dict[str, tuple[float, float, float, float, float, float]]
         ) -> list[Budget]:
    """UFM's rows of one ASIC, speed and FEC: per UFM medium (pre error, pre warning, post error, post
    warning, symbol error, symbol warning), as the CSV orders them (Error before Warning)."""
    out = []
    for ufm_medium, medium in _UFM_MEDIA:
        pe, pw, ee, ew, se, sw = rows[ufm_medium]
        out.append(Budget("IB", speed, fec, medium, asic, pw, pe, ew, ee, sw, se, UFM))
    return out


def _same(v: tuple[float, float, float, float, float, float]) -> dict[str, tuple[float, float, float, float, float, float]]:
    return {m: v for m, _ in _UFM_MEDIA}


# The numbers of Field_BER_Thresholds.csv, per (ASIC, speed, FEC): Pre-FEC Error, Pre-FEC Warning,
# Post-FEC Error, Post-FEC Warning, Symbol Error, Symbol Warning. UFM's Active and Active_DiD rows are
# identical: both are optical here.
_NDR_PLR_DAC = (1e-6, 5e-7, 1e-11, 5e-12, 1e-14, 5e-15)
_NDR_PLR_OPT = (1e-5, 5e-6, 1e-11, 5e-12, 1e-14, 5e-15)
_NDR_KP4_DAC = (1e-7, 5e-8, 1e-13, 5e-14, 1e-13, 5e-14)
_NDR_KP4_OPT = (1e-5, 5e-6, 1e-13, 5e-14, 1e-13, 5e-14)
_HDR7_PLR = (1e-7, 5e-8, 1e-13, 5e-14, 1e-14, 5e-15)
_HDR7_KP4 = (1e-7, 5e-8, 1e-13, 5e-14, 1e-13, 5e-14)
_HDR16 = (1e-5, 5e-6, 1e-13, 5e-14, 1e-13, 5e-14)
_EDR7 = (1e-12, 5e-13, 1e-13, 5e-14, 1e-13, 5e-14)
_EDR16_LL = (1e-12, 5e-13, 1e-13, 5e-14, 1e-13, 5e-14)
_EDR16_RS = (1e-9, 5e-10, 1e-13, 5e-14, 1e-13, 5e-14)
_NOFEC = (1e-13, 5e-14, 1e-13, 5e-14, 1e-13, 5e-14)


def _ib_rows() -> list[Budget]:
    rows: list[Budget] = []
    plr = {"DACs": _NDR_PLR_DAC, "ACC": _NDR_PLR_DAC, "Active": _NDR_PLR_OPT}
    kp4 = {"DACs": _NDR_KP4_DAC, "ACC": _NDR_KP4_DAC, "Active": _NDR_KP4_OPT}
    rows += _ufm("7nm", "NDR", "ll_plr", plr)           # Ethernet_Consortium_LL_50G_RS_FEC_PLR (14)
    rows += _ufm("7nm", "NDR", "rs544_plr", plr)        # KP4_Standard_RS_FEC_PLR (12)
    rows += _ufm("7nm", "NDR", "rs544", kp4)            # KP4_Standard_RS_FEC (7)
    rows += _ufm("7nm", "HDR", "rs544_plr", _same(_HDR7_PLR))
    rows += _ufm("7nm", "HDR", "rs544", _same(_HDR7_KP4))
    rows += _ufm("7nm", "HDR", "ll_plr", _same(_HDR7_PLR))   # LL_FEC_PLR (13)
    rows += _ufm("7nm", "EDR", "ll_rs", _same(_EDR7))        # STD_LL_RS (3)
    rows += _ufm("7nm", "EDR", "rs528", _same(_EDR7))        # STD_RS (2)
    rows += _ufm("7nm", "EDR", "none", _same(_NOFEC))        # NO_FEC (0)
    for fec in ("rs544_plr", "rs544", "ll_plr", "ll_rs"):
        rows += _ufm("16nm", "HDR", fec, _same(_HDR16))
    rows += _ufm("16nm", "EDR", "ll_rs", _same(_EDR16_LL))
    rows += _ufm("16nm", "EDR", "rs528", _same(_EDR16_RS))
    rows += _ufm("16nm", "EDR", "none", _same(_NOFEC))
    return rows


IEEE = "IEEE 802.3 (fabricmon's defaults: docs/ber.md)"

# Ethernet: RS(544,514) corrects a pre-FEC BER up to about 2.4e-4 to the 1e-12 frame objective (the
# KP4 limit: Dell KB 000286734 and IEEE 802.3 clause 91/119); RS(528,514) about 5e-5 (clause 108/91,
# 25G and 100G NRZ); without FEC the link itself must meet 1e-12. The warning levels are judgement: a
# tenth of the error level, the margin UFM's table keeps between its own levels and what FEC corrects.
ETHERNET: tuple[Budget, ...] = (
    Budget("Ethernet", "eth_pam4", "rs544", ANY, ANY, 2.4e-5, 2.4e-4, 1e-13, 1e-12, 1e-13, 1e-12, IEEE),
    Budget("Ethernet", "eth_pam4", "rs544_plr", ANY, ANY, 2.4e-5, 2.4e-4, 1e-13, 1e-12, 1e-13, 1e-12, IEEE),
    Budget("Ethernet", "eth_pam4", "ll_rs", ANY, ANY, 1e-6, 1e-5, 1e-13, 1e-12, 1e-13, 1e-12, IEEE),
    Budget("Ethernet", "eth_nrz", "rs528", ANY, ANY, 5e-6, 5e-5, 1e-13, 1e-12, 1e-13, 1e-12, IEEE),
    Budget("Ethernet", "eth_nrz", "firecode", ANY, ANY, None, None, 1e-13, 1e-12, 1e-13, 1e-12, IEEE),
    Budget("Ethernet", ANY, "none", ANY, ANY, 1e-13, 1e-12, 1e-13, 1e-12, 1e-13, 1e-12, IEEE),
)

DEFAULT_BUDGETS: tuple[Budget, ...] = (*_ib_rows(), *ETHERNET)


def find(budgets: Sequence[Budget], protocol: str, speed: str, fec: str, medium: str, asic: str) -> Budget | None:
    """The row that applies: the first that fits. Where the FEC mode, the medium or the ASIC is unknown, the
    most lenient of the rows that fit the rest and come from the same table as the first of them (so that
    not knowing never makes a budget stricter, and a site's row still wins over fabricmon's)."""
    if fec != "unknown" and medium != "unknown" and asic:
        return next((b for b in budgets if b.fits(protocol, speed, fec, medium, asic)), None)
    fit = [b for b in budgets if b.protocol in (ANY, protocol) and b.speed in (ANY, speed)
           and (fec == "unknown" or b.fec in (ANY, fec)) and (medium == "unknown" or b.medium in (ANY, medium))
           and (not asic or b.asic in (ANY, asic))]
    if not fit:
        return None
    return lenient(b for b in fit if b.source == fit[0].source)


def lenient(rows: Iterable[Budget]) -> Budget:
    """The most lenient of several rows, level by level (a row of its own, its source said)."""
    rows = list(rows)
    if len(rows) == 1:
        return rows[0]

    def top(vals: list[float | None]) -> float | None:
        known = [v for v in vals if v is not None]
        return max(known) if len(known) == len(vals) else None

    first = rows[0]
    lv = {f: top([getattr(r, f) for r in rows]) for f in _LEVEL_FIELDS}
    return Budget(first.protocol, first.speed, first.fec if all(r.fec == first.fec for r in rows) else ANY,
                  first.medium if all(r.medium == first.medium for r in rows) else ANY,
                  first.asic if all(r.asic == first.asic for r in rows) else ANY,
                  raw_warning=lv["raw_warning"], raw_error=lv["raw_error"],
                  effective_warning=lv["effective_warning"], effective_error=lv["effective_error"],
                  symbol_warning=lv["symbol_warning"], symbol_error=lv["symbol_error"],
                  source=first.source + " (the most lenient of its rows: the FEC mode, medium or adapter is unknown)")


_LEVEL_FIELDS = ("raw_warning", "raw_error", "effective_warning", "effective_error", "symbol_warning", "symbol_error")


__all__ = ["ANY", "Budget", "DEFAULT_BUDGETS", "ETHERNET", "IEEE", "UFM", "find", "lenient", "markdown"]


def markdown(budgets: Sequence[Budget] = DEFAULT_BUDGETS) -> str:
    """The table as docs/ber.md prints it (tests/checks/test_phy_ber.py keeps the two the same)."""
    def f(v: float | None) -> str:
        return "-" if v is None else f"{v:g}"
    lines = ["| protocol | speed | FEC | medium | ASIC | raw warning / error | effective warning / error | "
             "symbol warning / error | source |", "|---|---|---|---|---|---|---|---|---|"]
    for b in budgets:
        lines.append(f"| {b.protocol} | {b.speed} | {b.fec} | {b.medium} | {b.asic} | {f(b.raw_warning)} / "
                     f"{f(b.raw_error)} | {f(b.effective_warning)} / {f(b.effective_error)} | {f(b.symbol_warning)} / "
                     f"{f(b.symbol_error)} | {'UFM' if b.source == UFM else 'IEEE 802.3' if b.source == IEEE else b.source} |")
    return "\n".join(lines) + "\n"
