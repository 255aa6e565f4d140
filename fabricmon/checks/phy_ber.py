"""phy_ber: every port's raw (pre-FEC), effective (post-FEC) and symbol bit error ratios against the
budget of its speed, FEC mode, medium and adapter (model.ber_budget, docs/ber.md), over a short and a
long window (12 and 125 minutes by default, as UFM judges).

Per window and kind the errors counted in it are compared with the budget's level times the bits the
link receives in the whole window (its rx_bits_phy where the driver counts them, else its data rate):
a count at or above the warning level is a WARNING, at or above the error level a CRITICAL. The
finding names the budget that broke, over which window, the ratio measured, and the part to look at:
one end sees only what it receives, so a raw BER rising here is the far end's transmitter or module,
the cable or fibre, or this end's receiver (which end, the two ends' join says: docs/ber.md#which-end).

A planted degradation, raw BER rising over the long window while the effective BER stays clean, is a
WARNING long before any symbol error. Not judged (no status): a port whose counters have no second
sample in the window, a link of unknown rate and without rx_bits_phy, a link no budget row fits.
Pure: records and the counter history in, findings out.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from fabricmon.checks import CRITICAL, OK, WARNING, Finding
from fabricmon.model.finding import DEGRADED
from fabricmon.checks.shape import Outcome, Report, judged_in, report
from fabricmon.model.ber import KIND_NAMES, KINDS, BerPort, BerSection, BerVerdict
from fabricmon.model.ber_budget import ANY, DEFAULT_BUDGETS, Budget, find
from fabricmon.model.history import CounterHistory
from fabricmon.schema import ConfigError, Context, Schema, custom, number

CHECK = "phy_ber"
WINDOWS = ("short", "long")

# which counters give each kind, most direct first (a block count is a lower bound: >= 1 bit a block)
SOURCES_OF = {
    "raw": ("raw_errors", "corrected_bits", "fec_corrected_blocks"),
    "effective": ("effective_errors", "fec_uncorrectable_blocks"),
    "symbol": ("symbol_errors",),
}
LOWER_BOUND = frozenset({"fec_corrected_blocks", "fec_uncorrectable_blocks"})


def history_key(p: BerPort, name: str) -> tuple[str, int, str]:
    """Where the model keeps a port's physical counter in the counter history."""
    return (p.device, p.port, f"ber:{p.source}:{name}")


# --- settings: `checks.phy_ber` -------------------------------------------------------------------

_LEVELS = ("raw_warning", "raw_error", "effective_warning", "effective_error", "symbol_warning", "symbol_error")


def _budget_row(value: Any, key: str, ctx: Context) -> Budget:
    if not isinstance(value, dict):
        raise ConfigError(key, f"expected a mapping (protocol, speed, fec, medium, asic and the levels), got {value!r}")
    allowed = ("protocol", "speed", "fec", "medium", "asic", *_LEVELS, "source")
    for k in value:
        if k not in allowed:
            raise ConfigError(f"{key}.{k}", f"unknown key (allowed: {', '.join(allowed)})")
    levels: dict[str, float | None] = {}
    for k in _LEVELS:
        v = value.get(k)
        if v is not None and (isinstance(v, bool) or not isinstance(v, (int, float)) or not 0 < v < 1):
            raise ConfigError(f"{key}.{k}", f"expected a bit error ratio between 0 and 1 or null, got {v!r}")
        levels[k] = None if v is None else float(v)
    for kind in KINDS:
        w, e = levels[f"{kind}_warning"], levels[f"{kind}_error"]
        if w is not None and e is not None and w > e:
            raise ConfigError(f"{key}.{kind}_warning", f"{w:g} is above {kind}_error ({e:g})")
    words = {k: str(value.get(k, ANY)) for k in ("protocol", "speed", "fec", "medium", "asic")}
    return Budget(words["protocol"], words["speed"], words["fec"], words["medium"], words["asic"],
                  levels["raw_warning"], levels["raw_error"], levels["effective_warning"], levels["effective_error"],
                  levels["symbol_warning"], levels["symbol_error"], str(value.get("source", f"{key} (configured)")))


def _budgets(value: Any, key: str, ctx: Context) -> tuple[Budget, ...]:
    if value is None:
        return ()
    if not isinstance(value, list):
        raise ConfigError(key, f"expected a list of budget rows, got {type(value).__name__}")
    return tuple(_budget_row(v, f"{key}[{i}]", ctx) for i, v in enumerate(value))


@dataclass(frozen=True, slots=True)
class PhyBerConfig:
    """checks.phy_ber (docs/ber.md)."""
    short_window: float = 720.0
    long_window: float = 7500.0
    budgets: tuple[Budget, ...] = field(default=())      # the site's rows, before the defaults

    def table(self) -> tuple[Budget, ...]:
        return (*self.budgets, *DEFAULT_BUDGETS)


def _windows_check(values: dict[str, Any], m: Mapping[str, Any], key: str, ctx: Context) -> None:
    if values["short_window"] >= values["long_window"]:
        raise ConfigError(f"{key}.short_window", f"{values['short_window']:g} s is not shorter than long_window "
                          f"({values['long_window']:g} s)")


_D = PhyBerConfig()
SCHEMA: Schema[PhyBerConfig] = Schema(fields=(
    number("short_window", _D.short_window, "seconds of the short window (UFM's 12 minutes): a burst", lo=60),
    number("long_window", _D.long_window, "seconds of the long window (UFM's 125 minutes): a slow rise of the raw "
           "BER, resolved over more bits", lo=120),
    custom("budgets", (), "budget rows of your own, tried before fabricmon's table (the first that fits wins): each "
           "`protocol` (IB, Ethernet), `speed` (NDR, HDR, EDR, XDR, eth_pam4, eth_nrz), `fec` (rs544_plr, rs544, "
           "rs528, ll_plr, ll_rs, firecode, none), `medium` (copper, active_copper, optical), `asic` (7nm, 16nm); "
           "a key left out matches any; and the levels `raw_warning`, `raw_error`, `effective_warning`, "
           "`effective_error`, `symbol_warning`, `symbol_error` (ratios; null or left out: not judged) "
           "([ber.md](ber.md#the-budget-table))", _budgets, "list of rows", default_doc="[]"),
), check=_windows_check, build=lambda v, key, ctx: PhyBerConfig(**v))


# --- the judgement ---------------------------------------------------------------------------------

@dataclass(frozen=True, slots=True)
class Measure:
    kind: str
    window: str                 # "short" or "long"
    seconds: float              # the window's length
    covered: float              # seconds of it the history covers
    errors: int
    counter: str                # which counter it counted
    bits_window: float          # bits the link receives in the whole window
    bits_covered: float         # bits it received in what is covered

    @property
    def ratio(self) -> float:
        return self.errors / self.bits_covered if self.bits_covered > 0 else 0.0


def _fmt_window(seconds: float) -> str:
    return f"{seconds / 60:.0f} min" if seconds >= 60 else f"{seconds:.0f} s"


def _bps(p: BerPort, history: CounterHistory, window: float, now: float) -> float | None:
    """Bits a second the port receives: its rx_bits_phy over the window where counted, else its data rate."""
    if "received_bits" in p.counters.counters:
        bits, covered = history.increase(history_key(p, "received_bits"), window, now)
        if covered > 0 and bits > 0:
            return bits / covered
    return p.rate_gbps * 1e9 if p.rate_gbps else None


def measure(p: BerPort, history: CounterHistory, cfg: PhyBerConfig, now: float) -> list[Measure]:
    out: list[Measure] = []
    for window, seconds in (("short", cfg.short_window), ("long", cfg.long_window)):
        bps = _bps(p, history, seconds, now)
        if bps is None:
            continue
        for kind in KINDS:
            name = next((n for n in SOURCES_OF[kind] if n in p.counters.counters), None)
            if name is None:
                continue
            errors, covered = history.increase(history_key(p, name), seconds, now)
            if covered <= 0:
                continue
            out.append(Measure(kind, window, seconds, covered, errors, name, bps * seconds, bps * covered))
    return out


def _part(p: BerPort, kinds: set[str]) -> str:
    far = f" ({p.peer})" if p.peer else ""
    if p.medium == "copper":
        what = "the cable: a passive copper cable (DAC) has no module to swap; reseat it at both ends, then replace it"
    elif p.medium == "active_copper":
        what = "the active copper cable: reseat it at both ends, then replace it"
    elif p.medium == "optical":
        what = (f"the far end's transceiver{far} (its transmitter feeds this receiver), the fibre, or this port's "
                "transceiver: clean and inspect the connectors at both ends, then replace the far end's module first")
    else:
        what = (f"the cable, or the transceiver at either end{far}: reseat and clean both ends, then replace the "
                "cable or the far end's module")
    if "effective" in kinds or "symbol" in kinds:
        return f"frames are being lost: look at {what}"
    return f"the FEC still corrects every error, so traffic is unharmed for now: look at {what} before it fails"


def judge(p: BerPort, history: CounterHistory, cfg: PhyBerConfig, now: float
          ) -> tuple[Finding | None, BerVerdict]:
    """One port's finding (None: nothing could be judged) and what was measured."""
    verdict = BerVerdict()
    ms = measure(p, history, cfg, now)
    for m in ms:
        verdict.ratios[(m.kind, m.window)] = m.ratio
    budget = find(cfg.table(), p.protocol, p.speed, p.fec, p.medium, p.asic) if p.speed else None
    verdict.budget = budget
    if not ms or budget is None:
        return None, verdict
    worst, judged = OK, 0
    broke: list[tuple[str, int, str]] = []
    for m in sorted(ms, key=lambda x: (KINDS.index(x.kind), WINDOWS.index(x.window))):
        if m.window == "long" and m.covered <= cfg.short_window:
            continue            # the long window covers no more than the short one yet: it adds nothing
        warn, err = budget.levels(m.kind)
        if warn is None and err is None:
            continue
        judged += 1
        status, level, value = OK, "", 0.0
        if err is not None and m.errors >= err * m.bits_window and m.errors > 0:
            status, level, value = CRITICAL, "error", err
        elif warn is not None and m.errors >= warn * m.bits_window and m.errors > 0:
            status, level, value = WARNING, "warning", warn
        if status == OK:
            continue
        worst = max(worst, status)
        bound = " (at least: a codeword counts one bit)" if m.counter in LOWER_BOUND else ""
        broke.append((m.kind, status,
                      f"{KIND_NAMES[m.kind]} bit error ratio {m.ratio:.1e}{bound} ({m.errors} errors in the last "
                      f"{_fmt_window(m.covered)}) breaks the {level} level {value:g} of the {_budget_text(p, budget)} "
                      f"budget over the {_fmt_window(m.seconds)} window"))
    if not judged:
        return None, verdict
    if worst == OK:
        seen = ", ".join(f"{KIND_NAMES[k]} {verdict.ratios[(k, 'short')]:.1e}" for k in KINDS
                         if (k, "short") in verdict.ratios)
        return Finding(CHECK, p.device, p.port, OK,
                       f"{p.label}: within the {_budget_text(p, budget)} budget ({seen} over the "
                       f"{_fmt_window(cfg.short_window)} window)"), verdict
    # one line per kind: its worst window (a short window's CRITICAL before a long window's WARNING)
    best: dict[str, tuple[int, str]] = {}
    for kind, status, text in broke:
        if kind not in best or status > best[kind][0]:
            best[kind] = (status, text)
    kinds = set(best)
    clean = [KIND_NAMES[k] for k in KINDS if k not in kinds and (k, "short") in verdict.ratios]
    tail = f"; {' and '.join(clean)} within budget" if clean else ""
    # the FEC still corrects everything while only the raw ratio broke: a repair to schedule, never a drain
    klass = DEGRADED if kinds == {"raw"} else ""
    return Finding(CHECK, p.device, p.port, worst,
                   f"{p.label}: " + "; ".join(t for _, t in best.values()) + tail + f": {_part(p, kinds)}",
                   klass=klass), verdict


def _budget_text(p: BerPort, b: Budget) -> str:
    return f"{b.describe()} ({b.source})"


@dataclass(frozen=True, slots=True)
class BerInputs:
    """What the check judges, as the model joined it: the ports, the counter history, the time, and the
    section to derive (its ports)."""
    ports: Sequence[BerPort]
    history: CounterHistory
    now: float


class PhyBer:
    """The check (checks.shape): judges the ports the model joined (`select`); no state of its own (the
    counters are the model's counter history)."""
    state = None

    def __init__(self, settings: PhyBerConfig, select: Callable[[Any], BerInputs | None], needs: Sequence[str] = ()):
        self.settings = settings
        self.select = select
        self.reports: tuple[Report, ...] = (report(CHECK, *needs, any_of=("MlxlinkData", "EthtoolData", "FecData")),)

    def run(self, inputs: Any) -> Outcome:
        sel = self.select(inputs)
        if sel is None:
            return Outcome((), ())
        findings: list[Finding] = []
        section = BerSection(list(sel.ports))
        for p in sel.ports:
            f, verdict = judge(p, sel.history, self.settings, sel.now)
            section.verdicts[p.key] = verdict
            if f is not None:
                findings.append(f)
        return Outcome(findings, judged_in(findings), section)


__all__ = ["CHECK", "SCHEMA", "SOURCES_OF", "BerInputs", "Measure", "PhyBer", "PhyBerConfig", "history_key", "judge",
           "measure"]
